"""Retrieval on STS-B: search quality, index memory and latency per method and k.

The retrieval task is made from STS-B: the dev and test pairs rated at least
4.0 (80% of the 0-5 scale) give the queries (first sentence) and their
relevant sentence (second); the corpus is every distinct sentence of train,
dev and test; a query's own sentence is never returned to it. Every
post-processor is fitted on the train split's sentences only. For the
poolings ``mean`` and ``embeddings_avg`` of the default encoder
(the embedded MiniLM), the script scores raw embeddings, PCA-k, whitening-k
(power 1 and 0.5), NATSV and truncation to the first k coordinates, each as
float32, int8 and binary codes, with exact search; and, for the raw and
truncated embeddings, binary codes with and without centring.

It writes the tables between markers in ``benchmarks/retrieval.md`` (reruns
replace them), the figures ``benchmarks/retrieval_<pooling>.png`` and the
full JSON report to ``--out``.

Encoding the 15,457 sentences takes minutes on a small CPU; embeddings are
cached per sentence by ``BertPoolingVectorizer(memory=--cache)``, so run it
once to fill the cache, then again for the timings::

    flock -s /tmp/isotropy-cpu.lock python benchmarks/bench_retrieval.py --no-readme
    flock -x /tmp/isotropy-cpu.lock python benchmarks/bench_retrieval.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import REPO, load_average, machine_line, markdown_table, replace_section
from _stsb import stsb_dir

from sklearn_isotropy.evaluation import (
    METHODS,
    EncodingSettings,
    RetrievalSettings,
    RetrievalTask,
    evaluate,
    format_table,
    register_method,
    write_reports,
)

PAGE = REPO / "benchmarks" / "retrieval.md"
SECTION = "bench_retrieval"  # between its start and end markers in PAGE
POOLINGS = ("mean", "embeddings_avg")
HALF = "whitening-half"

if HALF not in METHODS:

    @register_method(
        HALF,
        label="whitening½-{n_components}",
        uses_k=True,
        help="whitening at power 0.5 (half way between PCA and full whitening)",
    )
    def _build_half(k, n_features, settings, dev=None):
        from sklearn_isotropy import WhiteningTransformer

        return WhiteningTransformer(n_components=k, power=0.5), {
            "n_components": k or n_features
        }


def _centring_rows(task, embeddings, settings):
    """Binary codes with and without centring, for raw and truncated vectors."""
    from dataclasses import replace

    from sklearn.preprocessing import FunctionTransformer

    def first(X, k):
        return X[:, :k]

    rows = []
    for label, transformer in (
        ("raw", "passthrough"),
        ("truncate-128", FunctionTransformer(first, kw_args={"k": 128})),
        ("PCA-128", METHODS["pca"].build(128, None, settings)[0]),
    ):
        recs, _ = task.score(
            transformer,
            embeddings,
            replace(
                settings,
                quantizations=("float32", "binary", "binary-uncentred"),
                latency_queries=0,
                per_query=False,
            ),
        )
        rows.append((label, {r["quantization"]: r for r in recs}))
    return rows


def _encoded(texts, settings, pooling):
    """The encoder's embeddings of ``texts``, read back from the study's cache.

    The settings' model with ``memory=`` their cache: the texts the study
    encoded are not encoded again (the script sets no batch size or device,
    so the vectorizer's defaults are the study's).
    """
    from sklearn_isotropy import BertPoolingVectorizer

    encoding = settings.encoding
    vec = BertPoolingVectorizer(encoding.model, pooling=pooling, memory=encoding.cache)
    return vec.fit(texts[:1]).transform(texts)


def _paired_errors(records, metric="mrr@10"):
    """Standard errors of each row's difference from raw float32, paired by query."""
    import numpy as np

    by_key = {
        (r["label"], r["quantization"]): np.asarray(r["per_query"][metric])
        for r in records
        if "per_query" in r
    }
    base = by_key[("raw", "float32")]
    rows = {
        key: (
            float(np.mean(v - base)),
            float(np.std(v - base, ddof=1) / np.sqrt(v.size)),
        )
        for key, v in by_key.items()
        if key != ("raw", "float32")
    }
    errors = [se for _, se in rows.values()]
    single = float(np.std(base, ddof=1) / np.sqrt(base.size))
    return {
        "min": min(errors),
        "max": max(errors),
        "raw": single,
        "n": base.size,
        "rows": rows,
    }


def _readme_section(ev, centring, meta, figures, noise):
    task = ev.task.summary()
    lines = [
        "## Retrieval on STS-B (`bench_retrieval.py`)",
        "",
        f"Task: the {'+'.join(task['query_splits'])} pairs of STS-B rated ≥ "
        f"{task['min_score']:g} (80% of the 0–5 scale) give **{task['queries']} "
        f"queries** (the first sentence; its partner is the relevant document, "
        f"{task['relevant_judgements']} judgements); the corpus is every distinct "
        f"sentence of train, dev and test (**{task['documents']} documents**); a "
        "query's own sentence is never returned to it. Every post-processor is "
        "**fitted on the train split's sentences only** "
        "(no labels used). Encoder: all-MiniLM-L6-v2 (384 dimensions). Exact "
        f"search ({meta['backend']}); ties averaged. Scores ×100. `whitening-k` "
        "has power 1, `whitening½-k` power 0.5, `PCA-k` power 0 (centre, rotate, "
        "truncate); `NATSV-5` removes the top 5 directions and keeps the width; "
        "`truncate-k` keeps the first k raw coordinates. Precisions: float32 unit "
        "vectors (inner product = cosine); int8 codes of the unit vectors "
        "(`quantize_embeddings`, ranges calibrated on the train sentences, integer "
        "inner product); binary = sign bits after centring on the train "
        "sentences' mean (Hamming distance). Index = documents × bytes per "
        "vector. Latency = median of 100 one-query top-10 searches on one "
        "thread; batch = the best of three searches of every query, per query. "
        "int8 codes are searched as exact float32 numbers (faiss has no int8 "
        "inner-product index), so their latency is float32's at the same width; "
        "binary codes use faiss's Hamming kernel.",
        "",
    ]
    for pooling in ev.poolings:
        lines += [f"### `{pooling}` pooling", ""]
        lines += [format_table(ev, pooling=pooling, markdown=True), ""]
        e = noise[pooling]
        lines += [
            f"Noise: the standard error of raw float32's MRR@10 over its {e['n']} "
            f"queries is {100 * e['raw']:.2f}; paired by query, the standard error "
            f"of another row's difference from it is {100 * e['min']:.2f} to "
            f"{100 * e['max']:.2f} (x100). Each row's difference from raw "
            "float32, ± that paired standard error:",
            "",
        ]
        labels = list(dict.fromkeys(label for label, _ in e["rows"]))
        rows = []
        for label in labels:
            cells = [label]
            for quant in ("float32", "int8", "binary"):
                diff = e["rows"].get((label, quant))
                cells.append(
                    "0 (reference)"
                    if diff is None and label == "raw" and quant == "float32"
                    else "-"
                    if diff is None
                    else f"{100 * diff[0]:+.2f} ± {100 * diff[1]:.2f}"
                )
            rows.append(cells)
        lines += markdown_table(["method", "float32", "int8", "binary"], rows)
        lines.append("")
        if pooling in figures:
            lines += [
                f"![MRR@10 against bytes per vector, {pooling} pooling]"
                f"({Path(figures[pooling]).name})",
                "",
            ]
    lines += [
        "### Centring before binary quantisation",
        "",
        "MRR@10 ×100 of the same vectors as float32, as binary codes after "
        "centring on the train sentences' mean (the default), and as binary codes "
        "without centring:",
        "",
    ]
    precisions = ("float32", "binary", "binary-uncentred")
    rows = [
        [pooling, label, *(f"{100 * recs[q]['mrr@10']:.2f}" for q in precisions)]
        for pooling, by_label in centring.items()
        for label, recs in by_label
    ]
    header = ["pooling", "vectors", "float32", "binary, centred"]
    lines += markdown_table([*header, "binary, not centred"], rows, left=2)
    lines += [
        "",
        f"Measured {meta['date']} on {meta['machine']}; load average "
        f"{meta['load_before']:.1f} before and {meta['load_after']:.1f} after the "
        f"run ({meta['lock']}). Encoding: {meta['encoding']}. Study: "
        f"{meta['study_seconds']:.0f} s. "
        "Rerun: `python benchmarks/bench_retrieval.py`.",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", default=None, help="STS-B directory")
    parser.add_argument("--model", default=None, help="encoder (default: MiniLM)")
    parser.add_argument(
        "--cache",
        default="/tmp/sklearn_isotropy_bench_retrieval",
        help="embedding cache directory (BertPoolingVectorizer memory=)",
    )
    parser.add_argument("--out", default="/tmp/sklearn_isotropy_bench_retrieval_out")
    parser.add_argument("--query-splits", default="dev,test")
    parser.add_argument("--dims", default="32,64,128,256")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument("--max-pairs", type=int, default=None, help="smoke runs")
    parser.add_argument(
        "--lock",
        default="run under flock -x /tmp/isotropy-cpu.lock",
        help="how the run was isolated (for the README)",
    )
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)

    data = args.data or stsb_dir()
    settings = RetrievalSettings(
        encoding=EncodingSettings(
            model=args.model, poolings=POOLINGS, cache=args.cache, progress=True
        ),
        n_components=tuple(int(k) for k in args.dims.split(",")),
        backend=args.backend,
        latency_queries=args.latency_queries,
        per_query=True,
        query_splits=tuple(args.query_splits.split(",")),
        max_pairs=args.max_pairs,
    )
    task = RetrievalTask.load(data, settings, fit_on="train")
    task.data_name = f"STS-B ({args.query_splits} pairs >= 4 as queries)"
    methods = list(RetrievalTask.default_methods)
    methods.insert(methods.index("whitening") + 1, HALF)
    load_before = load_average()
    start = time.perf_counter()
    ev = evaluate(
        task,
        methods=methods,
        settings=settings,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    study_seconds = (
        time.perf_counter() - start - sum(e["seconds"] for e in ev.encodings.values())
    )
    # centring check: reuse the cached encodings
    centring = {}
    for pooling in POOLINGS:
        embeddings = task.embed(lambda t, p=pooling: _encoded(t, settings, p))
        centring[pooling] = _centring_rows(task, embeddings, settings)
    load_after = load_average()
    noise = {
        p: _paired_errors([r.to_dict() for r in ev.results(p)]) for p in ev.poolings
    }
    for r in ev.records:
        r.values.pop("per_query", None)

    out = Path(args.out)
    files, _ = write_reports(ev, out)
    figures = {}
    for pooling in POOLINGS:
        src = out / f"retrieval_{pooling}.png"
        if src.is_file() and not args.no_readme:
            dst = REPO / "benchmarks" / f"retrieval_{pooling}.png"
            dst.write_bytes(src.read_bytes())
            figures[pooling] = dst
    for pooling in ev.poolings:
        print(f"\n{pooling} pooling")
        print(format_table(ev, pooling=pooling))
    print("\ncentring before binary quantisation (MRR@10 x100):")
    for pooling, rows_ in centring.items():
        for label, recs in rows_:
            print(
                f"  {pooling:15s} {label:13s} float32 "
                f"{100 * recs['float32']['mrr@10']:.2f}  binary "
                f"{100 * recs['binary']['mrr@10']:.2f}  uncentred "
                f"{100 * recs['binary-uncentred']['mrr@10']:.2f}"
            )
    for pooling, e in noise.items():
        print(
            f"{pooling}: s.e. of raw MRR@10 {100 * e['raw']:.2f}; paired s.e. of a "
            f"difference from raw {100 * e['min']:.2f}-{100 * e['max']:.2f} (x100)"
        )
    print(f"\nreports: {', '.join(files)}")
    backends = sorted({r.values.get("backend") for r in ev.records} - {None})
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_line(date=False, load=False, cpu_model=True),
        "load_before": load_before,
        "load_after": load_after,
        "lock": args.lock,
        "backend": ", ".join(b for b in backends if b),
        "study_seconds": study_seconds,
        "encoding": "; ".join(
            f"{p} {e['texts']} texts "
            + (
                f"in {e['seconds']:.0f} s"
                if e["seconds"] >= 1
                else "read from the embedding cache of an earlier run"
            )
            for p, e in ev.encodings.items()
        ),
    }
    if not args.no_readme:
        replace_section(
            PAGE,
            SECTION,
            _readme_section(ev, centring, meta, figures, noise),
            blank_lines=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
