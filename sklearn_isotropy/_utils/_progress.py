"""Progress bars: tqdm when asked for (or when someone is watching), else silent."""

from __future__ import annotations

import multiprocessing
import sys
import threading

from ._optional import import_optional


def interactive_stderr() -> bool:
    """True in a Jupyter kernel or when stderr is a terminal.

    In a kernel ``tqdm.auto`` draws a widget, wherever stderr points. In a
    worker (another process, as with ``GridSearchCV(n_jobs=2)``, or a thread
    other than the main one) bars of parallel tasks would overwrite each
    other on a terminal, so they are off unless asked for. Output piped to a
    file or a CI log is not interactive: a bar there is only noise.
    """
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    if shell is not None and "IPKernelApp" in getattr(shell, "config", {}):
        return True
    if multiprocessing.parent_process() is not None:
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False


class _NoBar:
    """The part of tqdm's interface the package uses, doing nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n=1):
        pass

    def close(self):
        pass


def progress_bar(*, total, desc, unit, enabled=True, leave=True):
    """A tqdm bar on stderr, or a silent stand-in (tqdm not even imported).

    ``enabled=None`` shows the bar only when :func:`interactive_stderr` is
    true. Either is a context manager; ``bar.update(n)`` advances it.
    """
    if enabled is None:
        enabled = interactive_stderr()
    if not enabled:
        return _NoBar()
    tqdm = import_optional("tqdm.auto", purpose="progress bars", extra="text")
    return tqdm.tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave)
