"""What every benchmark script shares: the repository, the machine, doc sections.

Import it first (``from _common import REPO, machine_line, replace_section``):
it puts the repository root on ``sys.path``, so the scripts run from a
checkout without installing it. Beside those: the two timers
(:func:`timed_rounds`, :func:`interleaved`), the table writers
(:func:`markdown_table`, :func:`rst_table`), :func:`quiet` for a call whose
warnings are not what is measured, the encoder's embeddings cached on disk
(:func:`encode_cached`) and :data:`DEFAULT_ENCODER`.

The scripts use the package's public API only: what one needs is public,
a parameter, or written here.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: How the reports name the default encoder when no ``--model`` is given
#: (the package's reports write the same words: ``Evaluation.model_description``).
DEFAULT_ENCODER = "all-MiniLM-L6-v2 (embedded default)"


def load_average() -> float:
    """The one-minute load average, NaN where the system has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return float("nan")


def _cpu_model() -> str:
    """The processor's name: ``/proc/cpuinfo``'s model name, else ``platform``'s."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_line(
    *,
    date: bool = True,
    versions: bool = True,
    load: bool = True,
    cpu_model: bool = False,
) -> str:
    """The machine, the date and the load average, in one line for a report.

    ``date``, ``versions`` (Python, numpy, scikit-learn) and ``load`` (the
    load average now) can be left out, for a page that states them its own
    way; ``cpu_model`` adds the processor's name after the CPU count.
    """
    cpus = f"{os.cpu_count()} logical CPUs"
    if cpu_model:
        cpus += f" ({_cpu_model()})"
    parts = [f"{platform.machine()} {platform.system()}", cpus]
    if date:
        parts.insert(0, time.strftime("%Y-%m-%d"))
    if versions:
        import numpy
        import sklearn

        parts += [
            f"Python {platform.python_version()}",
            f"numpy {numpy.__version__}",
            f"scikit-learn {sklearn.__version__}",
        ]
    if load:
        parts.append(f"load average {load_average():.2f}")
    return ", ".join(parts)


def replace_section(
    path: str | os.PathLike, name: str, text: str, *, blank_lines: bool = True
) -> None:
    """Replace what lies between the ``name`` markers of a doc file by ``text``.

    The markers are ``<!-- name:start -->`` / ``<!-- name:end -->`` in
    Markdown and ``.. name:start`` / ``.. name:end`` in reStructuredText;
    they stay in place, each followed (``start``) or preceded (``end``) by a
    blank line around ``text``, or by a line break alone with
    ``blank_lines=False``. A file without them is an error, not a silent skip.
    """
    path = Path(path)
    page = path.read_text(encoding="utf-8")
    if path.suffix == ".rst":
        start, end = f".. {name}:start", f".. {name}:end"
    else:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in page or end not in page:
        raise SystemExit(f"{path} has no {start} ... {end} section to replace")
    before, rest = page.split(start, 1)
    after = rest.split(end, 1)[1]
    gap = "\n\n" if blank_lines else "\n"
    path.write_text(
        f"{before}{start}{gap}{text.strip()}{gap}{end}{after}", encoding="utf-8"
    )
    print(f"wrote {path}", file=sys.stderr)


def quiet(call, *args, **kwargs):
    """``call(*args, **kwargs)`` with its warnings ignored.

    For the fits whose warnings (rank deficiency, truncation) are not what
    a benchmark measures.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)


def encode_cached(model, pooling, sentences, cache_dir, batch_size):
    """The encoder's embeddings of ``sentences``, cached in ``cache_dir``.

    Returns ``(embeddings, seconds, hit)``: the time spent encoding (0 when
    read from the cache) and whether they were. The file is named by the
    pooling and a hash of the model and the sentences.
    """
    import numpy as np

    from sklearn_isotropy import BertPoolingVectorizer

    key = hashlib.sha256(
        json.dumps([str(model), pooling, sentences]).encode("utf-8")
    ).hexdigest()[:16]
    path = Path(cache_dir) / f"{pooling}-{key}.npy"
    if path.is_file():
        return np.load(path), 0.0, True
    vec = BertPoolingVectorizer(
        model, pooling=pooling, batch_size=batch_size, show_progress_bar=True
    )
    start = time.perf_counter()
    E = vec.fit(sentences[:1]).transform(sentences)
    seconds = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, E)
    return E, seconds, False


# ------------------------------------------------------------------- timers
def timed_rounds(candidates, rounds, *, rotate=True):
    """Time each function once a round, ``rounds`` times.

    The order rotates from round to round (``rotate``), so that a burst of
    load from other processes spreads over all of them. Returns ``(wall,
    cpu)``, each ``{name: [seconds per round]}``: the wall time and the
    process CPU time (all threads), which other processes disturb less.
    """
    names = list(candidates)
    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for r in range(rounds):
        first = r % len(names) if rotate else 0
        for name in names[first:] + names[:first]:
            start, start_cpu = time.perf_counter(), time.process_time()
            candidates[name]()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return wall, cpu


def interleaved(candidates, repeat, settle=0.0, back_to_back=()):
    """Time every candidate ``repeat`` times, round-robin.

    Returns ``{name: array of times}``. Interleaving spreads the machine's
    slow moments over all candidates, so ratios of minima and paired ratios
    (same round) are fair even when absolute times drift between rounds.
    Each timed call starts after ``settle`` idle seconds (untimed), so that
    it does not share the cores with what the previous candidate left
    running: OpenBLAS's worker threads spin for about 0.1 s after every
    multi-threaded call (``bench_linear.idle_blas_spin``). The candidates
    named in ``back_to_back`` start right after the previous one, with no
    pause.
    """
    import numpy as np

    times = {name: [] for name in candidates}
    for _ in range(repeat):
        for name, fn in candidates.items():
            if settle and name not in back_to_back:
                time.sleep(settle)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: np.array(t) for name, t in times.items()}


# ------------------------------------------------------------------- tables
def markdown_table(header, rows, *, left=1):
    """The lines of a Markdown table: the first ``left`` columns left-aligned.

    The other columns are right-aligned (numbers); cells are written with
    ``str``.
    """
    rule = ["---"] * left + ["---:"] * (len(header) - left)
    return [
        "| " + " | ".join(map(str, header)) + " |",
        "|" + "|".join(rule) + "|",
        *["| " + " | ".join(map(str, row)) + " |" for row in rows],
    ]


def rst_table(header, rows):
    """The lines of a reStructuredText simple table, columns as wide as needed.

    Rows end at their last character; the header is padded to the full
    width, as the tables already in the docs were written.
    """
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    rule = " ".join("=" * w for w in widths)

    def line(cells):
        return " ".join(str(c).ljust(w) for c, w in zip(cells, widths))

    return [rule, line(header), rule, *[line(r).rstrip() for r in rows], rule]
