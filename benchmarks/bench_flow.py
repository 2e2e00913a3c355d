"""GlowFlowTransformer as a density model and as BERT-flow, against the Gaussian.

Six parts (``--parts``, all by default), each over ``--seeds`` (the flow's
``random_state``; for ``synthetic`` also the data's):

``synthetic``
    A known 16-d Gaussian with a decaying spectrum in a random basis: 6,000
    rows, the flow fitted on 5,000, held-out log-likelihood of the other
    1,000 against the true density and the Gaussian fitted by maximum
    likelihood (numpy mean and covariance, scipy ``logpdf``). Target: the
    flow (defaults) within 0.05 nats of the Gaussian MLE on average.
``loglik``
    all-MiniLM-L6-v2 sentence embeddings (``embeddings_avg`` and ``mean``
    pooling): fitted on the STS-B train sentences, scored on the test
    sentences that are not train sentences. Every pooling of a transformer
    puts the embeddings on a hyperplane (LayerNorm), so the Gaussian MLE in
    all 384 dimensions is singular: the baseline is the Gaussian of the
    standardised rows with the covariance shrunk by OAS when singular (what
    the flow starts from; numpy/scipy, not the flow's code), and the same
    comparison is also made in the numerical-rank subspace, where the
    Gaussian MLE exists and needs no shrinkage. Target: the flow above the
    Gaussian.
``sts``
    STS-B Spearman x100 (test pairs, cosine), every transform fitted on all
    STS-B sentences (the papers' "target" protocol), for the flow's defaults
    and the ``"bert-flow"`` preset against whitening. Target
    (``embeddings_avg``): the defaults within 0.3 of whitening on average and
    no seed more than 1.0 below.
``ood``
    Out-of-distribution detection: the flow and the Gaussian/Mahalanobis
    score of ``WhiteningTransformer`` (minus the squared norm of the whitened
    row) fitted on the train sentences; ROC-AUC of ``-score_samples`` at
    telling the held-out test sentences from shuffled-word versions of them
    from random strings of train-vocabulary words, and from random strings of
    tokenizer tokens, of the same lengths.
``ablation``
    Held-out log-likelihood (``embeddings_avg``, train to test sentences) of
    the defaults against other learning rates and against training the
    mixing layers too (switched on for the ablation only).
``time``
    Fit time of the defaults on the 17,256 STS-B sentence occurrences (train,
    dev and test pairs, both sides) x 384 (``embeddings_avg``). Target: under
    60 s. Run this part under an exclusive lock on a shared machine.

Sentences are encoded with ``BertPoolingVectorizer(memory=--cache-dir)``, so
a rerun does not encode again.

Run from the repository root::

    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py --seeds 0 1 2
    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py --parts time
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _common import load_average, machine_line
from _stsb import stsb_dir
from scipy.stats import multivariate_normal, ortho_group

from sklearn_isotropy import (
    BertPoolingVectorizer,
    GlowFlowTransformer,
    WhiteningTransformer,
)
from sklearn_isotropy.exceptions import RankDeficiencyWarning
from sklearn_isotropy.metrics import cosine_spearman_score

POOLINGS = ("embeddings_avg", "mean")
PARTS = ("synthetic", "loglik", "sts", "ood", "ablation", "time")


# ------------------------------------------------------------------ data
def read_split(root: Path, name: str) -> list[tuple[str, str, float]]:
    with open(root / f"{name}.csv", newline="", encoding="utf-8") as fh:
        return [(s1, s2, float(y)) for s1, s2, y in csv.reader(fh)]


class Encoder:
    """Embeddings of sentences for a pooling, cached on disk by the vectorizer."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self._vectorizers = {}

    def vectorizer(self, pooling: str) -> BertPoolingVectorizer:
        if pooling not in self._vectorizers:
            vec = BertPoolingVectorizer(
                pooling=pooling, batch_size=64, memory=str(self.cache_dir)
            )
            self._vectorizers[pooling] = vec.fit(["a"])
        return self._vectorizers[pooling]

    def __call__(self, sentences: list[str], pooling: str) -> np.ndarray:
        return self.vectorizer(pooling).transform(sentences)


def mean_and_spread(values) -> str:
    values = np.asarray(values, dtype=float)
    if values.size == 1:
        return f"{values[0]:.3f}"
    return f"{values.mean():.3f} ({values.min():.3f} to {values.max():.3f})"


def seconds(start: float) -> float:
    return time.perf_counter() - start


# ---------------------------------------------------------- the Gaussian
def gaussian_loglik(X_train: np.ndarray, X_test: np.ndarray) -> tuple[float, str]:
    """Held-out mean log-likelihood of the Gaussian fitted to ``X_train``.

    numpy standardisation, covariance (``ddof=1``) of the standardised rows,
    OAS shrinkage (sklearn.covariance.OAS) only when that covariance is
    singular; scipy's log-density, moved back to data units by the
    standardisation's log-determinant. Independent of the flow's code.
    """
    from sklearn.covariance import OAS

    X_train = X_train.astype(np.float64)
    mean, std = X_train.mean(0), X_train.std(0)
    std[std == 0] = 1.0
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


# ------------------------------------------------------------ the parts
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
        epochs.append(f"{flow.n_iter_} (kept {flow.best_epoch_})")
        rows["true density"].append(truth.logpdf(X_test).mean())
        rows["Gaussian MLE"].append(mle.logpdf(X_test).mean())
        rows["flow (defaults)"].append(flow.score(X_test))
    out("| model | held-out log-likelihood, nats/row (mean, min to max) |")
    out("|---|---|")
    for name, values in rows.items():
        out(f"| {name} | {mean_and_spread(values)} |")
    gap = np.mean(rows["flow (defaults)"]) - np.mean(rows["Gaussian MLE"])
    out("")
    out(
        f"Flow minus Gaussian MLE: {gap:+.4f} nats/row (target >= -0.05: "
        f"{'met' if gap >= -0.05 else 'NOT met'}). Epochs run (kept): "
        f"{', '.join(epochs)}; fit {mean_and_spread(fit_times)} s."
    )


def part_loglik(data, encode, seeds, out):
    out("## loglik: fit on STS-B train sentences, scored on test sentences")
    train, test = data["train_sentences"], data["test_only_sentences"]
    out(f"{len(train)} train sentences, {len(test)} test sentences not in train.")
    out("")
    out("| pooling | space | Gaussian | flow (defaults) | flow - Gaussian | epochs |")
    out("|---|---|---:|---|---:|---|")
    for pooling in POOLINGS:
        X_train = encode(train, pooling).astype(np.float64)
        X_test = encode(test, pooling).astype(np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankDeficiencyWarning)
            rotation = WhiteningTransformer(power=0).fit(X_train)
        spaces = {
            f"R^{X_train.shape[1]}": (X_train, X_test),
            # the numerical-rank subspace: principal axes, no rescaling
            f"rank-{rotation.n_components_} subspace": (
                rotation.transform(X_train),
                rotation.transform(X_test),
            ),
        }
        for space, (A, B) in spaces.items():
            baseline, label = gaussian_loglik(A, B)
            scores, epochs = [], []
            for seed in seeds:
                flow = GlowFlowTransformer(random_state=seed).fit(A)
                scores.append(flow.score(B))
                epochs.append(f"{flow.n_iter_}/{flow.best_epoch_}")
            gap = np.mean(scores) - baseline
            out(
                f"| {pooling} | {space} | {baseline:.3f} ({label}) | "
                f"{mean_and_spread(scores)} | {gap:+.3f} | {', '.join(epochs)} |"
            )
    out("")
    out("epochs: run/kept (early stopping keeps the best held-out epoch).")


def spearman_x100(Z, index, pairs) -> float:
    a = Z[[index[s1] for s1, _, _ in pairs]]
    b = Z[[index[s2] for _, s2, _ in pairs]]
    return 100 * cosine_spearman_score(a, b, [y for _, _, y in pairs])


def part_sts(data, encode, seeds, out):
    out("## sts: Spearman x100 on STS-B test, fitted on all STS-B sentences")
    sentences, test = data["all_sentences"], data["splits"]["test"]
    index = {s: i for i, s in enumerate(sentences)}
    out("")
    out("| pooling | raw | whitening | flow (defaults) | flow, preset bert-flow |")
    out("|---|---:|---:|---|---|")
    targets = []
    for pooling in POOLINGS:
        X = encode(sentences, pooling)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankDeficiencyWarning)
            whitening = spearman_x100(
                WhiteningTransformer().fit_transform(X), index, test
            )
        cells = {}
        for name, make in [
            ("defaults", lambda s: GlowFlowTransformer(random_state=s)),
            (
                "bert-flow",
                lambda s: GlowFlowTransformer.from_preset("bert-flow", random_state=s),
            ),
        ]:
            cells[name] = [
                spearman_x100(make(seed).fit_transform(X), index, test)
                for seed in seeds
            ]
        raw = spearman_x100(X, index, test)
        out(
            f"| {pooling} | {raw:.2f} | {whitening:.2f} | "
            f"{mean_and_spread(cells['defaults'])} | "
            f"{mean_and_spread(cells['bert-flow'])} |"
        )
        if pooling == "embeddings_avg":
            gap = np.mean(cells["defaults"]) - whitening
            worst = min(cells["defaults"]) - whitening
            met = gap >= -0.3 and worst >= -1.0
            targets.append(
                f"embeddings_avg: defaults - whitening = {gap:+.3f} on average, "
                f"worst seed {worst:+.3f} (target >= -0.3 and >= -1.0: "
                f"{'met' if met else 'NOT met'})"
            )
    out("")
    for line in targets:
        out(line)


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


def part_ood(data, encode, seeds, out):
    from sklearn.metrics import roc_auc_score

    out("## ood: ROC-AUC of -score_samples, fitted on STS-B train sentences")
    rng = np.random.RandomState(0)
    held_out = data["test_only_sentences"]
    vocabulary = [w for s in data["train_sentences"] for w in s.split()]
    shuffled_pairs = [(s, shuffled(s, rng)) for s in held_out]
    shuffled_pairs = [(s, t) for s, t in shuffled_pairs if t is not None]
    random_words = [
        " ".join(rng.choice(vocabulary, size=len(s.split()))) for s in held_out
    ]
    tokenizer = encode.vectorizer(POOLINGS[0]).tokenizer_
    special = set(tokenizer.all_special_ids)
    token_ids = [i for i in range(tokenizer.vocab_size) if i not in special]
    random_tokens = [
        tokenizer.decode(rng.choice(token_ids, size=len(tokenizer.tokenize(s))))
        for s in held_out
    ]
    out(
        f"in-distribution: {len(held_out)} test sentences not in train; "
        f"shuffled words: {len(shuffled_pairs)} of them (3+ distinct words), "
        "each against its original; random words: one string per test "
        "sentence of as many train-vocabulary words, drawn by frequency; "
        "random tokens: one string per test sentence of as many tokens, drawn "
        f"uniformly from the tokenizer's {len(token_ids)} non-special tokens."
    )
    out("")
    out("| pooling | outliers | Gaussian / Mahalanobis | flow (defaults) |")
    out("|---|---|---:|---|")
    for pooling in POOLINGS:
        X_train = encode(data["train_sentences"], pooling).astype(np.float64)
        X_in = encode(held_out, pooling).astype(np.float64)
        outliers = {
            "shuffled words": (
                encode([s for s, _ in shuffled_pairs], pooling),
                encode([t for _, t in shuffled_pairs], pooling),
            ),
            "random words": (X_in, encode(random_words, pooling)),
            "random tokens": (X_in, encode(random_tokens, pooling)),
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
            out(
                f"| {pooling} | {name} | {gaussian:.3f} | "
                f"{mean_and_spread(flow_aucs)} |"
            )


def part_ablation(data, encode, seeds, out):
    """What the defaults' choices buy, on held-out log-likelihood."""
    from sklearn_isotropy.flow._layers import Glow

    out("## ablation: embeddings_avg, fit on train sentences, scored on test")
    X_train = encode(data["train_sentences"], "embeddings_avg")
    X_test = encode(data["test_only_sentences"], "embeddings_avg")
    variants = [
        ("defaults (learning_rate=3e-3)", {}, False),
        ("learning_rate=1e-3", {"learning_rate": 1e-3}, False),
        ("learning_rate=1e-2", {"learning_rate": 1e-2}, False),
        ("mixing layers trained too", {}, True),
    ]
    out("")
    out(
        "| variant | held-out log-likelihood | held-out change after epoch 1 "
        "| epochs run/kept |"
    )
    out("|---|---|---|---|")
    fix_mixing = Glow.fix_mixing
    for name, params, train_mixing in variants:
        scores, first, epochs = [], [], []
        # the ablation switches off a private step of the estimator
        Glow.fix_mixing = (lambda flow: None) if train_mixing else fix_mixing
        try:
            for seed in seeds:
                flow = GlowFlowTransformer(random_state=seed, **params).fit(X_train)
                scores.append(flow.score(X_test))
                first.append(flow.validation_scores_[1] - flow.validation_scores_[0])
                epochs.append(f"{flow.n_iter_}/{flow.best_epoch_}")
        finally:
            Glow.fix_mixing = fix_mixing
        out(
            f"| {name} | {mean_and_spread(scores)} | {mean_and_spread(first)} | "
            f"{', '.join(epochs)} |"
        )


def part_time(data, encode, seeds, out):
    out("## time: fit of the defaults on 17k x 384")
    X = encode(data["occurrences"], "embeddings_avg")
    out(
        f"{X.shape[0]} x {X.shape[1]} float32 ({'embeddings_avg'}), "
        f"{_torch_threads()} torch threads, load average before "
        f"{load_average():.2f}."
    )
    out("")
    out("| seed | fit (s) | epochs run (kept) | s/epoch |")
    out("|---|---:|---|---:|")
    times = []
    for seed in seeds:
        start = time.perf_counter()
        flow = GlowFlowTransformer(random_state=seed).fit(X)
        times.append(seconds(start))
        out(
            f"| {seed} | {times[-1]:.1f} | {flow.n_iter_} ({flow.best_epoch_}) | "
            f"{times[-1] / max(flow.n_iter_, 1):.2f} |"
        )
    out("")
    out(
        f"Slowest fit {max(times):.1f} s (target < 60 s: "
        f"{'met' if max(times) < 60 else 'NOT met'}); load average after "
        f"{load_average():.2f}."
    )
    out("")
    out("One training step, batch of 128 rows x 384 features (ms, mean of 50):")
    out("")
    out("| Glow | forward | backward | Adam | total |")
    out("|---|---:|---:|---:|---:|")
    for name, (fwd, bwd, opt) in step_times().items():
        out(f"| {name} | {fwd:.1f} | {bwd:.1f} | {opt:.1f} | {fwd + bwd + opt:.1f} |")


def step_times(d: int = 384, batch: int = 128, steps: int = 50) -> dict:
    """Milliseconds per training step of the default Glow on ``d`` features.

    With the mixing layers fixed (``init="whitening"``: one cached product
    each) and trained (``init="bert-flow"``), on random rows, after warm-up.
    """
    import torch

    from sklearn_isotropy.flow._layers import Glow

    out = {}
    for name, fixed in [("fixed mixing", True), ("trained mixing", False)]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            glow = Glow(d, output_scale=fixed)
            x = torch.randn(batch, d)
        glow.initialize_identity()
        if fixed:
            glow.fix_mixing()
        params = [p for p in glow.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(params, lr=1e-3)
        totals = np.zeros(3)
        for i in range(steps + 5):
            t0 = time.perf_counter()
            loss = -glow.log_prob(x).mean()
            t1 = time.perf_counter()
            optimizer.zero_grad()
            loss.backward()
            t2 = time.perf_counter()
            optimizer.step()
            t3 = time.perf_counter()
            if i >= 5:
                totals += [t1 - t0, t2 - t1, t3 - t2]
        out[name] = 1e3 * totals / steps
    return out


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# ------------------------------------------------------------------ main
def load_data() -> dict:
    root = stsb_dir()
    splits = {name: read_split(root, name) for name in ("train", "dev", "test")}

    def unique(rows):
        return sorted({s for s1, s2, _ in rows for s in (s1, s2)})

    train = unique(splits["train"])
    train_set = set(train)
    return {
        "splits": splits,
        "train_sentences": train,
        "test_only_sentences": [
            s for s in unique(splits["test"]) if s not in train_set
        ],
        "all_sentences": unique([r for rows in splits.values() for r in rows]),
        "occurrences": [
            s for rows in splits.values() for s1, s2, _ in rows for s in (s1, s2)
        ],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "sklearn_isotropy_bench_flow",
        help="BertPoolingVectorizer(memory=...) cache of the embeddings",
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (torch.set_num_threads, this script only); "
        "default: torch's own choice",
    )
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    def out(line=""):
        print(line, flush=True)

    out(
        f"# bench_flow: {machine_line()}; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), seeds {args.seeds}"
    )
    data = None if args.parts == ["synthetic"] else load_data()
    encode = Encoder(args.cache_dir)
    runners = {
        "synthetic": lambda: part_synthetic(args.seeds, out),
        "loglik": lambda: part_loglik(data, encode, args.seeds, out),
        "sts": lambda: part_sts(data, encode, args.seeds, out),
        "ood": lambda: part_ood(data, encode, args.seeds, out),
        "ablation": lambda: part_ablation(data, encode, args.seeds, out),
        "time": lambda: part_time(data, encode, args.seeds, out),
    }
    for part in PARTS:
        if part in args.parts:
            start = time.perf_counter()
            out("")
            runners[part]()
            out(f"\n({part}: {seconds(start):.0f} s)")


if __name__ == "__main__":
    main()
