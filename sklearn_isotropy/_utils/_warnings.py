"""One way to warn: a package warning class, pointing at the caller's line.

:func:`warn` raises the package's warnings; :func:`record_warnings` and
:func:`reraise_once` keep the warnings of a step with its result and show
each distinct one once, saying where it came from.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings

# frames of these packages are skipped when looking for the caller's line:
# ours, and scikit-learn's wrappers (Pipeline, _fit_context, set_output,
# GridSearchCV, ...) that sit between a user's call and our code
_INTERNAL = ("sklearn_isotropy", "sklearn", "joblib")


def _is_internal(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name.split(".", 1)[0] in _INTERNAL


def _caller_stacklevel() -> int:
    """Return the ``stacklevel`` of the user's line, for :func:`warn`.

    The first frame outside the internal packages (the user's code), for
    :func:`warnings.warn` in :func:`warn`; else the outermost.
    """
    frame = sys._getframe(2)  # the frame that called warn()
    level = 1
    while frame is not None and _is_internal(frame):
        if frame.f_back is None:
            return level
        frame = frame.f_back
        level += 1
    return level


def warn(message: str, category: type[Warning]) -> None:
    """Warn with ``category`` (an ``IsotropyWarning``) at the user's line.

    Every warning of sklearn-isotropy goes through here, so the line a user
    sees is that of their own call (``fit``, ``GridSearchCV.fit``...), never
    a frame inside the package.
    """
    from ..exceptions import IsotropyWarning

    if not (isinstance(category, type) and issubclass(category, IsotropyWarning)):
        raise TypeError(
            f"sklearn-isotropy warnings must subclass IsotropyWarning; got "
            f"{category!r}."
        )
    # +1: warnings.warn is called from here, one frame below our caller
    warnings.warn(message, category, stacklevel=_caller_stacklevel() + 1)


# a figure in a message (not digits inside a name such as float32)
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")

#: warnings Python hides by default (they concern the code, not the run):
#: not recorded with a method's result
_HIDDEN_BY_DEFAULT = (
    ImportWarning,
    ResourceWarning,
    PendingDeprecationWarning,
    DeprecationWarning,
)


@contextlib.contextmanager
def record_warnings():
    """Record every warning raised in the block, repeats included.

    Yields the list of caught warnings. Warnings that Python does not show
    by default (e.g. an ``ImportWarning`` from a lazily imported module) are
    left out: they say nothing about the run.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for category in _HIDDEN_BY_DEFAULT:
            warnings.simplefilter("ignore", category)
        yield caught


def reraise_once(caught, where, category, shown=None):
    """Raise each distinct warning of ``caught`` again, once, as ``category``.

    The code ran under :func:`record_warnings` so that its warnings could be
    kept with its result; each distinct (class, message) is raised again as
    a ``category`` warning that says ``where`` it came from, so that it is
    seen while the run goes on. A grid search repeats a warning for every
    fold, sometimes with the fold's own figures: messages equal up to their
    numbers are shown once, the first one raised, with how many others
    there were. ``shown``, a set kept across steps, holds what was shown
    already: a warning that several steps raise (the same property of the
    data, met by every method) is shown for the first of them only.

    Returns
    -------
    messages : list of str
        The distinct messages, sorted.
    """
    messages = sorted({(w.category.__name__, str(w.message)) for w in caught})
    families = {}  # in the order they were first raised
    for w in caught:
        name, text = w.category.__name__, " ".join(str(w.message).split())
        texts = families.setdefault((name, _NUMBER.sub("#", text)), [])
        if text not in texts:
            texts.append(text)
    shown = set() if shown is None else shown
    for family, texts in families.items():
        if family not in shown:
            shown.add(family)
            more = f" (and {len(texts) - 1} similar)" if len(texts) > 1 else ""
            warn(f"{where}: {family[0]}: {texts[0]}{more}", category)
    return [message for _, message in messages]
