"""Sphinx configuration of the sklearn-isotropy documentation.

Build the site (from the repository root; warnings are errors, every
cross-reference must resolve)::

    SKLEARN_ISOTROPY_DOCS_FAST=1 \
        python -m sphinx -W --keep-going -n -b html docs docs/_build/html

or ``make -C docs ci`` (the same command). Without
``SKLEARN_ISOTROPY_DOCS_FAST=1`` the examples run on the full STS-B splits
they name; with it (the CI mode) they run on a fixed subset and say so in
their rendered text. See ``docs/README.md`` for timings and details.

Offline cross-references
------------------------
The machines that build this site have no internet access, so intersphinx
cannot fetch the inventories of scikit-learn, NumPy, SciPy, PyTorch or the
Python standard library. Intersphinx is therefore not loaded, and references
to those projects are listed in ``nitpick_ignore_regex`` below (each entry
says which project it covers). References to ``sklearn_isotropy`` itself are
never ignored: they must resolve.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path

DOCS_DIR = Path(__file__).resolve().parent
REPO_ROOT = DOCS_DIR.parent
# the checked-out package, not whatever is installed in the environment
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(DOCS_DIR))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# The examples run one after another in this process. On a shared 2-core
# machine multi-threaded BLAS and PyTorch spin against the other load: one
# 384 x 384 ``eigh`` took 1.9 s with 2 OpenBLAS threads against 0.05 s with
# 1, and five flow epochs on 1,600 embeddings 161 s with 2 OpenMP threads
# against 15 s with 1 (load average ~10). Set before NumPy or torch are
# imported (Sphinx itself imports neither); override by exporting them.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


# The examples read STS-B with load_sts_splits("stsb"), which looks in the data
# cache before downloading. Point the cache at the copy shipped beside the
# repository (<repo>/../shared/data/stsb) or at $SKLEARN_ISOTROPY_STSB, so the
# build needs no network; a user's own SKLEARN_ISOTROPY_DATA wins.
def _point_data_home_at_stsb() -> None:
    if os.environ.get("SKLEARN_ISOTROPY_DATA"):
        return
    shipped = REPO_ROOT.parent / "shared" / "data"
    if (shipped / "stsb" / "test.csv").is_file():
        os.environ["SKLEARN_ISOTROPY_DATA"] = str(shipped)
        return
    elsewhere = os.environ.get("SKLEARN_ISOTROPY_STSB")
    if elsewhere and (Path(elsewhere) / "test.csv").is_file():
        home = Path(tempfile.mkdtemp(prefix="sklearn_isotropy_data_"))
        (home / "stsb").symlink_to(Path(elsewhere).resolve())
        os.environ["SKLEARN_ISOTROPY_DATA"] = str(home)


_point_data_home_at_stsb()

from api_reference import write_api_reference  # noqa: E402

import sklearn_isotropy  # noqa: E402

# -- Project -----------------------------------------------------------------
project = "sklearn-isotropy"
author = "sklearn-isotropy developers"
copyright = "2026, sklearn-isotropy developers"
release = sklearn_isotropy.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = [
    "_build",
    "README.md",  # instructions for building the docs, not a page
    "examples",  # sphinx-gallery sources; rendered into auto_examples/
    "**/README.txt",
    "api_reference.py",
    "_generated",  # snippets written by this file, included by pages
]
templates_path = ["_templates"]
nitpicky = True
default_role = "literal"

# -- API reference (generated from the package at every build) ---------------
write_api_reference(DOCS_DIR)
autosummary_generate = True
autosummary_generate_overwrite = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc sections carry the types
autodoc_default_options = {"member-order": "groupwise"}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_use_plots = False
# Validate the docstring of every documented function, class and method.
numpydoc_validation_checks = {
    "all",
    "ES01",  # an extended summary only where the summary line is not enough
    "SA01",  # See Also only where a neighbour is worth naming
    "EX01",  # Examples on estimators and entry points, not on every method
    "RT02",  # returns are named, as in scikit-learn (``self : object``)
}


def _not_validated() -> set[str]:
    """Name patterns of documented objects that numpydoc cannot validate.

    numpydoc checks ``obj.__doc__``: for a constant or a class attribute that
    is the docstring of its type (``str``, ``dict``), not its ``#:`` comment;
    an inherited method carries scikit-learn's docstring (validated there),
    and a protocol implementation without its own shows the protocol's.
    """
    import inspect

    from api_reference import public_names

    out = set()
    for module_name, names in public_names().items():
        module = importlib.import_module(module_name)
        for name in names:
            obj = getattr(module, name)
            if not isinstance(obj, type):
                if not callable(obj):
                    out.add(rf"\.{name}$")
                continue
            members = {
                n for c in obj.__mro__ for n in vars(c).get("__annotations__", {})
            }
            for member in sorted(members | set(dir(obj))):
                owner = next((c for c in obj.__mro__ if member in vars(c)), None)
                raw = inspect.getattr_static(obj, member, None)
                fn = getattr(raw, "fn", getattr(raw, "__func__", raw))  # available_if
                if owner is None or not (
                    inspect.isfunction(fn) or isinstance(raw, property)
                ):
                    skip = True  # a class attribute, or annotated only
                elif not owner.__module__.startswith("sklearn_isotropy"):
                    skip = True  # inherited from scikit-learn
                else:  # no docstring of its own, but one it inherits
                    own = getattr(fn, "__doc__", None)
                    skip = (
                        own is None and inspect.getdoc(getattr(obj, member)) is not None
                    )
                if skip:
                    out.add(rf"\.{obj.__name__}\.{member}$")
    return out


numpydoc_validation_exclude = _not_validated()

# -- Cross-references to other projects (offline) ----------------------------
_BUILTINS = (
    "int|float|str|bytes|bool|object|list|tuple|dict|set|None|callable|"
    "Exception|ValueError|TypeError|RuntimeError|OSError|ImportError|"
    "FileNotFoundError|UserWarning|Warning|KeyError|NotImplementedError|"
    "os\\..*|pathlib\\..*|logging\\..*|collections\\..*|typing\\..*|"
    "numbers\\..*|abc\\..*|io\\..*|csv\\..*|warnings\\..*|pickle"
)
nitpick_ignore_regex = [
    # scikit-learn (no offline inventory): sklearn.* classes and functions
    (r"py:.*", r"sklearn(\..*)?"),
    # NumPy and SciPy
    (r"py:.*", r"(numpy|np|scipy)(\..*)?"),
    # PyTorch, Hugging Face transformers, sentence-transformers, tqdm
    (r"py:.*", r"(torch|transformers|sentence_transformers|tqdm)(\..*)?"),
    # the export runtimes: faiss, onnx, onnxruntime, skl2onnx, model2vec
    (r"py:.*", r"(faiss|onnx|onnxruntime|skl2onnx|model2vec)(\..*)?"),
    # pandas, Dask, dask-ml, distributed, joblib, matplotlib
    (r"py:.*", r"(pandas|dask|dask_ml|distributed|joblib|matplotlib)(\..*)?"),
    # the Python standard library (builtins and modules)
    (r"py:.*", rf"({_BUILTINS})"),
]

# Components being written on other branches would go here while they are not
# importable from the checked-out package: a reference to one of them renders
# as plain text instead of failing the build. Once importable (merged), its
# references must resolve like any other. Everything has landed, so it is
# empty; keep it that way on main.
PENDING_NAMES: set[str] = set()


def _importable(dotted: str) -> bool:
    module, _, attr = dotted.rpartition(".")
    try:
        importlib.import_module(dotted)
        return True
    except ImportError:
        pass
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


# -- Examples (sphinx-gallery) -----------------------------------------------
FAST = os.environ.get("SKLEARN_ISOTROPY_DOCS_FAST", "") not in ("", "0")


def _missing_imports(path: Path) -> list[str]:
    """``sklearn_isotropy`` names an example imports that do not exist here."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "sklearn_isotropy"
        ):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if not _importable(dotted):
                    missing.append(dotted)
    return missing


EXAMPLES_DIR = DOCS_DIR / "examples"
SKIPPED_EXAMPLES = {
    p.name: _missing_imports(p) for p in sorted(EXAMPLES_DIR.glob("plot_*.py"))
}
SKIPPED_EXAMPLES = {k: v for k, v in SKIPPED_EXAMPLES.items() if v}
for _name, _missing in SKIPPED_EXAMPLES.items():
    print(
        f"[sklearn-isotropy docs] example {_name} left out of this build: "
        f"{', '.join(_missing)} not importable from the checked-out package"
    )

# sphinx-gallery skips an example whose source is unchanged since its last
# run; switching between the CI subset and the full data must rerun them all.
GENERATED_DIR = DOCS_DIR / "_generated"
GENERATED_DIR.mkdir(exist_ok=True)
_MODE_STAMP = GENERATED_DIR / "gallery_mode.txt"
_MODE = "fast" if FAST else "full"
_RERUN = (
    _MODE_STAMP.read_text() != _MODE
    if _MODE_STAMP.exists()
    else (DOCS_DIR / "auto_examples").exists()  # outputs of an unknown mode
)
_MODE_STAMP.write_text(_MODE)

sphinx_gallery_conf = {
    "run_stale_examples": _RERUN,
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    # a module starting with "_" next to the examples would be a helper
    "ignore_pattern": "|".join(
        [r"(^|[/\\])_\w*\.py$", *(re.escape(n) for n in SKIPPED_EXAMPLES)]
    ),
    "within_subsection_order": "FileNameSortKey",
    "doc_module": ("sklearn_isotropy",),
    "backreferences_dir": "api/backreferences",
    "remove_config_comments": True,
    "download_all_examples": False,
    "show_memory": False,
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "abort_on_example_error": False,
}

# -- Generated snippets (docs/_generated/, not tracked) -----------------------


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


# The results page includes benchmarks/README.md and the full retrieval
# tables (benchmarks/retrieval.md) as they are at build time (a checkout
# without them says so rather than failing).
_BENCHMARKS = REPO_ROOT / "benchmarks" / "README.md"
if _BENCHMARKS.exists():
    _benchmarks_md = "".join(
        f"```{{include}} /../benchmarks/{name}\n:heading-offset: 1\n```\n\n"
        for name in ("README.md", "retrieval.md")
        if (REPO_ROOT / "benchmarks" / name).exists()
    )
else:
    _benchmarks_md = (
        "```{note}\nThis checkout has no `benchmarks/README.md` yet, so there "
        "are no recorded results to show.\n```\n"
    )
_write_if_changed(GENERATED_DIR / "benchmarks.md", _benchmarks_md)

# The anisotropy page shows the diagnostics example's figures when that
# example is part of the build.
if (
    "plot_diagnostics.py" in SKIPPED_EXAMPLES
    or not (EXAMPLES_DIR / "plot_diagnostics.py").exists()
):
    _figures = (
        ".. note::\n\n   The diagnostics figures are produced by the diagnostics\n"
        "   example, which is not part of this build of the documentation.\n"
    )
else:
    _figures = "".join(
        f".. figure:: /auto_examples/images/sphx_glr_plot_diagnostics_{i:03d}.png\n"
        f"   :alt: {alt}\n   :width: 90%\n\n   {caption}\n\n"
        for i, alt, caption in [
            (
                1,
                "eigenvalue spectra",
                "Eigenvalue spectra of STS-B embeddings from the default model, "
                "before and after whitening (from "
                ":ref:`sphx_glr_auto_examples_plot_diagnostics.py`).",
            ),
            (
                2,
                "histograms of pair cosines",
                "Cosine similarity of random sentence pairs, before and after "
                "whitening.",
            ),
        ]
    )
_write_if_changed(GENERATED_DIR / "anisotropy_figures.inc", _figures)


# The command line pages show the real ``--help`` of each ``sklearn-isotropy``
# subcommand, taken from the parser at build time.
def _cli_help(command: str) -> str | None:
    try:
        from sklearn_isotropy.cli import build_parser
    except ImportError:
        return None
    buffer = io.StringIO()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # argparse wraps to the terminal width
    try:
        with contextlib.redirect_stdout(buffer):
            try:
                build_parser().parse_args([command, "--help"])
            except SystemExit:
                pass
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return buffer.getvalue() or None


for _command, _name in (
    ("evaluate", "cli_help"),
    ("retrieval", "cli_help_retrieval"),
    ("classify", "cli_help_classify"),
):
    _help = _cli_help(_command)
    if _help:
        _cli_inc = ".. code-block:: text\n\n" + "".join(
            f"   {line}\n" if line.strip() else "\n" for line in _help.splitlines()
        )
    else:
        _cli_inc = (
            ".. note::\n\n   The command line tool is not part of this checkout of "
            "the package.\n"
        )
    _write_if_changed(GENERATED_DIR / f"{_name}.inc", _cli_inc)

# -- HTML ----------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"sklearn-isotropy {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path: list[str] = []
html_show_sourcelink = False

myst_heading_anchors = 3
# Markdown links in the files included from outside docs/ (benchmarks/README.md
# on the results page, README.md on the getting-started page) point at
# repository files such as ``bench_flow.py``, which are not pages of this
# site. Render them as text instead of failing the build. Only Markdown
# sources emit this warning, and the site's own pages are reStructuredText
# apart from results.md, which uses {doc} roles (still checked).
suppress_warnings = ["myst.xref_missing"]


# -- Hooks -----------------------------------------------------------------------
_SPHINX_ROLE = re.compile(r":(?:ref|term):`([^`<]*?)\s*(?:<[^>]*>)?`")


def _plain_foreign_roles(app, what, name, obj, options, lines):
    """Turn scikit-learn's ``:ref:``/``:term:`` roles into plain text.

    Methods inherited from scikit-learn (``get_params``, ``set_output``,
    ``set_fit_request``, ...) carry docstrings that point into scikit-learn's
    own user guide and glossary, which do not exist here (and intersphinx is
    offline). Our own docstrings are left untouched, so a broken reference in
    them still fails the build.
    """
    module = getattr(obj, "__module__", None) or ""
    if module.startswith("sklearn_isotropy"):
        return
    lines[:] = [_SPHINX_ROLE.sub(r"\1", line) for line in lines]


_NUMPYDOC_TYPE_LINE = re.compile(r"^(\s*[\w*, ]+ : )(.*)$")
_TRAILING_UNDERSCORE = re.compile(r"\b([A-Za-z]\w*?)_(?=[,)\s]|$)")


def _escape_fitted_names_in_types(app, what, name, obj, options, lines):
    """Keep ``n_components_`` in a numpydoc type line from becoming a link.

    Shapes such as ``ndarray of shape (n_samples, n_components_)`` name
    fitted attributes; in reStructuredText a word ending in ``_`` is a
    hyperlink reference, which fails the build. Escape that underscore in
    the type part of ``name : type`` lines (outside ````literals````) before
    numpydoc renders them.
    """
    for i, line in enumerate(lines):
        match = _NUMPYDOC_TYPE_LINE.match(line)
        if not match:
            continue
        head, type_text = match.groups()
        parts = type_text.split("``")
        parts[::2] = [_TRAILING_UNDERSCORE.sub(r"\1\\_", p) for p in parts[::2]]
        lines[i] = head + "``".join(parts)


def _top_level_alias(dotted: str) -> str | None:
    """``sklearn_isotropy.<name>`` if ``dotted`` is a submodule re-export of it."""
    module_name, _, name = dotted.rpartition(".")
    if not module_name.startswith("sklearn_isotropy."):
        return None
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None
    if name in sklearn_isotropy.__all__ and getattr(sklearn_isotropy, name) is obj:
        return f"sklearn_isotropy.{name}"
    return None


def _pending_reference(app, env, node, contnode):
    """Resolve re-export aliases; render not-yet-merged components as text.

    Names such as ``sklearn_isotropy.metrics.PairedCosineSimilarity`` are
    documented once, under their top-level name; a reference by the
    submodule path (or an unqualified one inside that submodule's
    docstrings) resolves to that page.
    """
    target = node.get("reftarget", "")
    if node.get("refdomain") == "py":
        candidates = [target]
        if node.get("py:module") and not target.startswith("sklearn_isotropy"):
            candidates.append(f"{node['py:module']}.{target}")
        for candidate in candidates:
            alias = _top_level_alias(candidate)
            if alias is not None:
                return env.domains["py"].resolve_xref(
                    env,
                    node["refdoc"],
                    app.builder,
                    node["reftype"],
                    alias,
                    node,
                    contnode,
                )
        for candidate in (target, f"sklearn_isotropy.{target}"):
            parent = candidate.rpartition(".")[0]
            for pending in (candidate, parent):
                if pending in PENDING_NAMES and not _importable(pending):
                    return contnode
    if node.get("refdomain") == "std" and node.get("reftype") == "ref":
        match = re.fullmatch(r"sphx_glr_auto_examples_(plot_\w+\.py)", target)
        if match and match.group(1) in SKIPPED_EXAMPLES:
            return contnode
    return None


_RELATIVE_IMAGE = re.compile(r"(!\[[^\]]*\]\()(?![a-z]+://|/)([^)\s]+\))")


def _benchmark_images(app, relative_path, parent_docname, content):
    """Point the figures of the included benchmarks/*.md files at benchmarks/.

    The README links its figures relative to itself (``retrieval_mean.png``),
    which GitHub shows; the results page includes it from ``docs/``, where
    Sphinx would look for them. A path starting with ``/`` is relative to
    ``docs/``, so ``/../benchmarks/...`` names the same file.
    """
    if Path(relative_path).parent.name == "benchmarks":
        content[0] = _RELATIVE_IMAGE.sub(r"\1/../benchmarks/\2", content[0])


def setup(app):
    app.connect("include-read", _benchmark_images)
    app.connect("autodoc-process-docstring", _plain_foreign_roles)
    # before numpydoc (priority 500) turns the sections into rst
    app.connect("autodoc-process-docstring", _escape_fitted_names_in_types, 400)
    app.connect("missing-reference", _pending_reference)
