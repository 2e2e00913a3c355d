"""Tests of the evaluation's method registry: labels, and the grid search."""

from __future__ import annotations

import numpy as np
import pytest

from sklearn_isotropy.evaluation import (
    METHODS,
    EncodingSettings,
    STSSettings,
    STSTask,
    evaluate,
)
from tests._data import sts_pairs


@pytest.mark.parametrize(
    "chosen, expected",
    [
        ({"transformer": "passthrough"}, "grid: no transform (raw), chosen on dev"),
        (
            {"transformer": "WhiteningTransformer", "n_components": 64, "power": 0.0},
            "grid: rotation only / no whitening, k=64",
        ),
        (
            {"transformer": "WhiteningTransformer", "n_components": None, "power": 1.0},
            "grid: whitening, k=all",
        ),
        (
            {"transformer": "WhiteningTransformer", "n_components": 128, "power": 0.5},
            "grid: partial whitening (power 0.5), k=128",
        ),
    ],
)
def test_grid_label_says_what_was_chosen(chosen, expected):
    assert METHODS["grid"].format_label({"chosen": chosen}) == expected


def test_a_label_template_with_missing_fields_falls_back_to_the_name():
    assert METHODS["whitening"].format_label({}) == "whitening"
    assert METHODS["whitening"].format_label({"n_components": 8}) == "whitening-8"


def test_grid_search_shows_a_progress_bar(capfd):
    rng = np.random.default_rng(2)
    emb, bunch = sts_pairs(rng, 40, 12)
    dev, dev_bunch = sts_pairs(rng, 30, 12)
    task = STSTask({"test": bunch, "dev": dev_bunch})
    settings = STSSettings(encoding=EncodingSettings(progress=True), cv=3)
    embeddings = {"mean": {"test": emb, "dev": dev}}
    ev = evaluate(task, methods=["grid"], settings=settings, embeddings=embeddings)
    err = capfd.readouterr().err
    n_fits = ev.record("grid", "mean").params["n_candidates"] * 3
    assert "grid search" in err and f"{n_fits}/{n_fits}" in err
    settings.encoding.progress = False
    evaluate(task, methods=["grid"], settings=settings, embeddings=embeddings)
    assert "grid search" not in capfd.readouterr().err
