"""Whitening without labels: the probabilistic-PCA posterior and its noise rules.

Encodes every STS-B sentence with the default encoder (or ``--model``) for
the poolings ``mean``, ``first_last_avg`` and ``embeddings_avg``, fits on
the train split's sentences, and scores:

1. **the rules tried** for the noise variance ``s2`` of
   ``WhiteningTransformer(noise_variance=s2)``, each computed from the
   fitted spectrum alone, on the **dev** split (STS Spearman x100, and
   MRR@10 of paraphrase retrieval: dev pairs rated >= 4 as queries over
   every STS-B sentence). The rule behind ``noise_variance="auto"`` was
   chosen on this table, never on test;
2. **the chosen rule on test** beside raw, plain whitening, PCA and the
   grid search over whitening k and power that needs dev labels (the
   evaluation's ``grid`` method), for STS and retrieval.

The tables are written to ``docs/user_guide/without_labels.rst`` between
the ``bench_noise`` markers (``--no-docs`` only prints them). Embeddings
are cached on disk (``--cache``), so reruns take about a minute.

Run from the repository root::

    python benchmarks/bench_noise.py
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings

import numpy as np
from _stsb import REPO, stsb_dir  # noqa: E402  (sibling module)
from bench_quality import _encode_cached  # noqa: E402  (sibling module)

sys.path.insert(0, str(REPO))

from sklearn.decomposition import PCA  # noqa: E402

from sklearn_isotropy import WhiteningTransformer  # noqa: E402
from sklearn_isotropy._defaults import DEFAULT_MODEL_DESCRIPTION  # noqa: E402
from sklearn_isotropy.datasets import get_data_home, load_sts  # noqa: E402
from sklearn_isotropy.evaluation import METHODS, EvaluationSettings  # noqa: E402
from sklearn_isotropy.metrics import (  # noqa: E402
    cosine_spearman_score,
    pairs_to_qrels,
    retrieval_scores,
)

POOLINGS = ("mean", "first_last_avg", "embeddings_avg")
DOCS = REPO / "docs" / "user_guide" / "without_labels.rst"
START, END = ".. bench_noise:start", ".. bench_noise:end"


# ------------------------------------------------------------------ the rules
def _profile_knee(evals):
    """Zhu and Ghodsi's profile likelihood; returns ``q``.

    ``q`` splits the spectrum into the two Gaussian groups of common variance
    that fit best.
    """
    d, best, best_q = evals.size, -np.inf, 1
    for q in range(1, d):
        a, b = evals[:q], evals[q:]
        sse = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()
        loglik = -d / 2 * np.log(max(sse / d, 1e-300))
        if loglik > best:
            best, best_q = loglik, q
    return best_q


def _mp_edge(evals, n):
    """Noise level iterated until no noise eigenvalue is above the MP edge.

    The upper edge of the Marchenko-Pastur law is ``s2 (1 + sqrt(d / n))**2``:
    no eigenvalue the level calls noise lies above it.
    """
    s2 = float(np.median(evals))
    edge = (1 + np.sqrt(evals.size / n)) ** 2
    for _ in range(200):
        new = float(evals[evals <= s2 * edge].mean())
        if abs(new - s2) <= 1e-12 * s2:
            break
        s2 = new
    return s2


def rules(X_fit):
    """``{rule: noise_variance}``: what each rule makes of the fitted spectrum."""
    evals = WhiteningTransformer().fit(X_fit).explained_variance_  # rank-capped
    n = X_fit.shape[0]
    mle = PCA(n_components="mle", svd_solver="full").fit(X_fit)
    q = _profile_knee(evals)
    return {
        "none (plain whitening)": 0.0,
        "quantile 0.25": float(np.quantile(evals, 0.25)),
        "median": float(np.median(evals)),
        'Marchenko-Pastur median ("auto")': "auto",
        "geometric mean": float(np.exp(np.mean(np.log(evals)))),
        "mean (trace / d)": float(evals.mean()),
        "Marchenko-Pastur edge, iterated": _mp_edge(evals, n),
        "PPCA ML noise beyond Minka's dimension": float(mle.noise_variance_),
        "PPCA ML noise beyond the profile knee": float(evals[q:].mean()),
    }


# ------------------------------------------------------------------- scoring
class Split:
    """One STS-B split: its pairs as rows of the embedding matrix."""

    def __init__(self, data, index, all_sentences):
        self.a = np.array([index[s] for s in data.pairs[:, 0]])
        self.b = np.array([index[s] for s in data.pairs[:, 1]])
        self.scores = np.asarray(data.scores, dtype=np.float64)
        qrels = pairs_to_qrels(data.pairs, data.scores)
        self.queries = np.array([index[qrels.corpus[q]] for q in qrels.queries])
        # the judgements over every STS-B sentence (the others are distractors)
        rows, cols = qrels.relevance.nonzero()
        self.relevant = [[] for _ in self.queries]
        for r, c in zip(rows, cols):
            self.relevant[r].append(index[qrels.corpus[c]])
        self.n_corpus = len(all_sentences)

    def sts(self, Z):
        return 100 * cosine_spearman_score(Z[self.a], Z[self.b], self.scores)

    def mrr(self, Z):
        from scipy import sparse

        Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        scores = Zn[self.queries] @ Zn.T
        scores[np.arange(len(self.queries)), self.queries] = -np.inf
        rows = np.repeat(np.arange(len(self.queries)), [len(r) for r in self.relevant])
        cols = np.concatenate(self.relevant)
        truth = sparse.csr_matrix(
            (np.ones(len(cols)), (rows, cols)), shape=scores.shape
        )
        return 100 * retrieval_scores(truth, scores, metrics=("mrr@10",))["mrr@10"]


def _fit_transform(est, X_fit, E):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank messages are not what is measured
        return est.fit(X_fit).transform(E)


def _grid(E, dev, X_fit, settings):
    """The evaluation's ``grid`` method: chosen by CV on the dev labels."""
    dev_pairs = np.stack([E[dev.a], E[dev.b]], axis=1)
    est, params = METHODS["grid"].build(
        None, E.shape[1], settings, (dev_pairs, dev.scores)
    )
    Z = E if est == "passthrough" else _fit_transform(est, X_fit, E)
    return Z, params["chosen"]


# -------------------------------------------------------------------- tables
def _table(header, rows):
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    rule = " ".join("=" * w for w in widths)
    lines = [rule, " ".join(h.ljust(w) for h, w in zip(header, widths)), rule]
    lines += [" ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return [*lines, rule]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)

    data = {s: load_sts(stsb_dir(), split=s) for s in ("train", "dev", "test")}
    sentences = list(
        dict.fromkeys(t for d in data.values() for pair in d.pairs for t in pair)
    )
    index = {s: i for i, s in enumerate(sentences)}
    fit_rows = np.unique([index[t] for pair in data["train"].pairs for t in pair])
    dev = Split(data["dev"], index, sentences)
    test = Split(data["test"], index, sentences)
    cache = args.cache or str(get_data_home() / "bench_cache")
    settings = EvaluationSettings(progress=False)
    model = args.model or DEFAULT_MODEL_DESCRIPTION

    rule_rows, test_rows, chosen = [], [], {}
    means = {}
    start = time.perf_counter()
    for pooling in POOLINGS:
        E, _, _ = _encode_cached(args.model, pooling, sentences, cache, args.batch_size)
        E = E.astype(np.float64)
        X_fit = E[fit_rows]
        raw = (dev.sts(E), dev.mrr(E))
        means.setdefault("raw", []).append(raw)
        rule_rows.append([pooling, "raw", "", E.shape[1], *(f"{c:.2f}" for c in raw)])
        for name, s2 in rules(X_fit).items():
            est = WhiteningTransformer(noise_variance=s2)
            Z = _fit_transform(est, X_fit, E)
            cells = (dev.sts(Z), dev.mrr(Z))
            means.setdefault(name, []).append(cells)
            rule_rows.append(
                [pooling, name, f"{est.noise_variance_:.3g}", est.n_components_]
                + [f"{c:.2f}" for c in cells]
            )
        candidates = {
            "raw": E,
            "PCA-256": _fit_transform(WhiteningTransformer(256, power=0.0), X_fit, E),
            "whitening": _fit_transform(WhiteningTransformer(), X_fit, E),
            "whitening-256": _fit_transform(WhiteningTransformer(256), X_fit, E),
            'noise_variance="auto"': _fit_transform(
                WhiteningTransformer(noise_variance="auto"), X_fit, E
            ),
        }
        candidates["grid (dev labels)"], chosen[pooling] = _grid(
            E, dev, X_fit, settings
        )
        for name, Z in candidates.items():
            test_rows.append(
                [pooling, name, f"{test.sts(Z):.2f}", f"{test.mrr(Z):.2f}"]
            )
        print(
            f"{pooling}: done after {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
        )

    average = [
        ["mean of the three", name, "", "", *(f"{np.mean(v):.2f}" for v in zip(*cells))]
        for name, cells in means.items()
    ]
    by_method = {}
    for _pooling, name, sts, mrr in test_rows:
        by_method.setdefault(name, []).append((float(sts), float(mrr)))
    test_rows += [
        ["mean of the three", name, *(f"{np.mean(v):.2f}" for v in zip(*cells))]
        for name, cells in by_method.items()
    ]
    lines = [
        START,
        "",
        "Rules tried, scored on STS-B **dev** (Spearman x100 and MRR@10 x100):",
        "",
        *_table(
            ["pooling", "rule for s2", "s2", "kept", "STS dev", "MRR@10 dev"],
            rule_rows + average,
        ),
        "",
        "The chosen rule and its neighbours on STS-B **test** (Spearman x100 and "
        "MRR@10 x100); the grid chose "
        + "; ".join(f"{p}: {c}" for p, c in chosen.items())
        + ":",
        "",
        *_table(["pooling", "method", "STS test", "MRR@10 test"], test_rows),
        "",
        f"Encoder: {model}; fitted on the {len(fit_rows):,} distinct train "
        f"sentences; retrieval queries: pairs rated >= 4 (dev {len(dev.queries)}, "
        f"test {len(test.queries)}) over all {len(sentences):,} STS-B sentences. "
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} Linux, 2 "
        "vCPUs (`python benchmarks/bench_noise.py`).",
        "",
        END,
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_docs:
        page = DOCS.read_text(encoding="utf-8")
        before, rest = page.split(START, 1)
        DOCS.write_text(before + text + rest.split(END, 1)[1], encoding="utf-8")
        print(f"wrote {DOCS}", file=sys.stderr)


if __name__ == "__main__":
    main()
