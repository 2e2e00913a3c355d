"""Tests of the flow's training: flat parameters, the optimiser, runaways."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

torch = pytest.importorskip("torch")

from sklearn_isotropy.flow._layers import Glow, learning_rate_factors  # noqa: E402
from sklearn_isotropy.flow._step import AdditiveStep  # noqa: E402
from sklearn_isotropy.flow._training import (  # noqa: E402
    EpochReporter,
    FlatParameters,
    latent_check,
    make_optimizer,
    train_flow,
    training_threads,
)


def _glow(d=6, seed=0, **config):
    glow = Glow.seeded({"n_features": d, "hidden_size": 8, **config}, seed)
    glow.train()
    with torch.no_grad():
        glow(torch.randn(256, d, generator=torch.Generator().manual_seed(seed)))
    return glow


def test_flat_parameters_are_views_of_one_tensor_per_factor():
    glow = _glow(logscale_factor=3.0)
    params = list(glow.parameters())
    before = [p.detach().clone() for p in params]
    factors = learning_rate_factors(glow)
    flat = FlatParameters(params, factors)
    assert [f for f, _ in flat.groups] == [1.0, 3.0]
    assert sum(t.numel() for t in flat.tensors) == sum(p.numel() for p in params)
    storages = {t.untyped_storage().data_ptr(): f for f, t in flat.groups}
    for p, value in zip(params, before):
        assert torch.equal(p, value)  # same values, now in a flat storage
        assert storages[p.untyped_storage().data_ptr()] == factors.get(id(p), 1.0)
    # autograd accumulates into the flat gradients, in place
    x = torch.randn(32, 6)
    (-glow.log_prob(x).mean()).backward()
    assert all(t.grad.abs().sum() > 0 for t in flat.tensors)
    grads = {id(p): p.grad.clone() for p in params}
    flat.zero_grad()
    assert not any(t.grad.any() for t in flat.tensors)
    assert all(not p.grad.any() for p in params) and grads
    # an update of a flat tensor is an update of its parameters
    saved = flat.snapshot()
    with torch.no_grad():
        for t in flat.tensors:
            t.add_(1.0)
    assert torch.equal(params[0], before[0] + 1)
    parts = flat.split(saved)  # no side effect
    assert torch.equal(params[0], before[0] + 1)
    for part, value in zip(parts, before):
        assert torch.equal(part, value) and part.shape == value.shape
    flat.restore(saved)
    assert torch.equal(params[0], before[0])
    # released: each parameter has its own storage again, and no gradient
    flat.release()
    pointers = {p.untyped_storage().data_ptr() for p in params}
    assert len(pointers) == len(params)
    assert all(p.grad is None for p in params)


def test_flat_adam_is_glows_reparametrised_log_scales():
    """The flat step is Glow's optimisation, computed independently.

    The reference trains every parameter with torch's AdamW on separate
    tensors, each log-scale of factor ``c`` as ``s' = s / c`` (Glow's
    ``logs * logscale_factor``); the flat step trains ``s`` itself at ``c``
    times the learning rate, with the weight decay divided by ``c``. Adam
    does not see the difference but for ``eps``, which a loss scaled up by
    1e4 makes negligible.
    """
    ref, flat_glow = (
        _glow(seed=1, logscale_factor=3.0),
        _glow(seed=1, logscale_factor=3.0),
    )
    factors = learning_rate_factors(ref)
    assert len(factors) == 2 * 2 * 3 + 2 * 3 + 2 * 3  # ActNorms and outputs
    # the reference's variables: s' = s / c for the log-scales
    variables = {
        id(p): torch.nn.Parameter(p.detach() / factors.get(id(p), 1.0))
        for p in ref.parameters()
    }
    reference = torch.optim.AdamW(
        list(variables.values()),
        lr=1e-2,
        betas=(0.9, 0.999),
        eps=1e-6,
        weight_decay=0.01,
    )
    flat = FlatParameters(
        list(flat_glow.parameters()), learning_rate_factors(flat_glow)
    )
    optimizer = make_optimizer(flat, 1e-2, 0.01)
    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(3))
    for _ in range(5):
        with torch.no_grad():  # the reference's parameters from its variables
            for p in ref.parameters():
                p.copy_(variables[id(p)] * factors.get(id(p), 1.0))
        ref.zero_grad()
        (-ref.log_prob(x).mean() * 1e4).backward()
        for p in ref.parameters():  # chain rule to the variables
            variables[id(p)].grad = p.grad * factors.get(id(p), 1.0)
        reference.step()
        flat.zero_grad()
        (-flat_glow.log_prob(x).mean() * 1e4).backward()
        optimizer.step()
    for p, q in zip(ref.parameters(), flat_glow.parameters()):
        expected = variables[id(p)].detach() * factors.get(id(p), 1.0)
        assert_allclose(q.detach().numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(optimizer, torch.optim.AdamW)
    for group, (factor, _) in zip(optimizer.param_groups, flat.groups):
        assert group["lr"] == pytest.approx(1e-2 * factor)
        assert group["weight_decay"] == pytest.approx(0.01 / factor)
        assert group["eps"] == 1e-6
        assert group.get("fused") or group.get("foreach")


def test_latent_check_is_the_mean_nll_and_the_median_norm():
    glow = _glow()
    glow.eval()
    x = torch.randn(300, 6, dtype=torch.float32)
    nll, norm = latent_check(glow, x)
    with torch.no_grad():
        z, _ = glow(x)
        expected = -glow.log_prob(x).double().mean().item()
    assert nll == pytest.approx(expected, rel=1e-6)
    assert norm == pytest.approx(np.median(np.linalg.norm(z.numpy(), axis=1)))


def _train(glow, X, **kw):
    params = {
        "max_iter": 2,
        "batch_size": 32,
        "learning_rate": 1e-2,
        "weight_decay": 0.0,
        "max_grad_norm": None,
        "shuffle": False,
        "n_iter_no_change": 10,
        "tol": 0.0,
        "generator": torch.Generator().manual_seed(0),
        "train_offset": 0.0,
        "val_offset": 0.0,
        "reporter": EpochReporter(0, 0, "test"),
        **kw,
    }
    if "initial_nll" not in params:
        params["initial_nll"] = latent_check(glow, X)[0]
    return train_flow(glow, X, None, **params)


def test_a_runaway_batch_stops_training_and_restores_a_good_snapshot():
    """A batch above the start by 2 nats per dimension ends training there.

    The parameters go back to the last snapshot taken at a batch no worse
    than the initial flow (here the initialisation), so the flow is where it
    started, and the result says where training ran away.
    """
    glow = _glow()
    X = torch.randn(320, 6, generator=torch.Generator().manual_seed(0))
    start = [p.detach().clone() for p in glow.parameters()]
    original = AdditiveStep.__call__
    calls = {"n": 0}

    def call(self, x, scale):  # the 4th training batch runs away (no NaN)
        out = original(self, x, scale)
        calls["n"] += 1
        return out + 1e6 if calls["n"] == 4 else out

    AdditiveStep.__call__ = call
    try:
        result = _train(glow, X)
    finally:
        AdditiveStep.__call__ = original
    epoch, batch, value = result.diverged
    assert (epoch, batch) == (1, 4) and value > 1e5
    assert result.restored == "the initialisation"
    for p, value in zip(glow.parameters(), start):
        assert torch.equal(p, value)
    assert result.n_iter == 1


def test_training_keeps_a_fallback_no_worse_than_the_start():
    glow = _glow()
    X = torch.randn(320, 6)
    result = _train(glow, X, max_iter=1)
    assert result.diverged is None
    parameters, where = result.fallback
    assert where == "the initialisation" or where.startswith("epoch 1, batch")
    assert [p.shape for p in parameters] == [p.shape for p in glow.parameters()]
    # the gradient is that of the mean NLL in bits per dimension: a step of
    # the clipped optimiser never moves the global norm past max_grad_norm
    norms = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        total = clip(parameters, max_norm, *args, **kwargs)
        grads = torch.cat([p.grad.reshape(-1) for p in parameters])
        norms.append(float(grads.norm()))
        return total

    torch.nn.utils.clip_grad_norm_ = spy
    try:
        _train(_glow(), X, max_iter=1, max_grad_norm=1e-3)
    finally:
        torch.nn.utils.clip_grad_norm_ = clip
    assert len(norms) == 10 and max(norms) <= 1e-3 * (1 + 1e-5)


@pytest.mark.parametrize("coupling", ["additive", "affine"])
def test_the_loss_is_differentiated_in_bits_per_dimension(coupling):
    """The step's gradient is the nats gradient over d ln 2 (width-free clipping).

    Additive flows train through AdditiveStep (given the scale), affine ones
    through autograd (``backward`` on the scaled loss).
    """
    glow = _glow(d=6, coupling=coupling)
    X = torch.randn(32, 6)
    scaled = []  # (the scaled loss, the scale)
    backward, call = torch.Tensor.backward, AdditiveStep.__call__

    def spy_backward(self, *args, **kwargs):
        scaled.append(float(self.detach()))
        return backward(self, *args, **kwargs)

    def spy_call(self, x, scale):
        nll = call(self, x, scale)
        scaled.append(float(nll) * scale)
        return nll

    torch.Tensor.backward, AdditiveStep.__call__ = spy_backward, spy_call
    try:
        result = _train(glow, X, max_iter=1, learning_rate=1e-9)
    finally:
        torch.Tensor.backward, AdditiveStep.__call__ = backward, call
    nats = result.loss_curve[0]  # train_offset 0: the batch's mean NLL
    assert scaled == [pytest.approx(nats / (6 * math.log(2)), rel=1e-5)]


def test_training_threads_is_one_on_the_cpu_and_restores_the_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with training_threads("cpu"):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), training_threads(torch.device("cpu")):
            raise RuntimeError("restored even so")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
