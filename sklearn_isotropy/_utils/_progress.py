"""Progress bars: tqdm when asked for, a silent stand-in otherwise."""

from __future__ import annotations

import sys

from ._optional import import_optional


class _NoBar:
    """The part of tqdm's interface the package uses, doing nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n=1):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass

    def close(self):
        pass


def progress_bar(*, total, desc, unit, enabled=True, leave=True):
    """A tqdm progress bar on stderr, or a stand-in that prints nothing.

    Parameters
    ----------
    total : int
        Number of steps.
    desc : str
        Label in front of the bar.
    unit : str
        What a step is (``"batch"``, ``"fit"``).
    enabled : bool, default=True
        False returns the silent stand-in (and does not import tqdm).
    leave : bool, default=True
        Keep the finished bar on screen.

    Returns
    -------
    bar : tqdm.tqdm or a silent stand-in
        Usable as a context manager; ``bar.update(n)`` advances it.
    """
    if not enabled:
        return _NoBar()
    tqdm = import_optional("tqdm.auto", purpose="progress bars", extra="text")
    return tqdm.tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave)
