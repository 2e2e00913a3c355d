"""Whitening on torch tensors (Array API dispatch) against numpy, in one run.

Times ``WhiteningTransformer().fit`` and ``.transform`` on the same
100,000 x 768 float32 rows (the anisotropic rows of ``bench_linear.py``)
given as a numpy array (dispatch off: the numpy code), as a torch tensor on
the CPU and, when CUDA is present, as a torch tensor on the GPU (skipped
otherwise), with ``sklearn.set_config(array_api_dispatch=True)`` for the
tensors. The candidates are timed round-robin for ``--repeat`` rounds, each
call after ``--settle`` idle seconds (see ``bench_linear.py``); GPU calls
end with ``torch.cuda.synchronize()``. Printed as a Markdown table: the
best and median time of each, the ratio of best times to numpy's and the
largest difference of the transform from numpy's, relative to its largest
entry (the statistics are float64 on every device that has float64, so the
output agrees to float32 round-off).

The float64 ``X.T @ X`` of the rows (converted once, beforehand) in each
library is timed in the same rounds: the floor of any fit whose statistics
are float64-exact, as in ``bench_linear.py``.

Run: ``python benchmarks/bench_array_api.py`` (``--quick`` for 10,000 rows).
"""

from __future__ import annotations

import os

# scipy reads it once, when first imported (the Array API needs it)
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import argparse

import numpy as np
import sklearn
from _common import interleaved, machine_line, markdown_table
from bench_linear import embeddings

from sklearn_isotropy import WhiteningTransformer


def _candidates(X, devices):
    """``{label: (X in that library, sync)}``: numpy, torch CPU, torch CUDA."""
    import torch

    out = {"numpy": (X, lambda: None)}
    for device in devices:
        Xt = torch.from_numpy(X).to(device)
        sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
        out[f"torch {device}"] = (Xt, sync)
    return out


def _as_float64(Xc):
    """A float64 copy of the rows, in their own library and on their device."""
    return Xc.astype(np.float64) if isinstance(Xc, np.ndarray) else Xc.double()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=100_000)
    parser.add_argument("--n-features", type=int, default=768)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--settle", type=float, default=0.3)
    parser.add_argument("--quick", action="store_true", help="10x fewer rows")
    args = parser.parse_args()
    if args.quick:
        args.n_samples //= 10

    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    n, d = args.n_samples, args.n_features
    X = embeddings(n, d)
    print(
        f"{machine_line()}; torch {torch.__version__} ({torch.get_num_threads()} "
        f"threads); CUDA: {'yes' if 'cuda' in devices else 'not present, skipped'}"
    )
    data = _candidates(X, devices)
    fitted, timed = {}, {}
    for label, (Xc, sync) in data.items():
        dispatch = label != "numpy"

        def fit(Xc=Xc, sync=sync, label=label, dispatch=dispatch):
            with sklearn.config_context(array_api_dispatch=dispatch):
                fitted[label] = WhiteningTransformer().fit(Xc)
            sync()

        def transform(Xc=Xc, sync=sync, label=label, dispatch=dispatch):
            with sklearn.config_context(array_api_dispatch=dispatch):
                fitted[label].transform(Xc)
            sync()

        Y = _as_float64(Xc)

        def floor(Y=Y, sync=sync):
            Y.T @ Y
            sync()

        timed[f"fit {label}"] = fit
        timed[f"floor {label}"] = floor
        timed[f"transform {label}"] = transform
    for name in timed:  # warm up (and fit once, for the transforms)
        if not name.startswith("transform"):
            timed[name]()
    times = interleaved(timed, args.repeat, settle=args.settle)

    reference = fitted["numpy"].transform(X)
    top = float(np.max(np.abs(reference)))
    print(
        f"\n{n:,} x {d} float32, {args.repeat} interleaved rounds, "
        f"{args.settle} s idle before each call (best / median)\n"
    )
    rows = []
    for label, (Xc, _) in data.items():
        fit, tr, fl = (times[f"{k} {label}"] for k in ("fit", "transform", "floor"))
        with sklearn.config_context(array_api_dispatch=label != "numpy"):
            Z = fitted[label].transform(Xc)
        Z = Z if isinstance(Z, np.ndarray) else Z.cpu().numpy()
        diff = float(np.max(np.abs(Z - reference))) / top
        base_fit = times["fit numpy"].min()
        base_tr = times["transform numpy"].min()
        rows.append(
            [
                label,
                f"{fit.min():.3f} / {np.median(fit):.3f} s",
                f"{fit.min() / base_fit:.2f}x",
                f"{fl.min():.3f} s",
                f"{fit.min() / fl.min():.2f}x",
                f"{tr.min():.3f} / {np.median(tr):.3f} s",
                f"{tr.min() / base_tr:.2f}x",
                f"{diff:.1e}",
            ]
        )
    header = ["input", "fit", "fit / numpy", "float64 X.T @ X", "fit / X.T @ X"]
    header += ["transform", "transform / numpy", "max transform diff"]
    print("\n".join(markdown_table(header, rows)))


if __name__ == "__main__":
    main()
