"""The evaluation module on precomputed embeddings: labels, reports, warnings."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.utils import Bunch

from sklearn_isotropy.evaluation import (
    METHODS,
    EvaluationSettings,
    STSTask,
    evaluate,
    format_table,
)
from sklearn_isotropy.evaluation._report import to_json
from sklearn_isotropy.exceptions import EvaluationWarning, RankDeficiencyWarning


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


def _splits(rng, n, d, offset=3.0):
    """Pairs of anisotropic embeddings with scores tied to their cosine."""
    base = rng.normal(size=(n, d)) * np.geomspace(5, 0.05, d) + offset
    other = base + rng.normal(scale=2.0, size=(n, d))
    emb = np.stack([base, other], axis=1)
    scores = rng.uniform(0, 5, size=n)
    return emb, Bunch(scores=scores)


def test_json_names_the_default_model():
    rng = np.random.default_rng(0)
    emb, bunch = _splits(rng, 10, 4)
    ev = evaluate(
        STSTask({"test": bunch}), methods=[], embeddings={"mean": {"test": emb}}
    )
    payload = json.loads(to_json(ev))
    assert payload["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert "embedded default" in payload["model_description"]
    ev.settings.model = "/models/mine"
    assert json.loads(to_json(ev))["model"] == "/models/mine"


def test_model_name_is_deprecated_for_model_description():
    emb, bunch = _splits(np.random.default_rng(0), 10, 4)
    task, embeddings = STSTask({"test": bunch}), {"mean": {"test": emb}}
    ev = evaluate(task, methods=[], embeddings=embeddings)
    payload = json.loads(to_json(ev))
    assert ev.model_description == payload["model_description"]
    assert ev.model_id == payload["model"]
    with pytest.warns(FutureWarning, match="use model_description"):
        assert ev.model_name == ev.model_description


def test_each_run_logs_the_score_the_task_names():
    rng = np.random.default_rng(1)
    emb, bunch = _splits(rng, 40, 6)
    lines = []
    ev = evaluate(
        STSTask({"test": bunch}),
        methods=["raw", "whitening"],
        embeddings={"mean": {"test": emb}},
        log=lines.append,
    )
    rho = [r.values["spearman_x100"] for r in ev.records]
    assert lines == [
        f"[mean] raw: {rho[0]:.2f}",
        f"[mean] whitening-6: {rho[1]:.2f}",
    ]


def test_run_warnings_are_raised_once_with_their_origin():
    rng = np.random.default_rng(0)
    # 6 test pairs of 20 dimensions: 12 rows, whitening is rank deficient
    emb, bunch = _splits(rng, 6, 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = evaluate(
            STSTask({"test": bunch}),
            methods=["raw", "whitening"],
            embeddings={"mean": {"test": emb}, "cls": {"test": emb}},
        )
    ours = [w for w in caught if issubclass(w.category, EvaluationWarning)]
    # once per pooling, and each names where it came from
    assert len(ours) == 2
    assert str(ours[0].message).startswith(
        "[mean] whitening: RankDeficiencyWarning: The covariance has numerical rank"
    )
    assert str(ours[1].message).startswith("[cls] whitening: RankDeficiencyWarning")
    assert ours[0].filename == __file__  # the caller's line
    record = ev.record("whitening", "mean")
    assert len(record.warnings) == 1 and "numerical rank" in record.warnings[0]
    assert ev.record("raw", "mean").warnings == []


def test_table_blocks_per_pooling_fit_100_columns():
    rng = np.random.default_rng(1)
    emb, bunch = _splits(rng, 60, 10)
    poolings = ["first_last_avg", "embeddings_avg", "last2_avg", "mean"]
    ev = evaluate(
        STSTask({"test": bunch}),
        methods=["raw", "sn", "natsv"],
        embeddings={p: {"test": emb} for p in poolings},
    )
    text = format_table(ev)
    assert max(len(line) for line in text.splitlines()) <= 100
    for p in poolings:
        assert f"{p} pooling:" in text
    md = format_table(ev, markdown=True)
    assert md.count("### ") == len(poolings)
    assert f"{ev.record('sn', 'mean').values['spearman_x100']:.2f}" in md


def test_grid_search_shows_a_progress_bar(capfd):
    rng = np.random.default_rng(2)
    emb, bunch = _splits(rng, 40, 12)
    dev, dev_bunch = _splits(rng, 30, 12)
    task = STSTask({"test": bunch, "dev": dev_bunch})
    settings = EvaluationSettings(cv=3, progress=True)
    embeddings = {"mean": {"test": emb, "dev": dev}}
    ev = evaluate(task, methods=["grid"], settings=settings, embeddings=embeddings)
    err = capfd.readouterr().err
    n_fits = ev.record("grid", "mean").params["n_candidates"] * 3
    assert "grid search" in err and f"{n_fits}/{n_fits}" in err
    settings.progress = False
    evaluate(task, methods=["grid"], settings=settings, embeddings=embeddings)
    assert "grid search" not in capfd.readouterr().err


def test_recorded_warnings_leave_out_those_python_hides():
    # e.g. the ImportWarning of a lazily imported module says nothing about
    # the run: it must not reach a method's record or the console
    from sklearn_isotropy._utils import record_warnings

    with record_warnings() as caught:
        warnings.warn("lazy import", ImportWarning, stacklevel=1)
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
        warnings.warn("rank 3 < 4", RankDeficiencyWarning, stacklevel=1)
        warnings.warn("rank 3 < 4", RankDeficiencyWarning, stacklevel=1)  # again
    assert [w.category for w in caught] == [RankDeficiencyWarning] * 2


def test_a_warning_repeated_with_other_figures_is_shown_once():
    # the folds of a grid search raise one warning with their own figures
    from sklearn_isotropy._utils import record_warnings, reraise_once

    with record_warnings() as caught:
        for rank, ratio in [(381, "7.7e+62"), (381, "8.5e+62"), (380, "1.0e-3")]:
            msg = f"The covariance has numerical rank {rank}: a factor of {ratio}."
            warnings.warn(msg, RankDeficiencyWarning, stacklevel=1)
        warnings.warn("another cause", RankDeficiencyWarning, stacklevel=1)
        for dtype in ("float32", "float64"):  # names, not figures: both shown
            warnings.warn(f"{dtype} overflow", RankDeficiencyWarning, stacklevel=1)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        kept = reraise_once(caught, "[mean] grid", EvaluationWarning)
    assert len(kept) == 6  # the record keeps every distinct message
    assert [str(w.message) for w in shown] == [
        "[mean] grid: RankDeficiencyWarning: The covariance has numerical rank "
        "381: a factor of 7.7e+62. (and 2 similar)",  # the first one raised
        "[mean] grid: RankDeficiencyWarning: another cause",
        "[mean] grid: RankDeficiencyWarning: float32 overflow",
        "[mean] grid: RankDeficiencyWarning: float64 overflow",
    ]


def test_custom_transformers_keep_their_own_diagnostics():
    from sklearn.preprocessing import Normalizer, StandardScaler

    rng = np.random.default_rng(3)
    emb, bunch = _splits(rng, 40, 6)
    ev = evaluate(
        STSTask({"test": bunch}),
        methods=["raw"],
        embeddings={"mean": {"test": emb}},
        transformers={"scaler": StandardScaler(), "l2": Normalizer()},
    )
    payload = json.loads(to_json(ev))
    assert set(payload["diagnostics"]["mean"]) == {"raw", "scaler", "l2"}
    # each run's report is its own: the scaler's output is not the l2's
    scaler, l2 = (payload["diagnostics"]["mean"][k] for k in ("scaler", "l2"))
    assert scaler["mean_pair_cosine"] != l2["mean_pair_cosine"]


def test_a_warning_several_methods_raise_is_shown_once_per_pooling():
    # the same property of the data (here too few rows) met by every method
    # is one console line, not one per method; each record still keeps it
    emb, bunch = _splits(np.random.default_rng(0), 6, 20)
    task, embeddings = STSTask({"test": bunch}), {"mean": {"test": emb}}
    with pytest.warns(EvaluationWarning) as caught:
        ev = evaluate(task, methods=["pca", "whitening"], embeddings=embeddings)
    shown = [str(w.message) for w in caught if w.category is EvaluationWarning]
    assert len(shown) == 1, shown
    assert shown[0].startswith("[mean] pca: RankDeficiencyWarning: The covariance")
    kept = [ev.record(m, "mean").warnings for m in ("pca", "whitening")]
    assert kept[0] == kept[1] and "numerical rank" in kept[0][0]


def _two_runs(methods_before=("raw",), methods_after=("raw", "sn"), poolings=("mean",)):
    rng = np.random.default_rng(4)
    emb, bunch = _splits(rng, 30, 6)
    task = STSTask({"test": bunch})
    return [
        evaluate(task, methods=list(m), embeddings={p: {"test": emb} for p in poolings})
        for m in (methods_before, methods_after)
    ]


@pytest.mark.skipif(
    not hasattr(__import__("os"), "geteuid"), reason="needs POSIX file-size limits"
)
def test_a_report_write_that_fails_keeps_the_previous_reports(tmp_path):
    # a full disk while the JSON report is written: the previous pair of
    # reports stays whole and consistent, no temporary file is left
    import resource
    import signal

    from sklearn_isotropy.evaluation import write_reports
    from sklearn_isotropy.evaluation._report import to_markdown

    before, after = _two_runs()
    write_reports(before, tmp_path, figures=False)
    previous = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    limit = len(to_markdown(after).encode()) + 16  # the Markdown fits, not the JSON
    assert len(to_json(after).encode()) > limit
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        with pytest.raises(OSError):
            write_reports(after, tmp_path, figures=False)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == previous


def test_a_new_report_removes_the_figures_of_the_previous_one(tmp_path):
    pytest.importorskip("matplotlib")
    from sklearn_isotropy.evaluation import write_reports

    before, after = _two_runs(poolings=("cls",))
    files, _ = write_reports(before, tmp_path)
    pngs = sorted(Path(f).name for f in files[2:])
    assert pngs == ["cls_cosines.png", "cls_spectrum.png"]
    (tmp_path / "mine.png").write_bytes(b"not written by the tool")
    write_reports(after, tmp_path, figures=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "mine.png",
        "results.json",
        "results.md",
    ]
    assert json.loads((tmp_path / "results.json").read_text())["figures"] == []


def test_settings_docstring_agrees_with_the_fields():
    """The literal docstring names every field, its type, default and tasks."""
    import ast
    import dataclasses
    import inspect
    import re

    from sklearn_isotropy._defaults import DEFAULT_MODEL_NAME

    doc = inspect.cleandoc(EvaluationSettings.__doc__)
    params = doc.partition("Parameters\n----------\n")[2]
    entries = re.findall(r"^(\w+) : (.+), default=(.+)\n((?:    .+\n?)+)", params, re.M)
    fields = dataclasses.fields(EvaluationSettings)
    assert [e[0] for e in entries] == [f.name for f in fields]
    names = {"sts": "STS", "retrieval": "retrieval", "classification": "classification"}
    for (name, kind, default, text), f in zip(entries, fields):
        annotation = re.sub(r"tuple\[(\w+), \.\.\.\]", r"tuple of \1", str(f.type))
        assert kind == annotation.replace(" | ", " or "), name
        assert ast.literal_eval(default) == f.default, name
        tasks = f.metadata["tasks"]  # only some tasks: "STS and retrieval only."
        listed = " and ".join(names[t] for t in tasks or ())
        ends = f"{listed[:1].upper()}{listed[1:]} only." if tasks else None
        assert (ends and " ".join(text.split()).endswith(ends)) or (
            not ends and "only." not in text
        ), name
    assert f"({DEFAULT_MODEL_NAME})" in doc
