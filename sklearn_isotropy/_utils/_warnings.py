"""One way to warn: a package warning class, pointing at the caller's line."""

from __future__ import annotations

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
    """``stacklevel`` for :func:`warnings.warn` called from :func:`warn`.

    Level 1 is :func:`warn`'s caller; walk out until the first frame that
    belongs to none of the internal packages (the user's code). If every
    frame is internal (a warning raised at import time, say), point at the
    outermost one.
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
    """Warn with ``category`` at the first line outside the package.

    Every warning of sklearn-isotropy goes through here, so the filename
    and line number a user sees are those of their own call (``fit``,
    ``transform``, ``GridSearchCV.fit``, ...), never a frame inside the
    package, whatever the depth of the call chain.

    Parameters
    ----------
    message : str
        What happened and what to do about it.
    category : subclass of :class:`~sklearn_isotropy.exceptions.IsotropyWarning`
        The warning class.
    """
    from ..exceptions import IsotropyWarning

    if not (isinstance(category, type) and issubclass(category, IsotropyWarning)):
        raise TypeError(
            f"sklearn-isotropy warnings must subclass IsotropyWarning; got "
            f"{category!r}."
        )
    # +1: warnings.warn is called from here, one frame below our caller
    warnings.warn(message, category, stacklevel=_caller_stacklevel() + 1)
