"""Tests of the Glow bijector modules against autograd Jacobians and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import multivariate_normal

torch = pytest.importorskip("torch")

from sklearn_isotropy.flow._layers import (  # noqa: E402
    ActNorm,
    Coupling,
    CouplingNet,
    FlowStep,
    Glow,
    OrthogonalMixing,
    ReversePermutation,
    SequentialFlow,
    learning_rate_factors,
)

TOL = {torch.float32: 5e-5, torch.float64: 1e-10}


def _make(name, d):
    return {
        "actnorm": lambda: ActNorm(d),
        "actnorm3": lambda: ActNorm(d, logscale_factor=3.0),
        "orthogonal": lambda: OrthogonalMixing(d),
        "permutation": lambda: ReversePermutation(d),
        "additive": lambda: Coupling(d, 8, "additive"),
        "affine": lambda: Coupling(d, 8, "affine"),
        "step": lambda: FlowStep(d, 8, "affine"),
        "glow": lambda: Glow(d, n_levels=2, depth=2, hidden_size=8),
        "glow_affine3": lambda: Glow(
            d, n_levels=3, depth=2, hidden_size=8, coupling="affine"
        ),
        "glow_bert_flow": lambda: Glow(
            d,
            n_levels=3,
            depth=1,
            hidden_size=8,
            mixing="permutation",
            logscale_factor=3.0,
        ),
    }[name]()


LAYERS = [
    "actnorm",
    "actnorm3",
    "orthogonal",
    "permutation",
    "additive",
    "affine",
    "step",
    "glow",
    "glow_affine3",
    "glow_bert_flow",
]
# the mixing layers have no parameters: nothing for a gradient to reach
TRAINED = [name for name in LAYERS if name not in ("orthogonal", "permutation")]


def _prepared(name, d, dtype, seed=0):
    """A layer with ActNorm initialised and every parameter moved off its init.

    Coupling conditioners start with a zero output layer (identity coupling);
    perturbing all parameters makes the checks exercise a generic bijection.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = _make(name, d).to(dtype)
    layer(torch.randn(64, d, generator=gen, dtype=dtype) * 3 + 1)  # ActNorm init
    with torch.no_grad():
        for p in layer.parameters():
            # by 20% of the parameter's size (0.2 where it starts at zero)
            size = float(p.abs().mean()) or 1.0
            p.add_(0.2 * size * torch.randn(p.shape, generator=gen, dtype=dtype))
    return layer, gen


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [1, 2, 5])
@pytest.mark.parametrize("name", LAYERS)
def test_inverse_of_forward_is_identity(name, d, dtype):
    layer, gen = _prepared(name, d, dtype)
    x = torch.randn(20, d, generator=gen, dtype=dtype)
    with torch.no_grad():
        z, log_det = layer(x)
        x_back, inv_log_det = layer.inverse(z)
        z_again, _ = layer(x_back)
    tol = TOL[dtype]
    assert z.shape == x.shape and log_det.shape == (20,)
    assert_allclose(x_back.numpy(), x.numpy(), atol=tol, rtol=tol)
    assert_allclose(inv_log_det.numpy(), -log_det.numpy(), atol=tol, rtol=tol)
    assert_allclose(z_again.numpy(), z.numpy(), atol=tol, rtol=tol)


@pytest.mark.parametrize("d", [1, 5])
@pytest.mark.parametrize("name", LAYERS)
def test_log_det_matches_autograd_jacobian(name, d):
    layer, gen = _prepared(name, d, torch.float64)
    x = torch.randn(4, d, generator=gen, dtype=torch.float64)
    _, log_det = layer(x)
    z = layer(x)[0].detach()
    _, inv_log_det = layer.inverse(z)
    for i in range(x.shape[0]):
        jac = torch.autograd.functional.jacobian(lambda v: layer(v[None])[0][0], x[i])
        sign, logabs = torch.linalg.slogdet(jac)
        assert sign != 0
        assert_allclose(log_det[i].item(), logabs.item(), rtol=1e-9, atol=1e-9)
        jac_inv = torch.autograd.functional.jacobian(
            lambda v: layer.inverse(v[None])[0][0], z[i]
        )
        assert_allclose(
            inv_log_det[i].item(),
            torch.linalg.slogdet(jac_inv)[1].item(),
            rtol=1e-9,
            atol=1e-9,
        )


@pytest.mark.parametrize("name", TRAINED)
def test_gradients_reach_every_parameter(name):
    layer, gen = _prepared(name, 6, torch.float32)
    x = torch.randn(32, 6, generator=gen)
    z, log_det = layer(x)
    loss = (0.5 * z.pow(2).sum(1) - log_det).mean()
    loss.backward()
    for pname, p in layer.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


def test_actnorm_data_dependent_init_and_flag_in_state_dict():
    x = torch.randn(500, 3, dtype=torch.float64) * torch.tensor([10.0, 0.5, 2.0]) + 4
    layer = ActNorm(3).double()
    assert not bool(layer.initialized)
    z, _ = layer(x)
    assert bool(layer.initialized)
    assert_allclose(z.mean(0).detach().numpy(), 0, atol=1e-10)
    std = x.std(0, correction=0).numpy()
    assert_allclose(z.std(0, correction=0).detach().numpy(), std / (std + 1e-6))
    assert "initialized" in layer.state_dict()

    # a freshly built module that loads the state never re-initialises, even
    # when it first sees data with a completely different scale
    loaded = ActNorm(3).double()
    loaded.load_state_dict(layer.state_dict())
    other = torch.randn(50, 3, dtype=torch.float64) * 100 - 7
    assert_allclose(loaded(other)[0].detach().numpy(), layer(other)[0].detach().numpy())
    expected_bias = -x.mean(0).numpy() / (std + 1e-6)
    assert_allclose(loaded.bias.detach().numpy(), expected_bias)

    # in evaluation mode a layer never changes itself (so that it traces for
    # export): an uninitialised one stays the identity
    fresh = ActNorm(3).double().eval()
    assert torch.equal(fresh(x)[0], x)
    assert not bool(fresh.initialized)


def test_actnorm_constant_feature_stays_finite():
    x = torch.ones(10, 2)
    x[:, 1] = torch.arange(10.0)
    z, log_det = ActNorm(2)(x)
    assert torch.isfinite(z).all() and torch.isfinite(log_det).all()


def test_actnorm_logscale_factor_is_a_learning_rate_factor():
    """Glow's logscale_factor: the same layer, a faster-learning log-scale."""
    x = torch.randn(200, 4, dtype=torch.float64) * torch.tensor([5.0, 1, 0.1, 2]) - 3
    plain, glow = ActNorm(4).double(), ActNorm(4, logscale_factor=3.0).double()
    z_plain, ld_plain = plain(x)
    z_glow, ld_glow = glow(x)
    assert torch.equal(z_glow, z_plain) and torch.equal(ld_glow, ld_plain)
    std = x.std(0, correction=0).numpy()
    assert_allclose(glow.log_scale.detach().numpy(), -np.log(std + 1e-6))
    net = CouplingNet(3, 2, 4)
    factors = learning_rate_factors(torch.nn.ModuleList([plain, glow, net]))
    assert factors == {
        id(glow.log_scale): 3.0,
        id(net.hidden_norm.log_scale): 3.0,
        id(net.hidden2_norm.log_scale): 3.0,
        id(net.out_log_scale): 3.0,
    }


def test_orthogonal_mixing_is_a_fixed_rotation_with_its_exact_log_det():
    torch.manual_seed(3)
    layer = OrthogonalMixing(6)
    assert list(layer.parameters()) == []  # never trained
    W = layer.weight.double().numpy()
    assert_allclose(W @ W.T, np.eye(6), atol=1e-6)
    # the log-determinant is that of the stored (float32-rounded) matrix
    assert layer.log_abs_det.item() == pytest.approx(np.linalg.slogdet(W)[1], abs=1e-12)
    x = torch.randn(7, 6, dtype=torch.float64)
    z, _ = layer.double()(x)
    assert_allclose(z.numpy(), x.numpy() @ W.T, atol=1e-12)
    # a Haar draw: its determinant's sign is not fixed by the QR convention
    signs = set()
    for seed in range(20):
        torch.manual_seed(seed)
        signs.add(np.sign(np.linalg.det(OrthogonalMixing(3).weight.double().numpy())))
    assert signs == {-1.0, 1.0}


def test_reverse_permutation_is_bert_flows_mixing():
    layer = ReversePermutation(5)
    assert list(layer.parameters()) == []
    x = torch.arange(10.0).reshape(2, 5)
    z, log_det = layer(x)
    assert torch.equal(z, x.flip(1)) and torch.equal(log_det, torch.zeros(2))
    with pytest.raises(ValueError, match="mixing must be one of"):
        FlowStep(5, 8, mixing="lu")


def test_coupling_starts_as_identity_and_rejects_bad_type():
    x = torch.randn(4, 6)
    for kind in ("additive", "affine"):
        z, log_det = Coupling(6, 8, kind)(x)
        assert torch.equal(z, x)
        assert torch.equal(log_det, torch.zeros(4))
    with pytest.raises(ValueError, match="'additive' or 'affine'"):
        Coupling(6, 8, "spline")


def test_affine_coupling_scale_is_bounded():
    layer = Coupling(4, 8, "affine")
    with torch.no_grad():
        layer.net.out.bias.fill_(1e3)  # huge raw log-scale
    _, log_det = layer(torch.randn(3, 4))
    # at most e per transformed feature (2 of 4 features)
    assert (log_det.abs() <= 2 + 1e-6).all()


def test_coupling_net_starts_at_zero_with_standardised_hidden_units():
    """Glow's conditioner: zero output, hidden units standardised by ActNorm."""
    torch.manual_seed(0)
    net = CouplingNet(3, 5, 16)
    x = torch.randn(400, 3) * 50 + 7  # any scale
    assert torch.equal(net(x), torch.zeros(400, 5))
    h = net.hidden_norm.affine(net.hidden(x))  # set on the first pass
    assert_allclose(h.mean(0).detach().numpy(), 0, atol=1e-4)
    assert_allclose(h.std(0, correction=0).detach().numpy(), 1, atol=1e-3)
    assert net.hidden.bias is None and net.hidden2.bias is None
    # the output is scaled by exp(out_log_scale)
    with torch.no_grad():
        net.out.bias.fill_(1.0)
        net.out_log_scale.fill_(0.3)
    assert_allclose(net(x[:2]).detach().numpy(), np.exp(0.3), rtol=1e-6)


@pytest.mark.parametrize(
    "d, n_levels, expected",
    [(8, 2, [4, 0]), (7, 3, [3, 2, 0]), (1, 3, [0, 0, 0]), (3, 1, [0])],
)
def test_glow_split_sizes(d, n_levels, expected):
    glow = Glow(d, n_levels=n_levels, depth=1, hidden_size=4)
    assert glow.split_sizes == expected
    z, _ = glow(torch.randn(5, d))
    assert z.shape == (5, d)


def test_factored_out_block_is_untouched_by_later_levels():
    glow, gen = _prepared("glow", 6, torch.float64)
    x = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    level1, _ = glow.levels[0](x)
    z, _ = glow(x)
    # the last 3 outputs of level 1 go to the front of the latent unchanged
    assert torch.equal(z[:, :3], level1[:, 3:])


def test_glow_log_prob_of_linear_flow_matches_scipy_gaussian():
    """At initialisation every coupling is the identity: the flow is affine.

    The flow is x -> A x + b, and its density is N(-A^-1 b, (A^T A)^-1).
    """
    torch.manual_seed(1)
    glow = Glow(4, n_levels=2, depth=2, hidden_size=8).double()
    glow(torch.randn(100, 4, dtype=torch.float64) * 2 + 1)  # ActNorm init
    with torch.no_grad():  # move the ActNorm params, keep couplings at zero
        for name, p in glow.named_parameters():
            if ".net." not in name:
                p.add_(0.2 * torch.randn_like(p))
    x = torch.randn(10, 4, dtype=torch.float64)
    b = glow(torch.zeros(1, 4, dtype=torch.float64))[0][0].detach().numpy()
    A = torch.autograd.functional.jacobian(
        lambda v: glow(v[None])[0][0], torch.zeros(4, dtype=torch.float64)
    ).numpy()
    mean = -np.linalg.solve(A, b)
    cov = np.linalg.inv(A.T @ A)
    expected = multivariate_normal(mean, cov).logpdf(x.numpy())
    assert_allclose(glow.log_prob(x).detach().numpy(), expected, rtol=1e-9)


def test_sequential_flow_composes():
    torch.manual_seed(0)
    a, b = ActNorm(3), OrthogonalMixing(3)
    seq = SequentialFlow(a, b)
    x = torch.randn(6, 3)
    z, log_det = seq(x)
    za, lda = a(x)
    zb, ldb = b(za)
    assert torch.equal(z, zb)
    assert_allclose(log_det.detach().numpy(), (lda + ldb).detach().numpy())


@pytest.mark.parametrize("coupling", ["additive", "affine"])
def test_identity_initialisation_gives_the_standard_normal(coupling):
    """initialize_identity makes the flow an orthogonal map.

    ActNorm at the identity, mixing orthogonal, couplings at zero: log_prob is
    exactly the N(0, I) log-density and no data initialisation happens later.
    """
    torch.manual_seed(0)
    glow = Glow(6, n_levels=2, depth=3, hidden_size=8, coupling=coupling).double()
    glow.initialize_identity()
    # the steps' ActNorm layers are set; the conditioners' wait for data
    for name, module in glow.named_modules():
        if isinstance(module, ActNorm):
            assert bool(module.initialized) != (".net." in name), name
    x = torch.randn(20, 6, dtype=torch.float64) * 5 + 3
    with torch.no_grad():
        z, log_det = glow(x)
    # orthogonal up to the float32 rounding of the mixing parameters
    assert_allclose(log_det.numpy(), 0, atol=1e-6)
    assert_allclose(z.norm(dim=1).numpy(), x.norm(dim=1).numpy(), rtol=1e-6)
    expected = multivariate_normal(np.zeros(6)).logpdf(x.numpy())
    assert_allclose(glow.log_prob(x).detach().numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("mixing", ["permutation", "orthogonal"])
@pytest.mark.parametrize("d", [7, 8])
def test_fused_training_step_is_the_layers_function(mixing, d):
    """A training pass's fused conditioners equal autograd on the layers.

    In training mode with gradients on, each coupling's conditioner runs a
    hand-written autograd function; in evaluation mode
    the same parameters run layer by layer. Values and every gradient must
    agree (float64), on an odd and an even width.
    """
    torch.manual_seed(0)
    glow = Glow(d, n_levels=2, depth=2, hidden_size=6, mixing=mixing)
    glow = glow.double()
    x = torch.randn(40, d, dtype=torch.float64)
    glow.train()
    with torch.no_grad():
        glow(x)  # ActNorm initialisation
        for p in glow.parameters():
            p.add_(0.2 * (float(p.abs().mean()) or 1.0) * torch.randn_like(p))
    weights = torch.randn(40, dtype=torch.float64)

    def value_and_gradients(training):
        glow.train(training)
        xr = x.clone().requires_grad_(True)
        log_prob = glow.log_prob(xr)
        grads = torch.autograd.grad(
            (log_prob * weights).sum(), [xr, *glow.parameters()]
        )
        return log_prob.detach(), grads

    fused, fused_grads = value_and_gradients(True)
    plain, plain_grads = value_and_gradients(False)
    assert_allclose(fused.numpy(), plain.numpy(), rtol=1e-12, atol=1e-12)
    for a, b in zip(fused_grads, plain_grads):
        assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)
    # the fused path ran: the conditioner's function, once per coupling
    glow.train()
    net = glow.levels[0].layers[0].layers[2].net
    out = net(x[:, : d // 2].clone().requires_grad_(True))
    assert "ConditionerFunction" in type(out.grad_fn).__name__


def test_fused_conditioner_is_the_layers_function():
    """The conditioner of an affine coupling also trains through its function."""
    torch.manual_seed(1)
    net = CouplingNet(5, 4, 8).double()
    x = torch.randn(30, 5, dtype=torch.float64)
    with torch.no_grad():
        net(x)  # ActNorm initialisation (training mode, no gradient)
        for p in net.parameters():
            p.add_(0.3 * (float(p.abs().mean()) or 1.0) * torch.randn_like(p))
    grad = torch.randn(30, 4, dtype=torch.float64)
    results = []
    for training in (True, False):
        net.train(training)
        xr = x.clone().requires_grad_(True)
        out = net(xr)
        results.append(
            (out.detach(), torch.autograd.grad(out, [xr, *net.parameters()], grad))
        )
    (fused, fused_grads), (plain, plain_grads) = results
    assert_allclose(fused.numpy(), plain.numpy(), rtol=1e-12, atol=1e-12)
    for a, b in zip(fused_grads, plain_grads):
        assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)
