"""Wall time of the README's main job, and how much of it is encoding.

Runs ``sklearn-isotropy evaluate --data <stsb>`` (the README's main command,
after the install) in a fresh process, ``--repeat`` times, into a temporary
``--out`` directory, with ``--quiet`` (no progress bars). Prints the wall
time of each run (interpreter start, imports, model load, encoding, every
method, reports) and the encoding seconds the run recorded in
``results.json``, per pooling: the command as a new user runs it. Then
prints what the last run printed on standard output (the scores table of
the README) and every line of its standard error that is a warning.

Run from the repository root::

    python benchmarks/bench_main_job.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_line
from _stsb import stsb_dir


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default=None)
    args = parser.parse_args(argv)
    data = args.data or stsb_dir()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    print(machine_line())
    rows = []
    for run in range(args.repeat):
        with tempfile.TemporaryDirectory() as out:
            command = [
                sys.executable,
                "-m",
                "sklearn_isotropy",
                "evaluate",
                "--data",
                str(data),
                "--out",
                out,
                "--quiet",
            ]
            start = time.perf_counter()
            done = subprocess.run(
                command, env=env, check=True, capture_output=True, text=True
            )
            wall = time.perf_counter() - start
            payload = json.loads((Path(out) / "results.json").read_text())
        encoding = {p: e["seconds"] for p, e in payload["encoding"].items()}
        rows.append((wall, encoding))
        print(
            f"run {run + 1}: {wall:.1f} s, encoding "
            + ", ".join(f"{p} {s:.1f} s" for p, s in encoding.items()),
            flush=True,
        )
    # what a new user sees (the last run): the table on stdout, and whether
    # any line on stderr is a warning
    print("\nThe command's standard output (last run):\n")
    print(done.stdout.rstrip())
    warned = [ln for ln in done.stderr.splitlines() if "warning" in ln.lower()]
    print(f"\nwarning lines on stderr: {len(warned)}")
    for line in warned:
        print(f"  {line}")
    walls = sorted(w for w, _ in rows)
    best = min(rows)
    print(
        f"\nbest {walls[0]:.1f} s, median {walls[len(walls) // 2]:.1f} s; in the "
        f"best run encoding took {sum(best[1].values()):.1f} s of it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
