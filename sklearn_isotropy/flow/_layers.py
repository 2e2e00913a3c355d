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
does: :class:`ActNorm`, :class:`InvertibleLinear` (LU form),
:class:`Coupling` (additive or affine), :class:`FlowStep` (the three in
turn), :class:`Glow` (levels of steps, half the features factored out after
each level but the last) and :class:`LatentMap` (an estimator's whole
``x -> z``, one module to trace for export). This module imports torch at
import time; the scikit-learn wrapper imports it only when it needs it.

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
    "FlowStep",
    "Glow",
    "InvertibleLinear",
    "LatentMap",
    "ResidualMLP",
    "SequentialFlow",
]

_LOG_2PI = math.log(2 * math.pi)


def _zeros_log_det(x: torch.Tensor) -> torch.Tensor:
    return x.new_zeros(x.shape[0])


def _is_traced() -> bool:
    """Whether ``torch.export`` (or ``torch.compile``) is tracing this call.

    ``torch.compiler.is_compiling`` exists from torch 2.3; nothing traces the
    layers on older releases.
    """
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling is not None and is_compiling())


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
    small steps on the shift into huge outputs.

    Parameters
    ----------
    n_features : int
        Width of the input.
    eps : float, default=1e-6
        Added to the batch standard deviation at initialisation, so constant
        features get a large but finite scale instead of a division by zero.
    """

    def __init__(self, n_features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.bias = nn.Parameter(torch.zeros(n_features))
        self.log_scale = nn.Parameter(torch.zeros(n_features))
        self.register_buffer("initialized", torch.tensor(False))

    @torch.no_grad()
    def initialize(self, x: torch.Tensor) -> None:
        """Set ``bias``/``log_scale`` from the batch ``x``; mark as initialised."""
        mean = x.mean(0)
        std = x.std(0, correction=0)
        self.log_scale.copy_(-torch.log(std + self.eps))
        self.bias.copy_(-mean * torch.exp(self.log_scale))
        self.initialized.fill_(True)

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

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.training and not bool(self.initialized):
            self.initialize(x)
        z = x * torch.exp(self.log_scale) + self.bias
        return z, self.log_scale.sum().expand(x.shape[0])

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = (z - self.bias) * torch.exp(-self.log_scale)
        return x, (-self.log_scale.sum()).expand(z.shape[0])


class InvertibleLinear(nn.Module):
    """Invertible dense layer ``z = W x`` parametrised by its LU decomposition.

    ``W = P L (U + diag(sign_s * exp(log_s)))`` with ``P`` a fixed permutation,
    ``L`` unit lower-triangular and ``U`` strictly upper-triangular (both
    learned), and a learned log-magnitude of the diagonal with a fixed sign.
    ``log|det W| = sum(log_s)`` costs O(d); the inverse uses two triangular
    solves. Initialised at a random orthogonal matrix drawn from torch's
    current random state.

    Parameters
    ----------
    n_features : int
        Width of the input.
    """

    def __init__(self, n_features: int):
        super().__init__()
        q, _ = torch.linalg.qr(torch.randn(n_features, n_features, dtype=torch.float64))
        p, lower, upper = torch.linalg.lu(q)
        diag = torch.diagonal(upper)
        # q = p @ lower @ upper, p[i, perm[i]] = 1, so (p @ y)[i] = y[perm[i]]
        self.register_buffer("perm", p.argmax(dim=1))
        self.register_buffer("inv_perm", torch.argsort(p.argmax(dim=1)))
        self.register_buffer("sign_s", torch.sign(diag).float())
        self.register_buffer(
            "lower_mask", torch.tril(torch.ones(n_features, n_features), -1)
        )
        self.lower = nn.Parameter(torch.tril(lower, -1).float())
        self.upper = nn.Parameter(torch.triu(upper, 1).float())
        self.log_s = nn.Parameter(torch.log(torch.abs(diag)).float())

    def _factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        eye = torch.eye(
            self.lower.shape[0], dtype=self.lower.dtype, device=self.lower.device
        )
        mask = self.lower_mask.to(self.lower.dtype)
        lower = self.lower * mask + eye
        upper = self.upper * mask.T + torch.diag(
            self.sign_s.to(self.log_s.dtype) * torch.exp(self.log_s)
        )
        return lower, upper

    def weight(self) -> torch.Tensor:
        """The dense matrix ``W`` (for inspection and tests)."""
        lower, upper = self._factors()
        return (lower @ upper)[self.perm]

    def _frozen_weight_t(self) -> torch.Tensor | None:
        """``W^T`` when no parameter of the layer is trained, else None.

        A fixed mixing layer (as behind a whitening) then costs one matrix
        product per pass instead of two products, a permutation and the
        rebuilding of its factors. The cached matrix is recomputed whenever a
        parameter is replaced or changed in place (``load_state_dict``,
        ``.double()``), which the key of tensor identities and versions sees.
        While the layer is traced (``torch.export``), ``W^T`` is computed
        from the parameters without the cache: an exporter folds that
        computation into one constant, and the module keeps no traced tensor.
        """
        params = (self.lower, self.upper, self.log_s)
        if any(p.requires_grad for p in params):
            return None
        if _is_traced():
            return self.weight().T
        key = tuple((id(p), p._version, p.dtype, p.device) for p in params)
        cached = getattr(self, "_weight_t_cache", None)
        if cached is None or cached[0] != key:
            with torch.no_grad():
                cached = (key, self.weight().T.contiguous())
            self._weight_t_cache = cached
        return cached[1]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weight_t = self._frozen_weight_t()
        if weight_t is not None:
            return x @ weight_t, self.log_s.sum().expand(x.shape[0])
        lower, upper = self._factors()
        # row vectors: z = x @ W^T = x @ U^T @ L^T @ P^T,
        # and (y @ P^T)[:, i] = y[:, perm[i]]
        z = (x @ upper.T @ lower.T)[:, self.perm]
        return z, self.log_s.sum().expand(x.shape[0])

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lower, upper = self._factors()
        y = z[:, self.inv_perm]
        w = torch.linalg.solve_triangular(
            lower.T, y, upper=True, left=False, unitriangular=True
        )
        x = torch.linalg.solve_triangular(upper.T, w, upper=False, left=False)
        return x, (-self.log_s.sum()).expand(z.shape[0])


class ResidualMLP(nn.Module):
    """Small residual MLP, the coupling conditioner.

    ``Linear(in, hidden) -> n_blocks x [h + Linear(ReLU(Linear(ReLU(h))))] ->
    ReLU -> Linear(hidden, out)``. The output layer starts at zero, so every
    coupling layer starts as the identity (as in Glow).

    Parameters
    ----------
    in_features, out_features, hidden_size : int
        Widths.
    n_blocks : int, default=1
        Number of residual blocks.
    """

    def __init__(
        self, in_features: int, out_features: int, hidden_size: int, n_blocks: int = 1
    ):
        super().__init__()
        self.inp = nn.Linear(in_features, hidden_size)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.ReLU(),
                nn.Linear(hidden_size, hidden_size),
                nn.ReLU(),
                nn.Linear(hidden_size, hidden_size),
            )
            for _ in range(n_blocks)
        )
        self.out = nn.Sequential(nn.ReLU(), nn.Linear(hidden_size, out_features))
        nn.init.zeros_(self.out[1].weight)
        nn.init.zeros_(self.out[1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


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
            self.net = ResidualMLP(self.n_a, n_out, hidden_size)

    def _shift_log_scale(self, x_a: torch.Tensor):
        h = self.net(x_a)
        if self.coupling == "additive":
            return h, None
        shift, raw = h.chunk(2, dim=1)
        return shift, torch.tanh(raw)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.net is None:
            return x, _zeros_log_det(x)
        x_a, x_b = x[:, : self.n_a], x[:, self.n_a :]
        shift, log_scale = self._shift_log_scale(x_a)
        if log_scale is None:
            return torch.cat([x_a, x_b + shift], dim=1), _zeros_log_det(x)
        z_b = x_b * torch.exp(log_scale) + shift
        return torch.cat([x_a, z_b], dim=1), log_scale.sum(1)

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.net is None:
            return z, _zeros_log_det(z)
        z_a, z_b = z[:, : self.n_a], z[:, self.n_a :]
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
        log_det = _zeros_log_det(x)
        for layer in self.layers:
            x, ld = layer(x)
            log_det = log_det + ld
        return x, log_det

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = _zeros_log_det(z)
        for layer in reversed(self.layers):
            z, ld = layer.inverse(z)
            log_det = log_det + ld
        return z, log_det


class FlowStep(SequentialFlow):
    """One Glow step: ActNorm -> InvertibleLinear -> Coupling."""

    def __init__(self, n_features: int, hidden_size: int, coupling: str = "additive"):
        super().__init__(
            ActNorm(n_features),
            InvertibleLinear(n_features),
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
                    *(FlowStep(width, hidden_size, coupling) for _ in range(depth))
                )
            )
            n_out = width // 2 if level < n_levels - 1 else 0
            self.split_sizes.append(n_out)
            width -= n_out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = _zeros_log_det(x)
        factored = []
        for level, n_out in zip(self.levels, self.split_sizes):
            x, ld = level(x)
            log_det = log_det + ld
            if n_out:
                factored.append(x[:, -n_out:])
                x = x[:, :-n_out]
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

    def fix_mixing(self) -> None:
        """Freeze the :class:`InvertibleLinear` layers (``init="whitening"``).

        After a whitening, their gradients are sampling noise, which Adam
        turns into steps of the size of the learning rate on every one of
        their ``d**2`` entries (the ablation in ``benchmarks/README.md``);
        they stay at their random orthogonal start, like the fixed
        permutations of RealNVP. Frozen, each runs as one cached matrix
        product (about 40% of the time of a training step on 384 features).
        """
        for module in self.modules():
            if isinstance(module, InvertibleLinear):
                module.requires_grad_(False)

    def initialize_identity(self) -> None:
        """Initialise every :class:`ActNorm` at the identity (no data needed).

        With the couplings starting at the identity and the invertible linear
        layers at orthogonal matrices, the whole flow is then an orthogonal
        map, under which the standard normal prior is invariant: the density
        of the flow is exactly ``N(0, I)`` until training changes it.
        """
        for module in self.modules():
            if isinstance(module, ActNorm):
                module.initialize_identity()

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Log-density of each row of ``x`` under the flow (standard normal prior)."""
        z, log_det = self(x)
        return standard_normal_log_prob(z) + log_det


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
