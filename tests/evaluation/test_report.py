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
    ev.settings.encoding.model = "/models/mine"
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


# ------------------------------------------- several tasks in one directory
def _classification_run():
    from sklearn.utils import Bunch

    from sklearn_isotropy.evaluation import ClassificationTask

    rng = np.random.default_rng(6)
    y = np.arange(40) % 2
    X = rng.normal(size=(40, 5)) + 2.0 * y[:, None]
    data = Bunch(data=[f"t{i}" for i in range(40)], target=y, test_size=10)
    task = ClassificationTask({"one split": data})
    return evaluate(task, methods=["raw"], embeddings={"cls": {"one split": X}})


def test_each_task_has_its_own_report_names():
    # issue 50, item 6: classify inherited STS's results.md / results.json
    from sklearn_isotropy.evaluation import TASKS

    reports = {name: task.report_class for name, task in TASKS.items()}
    stems = {name: report.stem for name, report in reports.items()}
    assert stems == {
        "sts": "results",
        "retrieval": "retrieval",
        "classification": "classify",
    }
    for name, report in reports.items():
        others = [r for n, r in reports.items() if n != name]
        for pattern in report.figure_names:
            for pooling in ("mean", "cls", "first_last_avg", "embeddings_avg"):
                figure = pattern.format(pooling)
                assert report.is_figure_name(figure)
                assert not any(o.is_figure_name(figure) for o in others), figure
        assert not any(
            o.is_figure_name(f"{report.stem}.json") for o in reports.values()
        )


def test_a_report_of_another_task_in_the_same_directory_is_left_alone(tmp_path):
    pytest.importorskip("matplotlib")
    from sklearn_isotropy.evaluation import write_reports

    sts, _ = _two_runs(poolings=("cls",))
    write_reports(sts, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == [
        "cls_cosines.png",
        "cls_spectrum.png",
        "results.json",
        "results.md",
    ]
    files, _ = write_reports(_classification_run(), tmp_path, figures=False)
    assert [Path(f).name for f in files] == ["classify.md", "classify.json"]
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert {n: after[n] for n in before} == before  # the STS report, untouched
    assert json.loads(after["classify.json"])["task"] == "classification"


def test_only_this_reports_own_figures_are_removed(tmp_path):
    # the previous JSON's list is read, but a name that is no figure of this
    # report (a list edited by hand, a file of the user's) is never deleted
    from sklearn_isotropy.evaluation import write_reports

    before, after = _two_runs()
    write_reports(before, tmp_path, figures=False)
    payload = json.loads((tmp_path / "results.json").read_text())
    kept = ["mine.png", "classify_mean.png", "retrieval_mean.png", "notes.txt"]
    payload["figures"] = [str(tmp_path / n) for n in [*kept, "mean_spectrum.png"]]
    (tmp_path / "results.json").write_text(json.dumps(payload))
    for name in [*kept, "mean_spectrum.png"]:
        (tmp_path / name).write_bytes(b"x")
    write_reports(after, tmp_path, figures=False)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([*kept, "results.json", "results.md"])


def test_another_tasks_report_under_this_reports_name_is_not_replaced(tmp_path):
    # as an earlier version's classify left results.json: refused, unchanged
    from sklearn_isotropy.evaluation import write_reports

    earlier = {
        "task": "classification",
        "figures": [str(tmp_path / "cls_spectrum.png")],
    }
    (tmp_path / "results.json").write_text(json.dumps(earlier))
    (tmp_path / "results.md").write_text("# sklearn-isotropy classify\n")
    (tmp_path / "cls_spectrum.png").write_bytes(b"x")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    sts, _ = _two_runs()
    with pytest.raises(FileExistsError) as caught:
        write_reports(sts, tmp_path, figures=False)
    message = str(caught.value)
    assert "results.json is the report of the 'classification' task" in message
    assert "write to another directory, or move that report" in message
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
