"""Writing an export directory whole, or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

__all__ = ["check_target", "staged_directory"]


def check_target(path, overwrite):
    """``path`` as a Path; FileExistsError if it holds files and not ``overwrite``."""
    path = Path(os.fspath(path)).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())) and not overwrite:
        raise FileExistsError(
            f"{path} exists and is not an empty directory; pass another path or "
            "overwrite=True."
        )
    return path


@contextmanager
def staged_directory(path, *, overwrite):
    """Yield an empty directory beside ``path`` that replaces it on success.

    Written beside the target, then moved in: a failed export leaves the
    target as it was, and a replaced export leaves none of its files.
    """
    path = check_target(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield staging
        _replace(path, staging)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _replace(path, staging):
    """Move the directory ``staging`` to ``path``, replacing what is there."""
    if not path.exists():
        os.replace(staging, path)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
    old.rmdir()
    os.replace(path, old)
    try:
        os.replace(staging, path)
    except BaseException:
        os.replace(old, path)  # put the previous export back
        raise
    if old.is_dir():
        shutil.rmtree(old)
    else:
        old.unlink()
