"""Glow bijector modules for vectors (PyTorch).

Every module here is a bijection with one contract::

    z, log_det = module(x)            # forward, data -> latent
    x, log_det = module.inverse(z)    # inverse, latent -> data

where ``log_det`` has shape ``(n_samples,)`` and is the log absolute
determinant of the Jacobian of the map that was applied (so the inverse
returns the negative of the forward log-determinant at the matching point).
In evaluation mode, ``forward`` must be traceable by ``torch.export`` (no
Python branch on a tensor's value): the fitted map is exported by tracing
the layers themselves (:class:`LatentMap`, which
:meth:`~sklearn_isotropy.GlowFlowTransformer.transform_module` builds), so a
layer that keeps the contract needs no export code of its own.

The layers follow Glow (Kingma & Dhariwal, 2018) with the convolutional
pieces replaced by their vector analogues, as BERT-flow (Li et al., 2020)
does: :class:`ActNorm`, a fixed mixing layer (:class:`ReversePermutation`,
BERT-flow's, or :class:`OrthogonalMixing`), :class:`Coupling` (additive or
affine), :class:`FlowStep` (the three in turn), :class:`Glow` (levels of
steps, half the features factored out after each level but the last) and
:class:`LatentMap` (an estimator's whole ``x -> z``, one module to trace for
export). This module imports torch at import time; the scikit-learn wrapper
imports it only when it needs it.

Examples
--------
>>> import torch
>>> from sklearn_isotropy.flow._layers import Glow
>>> _ = torch.manual_seed(0)
>>> flow = Glow(6, n_levels=2, depth=2, hidden_size=8)
>>> x = torch.randn(5, 6)
>>> z, log_det = flow(x)
>>> x_back, inv_log_det = flow.inverse(z)
>>> bool(torch.allclose(x, x_back, atol=1e-5))
True
>>> bool(torch.allclose(log_det, -inv_log_det, atol=1e-5))
True
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "ActNorm",
    "Coupling",
    "CouplingNet",
    "FlowStep",
    "Glow",
    "CONDITIONER_LOGSCALE_FACTOR",
    "LatentMap",
    "MIXING_LAYERS",
    "OrthogonalMixing",
    "ReversePermutation",
    "SequentialFlow",
    "learning_rate_factors",
]

_LOG_2PI = math.log(2 * math.pi)


def _zeros_log_det(x: torch.Tensor) -> torch.Tensor:
    return x.new_zeros(x.shape[0])


class ActNorm(nn.Module):
    """Per-feature affine map ``z = x * exp(log_scale) + bias``.

    On the first forward pass of an uninitialised module in training mode,
    ``bias`` and ``log_scale`` are set from the batch so that its output has
    zero mean and unit variance per feature (Glow's data-dependent
    initialisation). The flag ``initialized`` is a registered buffer: it is
    saved in the ``state_dict`` and restored by ``load_state_dict``, so a
    loaded model is never re-initialised from whatever data it sees first.
    In evaluation mode the layer never changes itself, so its forward pass
    has no branch on the flag's value and traces for export.

    The shift is applied after the scaling, so it lives in the (unit-scale)
    output space: an optimiser step on it has the same effect whatever the
    input's scale, and a near-constant feature (a huge scale) does not turn
    small steps on the shift into huge outputs. (Glow's and BERT-flow's
    ActNorm shifts before scaling; at initialisation the two maps are the
    same.)

    Parameters
    ----------
    n_features : int
        Width of the input.
    eps : float, default=1e-6
        Added to the batch standard deviation at initialisation, so constant
        features get a large but finite scale instead of a division by zero.
    logscale_factor : float, default=1.0
        How much faster the log-scale learns than the other parameters.
        Glow (and BERT-flow) trains ``log_scale / logscale_factor`` with
        ``logscale_factor=3``, so that an Adam step moves the log-scale three
        times as far; Adam is invariant to that reparametrisation, so training
        gives ``log_scale`` a learning rate ``logscale_factor`` times the
        others' instead (see :func:`learning_rate_factors`), and the layer
        computes no product for it.
    """

    def __init__(
        self, n_features: int, eps: float = 1e-6, logscale_factor: float = 1.0
    ):
        super().__init__()
        self.eps = eps
        self.logscale_factor = float(logscale_factor)
        self.bias = nn.Parameter(torch.zeros(n_features))
        self.log_scale = nn.Parameter(torch.zeros(n_features))
        self.register_buffer("initialized", torch.tensor(False))
        # the buffer is the truth (saved and loaded); this flag spares reading
        # it (a device synchronisation) on every training pass once it is set
        self._known_initialized = False

    def _load_from_state_dict(self, *args, **kwargs):
        self._known_initialized = False  # the loaded buffer decides again
        super()._load_from_state_dict(*args, **kwargs)

    @torch.no_grad()
    def initialize(self, x: torch.Tensor) -> None:
        """Set ``bias``/``log_scale`` from the batch ``x``; mark as initialised."""
        mean = x.mean(0)
        std = x.std(0, correction=0)
        log_scale = -torch.log(std + self.eps)
        self.log_scale.copy_(log_scale)
        self.bias.copy_(-mean * torch.exp(log_scale))
        self.initialized.fill_(True)
        self._known_initialized = True

    @torch.no_grad()
    def initialize_identity(self) -> None:
        """Set the map to the identity and mark it as initialised.

        For input that is already standardised (or whitened) by a fixed map
        in front of the flow, where a data-dependent initialisation would
        only move the map away from the identity by sampling noise.
        """
        self.bias.zero_()
        self.log_scale.zero_()
        self.initialized.fill_(True)
        self._known_initialized = True

    def _scale_shift(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z, log_scale)``, initialising from ``x`` on a first training pass."""
        if self.training and not self._known_initialized:
            if not bool(self.initialized):
                self.initialize(x)
            self._known_initialized = True
        log_scale = self.log_scale
        # a product and a sum, not addcmul: its backward pass converts its
        # scalar factor for every gradient it computes
        return x * torch.exp(log_scale) + self.bias, log_scale

    def affine(self, x: torch.Tensor) -> torch.Tensor:
        """The map alone, without its log-determinant (a conditioner's layer)."""
        return self._scale_shift(x)[0]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z, log_scale = self._scale_shift(x)
        return z, log_scale.sum().expand(x.shape[0])

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_scale = self.log_scale
        x = (z - self.bias) * torch.exp(-log_scale)
        return x, (-log_scale.sum()).expand(z.shape[0])


class ReversePermutation(nn.Module):
    """Reverse the order of the features: BERT-flow's mixing, never trained.

    Every configuration BERT-flow ships sets ``permutation: true``: the
    invertible layer between ActNorm and the coupling is this fixed
    permutation, so the next coupling conditions the other half of the
    features. It has no parameters and ``log|det| = 0``.

    Parameters
    ----------
    n_features : int
        Width of the input.
    """

    def __init__(self, n_features: int):
        super().__init__()
        # a gather rather than flip: it exports to every ONNX opset
        self.register_buffer("perm", torch.arange(n_features - 1, -1, -1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.index_select(1, self.perm), _zeros_log_det(x)

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return z.index_select(1, self.perm), _zeros_log_det(z)


class OrthogonalMixing(nn.Module):
    """A fixed random orthogonal map ``z = x @ W^T``, never trained.

    ``W`` is drawn from the Haar distribution (torch's current random state)
    and stored, rounded to float32, as a buffer. Its exact
    ``log|det W|`` (0 up to that rounding) is computed once, in float64, and
    stored beside it, so the log-determinant is the true one of the stored
    matrix in every dtype; the inverse solves with ``W`` rather than
    assuming ``W^-1 = W^T``.

    Every coupling after it conditions on a random half of all the
    directions, not on a fixed half of the features. A *trained* dense
    mixing (Glow's LU-parametrised layer) is not offered: one Adam step
    moves every entry of its factors by about the learning rate, and the
    factors of an orthogonal start are ill-conditioned, so from a few
    hundred features up one step wrecks the matrix's conditioning and the
    likelihood diverges (the flow page, :ref:`density`).

    Parameters
    ----------
    n_features : int
        Width of the input and of the output; the matrix is square.
    """

    def __init__(self, n_features: int):
        super().__init__()
        gaussian = torch.randn(n_features, n_features, dtype=torch.float64)
        q, r = torch.linalg.qr(gaussian)
        q = q * torch.sign(torch.diagonal(r))  # Haar, not biased by QR's signs
        weight = q.float()
        self.register_buffer("weight", weight)
        log_det = torch.linalg.slogdet(weight.double())[1]
        self.register_buffer("log_abs_det", log_det.float())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x @ self.weight.T, self.log_abs_det.expand(x.shape[0])

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.linalg.solve(self.weight, z.T).T
        return x, (-self.log_abs_det).expand(z.shape[0])


#: The mixing layers, by the name of :class:`Glow`'s ``mixing`` parameter.
MIXING_LAYERS = {"orthogonal": OrthogonalMixing, "permutation": ReversePermutation}


class CouplingNet(nn.Module):
    """The coupling conditioner of Glow and BERT-flow, for vectors.

    ``Linear(in, hidden) -> ActNorm -> ReLU -> Linear(hidden, hidden) ->
    ActNorm -> ReLU -> Linear(hidden, out) * exp(log_scale)``: Glow's
    ``conv_stack`` with 1x1 convolutions, as BERT-flow runs it (the factor 3
    of its log-scales is a learning-rate factor, see
    :func:`learning_rate_factors`). The hidden
    layers have no bias (their ActNorm has one) and start from
    ``N(0, 0.05**2)`` weights; their ActNorm layers (log-scale factor 3) are
    set from the data on the first training pass, so the hidden units start
    standardised whatever the input's scale. The output layer and its
    log-scale start at zero, so every coupling starts as the identity.

    Parameters
    ----------
    in_features, out_features, hidden_size : int
        Widths.
    """

    def __init__(self, in_features: int, out_features: int, hidden_size: int):
        super().__init__()
        self.hidden = nn.Linear(in_features, hidden_size, bias=False)
        self.hidden_norm = ActNorm(
            hidden_size, logscale_factor=CONDITIONER_LOGSCALE_FACTOR
        )
        self.hidden2 = nn.Linear(hidden_size, hidden_size, bias=False)
        self.hidden2_norm = ActNorm(
            hidden_size, logscale_factor=CONDITIONER_LOGSCALE_FACTOR
        )
        for layer in (self.hidden, self.hidden2):
            nn.init.normal_(layer.weight, std=0.05)
        self.out = nn.Linear(hidden_size, out_features)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.out_log_scale = nn.Parameter(torch.zeros(out_features))

    def _conditioner_parameters(self) -> tuple:
        """The ten parameters in the order the fused passes take them."""
        return (
            self.hidden.weight,
            self.hidden_norm.log_scale,
            self.hidden_norm.bias,
            self.hidden2.weight,
            self.hidden2_norm.log_scale,
            self.hidden2_norm.bias,
            self.out.weight,
            self.out.bias,
            self.out_log_scale,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norms = (self.hidden_norm, self.hidden2_norm)
        if (
            self.training
            and torch.is_grad_enabled()
            and all(norm._known_initialized for norm in norms)
        ):  # a training step: the same function, with a hand-written backward
            return _ConditionerFunction.apply(x, *self._conditioner_parameters())
        h = torch.relu(self.hidden_norm.affine(self.hidden(x)))
        h = torch.relu(self.hidden2_norm.affine(self.hidden2(h)))
        return self.out(h) * torch.exp(self.out_log_scale)


def _conditioner_forward(x, w1, ls1, b1, w2, ls2, b2, wo, bo, lso):
    """:class:`CouplingNet`'s output, and what its backward pass needs."""
    s1, s2, so = torch.exp(ls1), torch.exp(ls2), torch.exp(lso)
    h1 = torch.mm(x, w1.t())
    r1 = torch.addcmul(b1, h1, s1).relu_()
    h2 = torch.mm(r1, w2.t())
    r2 = torch.addcmul(b2, h2, s2).relu_()
    o = torch.addmm(bo, r2, wo.t())
    return o * so, (x, w1, s1, h1, r1, w2, s2, h2, r2, wo, so, o)


def _conditioner_backward(grad, saved, input_grad: bool = True):
    """Gradients of the input and of the ten parameters, from ``grad``."""
    x, w1, s1, h1, r1, w2, s2, h2, r2, wo, so, o = saved
    threshold_backward = torch.ops.aten.threshold_backward
    g_o = grad * so
    g_lso = (grad * o).sum(0) * so
    g_wo, g_bo = torch.mm(g_o.t(), r2), g_o.sum(0)
    g_a2 = threshold_backward(torch.mm(g_o, wo), r2, 0)
    g_b2, g_ls2 = g_a2.sum(0), (g_a2 * h2).sum(0) * s2
    g_h2 = g_a2 * s2
    g_w2 = torch.mm(g_h2.t(), r1)
    g_a1 = threshold_backward(torch.mm(g_h2, w2), r1, 0)
    g_b1, g_ls1 = g_a1.sum(0), (g_a1 * h1).sum(0) * s1
    g_h1 = g_a1 * s1
    g_w1 = torch.mm(g_h1.t(), x)
    g_x = torch.mm(g_h1, w1) if input_grad else None
    return g_x, (g_w1, g_ls1, g_b1, g_w2, g_ls2, g_b2, g_wo, g_bo, g_lso)


class _ConditionerFunction(torch.autograd.Function):
    """:class:`CouplingNet`'s forward pass, with its backward pass written out.

    Recorded op by op, a training step of the conditioner is some thirty
    small operations forward and twice as many backward, each of which costs
    torch's dispatch and autograd's bookkeeping: for the batches and widths a
    flow trains on, more than the six matrix products that do the work.
    Here the forward pass is eleven operations and the backward pass
    twenty-five, six of them the products. ``tests/flow/test_layers.py``
    checks it against autograd on the layers themselves.
    """

    @staticmethod
    def forward(ctx, x, *params):
        out, saved = _conditioner_forward(x, *params)
        ctx.save_for_backward(*saved)
        return out

    @staticmethod
    def backward(ctx, grad):
        g_x, g_params = _conditioner_backward(
            grad, ctx.saved_tensors, ctx.needs_input_grad[0]
        )
        return (g_x, *g_params)


class Coupling(nn.Module):
    """Additive or affine coupling layer.

    The input is split into ``x_a = x[:, :n_a]`` (``n_a = n_features // 2``)
    and ``x_b = x[:, n_a:]``; ``x_a`` passes unchanged and conditions the map
    of ``x_b``:

    - ``"additive"`` (NICE, BERT-flow): ``z_b = x_b + t(x_a)``, volume
      preserving (``log_det = 0``);
    - ``"affine"`` (RealNVP/Glow): ``z_b = x_b * exp(s) + t(x_a)`` with the
      bounded log-scale ``s = tanh(s_raw(x_a))`` in ``(-1, 1)``, so one layer
      never scales by more than ``e``.

    With a single feature there is nothing to condition on and the layer is
    the identity.

    Parameters
    ----------
    n_features : int
        Width of the input.
    hidden_size : int
        Width of the conditioner MLP.
    coupling : {"additive", "affine"}, default="additive"
        Type of coupling.
    """

    def __init__(self, n_features: int, hidden_size: int, coupling: str = "additive"):
        super().__init__()
        if coupling not in ("additive", "affine"):
            raise ValueError(
                f"coupling must be 'additive' or 'affine', got {coupling!r}"
            )
        self.coupling = coupling
        self.n_a = n_features // 2
        n_b = n_features - self.n_a
        if self.n_a == 0:
            self.net = None
        else:
            n_out = n_b if coupling == "additive" else 2 * n_b
            self.net = CouplingNet(self.n_a, n_out, hidden_size)

    def _shift_log_scale(self, x_a: torch.Tensor):
        h = self.net(x_a)
        if self.coupling == "additive":
            return h, None
        shift, raw = h.chunk(2, dim=1)
        return shift, torch.tanh(raw)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.net is None:
            return x, _zeros_log_det(x)
        # split, not two slices: its backward pass is one concatenation
        x_a, x_b = x.split([self.n_a, x.shape[1] - self.n_a], dim=1)
        shift, log_scale = self._shift_log_scale(x_a)
        if log_scale is None:
            return torch.cat([x_a, x_b + shift], dim=1), _zeros_log_det(x)
        z_b = x_b * torch.exp(log_scale) + shift
        return torch.cat([x_a, z_b], dim=1), log_scale.sum(1)

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.net is None:
            return z, _zeros_log_det(z)
        z_a, z_b = z.split([self.n_a, z.shape[1] - self.n_a], dim=1)
        shift, log_scale = self._shift_log_scale(z_a)
        if log_scale is None:
            return torch.cat([z_a, z_b - shift], dim=1), _zeros_log_det(z)
        x_b = (z_b - shift) * torch.exp(-log_scale)
        return torch.cat([z_a, x_b], dim=1), -log_scale.sum(1)


class SequentialFlow(nn.Module):
    """Composition of bijectors; log-determinants add up."""

    def __init__(self, *layers: nn.Module):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = None
        for layer in self.layers:
            x, ld = layer(x)
            log_det = ld if log_det is None else log_det + ld
        return x, _zeros_log_det(x) if log_det is None else log_det

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = None
        for layer in reversed(self.layers):
            z, ld = layer.inverse(z)
            log_det = ld if log_det is None else log_det + ld
        return z, _zeros_log_det(z) if log_det is None else log_det


class FlowStep(SequentialFlow):
    """One Glow step: ActNorm -> fixed mixing -> Coupling.

    Parameters
    ----------
    n_features, hidden_size, coupling
        As :class:`Coupling`'s.
    mixing : {"orthogonal", "permutation"}, default="orthogonal"
        A key of :data:`MIXING_LAYERS`.
    logscale_factor : float, default=1.0
        The ActNorm's (see :class:`ActNorm`).
    """

    def __init__(
        self,
        n_features: int,
        hidden_size: int,
        coupling: str = "additive",
        mixing: str = "orthogonal",
        logscale_factor: float = 1.0,
    ):
        if mixing not in MIXING_LAYERS:
            raise ValueError(
                f"mixing must be one of {sorted(MIXING_LAYERS)}, got {mixing!r}"
            )
        super().__init__(
            ActNorm(n_features, logscale_factor=logscale_factor),
            MIXING_LAYERS[mixing](n_features),
            Coupling(n_features, hidden_size, coupling),
        )


class Glow(nn.Module):
    """Multi-scale Glow for vectors with a standard normal prior.

    Level ``l`` applies ``depth`` :class:`FlowStep` to the ``d_l`` features it
    receives; after every level but the last, the last ``d_l // 2`` of them
    are factored out: they become part of the latent as they are and the next
    level only transforms the remaining ones. The latent is the concatenation,
    in level order, of the factored-out blocks followed by the last level's
    output, so it has the input's width. When fewer than two features remain,
    no further factoring out happens (the remaining levels still apply their
    steps).

    Parameters
    ----------
    n_features : int
        Width of the input (and of the latent).
    n_levels : int, default=2
        Number of levels.
    depth : int, default=3
        Flow steps per level.
    hidden_size : int, default=32
        Width of the coupling conditioners.
    coupling : {"additive", "affine"}, default="additive"
        Coupling type.
    mixing : {"orthogonal", "permutation"}, default="orthogonal"
        The fixed layer between each ActNorm and coupling: a random
        orthogonal matrix (:class:`OrthogonalMixing`) or BERT-flow's reverse
        permutation (:class:`ReversePermutation`).
    logscale_factor : float, default=1.0
        Of every :class:`ActNorm` (Glow's reparametrisation of the log-scale;
        BERT-flow's is 3).
    output_scale : bool, default=False
        End with an :class:`ActNorm` on the whole latent (a per-coordinate
        scale and shift, i.e. a diagonal Gaussian prior with learned
        parameters). Volume-preserving couplings and fixed mixing layers
        cannot rescale the latent after the last coupling of a level; this
        layer can.
    """

    def __init__(
        self,
        n_features: int,
        n_levels: int = 2,
        depth: int = 3,
        hidden_size: int = 32,
        coupling: str = "additive",
        mixing: str = "orthogonal",
        logscale_factor: float = 1.0,
        output_scale: bool = False,
    ):
        super().__init__()
        self.n_features = n_features
        self.output = ActNorm(n_features) if output_scale else None
        self.levels = nn.ModuleList()
        self.split_sizes: list[int] = []  # features factored out after each level
        width = n_features
        for level in range(n_levels):
            self.levels.append(
                SequentialFlow(
                    *(
                        FlowStep(width, hidden_size, coupling, mixing, logscale_factor)
                        for _ in range(depth)
                    )
                )
            )
            n_out = width // 2 if level < n_levels - 1 else 0
            self.split_sizes.append(n_out)
            width -= n_out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = None
        factored = []
        for level, n_out in zip(self.levels, self.split_sizes):
            x, ld = level(x)
            log_det = ld if log_det is None else log_det + ld
            if n_out:
                x, out = x.split([x.shape[1] - n_out, n_out], dim=1)
                factored.append(out)
        z = torch.cat([*factored, x], dim=1)
        if self.output is not None:
            z, ld = self.output(z)
            log_det = log_det + ld
        return z, log_det

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = _zeros_log_det(z)
        if self.output is not None:
            z, log_det = self.output.inverse(z)
        # peel the factored-out blocks off the front, in level order
        blocks, start = [], 0
        for n_out in self.split_sizes:
            blocks.append(z[:, start : start + n_out])
            start += n_out
        x = z[:, start:]
        for level, n_out, block in zip(
            reversed(self.levels), reversed(self.split_sizes), reversed(blocks)
        ):
            if n_out:
                x = torch.cat([x, block], dim=1)
            x, ld = level.inverse(x)
            log_det = log_det + ld
        return x, log_det

    @classmethod
    def seeded(cls, config: dict, seed: int | None) -> Glow:
        """``Glow(**config)`` seeded by ``seed``; torch's global RNG untouched."""
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.default_generator.manual_seed(seed)
            return cls(**config)

    def initialize_identity(self) -> None:
        """Set the steps' :class:`ActNorm` layers at the identity (no data needed).

        With the couplings starting at the identity and the mixing layers
        orthogonal (permutations are), the whole flow is then an orthogonal
        map, under which the standard normal prior is invariant: the density
        of the flow is exactly ``N(0, I)`` until training changes it. The
        ActNorm layers inside the couplings' conditioners are left to the
        first training pass (they shape hidden units, not the map, which
        starts at the identity whatever they are).
        """
        steps = [m for m in self.modules() if isinstance(m, FlowStep)]
        for norm in [step.layers[0] for step in steps] + [self.output]:
            if norm is not None:
                norm.initialize_identity()

    def scale_parameters(self) -> list:
        """The log-scales of the map's own :class:`ActNorm` layers.

        Those of the steps and of the output scale: with fixed mixings and
        additive couplings, the only parameters that change the flow's
        volume (the conditioners' ActNorm layers shape hidden units).
        """
        steps = [m for m in self.modules() if isinstance(m, FlowStep)]
        norms = [step.layers[0] for step in steps] + [self.output]
        return [norm.log_scale for norm in norms if norm is not None]

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Log-density of each row of ``x`` under the flow (standard normal prior)."""
        z, log_det = self(x)
        return standard_normal_log_prob(z) + log_det


#: Glow's ``logscale_factor`` inside the coupling conditioners
#: (``glow_ops.conv``'s default, which BERT-flow keeps).
CONDITIONER_LOGSCALE_FACTOR = 3.0


def learning_rate_factors(module: nn.Module) -> dict[int, float]:
    """``{id(parameter): factor}`` for the parameters that learn faster.

    Glow trains its log-scales as ``log_scale / logscale_factor``. Adam's
    step does not depend on the scale of a gradient, so training
    ``log_scale`` itself at ``logscale_factor`` times the learning rate is
    the same optimisation (with the weight decay divided by the factor, so
    the decay per step is the same too), and the forward pass is spared a
    product per layer. The factors: every :class:`ActNorm`'s own, and
    :data:`CONDITIONER_LOGSCALE_FACTOR` for the output scale of each
    :class:`CouplingNet`. Parameters not listed learn at the plain rate.
    """
    factors = {}
    for layer in module.modules():
        if isinstance(layer, ActNorm) and layer.logscale_factor != 1.0:
            factors[id(layer.log_scale)] = layer.logscale_factor
        elif isinstance(layer, CouplingNet):
            factors[id(layer.out_log_scale)] = CONDITIONER_LOGSCALE_FACTOR
    return factors


def standard_normal_log_prob(z: torch.Tensor) -> torch.Tensor:
    """Row-wise log-density of ``N(0, I)``."""
    return -0.5 * (z.pow(2).sum(1) + z.shape[1] * _LOG_2PI)


class LatentMap(nn.Module):
    """``x -> z`` of a fitted flow estimator: its fixed input map, then the flow.

    ``u = ((x - mean) / scale - whitening_mean) @ whitening`` in float64 (the
    product only when there is a whitening), cast to the dtype of ``x``; then
    ``flow`` on the first ``rank`` coordinates of ``u``, while the others
    bypass it and end the latent as they are. That is what
    :meth:`~sklearn_isotropy.GlowFlowTransformer.transform` computes, made
    of the flow's own layers, so that tracing this module (``torch.export``,
    ``torch.onnx.export``) exports the whole map with nothing specific to a
    layer; :meth:`~sklearn_isotropy.GlowFlowTransformer.transform_module`
    builds it. Not a bijector: ``forward`` returns the latent alone.

    Parameters
    ----------
    flow : torch.nn.Module
        A bijector of width ``rank`` (``flow(u) -> (z, log_det)``) whose
        parameters have the dtype of the input ``x``.
    mean, scale : torch.Tensor of shape (n_features,)
        The standardisation.
    whitening_mean : torch.Tensor of shape (n_features,), default=None
        Mean of the standardised rows subtracted before ``whitening``.
    whitening : torch.Tensor of shape (n_features, n_features), default=None
        The initial whitening matrix, or None for none.
    rank : int, default=None
        Number of leading coordinates of ``u`` the flow transforms; all of
        them when None.
    """

    def __init__(
        self,
        flow: nn.Module,
        mean: torch.Tensor,
        scale: torch.Tensor,
        whitening_mean: torch.Tensor | None = None,
        whitening: torch.Tensor | None = None,
        rank: int | None = None,
    ):
        super().__init__()
        self.flow = flow
        self.rank = int(mean.shape[0] if rank is None else rank)
        for name, value in [
            ("mean", mean),
            ("scale", scale),
            ("whitening_mean", whitening_mean),
            ("whitening", whitening),
        ]:
            if value is not None:
                value = value.to(torch.float64)
            self.register_buffer(name, value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = (x.to(torch.float64) - self.mean) / self.scale
        if self.whitening is not None:
            u = (u - self.whitening_mean) @ self.whitening
        u = u.to(x.dtype)
        z = self.flow(u[:, : self.rank])[0]
        if self.rank < u.shape[1]:
            z = torch.cat([z, u[:, self.rank :]], dim=1)
        return z
