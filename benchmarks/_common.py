"""What every benchmark script shares: the repository, the machine, doc sections.

Import it first (``from _common import REPO, machine_line, replace_section``):
it puts the repository root on ``sys.path``, so the scripts run from a
checkout without installing it.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


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
