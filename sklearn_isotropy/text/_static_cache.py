"""The on-disk cache of distilled token tables (placeholder: no cache yet)."""

from __future__ import annotations


def cached_table(key, compute):
    """The table of ``key``: computed by ``compute()``."""
    return compute()
