"""Tests of the GlowFlowTransformer scikit-learn wrapper."""

from __future__ import annotations

import io
import pickle
import sys
import warnings

import joblib
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.stats import multivariate_normal, ortho_group
from sklearn.exceptions import NotFittedError

torch = pytest.importorskip("torch")

from sklearn_isotropy import GlowFlowTransformer  # noqa: E402
from sklearn_isotropy.exceptions import (  # noqa: E402
    DeviceWarning,
    FlowTrainingWarning,
)
from sklearn_isotropy.flow._layers import Glow  # noqa: E402

FAST = {"hidden_size": 8, "depth": 2, "batch_size": 32}


def _data(n=200, d=4, seed=0, dtype=np.float64):
    rng = np.random.RandomState(seed)
    scales = np.geomspace(10, 0.1, d)
    return (rng.standard_normal((n, d)) * scales + 3).astype(dtype)


def _fitted(X=None, **params):
    X = _data() if X is None else X
    return GlowFlowTransformer(**{**FAST, "random_state": 0, **params}).fit(X)


def _state(est):
    return {k: v.clone() for k, v in est.flow_.state_dict().items()}


def test_missing_torch_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"sklearn-isotropy\[flow\]"):
        GlowFlowTransformer().fit(_data())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("coupling", ["additive", "affine"])
def test_dtype_preserved_and_inverse_round_trip(dtype, coupling):
    X = _data(dtype=dtype)
    est = _fitted(X, coupling=coupling, max_iter=3)
    Z = est.transform(X)
    assert Z.dtype == dtype and Z.shape == X.shape
    X_back = est.inverse_transform(Z)
    assert X_back.dtype == dtype
    tol = 1e-4 if dtype == np.float32 else 1e-9
    # relative to each feature's scale (they span 10 to 0.1)
    assert_allclose((X_back - X) / X.std(0), 0, atol=tol)
    assert_allclose(est.transform(X_back), Z, atol=10 * tol, rtol=10 * tol)


def test_float32_and_float64_paths_agree():
    X = _data()
    est = _fitted(X)
    assert_allclose(
        est.transform(X.astype(np.float32)), est.transform(X), rtol=1e-4, atol=1e-4
    )


def test_score_samples_matches_finite_difference_jacobian():
    """log p(x) = log N(f(x); 0, I) + log|det df/dx|, with the Jacobian of the
    whole map (standardisation included) taken by central differences."""
    X = _data(n=150, d=3)
    est = _fitted(X, max_iter=4, coupling="affine")
    x_rows = X[:4]
    log_p = est.score_samples(x_rows)
    z = est.transform(x_rows)
    h = 1e-5
    for i, x in enumerate(x_rows):
        jac = np.empty((3, 3))
        for j in range(3):
            step = np.zeros(3)
            step[j] = h * X[:, j].std()
            up = est.transform((x + step)[None])[0]
            down = est.transform((x - step)[None])[0]
            jac[:, j] = (up - down) / (2 * step[j])
        expected = multivariate_normal(np.zeros(3)).logpdf(z[i])
        expected += np.linalg.slogdet(jac)[1]
        assert_allclose(log_p[i], expected, rtol=1e-6, atol=1e-6)
    assert est.score(x_rows) == pytest.approx(log_p.mean())


def test_standardize_false_density_is_consistent():
    """Without internal standardisation the density must be the same kind of
    object: a proper density integrates the same way, so compare to an
    untrained linear-Gaussian reference instead: for max_iter tiny and
    additive coupling at init the map is affine."""
    X = _data(n=100, d=3)
    est = GlowFlowTransformer(
        standardize=False, hidden_size=4, depth=1, learning_rate=1e-12, random_state=0
    ).fit(X)
    assert_array_equal(est.mean_, 0)
    assert_array_equal(est.scale_, 1)
    # learning_rate ~ 0: couplings stay the identity, the map is x -> A x + b
    b = est.transform(np.zeros((1, 3)))[0]
    A = np.column_stack([est.transform(np.eye(3)[[j]])[0] - b for j in range(3)])
    mean = -np.linalg.solve(A, b)
    cov = np.linalg.inv(A.T @ A)
    assert_allclose(
        est.score_samples(X[:5]),
        multivariate_normal(mean, cov).logpdf(X[:5]),
        rtol=1e-5,
    )


def test_same_seed_identical_parameters_and_global_rng_untouched():
    X = _data()
    torch_state = torch.get_rng_state()
    np_state = np.random.get_state()[1].copy()  # noqa: NPY002 (global RNG)
    a = _fitted(X, random_state=42, max_iter=2)
    b = _fitted(X, random_state=42, max_iter=2)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert_array_equal(np.random.get_state()[1], np_state)  # noqa: NPY002
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert_array_equal(a.transform(X), b.transform(X))
    assert a.loss_curve_ == b.loss_curve_
    c = _fitted(X, random_state=43, max_iter=2)
    assert not np.array_equal(a.transform(X), c.transform(X))


def test_fitted_attributes_and_loss_curve():
    X = _data()
    est = _fitted(X, max_iter=4)
    assert est.n_iter_ == 4
    assert len(est.loss_curve_) == 4
    assert est.validation_scores_ is None and est.best_validation_score_ is None
    assert est.n_features_in_ == 4
    assert_allclose(est.mean_, X.mean(0))
    assert_allclose(est.scale_, X.std(0))
    assert all(
        bool(m.initialized) for m in est.flow_.modules() if hasattr(m, "initialized")
    )
    # training lowers the NLL, and the last epoch's mean training NLL is close
    # to the NLL of the final model on the training rows
    assert est.loss_curve_[-1] < est.loss_curve_[0]
    assert abs(-est.score(X) - est.loss_curve_[-1]) < 0.2 * abs(est.loss_curve_[0])
    assert list(est.get_feature_names_out()) == [
        f"glowflowtransformer{i}" for i in range(4)
    ]


def test_early_stopping_keeps_best_epoch():
    X = _data(n=300)
    params = {"early_stopping": True, "validation_fraction": 0.2, "max_iter": 6}
    est = _fitted(X, n_iter_no_change=100, **params)
    scores = est.validation_scores_
    assert len(scores) == est.n_iter_ == 6
    assert est.best_validation_score_ == max(scores)
    best_epoch = int(np.argmax(scores)) + 1
    # same seed -> same split and same trajectory: the kept parameters are the
    # ones reached after `best_epoch` epochs
    ref = _fitted(X, n_iter_no_change=100, **{**params, "max_iter": best_epoch})
    for k, v in _state(ref).items():
        assert torch.equal(_state(est)[k], v), k


def test_early_stopping_stops_after_n_iter_no_change():
    # tol is huge: only the first epoch counts as an improvement
    est = _fitted(
        _data(), early_stopping=True, max_iter=50, n_iter_no_change=2, tol=1e6
    )
    assert est.n_iter_ == 3 and len(est.validation_scores_) == 3
    est = _fitted(_data(), max_iter=50, n_iter_no_change=2, tol=1e6)
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3


def test_early_stopping_needs_training_rows():
    with pytest.raises(ValueError, match="leaves 1 training rows"):
        GlowFlowTransformer(early_stopping=True, validation_fraction=0.5).fit(
            _data(n=3)
        )


def _poison_log_prob(monkeypatch, at_call, break_params=False):
    original = Glow.log_prob
    calls = {"n": 0}

    def log_prob(self, x):  # counts training batches only
        out = original(self, x)
        calls["n"] += self.training
        if self.training and calls["n"] >= at_call:
            if break_params:
                with torch.no_grad():
                    self.levels[0].layers[0].layers[0].bias.fill_(float("nan"))
            return out * float("nan")
        return out

    monkeypatch.setattr(Glow, "log_prob", log_prob)


def test_non_finite_loss_keeps_last_finite_state_with_warning(monkeypatch):
    X = _data(n=320)
    _poison_log_prob(monkeypatch, at_call=13)  # 10 batches per epoch
    with pytest.warns(FlowTrainingWarning, match=r"epoch 2, batch 3.*learning_rate"):
        est = _fitted(X, max_iter=5)
    assert est.n_iter_ == 2
    assert np.isfinite(est.transform(X)).all()
    assert np.isfinite(est.score_samples(X)).all()


def test_non_finite_state_raises_with_epoch_and_remedy(monkeypatch):
    est = _fitted(_data())
    _poison_log_prob(monkeypatch, at_call=2, break_params=True)
    with pytest.raises(ValueError, match=r"epoch 1, batch 2.*lower learning_rate"):
        est.set_params(max_iter=2).fit(_data())
    # the failed refit leaves the estimator unfitted, not half old, half new
    with pytest.raises(NotFittedError):
        est.transform(_data())


def test_unstable_training_with_finite_loss_warns():
    # lr 0.5 blows the NLL up by orders of magnitude without producing NaN
    with pytest.warns(FlowTrainingWarning, match=r"rose from .* learning_rate"):
        unstable = _fitted(_data(), learning_rate=0.5, max_iter=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlowTrainingWarning)
        stable = _fitted(_data(), max_iter=3)  # the default learning rate
    assert max(unstable.loss_curve_) > 10 * abs(stable.loss_curve_[-1])
    assert np.isfinite(unstable.transform(_data())).all()


def _assert_same_model(a, b, X):
    assert_array_equal(a.transform(X), b.transform(X))
    assert_array_equal(a.score_samples(X), b.score_samples(X))
    assert_array_equal(a.inverse_transform(X), b.inverse_transform(X))
    assert_array_equal(a.sample(5, random_state=1), b.sample(5, random_state=1))


def test_pickle_and_joblib_round_trip(tmp_path):
    X = _data()
    est = _fitted(X, max_iter=2)
    torch_state = torch.get_rng_state()
    loaded = pickle.loads(pickle.dumps(est))
    assert torch.equal(torch.get_rng_state(), torch_state)
    _assert_same_model(est, loaded, X)
    # the ActNorm layers were restored as initialised: new data with another
    # scale does not re-initialise them
    X_other = _data(seed=5) * 50
    assert_array_equal(loaded.transform(X_other), est.transform(X_other))
    joblib.dump(est, tmp_path / "flow.joblib")
    _assert_same_model(est, joblib.load(tmp_path / "flow.joblib"), X)
    # pickling an unfitted estimator works too, and refitting a loaded one
    assert pickle.loads(pickle.dumps(GlowFlowTransformer())).get_params() == (
        GlowFlowTransformer().get_params()
    )
    _assert_same_model(loaded.fit(X), est, X)


def test_pickled_state_is_cpu_and_loaded_weights_only(monkeypatch):
    est = _fitted(max_iter=1)
    state = est.__getstate__()
    assert "flow_" not in state
    payload = torch.load(io.BytesIO(state["_flow_state_bytes"]), weights_only=True)
    assert all(t.device.type == "cpu" for t in payload.values())
    seen = {}
    original = torch.load

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    pickle.loads(pickle.dumps(est))
    assert seen == {"map_location": "cpu", "weights_only": True}


def test_cuda_trained_model_loads_on_cpu_only_machine(monkeypatch):
    """Simulate a model fitted with device='cuda' being unpickled where CUDA is
    unavailable: it must load on the CPU, warn, and give the same outputs."""
    X = _data()
    est = _fitted(X)
    est.set_params(device="cuda")
    blob = pickle.dumps(est)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(DeviceWarning, match="no CUDA device"):
        loaded = pickle.loads(blob)
    assert next(loaded.flow_.parameters()).device.type == "cpu"
    _assert_same_model(est, loaded, X)


def test_sample_is_inverse_of_gaussian_draws():
    X = _data()
    est = _fitted(X, max_iter=3)
    S = est.sample(50, random_state=7)
    assert S.shape == (50, 4) and S.dtype == np.float64
    Z = np.random.RandomState(7).standard_normal((50, 4))
    assert_allclose(S, est.inverse_transform(Z))
    assert_array_equal(S, est.sample(50, random_state=7))
    assert not np.array_equal(S, est.sample(50, random_state=8))
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        est.sample(0)
    with pytest.raises(TypeError, match="integer"):
        est.sample(2.5)


@pytest.mark.slow
def test_learns_anisotropic_gaussian_density():
    """Held-out log-likelihood close to the true density's; latent ~ N(0, I).

    Covariance: random rotation of variances spanning 25 to 0.04 (a 625x
    ratio), so neither the internal standardisation nor ActNorm alone can
    whiten it; the LU mixing layers must learn the rotation.
    """
    d = 8
    rng = np.random.RandomState(0)
    rotation = ortho_group.rvs(d, random_state=rng)
    cov = rotation @ np.diag(np.geomspace(5, 0.2, d) ** 2) @ rotation.T
    truth = multivariate_normal(rng.uniform(-5, 5, d), cov)
    X_train = truth.rvs(4000, random_state=rng).astype(np.float32)
    X_test = truth.rvs(2000, random_state=rng).astype(np.float32)
    est = GlowFlowTransformer(
        hidden_size=16, max_iter=10, batch_size=128, learning_rate=3e-3, random_state=0
    ).fit(X_train)
    true_ll = truth.logpdf(X_test).mean()
    # per-feature standardisation alone (what the flow starts from) is far off
    diagonal = multivariate_normal(X_train.mean(0), np.diag(X_train.var(0)))
    assert diagonal.logpdf(X_test).mean() < true_ll - 1
    assert est.score(X_test) == pytest.approx(true_ll, abs=0.1)
    Z = est.transform(X_test)
    assert_allclose(Z.mean(0), 0, atol=0.15)
    assert_allclose(np.cov(Z, rowvar=False), np.eye(d), atol=0.25)
    # eigenvalues of the data covariance span 25..0.04; of the latent's, ~1
    eigenvalues = np.linalg.eigvalsh(np.cov(Z, rowvar=False))
    assert eigenvalues.min() > 0.6 and eigenvalues.max() < 1.6


@pytest.mark.parametrize(
    "X, match",
    [
        (np.array([[1.0, np.nan], [2.0, 3.0]]), "NaN"),
        (np.array([[1.0, np.inf], [2.0, 3.0]]), "infinity"),
        (np.zeros((0, 3)), "0 sample"),
        (np.ones((1, 3)), "at least 2 samples"),
        ("a string", "string"),
    ],
)
def test_bad_fit_input(X, match):
    with pytest.raises(ValueError, match=match):
        GlowFlowTransformer().fit(X)


def test_bad_transform_input():
    est = _fitted()
    with pytest.raises(ValueError, match="4 features"):
        est.transform(np.ones((3, 5)))
    with pytest.raises(ValueError, match="expects 4"):
        est.inverse_transform(np.ones((3, 5)))
    with pytest.raises(ValueError, match="NaN"):
        est.transform(np.full((2, 4), np.nan))


@pytest.mark.parametrize(
    "params, match",
    [
        ({"coupling": "spline"}, "coupling"),
        ({"n_levels": 0}, "n_levels"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"device": "not-a-device"}, "not a device torch understands"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        GlowFlowTransformer(**params).fit(_data())


def test_cuda_requested_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA device"):
        GlowFlowTransformer(device="cuda").fit(_data())


def test_edge_shapes_and_values_stay_finite():
    rng = np.random.RandomState(0)
    # one feature, more levels than halvings, a constant column, float16
    for X, params in [
        (rng.standard_normal((50, 1)), {"n_levels": 3}),
        (rng.standard_normal((50, 3)), {"n_levels": 5}),
        (np.column_stack([rng.standard_normal(50), np.full(50, 7.0)]), {}),
        (rng.standard_normal((50, 3)).astype(np.float16), {}),
        (rng.standard_normal((3, 10)), {}),  # n_samples < n_features
    ]:
        est = _fitted(X, max_iter=2, **params)
        Z = est.transform(X)
        assert Z.shape == X.shape and np.isfinite(Z).all()
        assert np.isfinite(est.score_samples(X)).all()
        assert_allclose(est.inverse_transform(Z), X.astype(Z.dtype), atol=1e-3)


def test_in_pipeline_with_pandas_output():
    pd = pytest.importorskip("pandas")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X = pd.DataFrame(_data(), columns=list("abcd"))
    pipe = make_pipeline(FunctionTransformer(), GlowFlowTransformer(**FAST))
    pipe.set_output(transform="pandas")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = pipe.fit_transform(X)
    assert list(out.columns) == [f"glowflowtransformer{i}" for i in range(4)]
    assert_array_equal(pipe[-1].feature_names_in_, list("abcd"))
