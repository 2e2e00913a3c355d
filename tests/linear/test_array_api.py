"""The linear post-processors on Array API namespaces: torch and array-api-strict.

Every result is compared with the numpy code on the same rows. The
namespaces are ``array_api_strict`` (the reference implementation, on its
default device and on ``device1``; its ``no_float64`` device stands in for
Apple's MPS, which has no float64) and torch on the CPU.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import sklearn
from sklearn.base import clone

from sklearn_isotropy import (
    MomentAccumulator,
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)
from sklearn_isotropy.datasets import make_cone
from sklearn_isotropy.exceptions import RankDeficiencyWarning

xps = pytest.importorskip("array_api_strict")
torch = pytest.importorskip("torch")

ESTIMATORS = [
    WhiteningTransformer(),
    WhiteningTransformer(n_components=5),
    WhiteningTransformer(n_components=0.9, power=0.5),
    WhiteningTransformer(shrinkage=0.3),
    WhiteningTransformer(shrinkage="ledoit-wolf", n_components=6),
    WhiteningTransformer(shrinkage="oas", power=0.0),
    WhiteningTransformer(method="zca", power=0.5),
    WhiteningTransformer(method="cholesky"),
    WhiteningTransformer(noise_variance="auto"),
    WhiteningTransformer(method="zca", power=0.5, noise_variance=0.01),
    NATSVTransformer(n_components=3),
    NATSVTransformer(n_components=2, center=False),
    StandardNormalizer(),
    StandardNormalizer(with_mean=False),
    StandardNormalizer(with_std=False),
]
NAMESPACES = ["strict", "strict-device1", "torch"]


def _on(namespace, X):
    """``X`` (numpy) in ``namespace``."""
    if namespace == "torch":
        return torch.asarray(X)
    device = {
        "strict": "CPU_DEVICE",
        "strict-device1": "device1",
        "strict-no-float64": "no_float64",
    }[namespace]
    return xps.asarray(X, device=xps.Device(device))


def _numpy(a):
    if isinstance(a, torch.Tensor):
        return a.cpu().numpy()
    return np.asarray(xps.asarray(a, device=xps.Device("CPU_DEVICE")))


def _close(actual, expected, dtype):
    """Relative closeness to the largest entry: 1e-5 in float32, 1e-10 in float64."""
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    expected = np.asarray(expected, dtype=np.float64)
    scale = float(np.max(np.abs(expected))) if expected.size else 1.0
    np.testing.assert_allclose(_numpy(actual), expected, rtol=0, atol=rtol * scale)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    X = make_cone(
        600, 10, spread=(4.0, 0.05), offset=np.full(10, 3.0), random_state=rng
    )
    w = rng.uniform(0.0, 2.0, size=600)
    return X, w


@pytest.fixture
def dispatch():
    with sklearn.config_context(array_api_dispatch=True):
        yield


def test_scipy_array_api_is_set_before_scipy_is_imported():
    # tests/conftest.py sets it first; scipy reads it once, at import
    import scipy._lib._array_api as scipy_array_api

    assert os.environ["SCIPY_ARRAY_API"] == "1"
    assert scipy_array_api.SCIPY_ARRAY_API


# ----------------------------------------------- every method, every namespace
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_methods_match_numpy(estimator, namespace, dtype, rows, dispatch):
    X, w = rows
    X = X.astype(dtype)
    with sklearn.config_context(array_api_dispatch=False):
        ref = clone(estimator).fit(X, sample_weight=w)
        Z_ref = ref.transform(X)
    Xd = _on(namespace, X)
    wd = _on(namespace, w)  # weights of the same namespace as the rows
    est = clone(estimator).fit(Xd, sample_weight=wd)
    Z = est.transform(Xd)
    assert type(Z) is type(Xd) and Z.device == Xd.device and Z.dtype == Xd.dtype
    _close(Z, Z_ref, dtype)
    _close(clone(estimator).fit_transform(Xd, sample_weight=wd), Z_ref, dtype)
    for name, value in vars(ref).items():
        if isinstance(value, np.ndarray):
            fitted = getattr(est, name)
            assert type(fitted) is type(Xd) and fitted.device == Xd.device, name
            assert _numpy(fitted).dtype == np.float64, name
            _close(fitted, value, np.float64)  # statistics are float64 either way
    if hasattr(est, "inverse_transform"):
        back = est.inverse_transform(Z)
        assert type(back) is type(Xd) and back.dtype == Xd.dtype
        _close(back, ref.inverse_transform(Z_ref), dtype)


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_streamed_chunks_equal_one_fit(estimator, namespace, rows, dispatch):
    X, w = rows
    Xd, wd = _on(namespace, X), _on(namespace, w)
    whole = clone(estimator).fit(Xd, sample_weight=wd)
    streamed = clone(estimator)
    for lo, hi in ((0, 7), (7, 250), (250, 251), (251, 600)):
        streamed.partial_fit(Xd[lo:hi, ...], sample_weight=wd[lo:hi])
    assert "_map_pending" in vars(streamed)  # computed at first use
    np.testing.assert_allclose(
        streamed.moments_.scatter, whole.moments_.scatter, rtol=1e-12, atol=1e-12
    )
    _close(streamed.transform(Xd), _numpy(whole.transform(Xd)), np.float64)
    # the numpy fit of the same chunks: the same statistics
    ref = clone(estimator)
    for lo, hi in ((0, 7), (7, 250), (250, 251), (251, 600)):
        ref.partial_fit(X[lo:hi], sample_weight=w[lo:hi])
    np.testing.assert_allclose(
        streamed.moments_.scatter, ref.moments_.scatter, rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(streamed.moments_.mean, ref.moments_.mean, rtol=1e-13)


def test_fewer_rows_than_features_keep_the_dual_form_on_a_device(dispatch):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 40)) + 1.0
    with pytest.warns(RankDeficiencyWarning, match="too few samples"):
        ref = WhiteningTransformer().fit(X)
    with pytest.warns(RankDeficiencyWarning, match="too few samples"):
        est = WhiteningTransformer().fit(torch.asarray(X))
    assert est.moments_.representation == "rows"
    assert isinstance(est.whitening_, torch.Tensor)
    _close(est.transform(torch.asarray(X)), ref.transform(X), np.float64)
    assert "covariance_" not in vars(est)  # built on request, on the device
    assert isinstance(est.covariance_, torch.Tensor)
    _close(est.covariance_, np.cov(X, rowvar=False), np.float64)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_float32_arrays_keep_their_round_off_out_of_the_rank(namespace, dispatch):
    # rows in a 20-dim affine subspace of 64 features, stored in float32:
    # their round-off spans the other 44 directions, at 1e-14 of the variance
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(64, 20)))[0].T
    signal = 0.05 * rng.normal(size=(2000, 20)) @ basis
    X32 = (rng.normal(size=64) + signal).astype(np.float32)
    est = WhiteningTransformer().fit(_on(namespace, X32))
    assert est.rank_ == est.n_components_ == np.linalg.matrix_rank(signal) == 20
    assert est.moments_.input_eps == np.finfo(np.float32).eps


# ------------------------------------------------------ float32-only devices
def test_a_device_without_float64_accumulates_in_compensated_float32(
    rows, dispatch, monkeypatch
):
    # array_api_strict's "no_float64" device behaves like Apple's MPS; with
    # tiny blocks the 600 rows are 150 products added one after the other,
    # and the compensated sum keeps float32's accuracy all the same
    from sklearn_isotropy.linear import _scatter_kernels

    devices = xps.__array_namespace_info__().devices()
    if "no_float64" not in {getattr(d, "_device", str(d)) for d in devices}:
        pytest.skip("this array-api-strict has no float32-only device")
    monkeypatch.setattr(_scatter_kernels, "_BLOCK_ELEMENTS", 40)
    X, w = rows
    X = X.astype(np.float32)
    ref = WhiteningTransformer(shrinkage="ledoit-wolf").fit(X, sample_weight=w)
    Xd = _on("strict-no-float64", X)
    est = WhiteningTransformer(shrinkage="ledoit-wolf")
    for lo in range(0, 600, 200):
        est.partial_fit(Xd[lo : lo + 200, ...], sample_weight=w[lo : lo + 200])
    cov, cov_ref = est.moments_.covariance(), ref.moments_.covariance()
    assert np.max(np.abs(cov - cov_ref)) < 1e-6 * np.max(np.abs(cov_ref))
    np.testing.assert_allclose(est.moments_.mean, ref.moments_.mean, rtol=1e-6)
    assert abs(est.shrinkage_ - ref.shrinkage_) < 1e-6
    assert est.whitening_.dtype == xps.float32  # the widest dtype it has
    assert est.whitening_.device == Xd.device
    Z = est.transform(Xd)
    assert Z.device == Xd.device and Z.dtype == xps.float32
    _close(Z, ref.transform(X), np.float32)


# ------------------------------------------------------ accumulators, merged
def test_accumulators_of_different_devices_merge(rows, dispatch):
    X, w = rows
    parts = [
        MomentAccumulator(10).update(_on("torch", X[:200]), _on("torch", w[:200])),
        MomentAccumulator(10).update(
            _on("strict-device1", X[200:400]), _on("strict", w[200:400])
        ),
        MomentAccumulator(10).update(X[400:], w[400:]),
    ]
    merged = parts[2].merge(parts[0]).merge(parts[1])
    ref = MomentAccumulator(10).update(X, w)
    for stat in ("mean", "scatter", "norm3"):
        expected = getattr(ref, stat)
        np.testing.assert_allclose(
            getattr(merged, stat), expected, rtol=0, atol=1e-12 * np.abs(expected).max()
        )
    np.testing.assert_allclose(merged.norm4, ref.norm4, rtol=1e-12)
    assert all(isinstance(p.mean, np.ndarray) for p in parts)  # host statistics


# --------------------------------------------------------------- bad input
def test_mixing_namespaces_or_devices_is_an_error_naming_both(rows, dispatch):
    X, _ = rows
    on_torch = WhiteningTransformer().fit(torch.asarray(X))
    with pytest.raises(ValueError, match="fitted on torch tensors.*got numpy arrays"):
        on_torch.transform(X)
    with pytest.raises(ValueError, match="fitted on torch tensors.*got numpy arrays"):
        on_torch.inverse_transform(X)
    with pytest.raises(ValueError, match="partial_fit.*torch.*numpy"):
        on_torch.partial_fit(X)
    on_numpy = NATSVTransformer().fit(X)
    with pytest.raises(ValueError, match="fitted on numpy arrays and got torch"):
        on_numpy.transform(torch.asarray(X))
    on_cpu = StandardNormalizer().fit(_on("strict", X))
    with pytest.raises(ValueError, match="CPU_DEVICE.*device1"):
        on_cpu.transform(_on("strict-device1", X))
    with pytest.raises(ValueError, match=r"array_api_strict arrays.*torch tensors"):
        on_cpu.transform(torch.asarray(X))
    # the estimator is left as it was
    np.testing.assert_array_equal(
        _numpy(on_torch.transform(torch.asarray(X))),
        _numpy(
            WhiteningTransformer().fit(torch.asarray(X)).transform(torch.asarray(X))
        ),
    )


def test_a_device_fit_needs_dispatch_to_transform(rows):
    X, _ = rows
    with sklearn.config_context(array_api_dispatch=True):
        est = WhiteningTransformer().fit(torch.asarray(X))
    with pytest.raises(ValueError, match=r"array_api_dispatch is off.*set_config"):
        est.transform(torch.asarray(X))
    with pytest.raises(ValueError, match="to_numpy"):
        est.transform(X)


def test_bad_values_on_a_device_are_reported_like_numpy(rows, dispatch):
    X, _ = rows
    bad = X.copy()
    bad[5, 3] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        WhiteningTransformer().fit(torch.asarray(bad))
    est = WhiteningTransformer().fit(torch.asarray(X))
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.transform(torch.asarray(bad))
    fitted32 = WhiteningTransformer().fit(X.astype(np.float32))
    # finite in float32, but not once whitened
    huge = (X * (2e38 / np.abs(X).max())).astype(np.float32)
    with pytest.raises(ValueError, match="overflowed float32.*Pass float64"):
        fitted32.to_numpy().transform(huge)  # as the numpy code says
    with pytest.raises(ValueError, match="overflowed float32.*Pass float64"):
        WhiteningTransformer().fit(torch.asarray(X.astype(np.float32))).transform(
            torch.asarray(huge)
        )
    with pytest.raises(ValueError, match=r"sample_weight\[1\] = "):
        WhiteningTransformer().fit(torch.asarray(X), sample_weight=-torch.arange(600.0))


# ------------------------------------------------- dispatch off: unchanged
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_without_dispatch_the_numpy_code_runs_bit_for_bit(estimator, rows):
    X, w = rows
    X32 = X.astype(np.float32)
    # a torch tensor without dispatch goes through np.asarray, as before
    # (scikit-learn's check_array makes float64 of a torch.float32 dtype)
    off = clone(estimator).fit(torch.asarray(X32), sample_weight=torch.asarray(w))
    Z_off = off.transform(torch.asarray(X32))
    ref_off = clone(estimator).fit(X32.astype(np.float64), sample_weight=w)
    # numpy input with dispatch on takes the numpy code as well
    with sklearn.config_context(array_api_dispatch=True):
        on = clone(estimator).fit(X32, sample_weight=w)
        Z_on = on.transform(X32)
    ref_on = clone(estimator).fit(X32, sample_weight=w)
    for est, Z, ref, X_ref in (
        (off, Z_off, ref_off, X32.astype(np.float64)),
        (on, Z_on, ref_on, X32),
    ):
        Z_ref = ref.transform(X_ref)
        assert type(Z) is np.ndarray and Z.dtype == Z_ref.dtype
        np.testing.assert_array_equal(Z, Z_ref)
        assert "_fitted_on" not in vars(est)
        for name, value in vars(ref).items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(getattr(est, name), value)


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("noise", [None, "auto"])
def test_score_samples_on_a_device_matches_numpy(noise, namespace, rows, dispatch):
    X, _ = rows
    est = WhiteningTransformer(n_components=6, noise_variance=noise)
    with sklearn.config_context(array_api_dispatch=False):
        expected = clone(est).fit(X).score_samples(X)
    Xd = _on(namespace, X)
    got = clone(est).fit(Xd).score_samples(Xd)
    assert type(got) is type(Xd) and got.device == Xd.device
    _close(got, expected, np.float64)


# ------------------------------------------------------------ portability
def test_a_device_fit_pickles_and_converts_to_numpy(rows, dispatch):
    X, _ = rows
    Xt = torch.asarray(X.astype(np.float32))
    est = WhiteningTransformer(n_components=4).partial_fit(Xt)  # map pending
    again = pickle.loads(pickle.dumps(est))
    assert isinstance(again.whitening_, torch.Tensor)
    np.testing.assert_array_equal(
        _numpy(again.transform(Xt)), _numpy(est.transform(Xt))
    )
    as_numpy = est.to_numpy()
    assert type(as_numpy.whitening_) is np.ndarray
    assert as_numpy.whitening_.dtype == np.float64
    assert isinstance(est.whitening_, torch.Tensor)  # the original is kept
    Z = as_numpy.transform(X.astype(np.float32))
    assert type(Z) is np.ndarray
    np.testing.assert_allclose(Z, _numpy(est.transform(Xt)), rtol=1e-6, atol=1e-6)
    with sklearn.config_context(array_api_dispatch=False):
        np.testing.assert_array_equal(as_numpy.transform(X.astype(np.float32)), Z)
    # a numpy fit converts to an equal copy
    numpy_fit = WhiteningTransformer(n_components=4).fit(X)
    copied = numpy_fit.to_numpy()
    assert copied.whitening_ is not numpy_fit.whitening_
    np.testing.assert_array_equal(copied.whitening_, numpy_fit.whitening_)


def test_a_map_left_stale_converts_to_the_device_without_dispatch(rows):
    X, _ = rows
    with sklearn.config_context(array_api_dispatch=True):
        est = NATSVTransformer(2).partial_fit(_on("strict-device1", X))
    components = est.components_  # computed now, dispatch off
    assert components.device == xps.Device("device1")


# ---------------------------------------------------- encoder to whitening
def test_the_vectorizer_returns_tensors_for_a_pipeline_on_the_device(
    tiny_bert, dispatch
):
    from sklearn.pipeline import make_pipeline

    from sklearn_isotropy import BertPoolingVectorizer

    texts = [f"the {a} {b} sat on the mat" for a in ("cat", "dog") for b in "abcdefgh"]
    texts += ["a big red dog ran fast", "the woman was reading", "small blue man"]
    as_numpy = BertPoolingVectorizer(tiny_bert).fit(texts).transform(texts)
    vec = BertPoolingVectorizer(tiny_bert, output="torch").fit(texts)
    T = vec.transform(texts)
    assert isinstance(T, torch.Tensor) and T.dtype == torch.float32
    assert str(T.device) == vec.device_
    np.testing.assert_array_equal(T.numpy(), as_numpy)
    pipe = make_pipeline(
        BertPoolingVectorizer(tiny_bert, output="torch"),
        WhiteningTransformer(n_components=8),
    )
    Z = pipe.fit_transform(texts)
    assert isinstance(Z, torch.Tensor)
    ref = WhiteningTransformer(n_components=8).fit(as_numpy).transform(as_numpy)
    _close(Z, ref, np.float32)
