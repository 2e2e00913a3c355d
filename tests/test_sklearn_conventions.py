"""scikit-learn conventions every public estimator follows.

Pandas output with named columns, HTML reprs that link to this package's API
reference, and a version read from the installed metadata.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import BaseEstimator, clone

import sklearn_isotropy
from sklearn_isotropy import (
    BertPoolingVectorizer,
    GlowFlowTransformer,
    NATSVTransformer,
    PairedCosineSimilarity,
    StandardNormalizer,
    WhiteningTransformer,
)

pd = pytest.importorskip("pandas")

TEXTS = ["the cat sat on the mat", "a dog ran fast", "the man is big", "red"]
PUBLIC_ESTIMATORS = sorted(
    name
    for name in sklearn_isotropy.__all__
    if inspect.isclass(obj := getattr(sklearn_isotropy, name))
    and issubclass(obj, BaseEstimator)
)


def _embeddings(make_cone):
    X = make_cone(300, 5)
    return pd.DataFrame(X, columns=[f"dim_{i}" for i in range(5)])


@pytest.mark.parametrize(
    "make_estimator, names",
    [
        (
            lambda: WhiteningTransformer(n_components=3),
            "whitening0 whitening1 whitening2",
        ),
        (
            lambda: NATSVTransformer(n_components=2),
            "natsv0 natsv1 natsv2 natsv3 natsv4",
        ),
        # StandardScaler's convention: the input's own column names
        (lambda: StandardNormalizer(), "dim_0 dim_1 dim_2 dim_3 dim_4"),
        (
            lambda: GlowFlowTransformer(
                depth=1, hidden_size=4, max_iter=2, random_state=0
            ),
            "flow0 flow1 flow2 flow3 flow4",
        ),
    ],
    ids=["whitening", "natsv", "sn", "flow"],
)
def test_pandas_output_is_the_numpy_transform_with_named_columns(
    make_estimator, names, make_cone
):
    X = _embeddings(make_cone)
    est = make_estimator().fit(X.to_numpy())
    expected = est.transform(X.to_numpy())
    assert isinstance(expected, np.ndarray)

    pandas_est = clone(est).set_output(transform="pandas")
    for frame in (pandas_est.fit_transform(X), pandas_est.transform(X)):
        assert isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == names.split()
        assert list(frame.index) == list(X.index)
        assert_allclose(frame.to_numpy(), expected, rtol=1e-6, atol=1e-8)
    assert list(pandas_est.get_feature_names_out()) == names.split()


def test_numpy_input_gets_generated_names(make_cone):
    X = make_cone(200, 3)
    assert list(StandardNormalizer().fit(X).get_feature_names_out()) == [
        "x0",
        "x1",
        "x2",
    ]
    names = WhiteningTransformer().fit(X).get_feature_names_out(["a", "b", "c"])
    assert list(names) == ["whitening0", "whitening1", "whitening2"]
    with pytest.raises(ValueError, match="input_features"):
        WhiteningTransformer().fit(X).get_feature_names_out(["a", "b"])


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_vectorizer_pandas_output_is_named_after_the_pooling(pooling, tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert, pooling=pooling).fit(TEXTS)
    expected = vec.transform(TEXTS)
    frame = clone(vec).set_output(transform="pandas").fit_transform(TEXTS)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == [f"{pooling}{i}" for i in range(expected.shape[1])]
    assert_allclose(frame.to_numpy(), expected, rtol=1e-6)


def _expected_doc_link(name: str, version: str) -> str:
    return (
        f"https://sklearn-isotropy.readthedocs.io/en/{version}/api/generated/"
        f"sklearn_isotropy.{name}.html"
    )


def test_every_public_estimator_has_a_documented_page(monkeypatch):
    """The link's layout is the one docs/api_reference.py generates."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "docs"))
    rst = importlib.import_module("api_reference").render_api_reference()
    assert ".. currentmodule:: sklearn_isotropy\n" in rst
    assert ":toctree: generated/" in rst
    for name in PUBLIC_ESTIMATORS:
        assert f"\n   {name}\n" in rst


@pytest.mark.parametrize(
    "version, url_version",
    [("0.1.0", "0.1.0"), ("0.2.0.dev0", "latest"), ("0+unknown", "latest")],
)
def test_html_repr_links_to_the_api_reference(version, url_version, monkeypatch):
    assert PUBLIC_ESTIMATORS == [
        "BertPoolingVectorizer",
        "GlowFlowTransformer",
        "NATSVTransformer",
        "PairedCosineSimilarity",
        "StandardNormalizer",
        "StaticEmbeddingVectorizer",
        "WhiteningTransformer",
    ]
    from sklearn_isotropy._utils import _conventions

    monkeypatch.setattr(_conventions, "VERSION", version)
    for name in PUBLIC_ESTIMATORS:
        est = getattr(sklearn_isotropy, name)()
        assert _expected_doc_link(name, url_version) in est._repr_html_(), name
    # nested estimators link to their own pages
    html = PairedCosineSimilarity(WhiteningTransformer())._repr_html_()
    assert _expected_doc_link("WhiteningTransformer", url_version) in html


def test_version_comes_from_the_metadata():
    assert sklearn_isotropy.__version__ == metadata.version("sklearn-isotropy")


def test_public_submodules_are_attributes_in_a_fresh_process():
    """``sklearn_isotropy.exceptions`` works after a bare import, in any order.

    The reliability page points at ``exceptions.IsotropyWarning``; with the
    lazy ``__init__`` it was an attribute only once something else had
    imported the module. ``import sklearn_isotropy`` still loads no
    scikit-learn: the submodule is imported on first use.
    """
    code = (
        "import importlib, pkgutil, sys\n"
        "import sklearn_isotropy as si\n"
        "assert 'sklearn' not in sys.modules, 'import sklearn_isotropy is light'\n"
        "assert issubclass(si.exceptions.IsotropyWarning, UserWarning)\n"
        "names = sorted(m.name for m in pkgutil.iter_modules(si.__path__)\n"
        "               if not m.name.startswith('_'))\n"
        "for name in names:  # each one the lazy __getattr__ knows\n"
        "    module = importlib.import_module(f'sklearn_isotropy.{name}')\n"
        "    assert si.__getattr__(name) is module, name\n"
        "    assert name in dir(si), name\n"
        "print(' '.join(names))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "exceptions" in out.stdout.split()
