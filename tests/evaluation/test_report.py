"""Tests of the evaluation's reports: JSON, the console table, files written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sklearn_isotropy.evaluation import STSTask, evaluate, format_table
from sklearn_isotropy.evaluation._report import to_json
from tests._data import sts_pairs


def test_json_names_the_default_model():
    rng = np.random.default_rng(0)
    emb, bunch = sts_pairs(rng, 10, 4)
    ev = evaluate(
        STSTask({"test": bunch}), methods=[], embeddings={"mean": {"test": emb}}
    )
    payload = json.loads(to_json(ev))
    assert payload["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert "embedded default" in payload["model_description"]
    ev.settings.model = "/models/mine"
    assert json.loads(to_json(ev))["model"] == "/models/mine"


def test_table_blocks_per_pooling_fit_100_columns():
    rng = np.random.default_rng(1)
    emb, bunch = sts_pairs(rng, 60, 10)
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


def _two_runs(methods_before=("raw",), methods_after=("raw", "sn"), poolings=("mean",)):
    rng = np.random.default_rng(4)
    emb, bunch = sts_pairs(rng, 30, 6)
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
