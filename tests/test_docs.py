"""The documentation covers the public API, and its example scripts run.

The examples of the user guide's pages run too: the GPU page's first block
and, in order, every block of the deploying page.

The API reference page is generated from the package by
``docs/api_reference.py`` at every Sphinx build; these tests parse the
reStructuredText it produces (independently of how it is produced) and check
it against ``sklearn_isotropy.__all__`` and the ``__all__`` of every public
submodule, found by walking the package directory.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import sklearn_isotropy

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS_DIR = REPO_ROOT / "docs"
EXAMPLES_DIR = DOCS_DIR / "examples"

sys.path.insert(0, str(DOCS_DIR))
api_reference = importlib.import_module("api_reference")


def _public_submodules():
    """Public submodules found on disk (not via the generator)."""
    pkg_dir = Path(sklearn_isotropy.__file__).parent
    names = []
    for path in sorted(pkg_dir.iterdir()):
        stem = path.stem if path.suffix == ".py" else path.name
        if stem.startswith("_") or stem.startswith("."):
            continue
        if path.suffix == ".py" or (path / "__init__.py").exists():
            names.append(f"sklearn_isotropy.{stem}")
    return names


def _documented_entries(rst: str) -> list[str]:
    """Fully qualified names listed in the autosummary tables of ``rst``."""
    entries = []
    current_module = None
    in_autosummary = False
    for line in rst.splitlines():
        directive = re.match(r"\.\. currentmodule:: (\S+)", line)
        if directive:
            current_module = directive.group(1)
            in_autosummary = False
            continue
        if line.startswith(".. autosummary::"):
            in_autosummary = True
            continue
        if in_autosummary:
            if not line.strip() or line.strip().startswith(":"):
                continue
            if line.startswith("   "):
                entries.append(f"{current_module}.{line.strip()}")
                continue
            in_autosummary = False
    return entries


@pytest.fixture(scope="module")
def entries():
    return _documented_entries(api_reference.render_api_reference())


def test_every_top_level_name_is_in_the_api_reference(entries):
    missing = [
        name
        for name in sklearn_isotropy.__all__
        if f"sklearn_isotropy.{name}" not in entries
    ]
    assert not missing, f"public names missing from the API reference: {missing}"


def test_every_public_submodule_name_is_in_the_api_reference(entries):
    # an object exported in several places is documented once, under any of
    # its public names (a re-export of a top-level name at top level)
    documented = set()
    for entry in entries:
        module_name, _, name = entry.rpartition(".")
        documented.add(id(getattr(importlib.import_module(module_name), name)))
    missing = []
    for module_name in _public_submodules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            if id(getattr(module, name)) not in documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"submodule names missing from the API reference: {missing}"


def test_every_object_is_documented_once(entries):
    objects = []
    for entry in entries:
        module_name, _, name = entry.rpartition(".")
        objects.append(id(getattr(importlib.import_module(module_name), name)))
    assert len(objects) == len(set(objects))


def test_every_public_submodule_has_a_section():
    rst = api_reference.render_api_reference()
    for module_name in _public_submodules():
        assert f".. automodule:: {module_name}" in rst, module_name


def test_api_reference_entries_resolve_and_are_unique(entries):
    assert len(entries) == len(set(entries)), "a name is documented twice"
    for dotted in entries:
        module_name, _, name = dotted.rpartition(".")
        obj = getattr(importlib.import_module(module_name), name)
        doc = obj.__doc__ or ""
        assert doc.strip(), f"{dotted} has no docstring to render"


def test_unclaimed_names_still_get_documented(monkeypatch):
    """A new public name that no section lists lands under "Other"."""
    monkeypatch.setattr(
        sklearn_isotropy, "__all__", [*sklearn_isotropy.__all__, "__version__"]
    )
    rst = api_reference.render_api_reference()
    assert api_reference.OTHER_TITLE in rst
    assert "sklearn_isotropy.__version__" in _documented_entries(rst)


def test_written_reference_matches_rendered(tmp_path):
    target = api_reference.write_api_reference(tmp_path)
    assert target == tmp_path / "api" / "index.rst"
    assert target.read_text(encoding="utf-8") == api_reference.render_api_reference()


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES_DIR.glob("plot_*.py")), ids=lambda p: p.name
)
def test_examples_are_gallery_scripts(path):
    """Each example parses and opens with the RST title sphinx-gallery needs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc, f"{path.name} needs a module docstring (its gallery title)"
    lines = doc.strip().splitlines()
    assert set(lines[0]) == {"="} and set(lines[2]) == {"="}, path.name
    # docutils rejects an over/underline shorter than the title
    assert len(lines[0]) >= len(lines[1]) <= len(lines[2]), path.name


def test_synthetic_example_whitens_the_cone():
    """The README's placeholder main job runs headless and whitens."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run(
        [sys.executable, str(EXAMPLES_DIR / "plot_whitening_synthetic.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
        check=True,
    ).stdout
    rows = {}
    for line in out.splitlines():
        match = re.match(r"(\S+)\s+(-?\d+\.\d+)\s+(\d+\.\d+)\s+(\d+)$", line)
        if match:
            rows[match.group(1)] = tuple(float(g) for g in match.groups()[1:])
    assert {"raw", "WhiteningTransformer"} <= set(rows), out
    raw_cos, raw_cond, _ = rows["raw"]
    white_cos, white_cond, white_rank = rows["WhiteningTransformer"]
    assert raw_cos > 0.3 and raw_cond > 100  # the synthetic data are a cone
    assert abs(white_cos) < 0.05 and white_cond < 10 and white_rank == 64


def test_the_gpu_page_example_runs(capsys):
    # the first Python block of docs/user_guide/gpu.rst, as a user runs it
    pytest.importorskip("torch")
    import sklearn

    page = DOCS_DIR / "user_guide" / "gpu.rst"
    block = re.search(
        r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", page.read_text("utf-8")
    ).group(1)
    code = "\n".join(line[4:] for line in block.splitlines())
    with sklearn.config_context():  # the example turns the dispatch on
        exec(compile(code, str(page), "exec"), {})
    out = capsys.readouterr().out.split("\n")
    assert out[0] in ("Tensor cpu torch.float32", "Tensor cuda torch.float32")
    assert out[1:5] == ["Tensor torch.float64", "True", "True", "ndarray"]
    assert not sklearn.get_config()["array_api_dispatch"]


def _python_blocks(path):
    """The ``.. code-block:: python`` blocks of an rst file, dedented."""
    blocks, current = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() == ".. code-block:: python":
            current = []
            blocks.append(current)
        elif current is not None:
            if line.strip() and not line.startswith("   "):
                current = None
            else:
                current.append(line)
    return [textwrap.dedent("\n".join(b)).strip() for b in blocks]


@pytest.mark.slow
def test_deploying_page_runs(default_model_path, stsb_dir, tmp_path, monkeypatch):
    """Every example of docs/user_guide/deploying.rst runs, in order."""
    for name in ("sentence_transformers", "onnxruntime", "skl2onnx", "faiss"):
        pytest.importorskip(name)
    from numpy.testing import assert_allclose

    page = DOCS_DIR / "user_guide" / "deploying.rst"
    blocks = _python_blocks(page)
    assert len(blocks) == 8
    home = tmp_path / "data"
    home.mkdir()
    (home / "stsb").symlink_to(Path(stsb_dir).resolve())
    monkeypatch.setenv("SKLEARN_ISOTROPY_DATA", str(home))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a flow's slow-convergence notes
        for block in blocks:
            exec(compile(block, str(page), "exec"), namespace)  # noqa: S102
    pipe, queries = namespace["pipe"], namespace["queries"]
    expected = pipe.transform(queries)
    assert_allclose(namespace["served"], expected, rtol=0, atol=1e-5)
    assert_allclose(namespace["Z"], expected, rtol=0, atol=1e-5)
    assert_allclose(namespace["onnx_served"], expected, rtol=0, atol=1e-4)
    assert (tmp_path / "whitened-minilm-onnx" / "tokenizer.json").is_file()
    assert (tmp_path / "whitened-minilm" / "modules.json").is_file()
    assert namespace["ids"].shape == (2, 5)


def _public_callables():
    """``(name, function)`` of the public functions and methods to annotate.

    A method without a docstring of its own that shows its base class's (a
    task's ``load``, say) implements a protocol annotated there: skipped.
    """
    import inspect

    for module_name, names in api_reference.public_names().items():
        module = importlib.import_module(module_name)
        for name in names:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                yield f"{module_name}.{name}", obj
            if not isinstance(obj, type):
                continue
            for member in dir(obj):
                owner = next((c for c in obj.__mro__ if member in vars(c)), None)
                if member.startswith("_") or owner is None:
                    continue
                raw = vars(owner)[member]
                fn = getattr(raw, "__func__", getattr(raw, "fget", raw))
                fn = getattr(fn, "fn", fn)  # available_if
                if not inspect.isfunction(fn) or not fn.__module__.startswith(
                    "sklearn_isotropy"
                ):
                    continue
                if fn.__doc__ is None and inspect.getdoc(getattr(obj, member)):
                    continue
                yield f"{module_name}.{name}.{member}", fn


def test_public_signatures_are_annotated():
    """The type-hint rule of docs/architecture.rst ("Conventions")."""
    import inspect

    missing = []
    for name, fn in _public_callables():
        signature = inspect.signature(fn)
        bare = [
            p.name
            for p in signature.parameters.values()
            if p.annotation is p.empty
            and p.name not in ("self", "cls")
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and not (p.name == "y" and p.default is None)
        ]
        if bare or signature.return_annotation is signature.empty:
            missing.append(f"{name}: {bare or 'return'}")
    assert not missing, "\n".join(missing)


def test_readme_and_docs_quote_the_recommended_settings():
    """The per-use recommendation is one source: the downstream benchmark's."""
    import json

    results = REPO_ROOT / "benchmarks" / "downstream.json"
    out = subprocess.run(
        [sys.executable, "benchmarks/bench_downstream.py", "--print-recommended"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    recommended = json.loads(out.stdout)
    assert set(recommended) == {
        "similarity",
        "classification",
        "clustering",
        "retrieval",
    }
    assert results.is_file()
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("<!-- bench_downstream:start -->")[1]
    section = section.split("<!-- bench_downstream:end -->")[0]
    page = (DOCS_DIR / "user_guide" / "downstream.rst").read_text(encoding="utf-8")
    for use, expression in recommended.items():
        assert f"`{expression}`" in section, use
        assert f"``{expression}``" in page, use
    # each is a label-free setting built from the names a user has at hand
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    names = {n: getattr(sklearn_isotropy, n) for n in sklearn_isotropy.__all__}
    names.update(PCA=PCA, make_pipeline=make_pipeline, StandardScaler=StandardScaler)
    for expression in recommended.values():
        if expression != "passthrough":
            step = eval(expression, {"__builtins__": {}}, names)  # noqa: S307
            assert hasattr(step, "fit") and hasattr(step, "transform")
