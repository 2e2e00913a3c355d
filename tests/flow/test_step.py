"""Tests of the hand-written training step of additive Glows."""

from __future__ import annotations

import math

import pytest
from numpy.testing import assert_allclose

torch = pytest.importorskip("torch")

from sklearn_isotropy.flow import _training  # noqa: E402
from sklearn_isotropy.flow._layers import Glow, learning_rate_factors  # noqa: E402
from sklearn_isotropy.flow._step import AdditiveStep  # noqa: E402
from sklearn_isotropy.flow._training import (  # noqa: E402
    EpochReporter,
    FlatParameters,
    latent_check,
    train_flow,
)


def _initialised(config, seed=0, dtype=torch.float64):
    """A Glow of ``config`` after ActNorm's initialisation, then moved off it."""
    glow = Glow.seeded(config, seed).to(dtype)
    gen = torch.Generator().manual_seed(seed)
    d = config["n_features"]
    glow.train()
    with torch.no_grad():
        glow(2 * torch.randn(200, d, generator=gen, dtype=dtype) + 1)
        # away from the start, where many gradients are exactly zero
        for p in glow.parameters():
            scale = float(p.abs().mean()) or 1.0
            p.add_(0.2 * scale * torch.randn(p.shape, generator=gen, dtype=dtype))
    return glow


@pytest.mark.parametrize("mixing", ["permutation", "orthogonal"])
@pytest.mark.parametrize("output_scale", [False, True])
@pytest.mark.parametrize(("d", "n_levels"), [(7, 1), (24, 3), (5, 3)])
def test_step_is_autograd_on_the_layers(mixing, output_scale, d, n_levels):
    """Loss and every parameter's gradient equal autograd's, in float64.

    The reference differentiates ``scale * mean(-log_prob)`` through the
    layers' own forward pass (evaluation mode, so none of the fused
    functions runs). The step overwrites gradients: they start as garbage.
    Widths odd and even; (5, 3) has a last level of two features.
    """
    config = {
        "n_features": d,
        "n_levels": n_levels,
        "depth": 2,
        "hidden_size": 6,
        "mixing": mixing,
        "output_scale": output_scale,
        "logscale_factor": 3.0,
    }
    glow = _initialised(config)
    params = list(glow.parameters())
    x = torch.randn(33, d, generator=torch.Generator().manual_seed(1)).double()
    scale = 0.37

    glow.eval()
    expected = -glow.log_prob(x).mean()
    grads = torch.autograd.grad(scale * expected, params)

    flat = FlatParameters(params, learning_rate_factors(glow))
    for t in flat.tensors:
        t.grad.fill_(123.0)
    glow.train()
    assert AdditiveStep.supports(glow)
    nll = AdditiveStep(glow)(x, scale)
    assert_allclose(float(nll), float(expected.detach()), rtol=1e-12)
    for p, g in zip(params, grads):
        assert_allclose(p.grad.numpy(), g.numpy(), rtol=1e-9, atol=1e-12)
    # it read the parameters, and changed none of them
    glow.eval()
    assert torch.equal(-glow.log_prob(x).mean(), expected)


@pytest.mark.parametrize("mixing", ["permutation", "orthogonal"])
@pytest.mark.parametrize("output_scale", [False, True])
def test_step_leaves_out_the_scales_not_trained(mixing, output_scale):
    """``train_scales=False``: the map's log-scales get no gradient.

    The others get autograd's, with those scales held fixed (away from zero).
    """
    config = {
        "n_features": 24,
        "n_levels": 3,
        "depth": 2,
        "hidden_size": 6,
        "mixing": mixing,
        "output_scale": output_scale,
    }
    glow = _initialised(config)
    frozen = glow.scale_parameters()
    assert len(frozen) == 3 * 2 + output_scale
    for p in frozen:
        p.requires_grad_(False)
    params = [p for p in glow.parameters() if p.requires_grad]
    assert len(params) == len(list(glow.parameters())) - len(frozen)
    x = torch.randn(33, 24, generator=torch.Generator().manual_seed(1)).double()

    glow.eval()
    expected = -glow.log_prob(x).mean()
    grads = torch.autograd.grad(0.5 * expected, params)

    flat = FlatParameters(params, learning_rate_factors(glow))
    for t in flat.tensors:
        t.grad.fill_(123.0)
    glow.train()
    nll = AdditiveStep(glow)(x, 0.5)
    assert_allclose(float(nll), float(expected.detach()), rtol=1e-12)
    for p, g in zip(params, grads):
        assert_allclose(p.grad.numpy(), g.numpy(), rtol=1e-9, atol=1e-12)
    assert all(p.grad is None for p in frozen)
    glow.eval()  # it read the parameters, and changed none of them
    assert torch.equal(-glow.log_prob(x).mean(), expected)


def test_supports_only_initialised_additive_glows():
    config = {"n_features": 6, "n_levels": 2, "depth": 1, "hidden_size": 4}
    assert not AdditiveStep.supports(Glow(**config))  # ActNorm not set yet
    assert AdditiveStep.supports(_initialised(config))
    affine = _initialised({**config, "coupling": "affine"})
    assert not AdditiveStep.supports(affine)
    with pytest.raises(ValueError, match="initialised additive"):
        AdditiveStep(affine)


def test_training_with_the_step_is_training_with_autograd(monkeypatch):
    """``train_flow`` takes the step, and lands where autograd's steps land.

    Two epochs of clipped AdamW from the same start, float32: the same
    losses and parameters up to float32 round-off.
    """
    config = {"n_features": 10, "n_levels": 2, "depth": 2, "hidden_size": 8}
    X = torch.randn(300, 10, generator=torch.Generator().manual_seed(2))
    X = X @ torch.randn(10, 10, generator=torch.Generator().manual_seed(3))
    calls = []
    real_call = AdditiveStep.__call__

    def counted(self, *args):
        calls.append(1)
        return real_call(self, *args)

    def start():
        glow = Glow.seeded(config, 0)
        glow.train()
        with torch.no_grad():
            glow(X[:128])  # ActNorm's initialisation
        return glow

    def trained(use_step):
        glow = start()
        monkeypatch.setattr(AdditiveStep, "supports", staticmethod(lambda f: use_step))
        monkeypatch.setattr(AdditiveStep, "__call__", counted)
        nll = latent_check(glow, X)[0]
        result = train_flow(
            glow,
            X,
            None,
            max_iter=2,
            batch_size=64,
            learning_rate=1e-2,
            weight_decay=0.1,
            max_grad_norm=1.0,
            shuffle=True,
            n_iter_no_change=10,
            tol=0.0,
            generator=torch.Generator().manual_seed(0),
            train_offset=0.0,
            val_offset=0.0,
            initial_nll=nll,
            reporter=EpochReporter(0, 0, "test"),
        )
        return result, [p.detach().clone() for p in glow.parameters()]

    (with_step, params_step), n_calls = trained(True), len(calls)
    assert n_calls == 2 * math.ceil(300 / 64)
    with_autograd, params_autograd = trained(False)
    assert len(calls) == n_calls  # autograd: no call of the step
    assert_allclose(with_step.loss_curve, with_autograd.loss_curve, rtol=1e-5)
    moved = max(
        float((a - b).abs().max()) for a, b in zip(params_step, params_autograd)
    )
    assert moved < 1e-4
    assert any(
        not torch.allclose(p, q, atol=1e-3)
        for p, q in zip(params_step, start().parameters())
    )  # and training did move them


def test_reverse_permutation_is_checked():
    config = {"n_features": 6, "n_levels": 1, "depth": 1, "hidden_size": 4}
    glow = _initialised({**config, "mixing": "permutation"})
    mixing = glow.levels[0].layers[0].layers[1]
    mixing.perm.copy_(torch.tensor([0, 1, 2, 3, 4, 5]))
    with pytest.raises(ValueError, match="not the reverse"):
        AdditiveStep(glow)
    # the preset that trains with a permutation mixes with the reverse
    assert _training.FLOW_PRESETS["bert-flow"]["mixing"] == "permutation"
