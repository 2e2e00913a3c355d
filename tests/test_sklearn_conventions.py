"""scikit-learn conventions every public estimator follows.

Pandas output with named columns and the input's index (so that a
ColumnTransformer puts it beside scikit-learn's own columns), HTML reprs
that link to this package's API reference, a version read from the
installed metadata, and public functions that validate their parameters as
scikit-learn's do (``validate_params``).
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
    StaticEmbeddingVectorizer,
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


def _public_functions(module):
    """``"<module>.<name>"`` of each function in a submodule's ``__all__``."""
    mod = importlib.import_module(f"sklearn_isotropy.{module}")
    return [
        f"{module}.{name}"
        for name in mod.__all__
        if inspect.isfunction(getattr(mod, name))
    ]


#: The public functions that declare their parameters to ``validate_params``.
VALIDATED_FUNCTIONS = [
    *_public_functions("metrics"),
    *_public_functions("diagnostics"),
    "datasets.make_cone",
]


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


POST_PROCESSORS = {
    "whitening": lambda: WhiteningTransformer(n_components=3),
    "natsv": lambda: NATSVTransformer(n_components=2),
    "sn": lambda: StandardNormalizer(),
    "flow": lambda: GlowFlowTransformer(
        depth=1, hidden_size=4, max_iter=2, random_state=0
    ),
}


@pytest.mark.parametrize("name", [*POST_PROCESSORS, "bert", "static"])
@pytest.mark.usefixtures("static_cache")  # distilled tables: never ~/.cache
def test_pandas_output_carries_the_inputs_index(name, make_cone, tiny_bert):
    """Every transformer's DataFrame has its input's index, as StandardScaler's.

    The vectorizers' ``fit_transform`` used to return a new RangeIndex for
    a Series of texts (``transform`` kept it); the post-processors keep the
    index of a DataFrame.
    """
    rng = np.random.default_rng(0)
    if name in POST_PROCESSORS:
        X = _embeddings(make_cone)
        X.index = pd.Index(rng.permutation(10 * len(X))[: len(X)], name="id")
        est = POST_PROCESSORS[name]()
    else:
        texts = TEXTS * 3
        X = pd.Series(texts, index=[f"review-{i}" for i in rng.permutation(12)])
        if name == "bert":
            est = BertPoolingVectorizer(tiny_bert)
        else:
            est = StaticEmbeddingVectorizer(tiny_bert, refine=False)
    expected = clone(est).fit(X).transform(X)
    assert isinstance(expected, np.ndarray)
    pandas_est = clone(est).set_output(transform="pandas")
    for frame in (pandas_est.fit_transform(X), pandas_est.transform(X)):
        assert isinstance(frame, pd.DataFrame)
        assert frame.index.equals(X.index)
        assert_allclose(frame.to_numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_text_pipeline_in_a_column_transformer_with_pandas_output(
    tiny_bert, word_texts
):
    """A text column beside numeric and categorical ones, cross-validated.

    The columns' blocks are those of each step alone (StandardScaler's and
    OneHotEncoder's formulas written out), and ``cross_val_score`` gives
    the scores of the numpy output. Its folds' rows have indices that are
    not a RangeIndex: the text block used to get a new one, and pandas
    output failed with "Concatenating DataFrames ... Pandas Indexes that do
    not match".
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(0)
    n = 60
    reviews = pd.DataFrame(
        {
            "review": word_texts[:n],
            "stars": rng.integers(1, 6, size=n).astype(float),
            "category": rng.choice(["book", "film", "game"], size=n),
        },
        index=pd.Index(rng.permutation(1000)[:n], name="review_id"),
    )
    y = (reviews["stars"] >= 3).to_numpy()

    def features():
        text = make_pipeline(
            BertPoolingVectorizer(tiny_bert), WhiteningTransformer(n_components=4)
        )
        return ColumnTransformer(
            [
                ("text", text, "review"),
                ("num", StandardScaler(), ["stars"]),
                ("cat", OneHotEncoder(sparse_output=False), ["category"]),
            ]
        )

    frame = features().set_output(transform="pandas").fit_transform(reviews)
    assert frame.index.equals(reviews.index)
    assert list(frame.columns) == [
        *(f"text__whitening{i}" for i in range(4)),
        "num__stars",
        "cat__category_book",
        "cat__category_film",
        "cat__category_game",
    ]
    embeddings = BertPoolingVectorizer(tiny_bert).fit_transform(list(reviews.review))
    stars = reviews["stars"].to_numpy()
    category = reviews["category"].to_numpy()
    expected = np.hstack(
        [
            WhiteningTransformer(n_components=4).fit_transform(embeddings),
            ((stars - stars.mean()) / stars.std())[:, None],
            (category[:, None] == np.array(["book", "film", "game"])).astype(float),
        ]
    )
    assert_allclose(frame.to_numpy(), expected, rtol=1e-5, atol=1e-5)

    cv = KFold(3, shuffle=True, random_state=0)
    model = make_pipeline(features(), LogisticRegression())
    scores = cross_val_score(
        clone(model).set_output(transform="pandas"), reviews, y, cv=cv
    )
    assert_allclose(scores, cross_val_score(model, reviews, y, cv=cv))
    assert np.all((scores >= 0) & (scores <= 1))


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


@pytest.mark.parametrize("path", VALIDATED_FUNCTIONS)
def test_public_functions_declare_every_parameter(path):
    # as scikit-learn's test_public_functions: a constraint (or an explicit
    # "no_validation") for each parameter of the signature, and no other
    module, name = path.split(".")
    func = getattr(importlib.import_module(f"sklearn_isotropy.{module}"), name)
    constraints = getattr(func, "_skl_parameter_constraints", None)
    assert constraints is not None, f"{path} is not decorated with validate_params"
    assert list(constraints) == list(inspect.signature(func).parameters), path
