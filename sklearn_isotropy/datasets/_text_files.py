"""Opening the text files of a data set: UTF-8, a byte-order mark skipped.

Every loader of the package reads its files through :func:`reading`, so
that a file in another encoding is one clear ``ValueError`` naming the
file, the line and the byte, and how to convert it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
from pathlib import Path

__all__ = ["open_binary", "reading"]


def open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _open_text(path: Path):
    # utf-8-sig: a byte-order mark (as Excel and Notepad write) is not text;
    # left in, it would stick to the first sentence or hide a header name
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", newline="")


def _not_utf8(path: Path, reader: str) -> ValueError:
    """Say where a file stops being UTF-8 and what it probably is instead."""
    with open_binary(path) as fh:
        head = fh.read(4)
    source = "cp1252"  # the usual culprit: Excel and Notepad on Windows
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        what = "it is UTF-16 text (it starts with a UTF-16 byte-order mark)"
        source = "utf-16"
    elif head.startswith(b"\x1f\x8b"):
        what = "it is gzip-compressed; give it a .gz suffix"
    else:
        what = (
            "it was probably saved in another encoding such as Latin-1 or Windows-1252"
        )
    where = str(path)
    with open_binary(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                where = (
                    f"{path}:{lineno}: byte 0x{line[exc.start]:02x} at column "
                    f"{exc.start + 1} is not UTF-8"
                )
                break
    return ValueError(
        f"{where}; {reader} reads UTF-8 text and {what}. Re-save the file as "
        f"UTF-8 (for example: iconv -f {source} -t utf-8 {path.name} > "
        f"utf8{path.suffix}) and load that copy"
    )


@contextlib.contextmanager
def reading(path: Path, reader: str = "load_sts"):
    """Open ``path`` as text; a file that is not UTF-8 is one clear ValueError."""
    fh = _open_text(path)
    try:
        yield fh
    except UnicodeDecodeError:
        raise _not_utf8(path, reader) from None
    finally:
        fh.close()
