"""The house rules, checked: registries, warnings, and imports between families.

- A pooling preset or an evaluation method is added in one place (its
  registry) and shows up everywhere, the command line included.
- Every warning of the package is an ``IsotropyWarning`` and points at the
  caller's line, however deep the call chain.
- Optional dependencies are imported where they are used: importing the
  package and fitting on numpy imports none of them.
- No module imports a private name from a sibling family's module.
- One module (``_utils/_sklearn.py``) imports scikit-learn's private modules
  and names; the others import them from it.
- Imports run one way: no module imports, even lazily, one that imports it
  back (directly or through others).
"""

from __future__ import annotations

import ast
import inspect
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

import sklearn_isotropy
from sklearn_isotropy import exceptions
from tests._data import REPO

PACKAGE_DIR = Path(sklearn_isotropy.__file__).parent
HERE = str(Path(__file__).resolve())


# ------------------------------------------------------------- registries
@pytest.fixture
def temporary_preset():
    from sklearn_isotropy.text import POOLING_PRESETS, register_pooling

    preset = register_pooling(
        "emb_last_avg", layers=(0, -1), description="embeddings and last block"
    )
    yield preset
    del POOLING_PRESETS[preset.name]


@pytest.fixture
def temporary_method():
    from sklearn.preprocessing import Normalizer

    from sklearn_isotropy.evaluation import METHODS, register_method

    @register_method("l2norm", label="L2 rows", help="unit-norm rows, a test method")
    def build(k, n_features, settings, dev=None):
        return Normalizer(), {}

    yield METHODS["l2norm"]
    del METHODS["l2norm"]


def _help(run_cli):
    status, out, _ = run_cli(["evaluate", "--help"])
    assert status == 0
    return out


def test_a_registered_preset_is_everywhere(temporary_preset, tiny_bert, run_cli):
    from sklearn_isotropy import BertPoolingVectorizer

    help_text = _help(run_cli)
    assert "emb_last_avg" in help_text and "embeddings and last block" in help_text
    # the vectorizer accepts it and pools what it says: the same as layers=
    texts = ["the cat sat", "a dog ran fast"]
    got = BertPoolingVectorizer(tiny_bert, pooling="emb_last_avg").fit_transform(texts)
    expected = BertPoolingVectorizer(tiny_bert, layers=(0, -1)).fit_transform(texts)
    assert_allclose(got, expected, rtol=1e-6)


def test_a_preset_is_rejected_once_unregistered(tiny_bert):
    from sklearn_isotropy import BertPoolingVectorizer

    with pytest.raises(ValueError, match="pooling"):
        BertPoolingVectorizer(tiny_bert, pooling="emb_last_avg").fit(["a"])


def test_a_registered_method_is_everywhere(
    temporary_method, tiny_sts_dir, tiny_bert, tmp_path, run_cli
):
    import json

    help_text = _help(run_cli)
    assert "l2norm" in help_text and "unit-norm rows, a test method" in help_text
    argv = ["evaluate", "--data", str(tiny_sts_dir), "--model", str(tiny_bert)]
    argv += ["--pooling", "mean", "--methods", "raw,l2norm", "--out", str(tmp_path)]
    status, out, _ = run_cli([*argv, "--no-figures", "--quiet"])
    assert status == 0
    assert "L2 rows" in out
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    by_method = {r["method"]: r["spearman_x100"] for r in results}
    # cosine is scale-invariant: unit-norm rows score exactly like raw rows
    assert_allclose(by_method["l2norm"], by_method["raw"], atol=1e-9)


def test_registries_reject_duplicates():
    from sklearn_isotropy.evaluation import register_method
    from sklearn_isotropy.text import register_pooling

    with pytest.raises(ValueError, match="already registered"):
        register_pooling("mean", layers=(-1,))
    with pytest.raises(ValueError, match="already registered"):
        register_method("raw")(lambda k, d, s, dev=None: ("passthrough", {}))


# --------------------------------------------------------------- warnings
def _warning_classes():
    return [
        obj
        for _, obj in inspect.getmembers(exceptions, inspect.isclass)
        if issubclass(obj, Warning) and obj.__module__ == exceptions.__name__
    ]


def test_every_package_warning_is_an_isotropy_warning():
    classes = _warning_classes()
    assert len(classes) >= 5
    for cls in classes:
        assert issubclass(cls, exceptions.IsotropyWarning), cls


def test_the_package_warns_only_through_one_helper():
    offenders = []
    for path in PACKAGE_DIR.rglob("*.py"):
        if path.parent.name == "_utils" and path.name == "_warnings.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "warn"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "warnings"
            ):
                offenders.append(f"{path.relative_to(PACKAGE_DIR)}:{node.lineno}")
    assert not offenders, f"warnings.warn outside _utils.warn: {offenders}"


def _record(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, exceptions.IsotropyWarning)]


def _assert_points_here(caught, category):
    ours = [w for w in caught if issubclass(w.category, category)]
    assert ours, f"no {category.__name__} was raised"
    for w in ours:
        assert w.filename == HERE, (w.filename, w.lineno, str(w.message))


def test_rank_deficiency_points_at_the_callers_line():
    from sklearn_isotropy import NATSVTransformer, WhiteningTransformer

    X = np.random.default_rng(0).normal(size=(3, 6))
    caught = _record(lambda: WhiteningTransformer().fit(X))
    _assert_points_here(caught, exceptions.RankDeficiencyWarning)
    caught = _record(lambda: NATSVTransformer(n_components=4).fit(X))
    _assert_points_here(caught, exceptions.RankDeficiencyWarning)


def test_a_warning_deep_in_sklearn_points_at_the_callers_line():
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline

    from sklearn_isotropy import (
        PairedCosineSimilarity,
        StandardNormalizer,
        WhiteningTransformer,
    )

    rng = np.random.default_rng(1)
    pairs, y = rng.normal(size=(12, 2, 30)), rng.uniform(0, 5, size=12)
    model = PairedCosineSimilarity(
        make_pipeline(StandardNormalizer(), WhiteningTransformer())
    )
    caught = _record(lambda: cross_val_score(model, pairs, y, cv=2))
    _assert_points_here(caught, exceptions.RankDeficiencyWarning)


def test_undefined_correlation_points_at_the_callers_line():
    from sklearn_isotropy.metrics import cosine_spearman_score, spearman_score

    a = np.ones((4, 3))
    caught = _record(lambda: spearman_score([1, 1, 1], [0.1, 0.2, 0.3]))
    _assert_points_here(caught, exceptions.UndefinedCorrelationWarning)
    caught = _record(lambda: cosine_spearman_score(a, np.zeros((4, 3)), [1, 2, 3, 4]))
    _assert_points_here(caught, exceptions.UndefinedCorrelationWarning)


def test_truncation_points_at_the_callers_line(tiny_bert):
    from sklearn_isotropy import BertPoolingVectorizer

    vec = BertPoolingVectorizer(tiny_bert, max_length=4).fit(["a"])
    caught = _record(lambda: vec.transform(["the cat sat on the mat"]))
    _assert_points_here(caught, exceptions.TruncationWarning)


def test_device_fallback_points_at_the_callers_line(monkeypatch):
    torch = pytest.importorskip("torch")
    from sklearn_isotropy import GlowFlowTransformer

    X = np.random.default_rng(2).normal(size=(64, 3)).astype(np.float32)
    flow = GlowFlowTransformer(depth=1, hidden_size=4, random_state=0).fit(X)
    blob = pickle.dumps(flow.set_params(device="cuda"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    caught = _record(lambda: pickle.loads(blob))
    _assert_points_here(caught, exceptions.DeviceWarning)


# --------------------------------------------- optional dependencies
def test_optional_dependencies_are_imported_lazily():
    # importing the modules, and a fit and transform on numpy, import no
    # plotting, torch or dask (one fresh process checks them all)
    code = (
        "import sys, numpy as np, sklearn_isotropy, sklearn_isotropy.diagnostics, "
        "sklearn_isotropy.metrics, sklearn_isotropy.datasets\n"
        "X = np.random.default_rng(0).normal(size=(50, 4))\n"
        "sklearn_isotropy.WhiteningTransformer().fit(X).transform(X)\n"
        "heavy = ('matplotlib', 'torch', 'transformers', 'dask', 'distributed')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert out.stdout.strip() == "[]"


# ------------------------------------------------- imports between families
def _family(module: str) -> str:
    """``sklearn_isotropy.linear._base`` -> ``linear``; top modules are their own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(root=PACKAGE_DIR, typing=True):
    """``(module, target, names)`` for every import statement of the package.

    Statements inside functions and classes count as much as those at module
    level: a lazy import still runs. Those under ``if TYPE_CHECKING:`` never
    run, and count only with ``typing=True``. ``target`` is absolute
    (relative imports resolved); ``names`` are those of a ``from ... import``,
    else empty.
    """
    for path in root.rglob("*.py"):
        here = _module_name(path, root)
        package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = set()
        for node in ast.walk(tree):
            if not typing and isinstance(node, ast.If):
                if ast.unparse(node.test).endswith("TYPE_CHECKING"):
                    skipped |= {id(n) for b in node.body for n in ast.walk(b)}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield here, alias.name, []
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                target = node.module or ""
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                yield here, target, [a.name for a in node.names]


def _private_reach(target, names, first):
    """The private names an import takes, ``["..."]`` for a private module, or [].

    The module is private when a part of its dotted name from ``first`` on
    starts with an underscore.
    """
    private_names = [name for name in names if name.startswith("_")]
    private_module = any(p.startswith("_") for p in target.split(".")[first:])
    return private_names or (["..."] if private_module else [])


def _private_imports_across_families(root=PACKAGE_DIR):
    found = []
    for here, target, names in _imports(root):
        if not target.startswith("sklearn_isotropy"):
            continue
        family = _family(target)
        if family in (_family(here), "_utils") or family == "":
            continue
        if private := _private_reach(target, names, 2):
            found.append(f"{here}: from {target} import {private}")
    return found


def test_no_private_imports_between_families():
    assert _private_imports_across_families() == []


def test_the_import_check_would_catch_a_violation(tmp_path):
    import shutil

    copy = tmp_path / "sklearn_isotropy"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "flow" / "_probe.py").write_text(
        "from ..linear._base import _sorted_eigh\n", encoding="utf-8"
    )
    (copy / "text" / "_probe.py").write_text(
        "from sklearn_isotropy.linear import _whitening\n", encoding="utf-8"
    )
    found = _private_imports_across_families(copy)
    assert any("flow._probe" in f for f in found)
    assert any("text._probe" in f for f in found)


# ------------------------------------------- private scikit-learn names
SKLEARN_SHIM = "sklearn_isotropy._utils._sklearn"


def _private_sklearn_imports(root=PACKAGE_DIR):
    """Imports of a private scikit-learn module or name outside the shim."""
    return [
        f"{here}: from {target} import {private}"
        for here, target, names in _imports(root)
        if here != SKLEARN_SHIM
        and target.split(".")[0] == "sklearn"
        and (private := _private_reach(target, names, 1))
    ]


def test_only_the_shim_imports_private_sklearn_names():
    # scikit-learn may move a private name in any release, and the package's
    # requirement has no upper bound: such a move must be one edit
    assert _private_sklearn_imports() == []


def test_the_sklearn_check_would_catch_a_violation(tmp_path):
    package = tmp_path / "sklearn_isotropy"
    (package / "_utils").mkdir(parents=True)
    (package / "_utils" / "_sklearn.py").write_text(
        "from sklearn.base import _fit_context\n", encoding="utf-8"
    )
    (package / "_probe.py").write_text(
        "import sklearn.utils._param_validation\n"
        "from sklearn.utils.validation import _check_sample_weight\n"
        "from sklearn.utils import check_array\n",
        encoding="utf-8",
    )
    found = _private_sklearn_imports(package)
    assert found == [
        "sklearn_isotropy._probe: from sklearn.utils._param_validation import ['...']",
        "sklearn_isotropy._probe: from sklearn.utils.validation import "
        "['_check_sample_weight']",
    ]


# ------------------------------------------------------- import cycles
def _import_graph(root=PACKAGE_DIR):
    """Module -> the package modules it imports.

    An edge goes to the module a statement names: ``from .x import f`` to
    ``x``, ``from . import x`` to ``x`` when ``x`` is a module, ``from ..
    import f`` to the package's ``__init__``. Every statement counts, lazy
    ones inside functions too (they run, and then need the other module to
    be importable), but not those under ``if TYPE_CHECKING:``, which never
    run; the parent packages Python initialises on the way are not edges, or
    every submodule would close a cycle with its package.
    """
    modules = {_module_name(path, root) for path in root.rglob("*.py")}
    graph = {module: set() for module in modules}
    for here, target, names in _imports(root, typing=False):
        for name in names or [""]:
            module = f"{target}.{name}" if f"{target}.{name}" in modules else target
            while module and module not in modules:  # import a.b.c as ...
                module = module.rpartition(".")[0]
            if module and module != here:
                graph[here].add(module)
    return graph


def _import_cycles(graph):
    """One cycle, as a list of modules, per back edge of a depth-first search."""
    cycles, state, path = [], {}, []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                cycles.append(path[path.index(other) :] + [other])
            elif other not in state:
                visit(other)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def test_imports_run_one_way():
    cycles = _import_cycles(_import_graph())
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_would_catch_a_lazy_import(tmp_path):
    import shutil

    copy = tmp_path / "sklearn_isotropy"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "export" / "_probe.py").write_text(
        "from ._faiss import to_faiss\n", encoding="utf-8"
    )
    faiss = copy / "export" / "_faiss.py"
    faiss.write_text(
        faiss.read_text(encoding="utf-8")
        + "\n\ndef _lazy():\n    from . import _probe\n",
        encoding="utf-8",
    )
    cycles = _import_cycles(_import_graph(copy))
    modules = ["sklearn_isotropy.export._faiss", "sklearn_isotropy.export._probe"]
    assert [sorted(set(cycle)) for cycle in cycles] == [modules]


def test_the_evaluation_loop_does_not_import_the_reports():
    # the loop hands records to its caller; reports render them, never the
    # other way round (not even for an annotation)
    edges = {
        (here, target)
        for here, target, names in _imports()
        for target in [target, *(f"{target}.{n}" for n in names)]
    }
    task = "sklearn_isotropy.evaluation._task"
    assert (task, "sklearn_isotropy.evaluation._report") not in edges
    assert ("sklearn_isotropy.evaluation._report", task) in edges  # annotations


# ----------------------------------------------------------- export dispatch
def test_the_export_entry_points_dispatch_through_one_table():
    from sklearn.pipeline import make_pipeline

    from sklearn_isotropy import (
        BertPoolingVectorizer,
        StaticEmbeddingVectorizer,
        WhiteningTransformer,
    )
    from sklearn_isotropy.export import _common

    entries = {"to_onnx", "save_onnx_pipeline", "to_sentence_transformers"}
    table = _common.EXPORTERS
    for first in (StaticEmbeddingVectorizer, BertPoolingVectorizer, None):
        assert set(table[first]) == entries, first
    pipelines = {
        StaticEmbeddingVectorizer: make_pipeline(
            StaticEmbeddingVectorizer(), WhiteningTransformer()
        ),
        BertPoolingVectorizer: [BertPoolingVectorizer(), WhiteningTransformer()],
        None: make_pipeline(WhiteningTransformer()),
    }
    for first, pipeline in pipelines.items():
        for entry in entries:
            assert _common.exporter(pipeline, entry) is table[first][entry]
