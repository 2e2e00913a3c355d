"""Tests of the GlowFlowTransformer scikit-learn wrapper."""

from __future__ import annotations

import io
import pickle
import re
import sys
import warnings

import joblib
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.stats import multivariate_normal, ortho_group
from sklearn.exceptions import NotFittedError

torch = pytest.importorskip("torch")

from sklearn_isotropy import GlowFlowTransformer, WhiteningTransformer  # noqa: E402
from sklearn_isotropy.exceptions import (  # noqa: E402
    DensityUnderflowWarning,
    DeviceWarning,
    FlowTrainingError,
    FlowTrainingWarning,
)
from sklearn_isotropy.flow import FLOW_PRESETS, _training  # noqa: E402
from sklearn_isotropy.flow._layers import Glow  # noqa: E402
from sklearn_isotropy.flow._step import AdditiveStep  # noqa: E402

FAST = {"hidden_size": 8, "depth": 2, "batch_size": 32}
# a fixed number of epochs, every row trained on
FIXED = {**FAST, "early_stopping": False, "n_iter_no_change": 1000}


# the data of these tests, from make_cone(n, d, **...):
# AXES: feature scales 10 to 0.1 along the axes, around an offset of scale 3
AXES = {"offset": 3.0, "spread": (10.0, 0.1), "rotate": False}
# CORRELATED: the same spectrum in a random basis, a Gaussian with a full,
# strongly correlated covariance
CORRELATED = {"offset": 5.0, "spread": (10.0, 0.1), "rotate": True}


def _fitted(X, **params):
    return GlowFlowTransformer(**{**FIXED, "random_state": 0, **params}).fit(X)


def _state(est):
    return {k: v.clone() for k, v in est.flow_.state_dict().items()}


def _data_space_gaussian(est):
    """The Gaussian the whitening init implies, mapped back to data units."""
    w = est.whitener_
    mean = est.mean_ + est.scale_ * w.mean_
    cov = w.covariance_ * np.outer(est.scale_, est.scale_)
    return multivariate_normal(mean, cov)


def _torch_map(est):
    """The whole fitted map x -> (z, log|det J|) rebuilt in float64 torch.

    Built from the public fitted attributes (standardisation, the whitener's
    mean and matrix, the Glow module), independently of the estimator's own
    numpy/torch code path.
    """
    flow = Glow(**est._flow_config).double()
    flow.load_state_dict(est.flow_.state_dict())
    flow.eval()
    mean = torch.from_numpy(est.mean_)
    scale = torch.from_numpy(est.scale_)
    w = est.whitener_

    r = est.rank_

    def f(x):
        u = (x - mean) / scale
        if w is not None:
            u = (u - torch.from_numpy(w.mean_)) @ torch.from_numpy(w.whitening_)
        # coordinates past rank_ bypass the Glow
        return torch.cat([flow(u[None, :r])[0][0], u[r:]])

    return f


def test_missing_torch_error_names_the_extra(monkeypatch, make_cone):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"sklearn-isotropy\[flow\]"):
        GlowFlowTransformer().fit(make_cone(200, 4, **AXES))


# ------------------------------------------------------- the Gaussian start
def test_untrained_flow_is_the_gaussian_mle(make_cone):
    """max_iter=0: score_samples is the Gaussian log-density of the rows.

    Of the rows' mean and covariance (numpy, ddof=1), log-determinant included,
    and transform is the whitening up to a rotation.
    """
    X = make_cone(400, 4, **CORRELATED)
    est = GlowFlowTransformer(max_iter=0, early_stopping=False, random_state=0)
    est.fit(X)
    reference = multivariate_normal(X.mean(0), np.cov(X, rowvar=False))
    X_new = make_cone(50, 4, seed=1, **CORRELATED)
    assert_allclose(est.score_samples(X_new), reference.logpdf(X_new), rtol=1e-6)
    assert est.score(X_new) == pytest.approx(reference.logpdf(X_new).mean())
    assert est.n_iter_ == 0 and est.loss_curve_ == []
    # Z = whitened @ Q with Q orthogonal: the Gram matrices agree
    Z = est.transform(X_new)
    W = WhiteningTransformer().fit(X).transform(X_new)
    # (the mixing is orthogonal up to its float32 parameters)
    assert_allclose(Z @ Z.T, W @ W.T, rtol=1e-5, atol=1e-5)


def test_initial_flow_is_the_gaussian_with_early_stopping(make_cone):
    """Before the first step the density is the Gaussian MLE of every row.

    Early stopping holds rows out of the flow's training, not out of the
    Gaussian it starts from: the density kept when no epoch beats the start
    is scipy's Gaussian with the mean and covariance of all 300 rows.
    """
    X = make_cone(300, 4, **CORRELATED)
    est = GlowFlowTransformer(max_iter=0, random_state=0).fit(X)
    assert est.best_epoch_ == 0 and len(est.validation_scores_) == 1
    assert est.whitener_.n_samples_seen_ == 300
    reference = multivariate_normal(X.mean(0), np.cov(X, rowvar=False))
    assert_allclose(est.score_samples(X), reference.logpdf(X), rtol=1e-6)
    assert_allclose(
        est.score_samples(X), _data_space_gaussian(est).logpdf(X), rtol=1e-6
    )


def test_initial_flow_scipy_reference_float32(make_cone):
    X = make_cone(400, 4, **CORRELATED).astype(np.float32)
    est = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    X64 = X.astype(np.float64)
    reference = multivariate_normal(X64.mean(0), np.cov(X64, rowvar=False))
    # float32 latent, float64 log-determinant: float32-level agreement
    assert_allclose(est.score_samples(X), reference.logpdf(X64), rtol=1e-5)


def _hyperplane(n=300, seed=0):
    """Rows whose features sum to 0, as the LayerNorm output of a transformer."""
    rng = np.random.RandomState(seed)
    X = rng.standard_normal((n, 5)) * [3, 2, 1, 1, 0.5]
    X[:, 1] += 0.5 * X[:, 0] ** 2 / 3  # something non-Gaussian to learn
    return X - X.mean(1, keepdims=True)


def test_singular_covariance_is_shrunk_automatically():
    """Rows on a hyperplane get an invertible map and a finite density.

    The initial whitening uses OAS shrinkage.
    """
    X = _hyperplane()
    est = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    w = est.whitener_
    assert w.shrinkage_ > 0 and w.n_components_ == 5 and est.rank_ == 4
    reference = WhiteningTransformer(shrinkage="oas").fit((X - est.mean_) / est.scale_)
    assert w.shrinkage_ == pytest.approx(reference.shrinkage_)
    assert_allclose(
        est.score_samples(X), _data_space_gaussian(est).logpdf(X), rtol=1e-6
    )
    assert_allclose(est.inverse_transform(est.transform(X)), X, atol=1e-8)
    with pytest.raises(ValueError, match=r"rank 4 < n_features = 5.*'auto'"):
        GlowFlowTransformer(max_iter=0, shrinkage=0.0).fit(X)


def test_directions_without_variance_bypass_the_flow():
    """The hyperplane's normal is not modelled.

    Training cannot buy likelihood by shrinking a direction that only holds
    round-off, the latent keeps it at ~0 (as whitening does), and the change of
    variables still holds for rows off the hyperplane.
    """
    X = _hyperplane(n=1000)
    est = _fitted(X, max_iter=5, learning_rate=1e-2)
    assert est.rank_ == 4 and est.flow_.n_features == 4
    Z = est.transform(X)
    assert np.abs(Z[:, 4]).max() < 1e-6
    assert_allclose(
        Z[:, 4], est.whitener_.transform((X - est.mean_) / est.scale_)[:, 4]
    )
    f = _torch_map(est)
    rows = np.random.RandomState(1).standard_normal((4, 5))  # off the plane
    for x, log_p in zip(torch.from_numpy(rows), est.score_samples(rows)):
        jac = torch.autograd.functional.jacobian(f, x)
        z = f(x).detach().numpy()
        expected = multivariate_normal(np.zeros(5)).logpdf(z)
        expected += torch.linalg.slogdet(jac)[1].item()
        assert log_p == pytest.approx(expected, rel=1e-9)
    # the bypassed coordinate contributes the shrunk Gaussian's constant
    untrained = _fitted(X, max_iter=0)
    gain = est.score(X) - untrained.score(X)
    assert 0 < gain < 5


def test_explicit_shrinkage_is_used(make_cone):
    X = make_cone(400, 4, **CORRELATED)
    est = GlowFlowTransformer(max_iter=0, early_stopping=False, shrinkage=0.3)
    est.fit(X)
    assert est.whitener_.shrinkage_ == 0.3
    assert_allclose(
        est.score_samples(X), _data_space_gaussian(est).logpdf(X), rtol=1e-6
    )


def test_bert_flow_init_is_a_gaussian_from_actnorm(make_cone):
    """init='bert-flow': no whitening, and the untrained flow is affine.

    Every ActNorm is set from the data and the couplings start at the identity,
    so the untrained flow is x -> A x + b: the density is N(-A^-1 b, (A^T
    A)^-1), with A and b read off the map by autograd, and it ignores most of
    the correlations that the whitening init captures.
    """
    X = make_cone(2000, 4, **CORRELATED)
    est = GlowFlowTransformer(init="bert-flow", max_iter=0, early_stopping=False)
    est.set_params(random_state=0).fit(X)
    assert est.whitener_ is None
    f = _torch_map(est)
    origin = torch.zeros(4, dtype=torch.float64)
    b = f(origin).detach().numpy()
    A = torch.autograd.functional.jacobian(f, origin).numpy()
    gaussian = multivariate_normal(-np.linalg.solve(A, b), np.linalg.inv(A.T @ A))
    assert_allclose(est.score_samples(X[:20]), gaussian.logpdf(X[:20]), rtol=1e-9)
    # the maximum-likelihood Gaussian is the best Gaussian on its own rows
    # (over 300 seeds of the mixing layers the gap ranged from 1.0 to 5.6 nats)
    whitening = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    assert whitening.score(X) > est.score(X) + 0.3


# ----------------------------------------------------- change of variables
@pytest.mark.parametrize("init", ["whitening", "bert-flow"])
@pytest.mark.parametrize("coupling", ["additive", "affine"])
def test_score_samples_is_the_change_of_variables(init, coupling, make_cone):
    """log p(x) = log N(f(x); 0, I) + log|det df/dx| on random rows.

    The Jacobian of the whole map is taken by torch autograd, with its slogdet.
    """
    X = make_cone(300, 5, **CORRELATED)
    est = _fitted(X, init=init, coupling=coupling, max_iter=3, learning_rate=1e-2)
    f = _torch_map(est)
    rows = np.random.RandomState(3).standard_normal((5, 5)) * X.std(0) + X.mean(0)
    expected = []
    for x in torch.from_numpy(rows):
        z = f(x)
        jac = torch.autograd.functional.jacobian(f, x)
        sign, logabs = torch.linalg.slogdet(jac)
        assert sign != 0
        expected.append(
            multivariate_normal(np.zeros(5)).logpdf(z.detach().numpy()) + logabs.item()
        )
        assert_allclose(est.transform(x.numpy()[None])[0], z.detach().numpy())
    assert_allclose(est.score_samples(rows), expected, rtol=1e-9, atol=1e-9)
    assert est.score(rows) == pytest.approx(np.mean(expected))
    # the couplings have moved: the map is not affine any more
    if coupling == "affine":
        jacobians = [
            torch.autograd.functional.jacobian(f, torch.from_numpy(r)) for r in rows[:2]
        ]
        assert not torch.allclose(*jacobians)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("coupling", ["additive", "affine"])
def test_dtype_preserved_and_inverse_round_trip(dtype, coupling, make_cone):
    X = make_cone(200, 4, **AXES, dtype=dtype)
    est = _fitted(X, coupling=coupling, max_iter=3)
    Z = est.transform(X)
    assert Z.dtype == dtype and Z.shape == X.shape
    X_back = est.inverse_transform(Z)
    assert X_back.dtype == dtype
    tol = 1e-4 if dtype == np.float32 else 1e-9
    # relative to each feature's scale (they span 10 to 0.1)
    assert_allclose((X_back - X) / X.std(0), 0, atol=tol)
    assert_allclose(est.transform(X_back), Z, atol=10 * tol, rtol=10 * tol)


def test_float32_and_float64_paths_agree(make_cone):
    X = make_cone(200, 4, **AXES)
    est = _fitted(X)
    assert_allclose(
        est.transform(X.astype(np.float32)), est.transform(X), rtol=1e-4, atol=1e-4
    )
    assert_allclose(
        est.score_samples(X.astype(np.float32)), est.score_samples(X), rtol=1e-5
    )


@pytest.mark.parametrize("init", ["whitening", "bert-flow", "rank-deficient"])
@pytest.mark.parametrize("coupling", ["additive", "affine"])
def test_transform_module_computes_transform(init, coupling, make_cone):
    """The torch module of the fitted map computes transform, and is a copy.

    The module (what to_onnx traces) computes transform in either dtype,
    bypassed coordinates included; changing it leaves the estimator as it was.
    """
    X = make_cone(200, 5, **CORRELATED)
    if init == "rank-deficient":
        X, init = np.hstack([X, X[:, :1] - X[:, 1:2]]), "whitening"
    est = _fitted(X, init=init, coupling=coupling, max_iter=2, learning_rate=1e-2)
    assert est.rank_ == 5
    for dtype, tol in [(np.float32, 1e-5), (np.float64, 1e-12)]:
        module = est.transform_module(dtype)
        assert not module.training
        assert not any(p.requires_grad for p in module.parameters())
        rows = X.astype(dtype)
        expected = est.transform(rows)
        with torch.no_grad():
            Z = module(torch.from_numpy(rows)).numpy()
            assert Z.dtype == dtype
            assert_allclose(Z, expected, rtol=tol, atol=tol)
            module.mean.add_(1.0)
            next(module.parameters()).add_(1.0)
        assert_array_equal(est.transform(rows), expected)
    with pytest.raises(ValueError, match="float32 or numpy.float64; got float16"):
        est.transform_module(np.float16)
    with pytest.raises(NotFittedError):
        GlowFlowTransformer().transform_module()


def test_sample_is_inverse_of_gaussian_draws(make_cone):
    X = make_cone(200, 4, **AXES)
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


@pytest.mark.parametrize(
    "max_iter, banana, tol_mean, tol_cov",
    [(0, False, 0.03, 0.04), (20, True, 0.06, 0.1)],
)
def test_sample_moments_match_the_training_data(max_iter, banana, tol_mean, tol_cov):
    """Rows drawn from the fitted flow have the training rows' moments.

    Their mean and covariance, correlations included (in units of each
    feature's standard deviation): up to sampling noise for the initial
    Gaussian, up to the fit of a small trained flow on a curved (banana)
    density.
    """
    rng = np.random.RandomState(0)
    X = rng.standard_normal((3000, 4)) @ rng.standard_normal((4, 4)) + [5, -2, 0, 9]
    if banana:
        X[:, 1] += 0.3 * X[:, 0] ** 2 / X[:, 0].std()
    est = GlowFlowTransformer(hidden_size=8, depth=2, max_iter=max_iter)
    est.set_params(random_state=0).fit(X)
    S = est.sample(20000, random_state=1)
    sd = X.std(0)
    assert_allclose((S.mean(0) - X.mean(0)) / sd, 0, atol=tol_mean)
    cov_s = np.cov(S, rowvar=False) / np.outer(sd, sd)
    cov_x = np.cov(X, rowvar=False) / np.outer(sd, sd)
    assert_allclose(cov_s, cov_x, atol=tol_cov)
    # and the samples are as likely under the flow as the training rows
    assert est.score(S) == pytest.approx(est.score(X), abs=0.1)


# ------------------------------------------------------------- training
def test_same_seed_identical_parameters_and_global_rng_untouched(make_cone):
    X = make_cone(200, 4, **AXES)
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


@pytest.mark.parametrize("init", ["whitening", "bert-flow"])
def test_fitted_attributes_and_loss_curve(init, make_cone):
    X = make_cone(200, 4, **AXES)
    est = _fitted(X, max_iter=4, init=init, learning_rate=3e-3)
    assert est.n_iter_ == 4
    assert len(est.loss_curve_) == 4
    assert est.validation_scores_ is None and est.best_validation_score_ is None
    assert est.best_epoch_ is None
    assert est.n_features_in_ == 4
    assert_allclose(est.mean_, X.mean(0))
    assert_allclose(est.scale_, X.std(0))
    assert all(
        bool(m.initialized) for m in est.flow_.modules() if hasattr(m, "initialized")
    )
    # the last epoch's mean training NLL (nats per row, data space) is close
    # to the NLL of the final model on the training rows
    assert abs(-est.score(X) - est.loss_curve_[-1]) < 0.3
    assert list(est.get_feature_names_out()) == [f"flow{i}" for i in range(4)]


@pytest.mark.parametrize("mixing", ["orthogonal", "permutation"])
def test_mixing_layers_are_never_trained(mixing, make_cone):
    """The mixing layers never train, the map's scales only when asked to.

    Everything else learns; the map's ActNorm scales with
    ``train_scales=True`` only. A trained dense mixing diverges at width
    (see the wide-Gaussian test); with either init, the mixing stays where
    it was drawn.
    """
    X = make_cone(200, 4, **AXES)
    cases = [("whitening", False), ("whitening", True), ("bert-flow", True)]
    for init, train_scales in cases:
        params = {"init": init, "mixing": mixing, "train_scales": train_scales}
        before = _state(_fitted(X, **params, max_iter=0))
        after = _state(_fitted(X, **params, max_iter=2))
        assert before.keys() == after.keys()
        mixing_keys = [k for k in before if k.endswith((".perm", ".weight"))]
        mixing_keys = [k for k in mixing_keys if ".net." not in k]
        map_scales = [k for k in before if k.endswith("log_scale") and ".net." not in k]
        assert mixing_keys and map_scales
        for name in before:
            moved = not torch.equal(before[name], after[name])
            if name in mixing_keys:
                assert not moved, name
            elif name in map_scales:
                assert moved == train_scales, name
            elif name.endswith(("log_scale", "net.out.weight")):
                assert moved, name
        # the scales held fixed for training are trainable again afterwards
        est = _fitted(X, **params, max_iter=1)
        assert all(p.requires_grad for p in est.flow_.parameters())
    # the whitening init ends with a per-coordinate output scale
    assert "output.log_scale" in _state(_fitted(X, max_iter=0))
    assert "output.log_scale" not in _state(_fitted(X, init="bert-flow", max_iter=0))


@pytest.mark.parametrize("train_scales", [False, True])
def test_training_keeps_the_volume_unless_scales_train(train_scales, make_cone):
    """By default training keeps the log-determinant of the starting Gaussian.

    log p(x) - log N(f(x); 0, I), the same at every row, does not move with
    training. Trained scales move it.
    """
    X = make_cone(300, 6, **CORRELATED)

    def log_det(est):
        Z = est.transform(X).astype(np.float64)
        values = est.score_samples(X) - multivariate_normal(np.zeros(6)).logpdf(Z)
        assert_allclose(values, values[0], rtol=0, atol=1e-3)
        return values[0]

    start = log_det(_fitted(X, max_iter=0, train_scales=train_scales))
    trained = log_det(_fitted(X, max_iter=3, train_scales=train_scales))
    if train_scales:
        assert abs(trained - start) > 0.01
    else:
        assert trained == pytest.approx(start, abs=1e-4)


def test_early_stopping_keeps_best_evaluation(make_cone):
    X = make_cone(300, 4, **AXES)
    params = {**FAST, "validation_fraction": 0.2, "max_iter": 6}
    params.update(n_iter_no_change=100, learning_rate=3e-3, random_state=0)
    est = GlowFlowTransformer(**params).fit(X)
    scores = est.validation_scores_
    assert len(scores) == est.n_iter_ + 1 == 7
    assert est.best_validation_score_ == max(scores)
    assert est.best_epoch_ == int(np.argmax(scores))
    # same seed -> same split and trajectory: the kept parameters are the ones
    # reached after `best_epoch_` epochs
    ref = GlowFlowTransformer(**{**params, "max_iter": est.best_epoch_}).fit(X)
    for k, v in _state(ref).items():
        assert torch.equal(_state(est)[k], v), k
    # the reported validation score is the model's own mean log-likelihood of
    # the held-out rows (same permutation as the estimator's)
    perm = np.random.RandomState(0)
    perm.randint(np.iinfo(np.int32).max)
    held_out = X[perm.permutation(300)[:60]]
    assert est.score(held_out) == pytest.approx(est.best_validation_score_)


def test_early_stopping_never_ends_below_the_initial_gaussian(make_cone):
    """A learning rate that wrecks the flow keeps the initial Gaussian.

    Every epoch is worse on the held-out rows, so the initial Gaussian is what
    is kept.
    """
    X = make_cone(300, 4, **CORRELATED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowTrainingWarning)
        est = GlowFlowTransformer(
            **FAST, learning_rate=0.5, max_iter=3, n_iter_no_change=10, random_state=0
        ).fit(X)
    assert est.best_epoch_ == 0
    # every evaluation after the start was worse (or training ran away first)
    assert all(s < est.validation_scores_[0] for s in est.validation_scores_[1:])
    assert_allclose(
        est.score_samples(X), _data_space_gaussian(est).logpdf(X), rtol=1e-6
    )


def test_early_stopping_stops_after_n_iter_no_change(make_cone):
    X = make_cone(200, 4, **AXES)
    # tol is huge: nothing counts as an improvement
    est = _fitted(X, early_stopping=True, max_iter=50, n_iter_no_change=2, tol=1e6)
    assert est.n_iter_ == 2 and len(est.validation_scores_) == 3
    # without early stopping the training loss is monitored (first epoch
    # improves on -inf)
    est = _fitted(X, max_iter=50, n_iter_no_change=2, tol=1e6)
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3


def test_early_stopping_needs_training_rows(make_cone):
    with pytest.raises(ValueError, match="leaves 1 training rows"):
        GlowFlowTransformer(early_stopping=True, validation_fraction=0.5).fit(
            make_cone(3, 4, **AXES)
        )


def test_presets(make_cone):
    assert set(FLOW_PRESETS) == {"density", "bert-flow"}
    default = GlowFlowTransformer().get_params()
    density = GlowFlowTransformer.from_preset("density").get_params()
    assert density == default
    paper = GlowFlowTransformer.from_preset("bert-flow", random_state=3)
    assert paper.get_params()["random_state"] == 3
    # bohanli/BERT-flow: flow/config/config_l3_d3_w32.json (levels, depth,
    # width, additive coupling, permutation: true), run_siamese.py (flow
    # lr 1e-3, batches of 32 pairs, one epoch), optimization_bert_flow.py
    # (AdamWeightDecay 0.01, global norm clipped at 1.0 on the sum of both
    # sentences' losses: 0.5 on the mean over the 64 rows)
    assert (paper.n_levels, paper.depth, paper.hidden_size) == (3, 3, 32)
    assert (paper.coupling, paper.mixing) == ("additive", "permutation")
    assert (paper.learning_rate, paper.weight_decay) == (1e-3, 0.01)
    assert (paper.max_grad_norm, paper.batch_size) == (0.5, 64)
    assert (paper.init, paper.max_iter, paper.early_stopping) == ("bert-flow", 1, 0)
    # Glow's ActNorm trains its scales; the defaults keep theirs
    assert paper.train_scales and not density["train_scales"]
    est = GlowFlowTransformer.from_preset("bert-flow", **FAST).fit(
        make_cone(200, 4, **AXES)
    )
    assert est.n_iter_ == 1 and est.whitener_ is None
    with pytest.raises(ValueError, match="Unknown flow preset 'nope'"):
        GlowFlowTransformer.from_preset("nope")


# ------------------------------------------------------------- verbosity
def test_verbose_prints_epoch_lines_to_stderr_without_logging(capsys, make_cone):
    X = make_cone(200, 4, **AXES)
    GlowFlowTransformer(**FAST, max_iter=2, n_iter_no_change=10, verbose=1).fit(X)
    out, err = capsys.readouterr()
    assert out == ""
    lines = [line for line in err.splitlines() if ": epoch" in line]
    assert len(lines) == 2
    assert re.match(
        r"GlowFlowTransformer: epoch 1/2: training NLL -?\d+\.\d+ nats/row, "
        r"validation log-likelihood -?\d+\.\d+",
        lines[0],
    )
    assert "initialisation: validation log-likelihood" in err
    GlowFlowTransformer(**FAST, max_iter=2).fit(X)  # verbose=0: silent
    assert capsys.readouterr() == ("", "")


def test_verbose_without_tqdm_prints_plain_lines(capsys, monkeypatch, make_cone):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    GlowFlowTransformer(**FIXED, max_iter=2, verbose=2).fit(make_cone(200, 4, **AXES))
    err = capsys.readouterr().err
    assert re.findall(r"(?m)^GlowFlowTransformer: epoch \d/2: training NLL", err)
    assert len(err.splitlines()) == 2  # no bar, one line per epoch


def test_verbose_lines_do_not_break_the_progress_bar(capsys, make_cone):
    pytest.importorskip("tqdm")
    X = make_cone(400, 4, **AXES)
    GlowFlowTransformer(**FIXED, max_iter=3, verbose=2).fit(X)
    err = capsys.readouterr().err
    assert "rows" in err  # the bar was drawn
    # every epoch line starts a line of its own (tqdm.write clears the bar
    # with a carriage return first), never glued to the end of a bar
    starts = re.findall(r"(^|[\r\n])GlowFlowTransformer: epoch \d/3", err)
    assert len(starts) == 3
    assert not re.search(r"[^\r\n]GlowFlowTransformer: epoch", err)


# ---------------------------------------------------- non-finite training
def _poison_log_prob(monkeypatch, at_call, break_params=False):
    """Make the ``at_call``-th training batch's loss NaN (and the parameters too).

    Training computes an additive flow's loss with
    :class:`~sklearn_isotropy.flow._step.AdditiveStep`: that is what is
    poisoned.
    """
    original_init, original_call = AdditiveStep.__init__, AdditiveStep.__call__
    calls = {"n": 0}

    def init(self, flow):
        original_init(self, flow)
        self.test_flow = flow

    def call(self, x, scale):  # counts training batches
        out = original_call(self, x, scale)
        calls["n"] += 1
        if calls["n"] >= at_call:
            if break_params:
                with torch.no_grad():  # every parameter training changes
                    for p in self.test_flow.parameters():
                        if p.requires_grad:
                            p.fill_(float("nan"))
            return out * float("nan")
        return out

    monkeypatch.setattr(AdditiveStep, "__init__", init)
    monkeypatch.setattr(AdditiveStep, "__call__", call)


def test_non_finite_loss_keeps_last_good_state_with_warning(monkeypatch, make_cone):
    X = make_cone(320, 4, **AXES)
    _poison_log_prob(monkeypatch, at_call=13, break_params=True)  # 10 batches/epoch
    with pytest.warns(
        FlowTrainingWarning, match=r"epoch 2, batch 3.*non-finite.*learning_rate"
    ):
        est = _fitted(X, max_iter=5)
    assert est.n_iter_ == 2
    # the parameters were NaN when the loss was: the snapshot came back
    assert all(torch.isfinite(p).all() for p in est.flow_.parameters())
    assert np.isfinite(est.transform(X)).all()
    assert np.isfinite(est.score_samples(X)).all()


def test_fallback_that_fails_too_raises_with_the_remedy(monkeypatch, make_cone):
    """If even the parameters training falls back to give NaN, fit raises."""
    X = make_cone(200, 4, **AXES)
    est = _fitted(X)
    original = Glow.forward
    calls = {"n": 0}

    def forward(self, x):  # NaN from the first training batch on, in any mode
        calls["n"] += 1  # 1: the ActNorm pass, 2: the initial check
        z, log_det = original(self, x)
        return (z * float("nan"), log_det) if calls["n"] > 2 else (z, log_det)

    def call(self, x, scale):  # the training batches' loss
        return original_call(self, x, scale) * float("nan")

    original_call = AdditiveStep.__call__
    monkeypatch.setattr(Glow, "forward", forward)
    monkeypatch.setattr(AdditiveStep, "__call__", call)
    with pytest.raises(
        FlowTrainingError, match=r"epoch 1, batch 1.*give non-finite.*learning_rate"
    ):
        est.set_params(max_iter=2).fit(X)
    # the failed refit leaves the estimator unfitted, not half old, half new
    with pytest.raises(NotFittedError):
        est.transform(X)


@pytest.mark.parametrize("train_scales", [False, True])
def test_a_flow_worse_than_its_start_goes_back_to_a_snapshot(
    monkeypatch, train_scales, make_cone
):
    """The fallback of a flow that ends worse than it started.

    Every fit counts as worse here: the parameters training changed go back
    to the last snapshot (the fixed scales among them or not), with the
    warning; the scales held fixed stay at zero.
    """
    monkeypatch.setattr(_training, "WORSE_NATS_PER_DIMENSION", -100.0)
    X = make_cone(300, 6, **CORRELATED)
    with pytest.warns(FlowTrainingWarning, match="worse than its initialisation"):
        est = _fitted(X, max_iter=2, train_scales=train_scales)
    assert np.isfinite(est.score_samples(X)).all()
    if not train_scales:
        assert all(not p.any() for p in est.flow_.scale_parameters())


def test_runaway_training_keeps_the_last_good_state(make_cone):
    """A learning rate that wrecks the flow: the fit keeps a state near its start.

    bert-flow init, lr 0.5: the NLL blows up by orders of magnitude without
    producing NaN. The fitted flow is never that runaway: its NLL stays
    within 0.1 nat per dimension of the initial flow's, and its latent norm
    near sqrt(d).
    """
    X = make_cone(400, 4, **AXES)
    initial = _fitted(X, init="bert-flow", max_iter=0)
    with pytest.warns(FlowTrainingWarning, match=r"(ran away|worse).*learning_rate"):
        unstable = _fitted(
            X, init="bert-flow", train_scales=True, learning_rate=0.5, max_iter=3
        )
    assert -unstable.score(X) <= -initial.score(X) + 0.1 * 4
    norms = np.linalg.norm(unstable.transform(X), axis=1)
    assert 0.5 * np.sqrt(4) < np.median(norms) < 2 * np.sqrt(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlowTrainingWarning)
        stable = _fitted(X, init="bert-flow", train_scales=True, max_iter=3)
    assert stable.score(X) > initial.score(X)


@pytest.mark.parametrize("d", [768, 1536])
def test_wide_gaussian_trains_without_divergence(d):
    """The bert-flow preset on wide Gaussian rows: no runaway, latent norm sqrt(d).

    A trained LU mixing diverged here from 768 features up (one Adam step
    wrecked the conditioning of an orthogonal start); fixed mixing cannot.
    """
    rng = np.random.RandomState(0)
    X = rng.standard_normal((640, d)).astype(np.float32) * rng.uniform(0.5, 2, d)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlowTrainingWarning)
        est = GlowFlowTransformer.from_preset("bert-flow", random_state=0).fit(X)
    norms = np.linalg.norm(est.transform(X), axis=1)
    assert abs(np.median(norms) / np.sqrt(d) - 1) < 0.05
    # one epoch improves on the initial flow (the data are Gaussian, so only
    # a little): the training NLL is below the initial one, nats per row
    initial = GlowFlowTransformer.from_preset("bert-flow", random_state=0)
    initial = initial.set_params(max_iter=0).fit(X)
    assert est.score(X) > initial.score(X)


def test_training_runs_on_one_thread_and_restores_the_count(monkeypatch, make_cone):
    X = make_cone(200, 4, **AXES)
    seen = []
    original = AdditiveStep.__call__

    def call(self, x, scale):
        seen.append(torch.get_num_threads())
        return original(self, x, scale)

    monkeypatch.setattr(AdditiveStep, "__call__", call)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _fitted(X, max_iter=1)
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_clipping_and_weight_decay_reach_the_optimiser(monkeypatch, make_cone):
    """max_grad_norm clips each step's gradient; weight_decay goes to AdamW."""
    from sklearn_isotropy.flow import _training

    X = make_cone(200, 4, **AXES)
    norms, optimisers = [], []
    clip = torch.nn.utils.clip_grad_norm_

    def spy_clip(parameters, max_norm, *args, **kwargs):
        norms.append(max_norm)
        return clip(parameters, max_norm, *args, **kwargs)

    make = _training.make_optimizer

    def spy_make(*args):
        optimisers.append(make(*args))
        return optimisers[-1]

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy_clip)
    monkeypatch.setattr(_training, "make_optimizer", spy_make)
    _fitted(X, max_iter=1, batch_size=50)  # 4 steps, no clipping
    assert norms == []
    _fitted(X, max_iter=1, batch_size=50, max_grad_norm=0.25, weight_decay=0.02)
    assert norms == [0.25] * 4
    assert isinstance(optimisers[-1], torch.optim.AdamW)
    # the plain group, and the log-scales' (Glow's factor 3 in the couplings)
    plain, log_scales = optimisers[-1].param_groups
    assert (plain["lr"], plain["weight_decay"], plain["eps"]) == (1e-3, 0.02, 1e-6)
    assert log_scales["lr"] == pytest.approx(3e-3)
    assert log_scales["weight_decay"] == pytest.approx(0.02 / 3)


# ------------------------------------------------------ huge magnitudes
@pytest.mark.parametrize("factor", [1e160, 1e300, 1e-200])
def test_any_finite_magnitude_is_standardised_safely(factor, make_cone):
    """Input of magnitude 1e154 and more gets the same flow as unscaled input.

    The standardisation is computed on a power-of-two rescaled copy, so input
    whose squares overflow float64 gets the same flow; densities shift by -d
    log(factor).
    """
    X = make_cone(200, 4, **CORRELATED)
    reference = _fitted(X, max_iter=2)
    est = _fitted(X * factor, max_iter=2)
    assert np.isfinite(est.scale_).all() and (est.scale_ > 0).all()
    assert_allclose(est.transform(X * factor), reference.transform(X), atol=1e-6)
    assert_allclose(
        est.score_samples(X * factor),
        reference.score_samples(X) - 4 * np.log(factor),
        rtol=1e-9,
    )
    assert_allclose(
        est.inverse_transform(reference.transform(X)), X * factor, rtol=1e-6
    )
    # values near the float64 limit with opposite signs: X - mean_ overflows
    extreme = np.array([[1.5e308, 1.0], [-1.5e308, 2.0], [1e308, 3.0]])
    est = _fitted(extreme, max_iter=1, batch_size=2)
    assert np.isfinite(est.transform(extreme)).all()


def test_huge_values_without_standardisation_name_the_cause(make_cone):
    X = make_cone(200, 4, **AXES)
    # whitening init: the float64 sums of squares of the whitening overflow
    match = "squares overflow the float64 sums.*standardize=True"
    with pytest.raises(ValueError, match=match) as info:
        GlowFlowTransformer(standardize=False).fit(X * 1e160)
    assert "learning_rate" not in str(info.value)
    # values beyond float32 but fine in float64 train as usual
    est = _fitted(X * 1e39, standardize=False, max_iter=1)
    assert np.isfinite(est.score_samples(X * 1e39)).all()
    # bert-flow init computes on the raw values in float32
    for factor in (1e39, 1e25):  # beyond float32; squares beyond float32
        with pytest.raises(
            ValueError, match="overflow float32.*standardize=True"
        ) as info:
            GlowFlowTransformer(init="bert-flow", standardize=False).fit(X * factor)
        assert "learning_rate" not in str(info.value)
    # moderate values still work without standardisation
    est = _fitted(X, init="bert-flow", standardize=False, max_iter=1)
    assert_array_equal(est.mean_, 0)
    assert_array_equal(est.scale_, 1)
    assert np.isfinite(est.score_samples(X)).all()


def test_constant_data_is_an_error_with_the_whitening_init():
    X = np.full((20, 3), 7.0)
    with pytest.raises(ValueError, match="constant data"):
        GlowFlowTransformer().fit(X)
    est = _fitted(X, init="bert-flow", max_iter=1)
    assert np.isfinite(est.transform(X)).all()


# ---------------------------------------------------------- persistence
def _assert_same_model(a, b, X):
    assert_array_equal(a.transform(X), b.transform(X))
    assert_array_equal(a.score_samples(X), b.score_samples(X))
    assert_array_equal(a.inverse_transform(X), b.inverse_transform(X))
    assert_array_equal(a.sample(5, random_state=1), b.sample(5, random_state=1))


@pytest.mark.parametrize("init", ["whitening", "bert-flow"])
def test_pickle_and_joblib_round_trip(tmp_path, init, make_cone):
    X = make_cone(200, 4, **AXES)
    est = _fitted(X, max_iter=2, init=init)
    torch_state = torch.get_rng_state()
    loaded = pickle.loads(pickle.dumps(est))
    assert torch.equal(torch.get_rng_state(), torch_state)
    _assert_same_model(est, loaded, X)
    # the data-dependent initialisation is restored, not re-run: new data
    # with another scale gives the same outputs
    X_other = make_cone(200, 4, seed=5, **AXES) * 50
    assert_array_equal(loaded.transform(X_other), est.transform(X_other))
    joblib.dump(est, tmp_path / "flow.joblib")
    _assert_same_model(est, joblib.load(tmp_path / "flow.joblib"), X)
    # pickling an unfitted estimator works too, and refitting a loaded one
    assert pickle.loads(pickle.dumps(GlowFlowTransformer())).get_params() == (
        GlowFlowTransformer().get_params()
    )
    _assert_same_model(loaded.fit(X), est, X)


def test_a_pickle_from_before_train_scales_loads_as_trained_scales(make_cone):
    X = make_cone(200, 4, **AXES)
    est = _fitted(X, max_iter=1)
    state = est.__getstate__()
    del state["train_scales"]
    old = GlowFlowTransformer.__new__(GlowFlowTransformer)
    old.__setstate__(state)
    assert old.get_params()["train_scales"] is True
    assert_array_equal(old.transform(X), est.transform(X))


def test_pickled_state_is_cpu_and_loaded_weights_only(monkeypatch, make_cone):
    est = _fitted(make_cone(200, 4, **AXES), max_iter=1)
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


def test_cuda_trained_model_loads_on_cpu_only_machine(monkeypatch, make_cone):
    """A model fitted with device='cuda' unpickles where CUDA is unavailable.

    It must load on the CPU, warn, and give the same outputs.
    """
    X = make_cone(200, 4, **AXES)
    est = _fitted(X)
    est.set_params(device="cuda")
    blob = pickle.dumps(est)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(DeviceWarning, match="no CUDA device"):
        loaded = pickle.loads(blob)
    assert next(loaded.flow_.parameters()).device.type == "cpu"
    _assert_same_model(est, loaded, X)


# --------------------------------------------------------------- density
@pytest.mark.slow
def test_learns_a_non_gaussian_density():
    """On a banana-shaped density the flow beats the Gaussian it starts from.

    On held-out rows; and its latent is close to N(0, I).
    """
    rng = np.random.RandomState(0)
    d = 6
    rotation = ortho_group.rvs(d, random_state=rng)

    def draw(n):
        u = rng.standard_normal((n, d))
        u[:, 1] += 0.8 * (u[:, 0] ** 2 - 1)
        u[:, 3] += 0.8 * (u[:, 2] ** 2 - 1)
        return (u * np.geomspace(5, 0.2, d)) @ rotation.T + 3

    X_train, X_test = draw(4000), draw(2000)
    est = GlowFlowTransformer(hidden_size=32, random_state=0).fit(X_train)
    gaussian = multivariate_normal(X_train.mean(0), np.cov(X_train, rowvar=False))
    assert est.score(X_test) > gaussian.logpdf(X_test).mean() + 0.3
    assert est.best_epoch_ > 0
    # held-out rows map close to N(0, I), up to the fit of a small flow
    Z = est.transform(X_test)
    assert_allclose(Z.mean(0), 0, atol=0.2)
    assert_allclose(np.cov(Z, rowvar=False), np.eye(d), atol=0.25)


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


def test_bad_transform_input(make_cone):
    est = _fitted(make_cone(200, 4, **AXES))
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
        ({"init": "random"}, "init"),
        ({"shrinkage": 2.0}, "shrinkage"),
        ({"n_levels": 0}, "n_levels"),
        ({"max_iter": -1}, "max_iter"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"device": "not-a-device"}, "not a device torch understands"),
    ],
)
def test_bad_parameters(params, match, make_cone):
    with pytest.raises(ValueError, match=match):
        GlowFlowTransformer(**params).fit(make_cone(200, 4, **AXES))


def test_cuda_requested_without_cuda(monkeypatch, make_cone):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA device"):
        GlowFlowTransformer(device="cuda").fit(make_cone(200, 4, **AXES))


def test_far_row_scores_minus_inf_and_the_others_as_alone(make_cone):
    """A float32 row at 1e19 scores -inf, with one warning; the others as alone.

    It made score_samples raise for the whole batch: its log-likelihood
    overflows float32. It scores -inf, like a density that underflows.
    """
    X = make_cone(200, 4, **AXES)
    est = _fitted(X, max_iter=2)
    rows = X[:6].astype(np.float32)
    rows[2] = 1e19
    others = [0, 1, 3, 4, 5]
    with pytest.warns(DensityUnderflowWarning) as record:
        scores = est.score_samples(rows)
    assert len(record) == 1
    message = str(record[0].message)
    assert message.startswith("1 of 6 rows") and "overflows float32" in message
    assert scores[2] == -np.inf
    assert np.isfinite(scores[others]).all()
    assert_allclose(scores[others], est.score_samples(rows[others]), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # in float64, as the message advises, the row has a finite score
        far64 = est.score_samples(rows.astype(np.float64))[2]
    assert -np.inf < far64 < scores[others].min() - 1e30
    # every row too far: those at 3e38 even for the input map, whose float64
    # output no longer fits in float32
    far = np.full((6, 4), 1e30, np.float32)
    far[::2] = 3e38
    with pytest.warns(DensityUnderflowWarning, match="^6 of 6 rows"):
        assert np.all(est.score_samples(far) == -np.inf)
    # and a row too far for float64
    huge = X[:3].copy()
    huge[0] = 1e300
    with pytest.warns(DensityUnderflowWarning, match="^1 of 3 rows .* float64"):
        scores = est.score_samples(huge)
    assert scores[0] == -np.inf
    assert_allclose(scores[1:], est.score_samples(X[1:3]), rtol=1e-12)


def test_edge_shapes_and_values_stay_finite():
    rng = np.random.RandomState(0)
    # one feature, more levels than halvings, a constant column, float16,
    # fewer rows than features
    for X, params in [
        (rng.standard_normal((50, 1)), {"n_levels": 3}),
        (rng.standard_normal((50, 3)), {"n_levels": 5}),
        (np.column_stack([rng.standard_normal(50), np.full(50, 7.0)]), {}),
        (rng.standard_normal((50, 3)).astype(np.float16), {}),
        (rng.standard_normal((3, 10)), {}),
    ]:
        for init in ("whitening", "bert-flow"):
            est = _fitted(X, max_iter=2, init=init, **params)
            Z = est.transform(X)
            assert Z.shape == X.shape and np.isfinite(Z).all()
            assert np.isfinite(est.score_samples(X)).all()
            assert_allclose(est.inverse_transform(Z), X.astype(Z.dtype), atol=1e-3)


def test_in_pipeline_with_pandas_output(make_cone):
    pd = pytest.importorskip("pandas")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X = pd.DataFrame(make_cone(200, 4, **AXES), columns=list("abcd"))
    pipe = make_pipeline(FunctionTransformer(), GlowFlowTransformer(**FAST))
    pipe.set_output(transform="pandas")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = pipe.fit_transform(X)
    assert list(out.columns) == [f"flow{i}" for i in range(4)]
    assert_array_equal(pipe[-1].feature_names_in_, list("abcd"))
