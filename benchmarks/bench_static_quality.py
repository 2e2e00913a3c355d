"""Static embeddings, round 2: refit time per refine backend, and what moved quality.

``StaticEmbeddingVectorizer`` on the default encoder (or ``--model``),
fitted on the 10,536 distinct sentences of STS-B train (no labels), in
three parts (``--part``, all by default):

1. ``time``: a refit with the distilled table cached (the fit texts and
   their copies less a word encoded with the encoder, the table refined),
   per ``refine_backend``: ``torch``,
   ``onnx`` and ``onnx-int8``, each with its exported graph cached (the
   export is timed apart, once per encoder and machine), wall and CPU
   seconds and the load average at the start;
2. ``backend``: what each backend's embeddings cost the refined table:
   the pipeline ``make_pipeline(StaticEmbeddingVectorizer(refine_backend=b),
   post)`` on STS-B **dev** (where ``refine_backend="auto"`` was chosen)
   and, as a second opinion, the 4-set (mean over STS-B test, STS12, STS13
   and STS14), per post-processor;
3. ``tried``: the ideas tried to close the gap to the encoder, each on
   STS-B dev (where they were chosen) and the 4-set, per post-processor.

Post-processors, fitted on the static embeddings of the train sentences:
``WhiteningTransformer(noise_variance="auto")``, ``WhiteningTransformer()``
and none (raw). Scores are Spearman x100 of the cosines. STS12-14 come
from ``<repo>/../shared/data/sts12-14`` (or ``$SKLEARN_ISOTROPY_STS1214``).
The encoder's embeddings of the fit texts are cached under ``--cache``
(``memory=``), so a rerun encodes nothing twice. Run from the repository
root::

    python benchmarks/bench_static_quality.py [--part time|backend|tried]
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import load_average, machine_line, quiet, rst_table
from _sts_sets import sts1214_dir
from _stsb import stsb_dir

from sklearn_isotropy import (
    StaticEmbeddingVectorizer,
    WhiteningTransformer,
)
from sklearn_isotropy.datasets import get_data_home, load_sts
from sklearn_isotropy.metrics import (
    cosine_spearman_score,
    paired_cosine_similarity,
    spearman_score,
)
from sklearn_isotropy.text import refine_table

SETS = ("test", "sts12", "sts13", "sts14")  # the 4-set
POSTS = {
    'noise_variance="auto"': lambda: WhiteningTransformer(noise_variance="auto"),
    "whitening": lambda: WhiteningTransformer(),
    "raw": None,
}
BACKENDS = ("torch", "onnx", "onnx-int8")


def _distinct(data):
    return list(dict.fromkeys(t for pair in data.pairs for t in pair))


def _data():
    """``(fit_texts, {set: (sentences1, sentences2, scores)})``."""
    fit_texts = _distinct(load_sts(stsb_dir(), split="train"))
    sets = {s: load_sts(stsb_dir(), split=s) for s in ("dev", "test")}
    for name in ("sts12", "sts13", "sts14"):
        sets[name] = load_sts(sts1214_dir() / f"{name}.csv")
    pairs = {
        name: (list(d.pairs[:, 0]), list(d.pairs[:, 1]), np.asarray(d.scores, float))
        for name, d in sets.items()
    }
    return fit_texts, pairs


def scores(encode, fit_texts, pairs):
    """Score ``encode`` (texts -> static embeddings) after each post-processor.

    Returns ``{post: {set: Spearman x100, "4-set": mean}}``, each
    post-processor fitted on the fit texts' embeddings.
    """
    fitted = encode(fit_texts)
    encoded = {name: (encode(a), encode(b), y) for name, (a, b, y) in pairs.items()}
    out = {}
    for post_name, make in POSTS.items():
        post = None if make is None else quiet(make().fit, fitted)
        row = {}
        for name, (a, b, y) in encoded.items():
            if post is not None:
                a, b = post.transform(a), post.transform(b)
            row[name] = 100 * cosine_spearman_score(a, b, y)
        row["4-set"] = float(np.mean([row[s] for s in SETS]))
        out[post_name] = row
    return out


def _score_cells(result):
    return [f"{result[p][k]:.2f}" for p in POSTS for k in ("dev", "4-set")]


def _score_header():
    return [f"{p} {k}" for p in POSTS for k in ("dev", "4-set")]


# ---------------------------------------------------------------- 1: time
def part_time(args, fit_texts):
    """Rows of the refit times per backend.

    The distilled table comes from the usual cache (distilled first if it is
    not there); the ONNX exports go to a fresh cache, so the first export is
    timed too.
    """
    from sklearn_isotropy import BertPoolingVectorizer

    rows = []
    start = time.perf_counter()
    StaticEmbeddingVectorizer(args.model, refine=False).fit(fit_texts[:10])
    print(f"table ready in {time.perf_counter() - start:.1f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_static_quality_") as tmp:
        os.environ["SKLEARN_ISOTROPY_ONNX_CACHE"] = tmp
        for backend in BACKENDS:
            if backend != "torch":  # the export, then cached
                start = time.perf_counter()
                BertPoolingVectorizer(args.model, backend=backend).fit(["a"])
                seconds = time.perf_counter() - start
                rows.append([f"{backend}: first export", f"{seconds:.1f}", "", ""])
                print(rows[-1], flush=True)
            for _ in range(args.repeats):
                load = load_average()
                start, start_cpu = time.perf_counter(), time.process_time()
                quiet(
                    StaticEmbeddingVectorizer(args.model, refine_backend=backend).fit,
                    fit_texts,
                )
                wall = time.perf_counter() - start
                cpu = time.process_time() - start_cpu
                rows.append([backend, f"{wall:.1f}", f"{cpu:.1f}", f"{load:.1f}"])
                print(rows[-1], flush=True)
    return rows


# ------------------------------------------------------------- 2: backend
def part_backend(args, fit_texts, pairs):
    rows = []
    for backend in BACKENDS:
        vec = quiet(
            StaticEmbeddingVectorizer(
                args.model, refine_backend=backend, memory=args.cache
            ).fit,
            fit_texts,
        )
        result = scores(vec.transform, fit_texts, pairs)
        rows.append([backend, *_score_cells(result)])
        print(rows[-1], flush=True)
    return rows


# --------------------------------------------------------------- 3: tried
NEGATIONS = {"not", "no", "n't", "never", "nobody", "nothing", "none", "without"}
#: ``refine_deletions`` copies the fit texts of four words or more.
DELETION_MIN_WORDS = 4


class Refitter:
    """The pieces of a refinement, computed once.

    The distilled table and the fit texts' SIF weights (the vectorizer fitted
    with ``refine=False``), the fit texts' token ids, and the encoder's
    embeddings of the fit texts (``backend="onnx"``: torch's to round-off,
    faster).
    """

    def __init__(self, args, fit_texts):
        from sklearn_isotropy import BertPoolingVectorizer

        self.args, self.fit_texts = args, fit_texts
        self.vec = quiet(
            StaticEmbeddingVectorizer(args.model, refine=False).fit, fit_texts
        )
        self.table = self.vec.embeddings_
        self.tokenizer, self.weights = self.vec.tokenizer_, self.vec.token_weights_
        # every fit text's token ids end to end, as the vectorizer tokenizes
        encodings = self.tokenizer.encode_batch(fit_texts, add_special_tokens=False)
        self.ids = np.concatenate([e.ids for e in encodings]).astype(np.intp)
        self.encoder = BertPoolingVectorizer(
            args.model, pooling="mean", backend="onnx", memory=args.cache
        ).fit(["a"])
        self.targets = self.encode(fit_texts)

    def encode(self, texts):
        return quiet(self.encoder.transform, texts)

    def refined(self, pseudo_tokens=0.0, alpha=0.1, extra=None, table=None, **stages):
        """``table`` (the distilled one) refined on the fit texts and ``extra``."""
        texts, targets = self.fit_texts, self.targets
        if extra is not None:
            texts = [*texts, *extra]
            targets = np.vstack([targets, self.encode(extra)])
        return refine_table(
            self.table if table is None else table,
            self.tokenizer,
            texts,
            targets,
            weights=self.weights,
            alpha=alpha,
            pseudo_tokens=pseudo_tokens,
            **stages,
        )

    def with_copies(self, pseudo_tokens, copies=1):
        """The vectorizer's own refinement, with ``refine_deletions=copies``.

        Its targets are the same encoder's (ONNX float32, the same
        ``memory=``) and its copies less a word those of the default.
        """
        vec = StaticEmbeddingVectorizer(
            self.args.model,
            refine_pseudo_tokens=pseudo_tokens,
            refine_deletions=copies,
            refine_backend="onnx",
            memory=self.args.cache,
        )
        return quiet(vec.fit, self.fit_texts).embeddings_

    def encoder_of(self, table):
        """``transform`` of the vectorizer with ``table`` for its table."""
        vec = copy.copy(self.vec)
        vec.embeddings_ = table
        return vec.transform


def _spans(fit_texts, seed=0):
    """One random span of 2 to n - 1 words of each fit text of n >= 3 words."""
    rng = np.random.default_rng(seed)
    out = []
    for text in fit_texts:
        words = text.split()
        if len(words) < 3:
            continue
        length = rng.integers(2, len(words))
        begin = rng.integers(0, len(words) - length + 1)
        out.append(" ".join(words[begin : begin + length]))
    return list(dict.fromkeys(out))


def _contextual_token_means(args, refit):
    """Average each token's contextual output over its fit-text occurrences.

    The last layer's outputs and the counts; cached in ``--cache``.
    """
    import torch

    from sklearn_isotropy import BertPoolingVectorizer

    path = Path(args.cache) / "contextual_token_means.npz"
    if path.is_file():
        data = np.load(path)
        return data["means"], data["counts"]
    loaded = BertPoolingVectorizer(args.model).fit(["a"])
    model, tokenizer = loaded.model_.eval(), loaded.tokenizer_
    sums = np.zeros(refit.table.shape)
    counts = np.zeros(len(refit.table))
    texts = sorted(refit.fit_texts, key=len)
    with torch.inference_mode():
        for begin in range(0, len(texts), 64):
            batch = tokenizer(
                texts[begin : begin + 64],
                padding=True,
                truncation=True,
                return_tensors="pt",
                return_special_tokens_mask=True,
            )
            special = batch.pop("special_tokens_mask").numpy().astype(bool)
            hidden = model(**batch).last_hidden_state.double().numpy()
            keep = batch["attention_mask"].numpy().astype(bool) & ~special
            ids = batch["input_ids"].numpy()[keep]
            np.add.at(sums, ids, hidden[keep])
            np.add.at(counts, ids, 1)
    means = sums / np.maximum(counts, 1)[:, None]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, means=means, counts=counts)
    return means, counts


def _contextual_prior(refit, means, counts, smoothing=5.0):
    """Pull each seen token's distilled row toward its contextual mean.

    ``(count * mean + s * mapped) / (count + s)``, where ``mapped`` is the
    distilled row under the ridge map from distilled to contextual rows
    fitted on the seen tokens (so both live in one space).
    """
    seen = counts > 0
    X = np.hstack([refit.table, np.ones((len(refit.table), 1))]).astype(np.float64)
    root = np.sqrt(counts[seen])[:, None]
    Xs, Ys = X[seen] * root, means[seen] * root
    gram = Xs.T @ Xs
    penalty = 1e-2 * np.trace(gram) / len(gram)
    W = np.linalg.solve(gram + penalty * np.eye(len(gram)), Xs.T @ Ys)
    mapped = X @ W
    blended = (counts[:, None] * means + smoothing * mapped) / (
        counts[:, None] + smoothing
    )
    return blended.astype(np.float32)


def _neighbour_rows(refit, table, affine_only, k=5):
    """Move the rows of the tokens the fit texts never use.

    Each moves by the mean token correction of its ``k`` nearest used tokens
    (cosine of distilled rows, weights cos^4).
    """
    used = np.bincount(refit.ids, minlength=len(table)) > 0
    correction = table.astype(np.float64) - affine_only
    unit = refit.table / np.linalg.norm(refit.table, axis=1, keepdims=True)
    seen, unseen = np.flatnonzero(used), np.flatnonzero(~used)
    out = table.astype(np.float64).copy()
    for begin in range(0, len(unseen), 2048):
        rows = unseen[begin : begin + 2048]
        sims = unit[rows] @ unit[seen].T
        nearest = np.argpartition(-sims, k, axis=1)[:, :k]
        w = np.maximum(np.take_along_axis(sims, nearest, 1), 0) ** 4
        moved = (w[:, :, None] * correction[seen][nearest]).sum(1)
        out[rows] = affine_only[rows] + moved / (w.sum(1, keepdims=True) + 1e-12)
    return out.astype(np.float32)


def _deletions(fit_texts, seed):
    """Each fit text of 4 words or more without one word, drawn at random.

    As ``refine_deletions=1`` does, but the word drawn by a seeded generator
    instead of the text's CRC-32 (and the words joined by single spaces):
    other draws of the same kind of texts.
    """
    rng = np.random.default_rng(seed)
    out = []
    for text in fit_texts:
        words = text.split()
        if len(words) >= DELETION_MIN_WORDS:
            gone = rng.integers(len(words))
            out.append(" ".join(words[:gone] + words[gone + 1 :]))
    return out


def part_tried(args, fit_texts, pairs):
    """Score each idea, and the dev pairs by kind.

    Returns ``(rows, analysis rows)``: each idea's scores, and the static
    pipeline against the encoder on each kind of dev pair.
    """
    refit = Refitter(args, fit_texts)
    default_k = StaticEmbeddingVectorizer().refine_pseudo_tokens
    rows, tables = [], {}

    def run(label, table):
        result = scores(refit.encoder_of(table), fit_texts, pairs)
        rows.append([label, *_score_cells(result)])
        print(rows[-1], flush=True)
        return table

    tables[0.0] = run("refined as in round 1 (k = 0, fit texts alone)", refit.refined())
    affine_only = refit.refined(tokens=False).astype(np.float64)
    for k in (2.0, 4.0, 8.0, 16.0, 32.0):
        label = f"targets x (n + k) / n, k = {k:g}"
        tables[k] = run(
            label + (" (the default's k)" if k == default_k else ""),
            refit.refined(pseudo_tokens=k),
        )
    run(
        "separate penalties: affine 0.03, token rows 0.1 (k = 0)",
        _two_alphas(refit, 0.03, 0.1),
    )
    run(
        "unused tokens moved like their 5 nearest used ones (k = 0)",
        _neighbour_rows(refit, tables[0.0], affine_only),
    )
    spans = _spans(fit_texts)
    for k in (0.0, default_k):
        run(
            f"+ {len(spans):,} random spans of the fit texts (k = {k:g})",
            refit.refined(pseudo_tokens=k, extra=spans),
        )
    n_copies = sum(len(text.split()) >= DELETION_MIN_WORDS for text in fit_texts)
    for k in (0.0, default_k):
        label = f"+ the {n_copies:,} fit texts of 4+ words less one word (k = {k:g})"
        tables["deleted", k] = run(
            label + (" (the default)" if k == default_k else ""),
            refit.with_copies(k),
        )
    run(
        f"+ two copies less another word each (k = {default_k:g})",
        refit.with_copies(default_k, copies=2),
    )
    for seed in range(5):
        run(
            f"+ one copy less a word drawn at random, draw {seed + 1} "
            f"(k = {default_k:g})",
            refit.refined(pseudo_tokens=default_k, extra=_deletions(fit_texts, seed)),
        )
    means, counts = _contextual_token_means(args, refit)
    prior = _contextual_prior(refit, means, counts)
    run("contextual token means as the prior, not refined", prior)
    run(
        "contextual token means as the prior, refined (k = 0)",
        refit.refined(table=prior),
    )

    # where the static pipeline loses on dev
    a, b, gold = pairs["dev"]
    encoded_a, encoded_b = refit.encode(a), refit.encode(b)
    seen = np.bincount(refit.ids, minlength=len(refit.table))

    def tokens(text):
        return refit.tokenizer.encode(text, add_special_tokens=False).ids

    def words(text):
        return set(text.lower().replace(".", " ").replace(",", " ").split())

    kinds = {
        "all": np.ones(len(gold), dtype=bool),
        "a token the fit texts never use": np.array(
            [any(seen[i] == 0 for i in tokens(x) + tokens(y)) for x, y in zip(a, b)]
        ),
        "a negation on one side only": np.array(
            [
                bool(words(x) & NEGATIONS) != bool(words(y) & NEGATIONS)
                for x, y in zip(a, b)
            ]
        ),
        "nearly the same words (Jaccard > 0.8)": np.array(
            [
                len(words(x) & words(y)) / len(words(x) | words(y)) > 0.8
                for x, y in zip(a, b)
            ]
        ),
        "short (< 16 tokens in the pair)": np.array(
            [len(tokens(x)) + len(tokens(y)) < 16 for x, y in zip(a, b)]
        ),
        "long (>= 40 tokens in the pair)": np.array(
            [len(tokens(x)) + len(tokens(y)) >= 40 for x, y in zip(a, b)]
        ),
    }

    columns = [paired_cosine_similarity(encoded_a, encoded_b)]
    for key in (0.0, default_k, ("deleted", default_k)):
        encode = refit.encoder_of(tables[key])
        post = quiet(POSTS['noise_variance="auto"']().fit, encode(fit_texts))
        columns.append(
            paired_cosine_similarity(
                post.transform(encode(a)), post.transform(encode(b))
            )
        )
    analysis = []
    for kind, mask in kinds.items():
        cells = [f"{100 * spearman_score(gold[mask], c[mask]):.2f}" for c in columns]
        analysis.append([kind, f"{mask.sum():,}", *cells])
    return rows, analysis


def _two_alphas(refit, affine_alpha, token_alpha):
    """The affine stage at one penalty, then the token rows at another (k = 0)."""
    affine = refit.refined(alpha=affine_alpha, tokens=False)
    return refit.refined(alpha=token_alpha, table=affine, affine=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--part", choices=("time", "backend", "tried"), default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--cache",
        default=str(get_data_home() / "bench_cache" / "static_quality"),
        help="memory= of the encoder's embeddings of the fit texts",
    )
    args = parser.parse_args(argv)
    fit_texts, pairs = _data()
    load_before = load_average()
    lines = []
    if args.part in (None, "time"):
        rows = part_time(args, fit_texts)
        lines += [
            f"Refit on the {len(fit_texts):,} STS-B train sentences with the "
            "table cached (wall and CPU seconds, load average at the start):",
            "",
            *rst_table(["refine_backend", "seconds", "CPU s", "load"], rows),
            "",
        ]
    if args.part in (None, "backend"):
        rows = part_backend(args, fit_texts, pairs)
        lines += [
            "Quality of the table refined on each backend's embeddings "
            "(Spearman x100; 4-set: STS-B test, STS12, STS13, STS14):",
            "",
            *rst_table(["refine_backend", *_score_header()], rows),
            "",
        ]
    if args.part in (None, "tried"):
        rows, analysis = part_tried(args, fit_texts, pairs)
        lines += [
            "What each idea gave (Spearman x100; chosen on dev; 4-set: STS-B "
            "test, STS12, STS13, STS14; targets from the encoder in ONNX "
            "float32, torch's to round-off):",
            "",
            *rst_table(["refinement", *_score_header()], rows),
            "",
            "STS-B dev pairs by kind, Spearman x100 of the encoder (mean "
            'pooling, raw) and of the static pipeline (noise_variance="auto"):',
            "",
            *rst_table(
                [
                    "dev pairs",
                    "n",
                    "encoder",
                    "static, k = 0",
                    "static, k = 16",
                    "static, the default",
                ],
                analysis,
            ),
            "",
        ]
    lines.append(
        f"Measured {time.strftime('%Y-%m-%d')} on "
        f"{machine_line(date=False, versions=False, load=False)}, load average "
        f"{load_before:.1f} before, {load_average():.1f} after "
        "(`python benchmarks/bench_static_quality.py`)."
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
