"""The ``sklearn-isotropy`` command: evaluate isotropy post-processors on STS.

``sklearn-isotropy evaluate`` encodes an STS data set with a sentence encoder
(the embedded all-MiniLM-L6-v2 by default), applies each post-processing
method, and reports Spearman's rho x100 between the gold scores and the
cosine similarities on the test split, together with fit/transform times and
anisotropy diagnostics. Exit status: 0 on success, 2 for bad arguments, 1 for
missing data or model (with a one-line message).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .metrics._scores import _spearman

__all__ = ["main"]

logger = logging.getLogger(__name__)

PROG = "sklearn-isotropy"
METHODS = ("raw", "sn", "natsv", "whitening", "flow", "grid")
POOLINGS = ("mean", "cls", "first_last_avg", "last2_avg", "embeddings_avg", "pooler")
DEFAULT_METHODS = "raw,sn,natsv,whitening,flow,grid"
DEFAULT_POOLINGS = ("mean", "embeddings_avg")
GRID_K = (64, 128, 256)
GRID_POWER = (0.0, 0.5, 1.0)
METHOD_LABELS = {
    "raw": "raw (no post-processing)",
    "sn": "SN (standard normalisation)",
    "natsv": "NATSV-{k}",
    "whitening": "whitening-{k}",
    "flow": "flow (Glow)",
    "grid": "grid (whitening k, power on dev)",
}
PROTOCOLS = {
    "target": (
        "transforms fitted on the sentences of the test split itself ('target', "
        "the papers' transductive protocol)"
    ),
    "train": "transforms fitted on the sentences of the train split ('train')",
}


class CLIError(Exception):
    """An error reported as one line with exit status 1."""


# ---------------------------------------------------------------- arguments


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _methods(text):
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {unknown or [text]}; choose from {', '.join(METHODS)}"
        )
    return list(dict.fromkeys(names))


def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Isotropy post-processing for sentence embeddings.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ev = sub.add_parser(
        "evaluate",
        help="compare raw/SN/NATSV/whitening/flow/grid on an STS data set",
        description=(
            "Encode an STS data set, post-process the embeddings with each "
            "method and report Spearman x100 on the test split. Exit status: 0 "
            "success, 2 bad arguments, 1 missing data or model."
        ),
    )
    ev.add_argument(
        "--model",
        default=None,
        help="Hugging Face model name or local directory (default: the embedded "
        "all-MiniLM-L6-v2)",
    )
    ev.add_argument(
        "--pooling",
        action="append",
        choices=POOLINGS,
        help="pooling preset; repeat for several (default: "
        f"{' and '.join(DEFAULT_POOLINGS)})",
    )
    ev.add_argument(
        "--data",
        default="stsb",
        help="STS directory with train/dev/test files, a single file (used as "
        "test), or 'stsb' to download the STS Benchmark (default: stsb)",
    )
    ev.add_argument(
        "--methods",
        type=_methods,
        default=_methods(DEFAULT_METHODS),
        help=f"comma-separated, from {','.join(METHODS)} (default: all)",
    )
    ev.add_argument(
        "--fit-on",
        choices=("target", "train"),
        default="target",
        help="fit the transforms on the test sentences (target, the papers' "
        "protocol) or on the train split (default: target)",
    )
    ev.add_argument(
        "--n-components",
        type=_positive_int,
        default=256,
        help="kept dimensions for 'whitening' (capped at the embedding width; "
        "default: 256)",
    )
    ev.add_argument(
        "--natsv-components",
        type=_positive_int,
        default=5,
        help="top directions removed by 'natsv' (default: 5)",
    )
    ev.add_argument(
        "--out",
        default="results",
        help="directory for results.md, results.json and PNG figures "
        "(default: ./results)",
    )
    ev.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    ev.add_argument(
        "--batch-size", type=_positive_int, default=64, help="encoding batch size"
    )
    ev.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    ev.add_argument(
        "--cv", type=_positive_int, default=5, help="folds of the 'grid' search"
    )
    ev.add_argument(
        "--max-pairs",
        type=_positive_int,
        default=None,
        help="use a random subset of at most this many pairs per split (for "
        "quick runs)",
    )
    ev.add_argument(
        "--flow-epochs",
        type=_positive_int,
        default=1,
        help="training epochs of 'flow' (default: 1, as in BERT-flow)",
    )
    ev.add_argument(
        "--cache",
        default=None,
        help="directory caching sentence encodings across runs (optional)",
    )
    ev.add_argument(
        "--no-figures", action="store_true", help="do not write PNG figures"
    )
    ev.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars or log lines"
    )
    return parser


# --------------------------------------------------------------------- data


def _load_splits(data, needed, max_pairs, seed):
    """Load the needed splits; `data` is a directory, a file or 'stsb'."""
    from .datasets import load_sts

    path = Path(data).expanduser()
    single_file = data != "stsb" and path.is_file()
    if data != "stsb" and not path.exists():
        raise CLIError(
            f"data not found: {data!r} is neither a file nor a directory; pass "
            "--data path/to/stsb (train/dev/test.csv) or --data stsb to download"
        )
    splits = {}
    for split in needed:
        if single_file:
            if split != "test":
                raise CLIError(
                    f"--data {data} is a single file, used as the test split; the "
                    f"requested methods/protocol also need a {split!r} split: pass a "
                    "directory with train/dev/test files"
                )
            bunch = load_sts(path)
        else:
            try:
                bunch = load_sts(data, split=split)
            except (OSError, ValueError) as exc:
                raise CLIError(
                    f"cannot read the {split} split of {data}: {exc}"
                ) from exc
        if max_pairs is not None and len(bunch.scores) > max_pairs:
            rng = np.random.RandomState(seed)
            keep = np.sort(rng.choice(len(bunch.scores), max_pairs, replace=False))
            bunch.pairs = bunch.pairs[keep]
            bunch.scores = bunch.scores[keep]
        splits[split] = bunch
    return splits


def _encode(args, pooling, splits, progress):
    """Encode each distinct sentence once; return (n, 2, d) arrays per split."""
    from . import BertPoolingVectorizer

    sentences = {}
    for bunch in splits.values():
        for s in bunch.pairs.ravel():
            sentences.setdefault(s, len(sentences))
    vec = BertPoolingVectorizer(
        args.model,
        pooling=pooling,
        batch_size=args.batch_size,
        device=args.device,
        memory=args.cache,
        show_progress_bar=progress,
    )
    try:
        vec.fit(list(sentences)[:1])
    except (OSError, ValueError, ImportError, RuntimeError) as exc:
        name = args.model or "the default all-MiniLM-L6-v2"
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise CLIError(
            f"cannot load model {name}: {'; '.join(lines) or repr(exc)}"
        ) from exc
    start = time.perf_counter()
    E = vec.transform(list(sentences))
    seconds = time.perf_counter() - start
    out = {}
    for split, bunch in splits.items():
        idx = np.vectorize(sentences.__getitem__, otypes=[np.intp])(bunch.pairs)
        out[split] = E[idx]  # (n, 2, d)
    return out, len(sentences), seconds


# ------------------------------------------------------------------ methods


def _grid_candidates(d):
    from . import WhiteningTransformer

    ks = [k for k in GRID_K if k < d] or [max(1, d // 2)]
    ks.append(None)
    return [
        {"transformer": ["passthrough"]},
        {
            "transformer": [WhiteningTransformer()],
            "transformer__n_components": ks,
            "transformer__power": list(GRID_POWER),
        },
    ]


def _make_transformer(method, d, args, progress):
    from . import NATSVTransformer, StandardNormalizer, WhiteningTransformer

    if method == "raw":
        return "passthrough", {}
    if method == "sn":
        return StandardNormalizer(), {}
    if method == "natsv":
        k = min(args.natsv_components, d - 1)
        return NATSVTransformer(n_components=k), {"n_components": k}
    if method == "whitening":
        k = args.n_components if args.n_components < d else None
        return WhiteningTransformer(n_components=k), {"n_components": k or d}
    if method == "flow":
        try:
            from . import GlowFlowTransformer
        except ImportError as exc:
            raise CLIError(f"method 'flow' is unavailable: {exc}") from exc
        return (
            GlowFlowTransformer(
                max_iter=args.flow_epochs,
                random_state=args.seed,
                device=args.device,
                verbose=2 if progress else 0,  # 2 = tqdm bar over batches
            ),
            {"max_iter": args.flow_epochs},
        )
    raise ValueError(method)  # pragma: no cover - parser restricts methods


def _describe_params(params):
    out = {}
    for key, value in params.items():
        key = key.removeprefix("transformer__")
        if key == "transformer":
            value = value if isinstance(value, str) else type(value).__name__
        out[key] = value
    return out


def _run_method(method, emb, splits, args, progress):
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV, KFold

    from .metrics import PairedCosineSimilarity

    d = emb["test"].shape[2]
    fit_pairs = emb["test"] if args.fit_on == "target" else emb["train"]
    info = {}
    start = time.perf_counter()
    if method == "grid":
        n_dev = len(splits["dev"].scores)
        if n_dev < 2 * args.cv:
            raise CLIError(
                f"the dev split has {n_dev} pairs, too few for --cv {args.cv}"
            )
        search = GridSearchCV(
            PairedCosineSimilarity(),
            _grid_candidates(d),
            cv=KFold(args.cv, shuffle=True, random_state=args.seed),
            refit=False,
        )
        search.fit(emb["dev"], splits["dev"].scores)
        best = clone(search.estimator).set_params(**search.best_params_)
        info = {
            "chosen": _describe_params(search.best_params_),
            "dev_cv_spearman_x100": 100 * float(search.best_score_),
            "n_candidates": len(search.cv_results_["params"]),
        }
        model = best
    else:
        transformer, info = _make_transformer(method, d, args, progress)
        model = PairedCosineSimilarity(transformer)
    model.fit(fit_pairs)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    cos = model.predict(emb["test"])
    transform_seconds = time.perf_counter() - start

    rho = _spearman(splits["test"].scores, cos)
    return model, {
        "method": method,
        "spearman_x100": 100.0 * rho,
        "fit_seconds": fit_seconds,
        "transform_seconds": transform_seconds,
        "params": info,
    }


def _transformed_test(model, emb_test):
    """Embeddings of the distinct test items after the fitted transform."""
    items = emb_test.reshape(-1, emb_test.shape[2])
    items = np.unique(items, axis=0)
    if model.transformer_ is None:
        return items
    return np.asarray(model.transformer_.transform(items))


# ------------------------------------------------------------------- output


def _label(method, params):
    label = METHOD_LABELS[method]
    if "{k}" in label and "n_components" not in params:
        return method
    if "{k}" in label:
        label = label.format(k=params.get("n_components"))
    return label


def _table(results, poolings, methods, markdown):
    header = ["method"]
    for p in poolings:
        header += [f"{p} ρ×100", "fit s", "transform s"]
    rows = []
    for m in methods:
        ok = [
            results[(m, p)]
            for p in poolings
            if (m, p) in results and "error" not in results[(m, p)]
        ]
        row = [_label(m, ok[0]["params"]) if ok else m]
        for p in poolings:
            r = results.get((m, p))
            if r is None or r["spearman_x100"] is None:
                row += ["failed" if r else "-", "-", "-"]
            else:
                row += [
                    f"{r['spearman_x100']:.2f}",
                    f"{r['fit_seconds']:.2f}",
                    f"{r['transform_seconds']:.2f}",
                ]
        rows.append(row)
    if markdown:
        lines = ["| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
    )
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), sep, *[fmt(r) for r in rows]])


def _save_figures(out_dir, pooling, transformed):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return [], "figures skipped: matplotlib is not installed (extra [plot])"
    from .diagnostics import plot_cosine_histogram, plot_eigenvalue_spectrum

    files = []
    for kind, plot in (
        ("spectrum", plot_eigenvalue_spectrum),
        ("cosines", plot_cosine_histogram),
    ):
        fig = Figure(figsize=(7, 4.5), layout="constrained")
        ax = fig.add_subplot()
        kwargs = {"random_state": 0} if kind == "cosines" else {}
        plot(transformed, ax=ax, **kwargs)
        ax.set_title(f"{ax.get_title()} ({pooling} pooling, test sentences)")
        path = out_dir / f"{pooling}_{kind}.png"
        fig.savefig(path, dpi=110)
        files.append(str(path))
    return files, None


# --------------------------------------------------------------------- main


def _evaluate(args):
    from .diagnostics import anisotropy_report

    progress = not args.quiet
    poolings = list(dict.fromkeys(args.pooling or DEFAULT_POOLINGS))
    methods = args.methods
    needed = ["test"]
    if args.fit_on == "train":
        needed.append("train")
    if "grid" in methods:
        needed.append("dev")
    splits = _load_splits(args.data, needed, args.max_pairs, args.seed)
    out_dir = Path(args.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot create --out directory {out_dir}: {exc}") from exc

    model_name = args.model or "all-MiniLM-L6-v2 (embedded default)"
    protocol = PROTOCOLS[args.fit_on]
    sizes = ", ".join(f"{s} {len(b.scores)} pairs" for s, b in splits.items())
    print(f"Data: {args.data} ({sizes})")
    print(f"Model: {model_name}")
    print(f"Fitting protocol: {protocol}.")
    sys.stdout.flush()

    results, diagnostics, encodings, figures = {}, {}, {}, []
    for pooling in poolings:
        emb, n_sentences, enc_seconds = _encode(args, pooling, splits, progress)
        encodings[pooling] = {"sentences": n_sentences, "seconds": enc_seconds}
        if progress:
            print(
                f"[{pooling}] encoded {n_sentences} distinct sentences in "
                f"{enc_seconds:.1f} s",
                file=sys.stderr,
            )
        transformed = {}
        diagnostics[pooling] = {}
        for method in methods:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    model, record = _run_method(method, emb, splits, args, progress)
                except (ValueError, RuntimeError, np.linalg.LinAlgError) as exc:
                    # a numerical failure of one method is a result, not a crash
                    msg = " ".join(str(exc).split())
                    print(f"[{pooling}] {method} failed: {msg}", file=sys.stderr)
                    results[(method, pooling)] = {
                        "method": method,
                        "pooling": pooling,
                        "spearman_x100": None,
                        "fit_seconds": None,
                        "transform_seconds": None,
                        "params": {},
                        "error": msg,
                    }
                    continue
            record["warnings"] = sorted({str(w.message) for w in caught})
            record["pooling"] = pooling
            results[(method, pooling)] = record
            Z = _transformed_test(model, emb["test"])
            label = _label(method, record["params"])
            transformed[label] = Z
            diagnostics[pooling][method] = anisotropy_report(Z, random_state=args.seed)
            if progress:
                print(
                    f"[{pooling}] {label}: {record['spearman_x100']:.2f}",
                    file=sys.stderr,
                )
        if not args.no_figures:
            files, note = _save_figures(out_dir, pooling, transformed)
            figures += files
            if note:
                print(note, file=sys.stderr)

    title = "Spearman ρ×100 on the test split (cosine of pair embeddings)"
    text_table = _table(results, poolings, methods, markdown=False)
    print()
    print(title)
    print(text_table)
    print(f"Fitting protocol: {protocol}.")
    for method in methods:
        for pooling in poolings:
            chosen = results[(method, pooling)]["params"].get("chosen")
            error = results[(method, pooling)].get("error")
            if error:
                print(f"{method} failed for {pooling}: {error}")
            if chosen:
                print(f"grid choice for {pooling}: {chosen}")

    md = [
        "# sklearn-isotropy evaluate",
        "",
        f"- Data: `{args.data}` ({sizes})",
        f"- Model: {model_name}",
        f"- Fitting protocol: {protocol}.",
        f"- Seed: {args.seed}; device: {args.device}",
        "",
        f"## {title}",
        "",
        _table(results, poolings, methods, markdown=True),
        "",
        "## Anisotropy of the test-sentence embeddings",
        "",
        "| pooling | method | mean pair cosine | isotropy I(W) | effective rank "
        "| top-PC variance share |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for pooling in poolings:
        for method in methods:
            r = diagnostics[pooling].get(method)
            if r is None:
                continue
            md.append(
                f"| {pooling} | {method} | {r['mean_pair_cosine']:.3f} | "
                f"{r['isotropy_score']:.3g} | {r['effective_rank']:.1f} | "
                f"{r['top_component_variance_ratio']:.3f} |"
            )
    if figures:
        md += ["", "## Figures", ""]
        md += [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    (out_dir / "results.md").write_text("\n".join(md) + "\n", encoding="utf-8")

    from . import __version__

    payload = {
        "data": str(args.data),
        "splits": {s: len(b.scores) for s, b in splits.items()},
        "model": args.model,
        "poolings": poolings,
        "methods": methods,
        "fit_on": args.fit_on,
        "protocol": protocol,
        "seed": args.seed,
        "device": args.device,
        "encoding": encodings,
        "results": [results[(m, p)] for p in poolings for m in methods],
        "diagnostics": diagnostics,
        "figures": figures,
        "versions": {
            "sklearn_isotropy": __version__,
            "python": platform.python_version(),
        },
    }
    (out_dir / "results.json").write_text(
        json.dumps(payload, indent=2, default=_json_default), encoding="utf-8"
    )
    print(f"Wrote {out_dir / 'results.md'}, {out_dir / 'results.json'}", end="")
    print(f" and {len(figures)} figures." if figures else ".")
    return payload


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def main(argv=None):
    """Run the ``sklearn-isotropy`` command; return its exit status.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns
    -------
    status : int
        0 on success, 1 for missing data or model. Bad arguments exit with
        status 2 through :class:`SystemExit`, as argparse does.

    Examples
    --------
    >>> from sklearn_isotropy._cli import main
    >>> main(["evaluate", "--data", "/nonexistent/sts", "--quiet"])
    1
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(name)s: %(message)s",
    )
    try:
        _evaluate(args)
    except CLIError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0
