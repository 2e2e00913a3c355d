"""A training step of an additive Glow with its backward pass written out.

:func:`~sklearn_isotropy.flow._training.train_flow` differentiates the
batch's mean negative log-likelihood. For the batches and widths a flow
trains on (tens of rows, conditioners 32 wide), autograd's part of that
(recording the graph, running it, a Python call per node and per
parameter, the splits and concatenations of the layers) costs several times
the matrix products that do the work. :class:`AdditiveStep` computes the
loss and writes every gradient straight into the parameters' gradient
tensors (the flat views of
:class:`~sklearn_isotropy.flow._training.FlatParameters`), with no graph:
about thirty operations a flow step, the products among them, the coupling
done in place.

It covers what both presets train, a :class:`~sklearn_isotropy.flow._layers.
Glow` of additive couplings (either mixing, with or without the output
ActNorm) whose ActNorm layers are all initialised; :meth:`AdditiveStep.
supports` says whether a flow is one, and training falls back to autograd
for any other. ``tests/flow/test_step.py`` checks the loss and every gradient
against autograd on the layers themselves.
"""

from __future__ import annotations

import math

import torch

from ._layers import ActNorm, CouplingNet, FlowStep, ReversePermutation

__all__ = ["AdditiveStep"]

_LOG_2PI = math.log(2 * math.pi)


class AdditiveStep:
    """``step(x, scale)``: the mean NLL of ``x`` (nats a row); gradients set.

    The gradients written are those of ``scale`` times the mean negative
    log-likelihood (``scale`` converts nats a row to the unit training
    differentiates, bits a dimension). Every trainable parameter of the flow
    gets its gradient (overwritten, not accumulated), so no zeroing is
    needed between steps; a log-scale of the map's ActNorm layers that
    requires no gradient (``train_scales=False``) gets none. The step reads
    the parameters' current values (it holds the tensors, not copies).

    Parameters
    ----------
    flow : Glow
        A flow for which :meth:`supports` is true; its parameters that
        require a gradient already have their gradient tensors (``p.grad``
        not None, e.g. views of :class:`FlatParameters`' flat gradients).
    """

    def __init__(self, flow):
        if not self.supports(flow):
            raise ValueError("AdditiveStep needs an initialised additive Glow.")
        self.split_sizes = list(flow.split_sizes)
        # exp of every log-scale, written in place into these at each step
        self._exp = {}
        for module in flow.modules():
            if isinstance(module, ActNorm):
                self._exp[id(module.log_scale)] = torch.empty_like(module.log_scale)
            elif isinstance(module, CouplingNet):
                p = module.out_log_scale
                self._exp[id(p)] = torch.empty_like(p)
        self._exp_pairs = [
            (p, self._exp[id(p)]) for p in flow.parameters() if id(p) in self._exp
        ]
        # per level, per step: the tensors forward and backward read, and the
        # gradients they write (module attribute lookups are slow)
        self.levels = []
        log_scales, mix_log_det = [], 0.0
        for level in flow.levels:
            steps = []
            for step in level.layers:
                norm, mixing, coupling = step.layers
                if isinstance(mixing, ReversePermutation):
                    reverse = torch.arange(mixing.perm.numel() - 1, -1, -1)
                    if not torch.equal(mixing.perm.cpu(), reverse):
                        raise ValueError("ReversePermutation is not the reverse.")
                    mix = None  # a flip (faster than its index)
                else:
                    mix = mixing.weight
                    mix_log_det += float(mixing.log_abs_det)
                net = coupling.net
                params = (
                    norm.log_scale,
                    norm.bias,
                    net.hidden.weight,
                    net.hidden_norm.log_scale,
                    net.hidden_norm.bias,
                    net.hidden2.weight,
                    net.hidden2_norm.log_scale,
                    net.hidden2_norm.bias,
                    net.out.weight,
                    net.out.bias,
                    net.out_log_scale,
                )
                ls, b, w1, ls1, b1, w2, ls2, b2, wo, bo, lso = params
                exp = self._exp
                if mix is not None:
                    mix = (mix, mix.t())
                # the weights and their transposes, as views: the training
                # updates the parameters in place
                steps.append(
                    (
                        (exp[id(ls)], b, mix, coupling.n_a, w1, exp[id(ls1)], b1),
                        (w2, exp[id(ls2)], b2, wo, bo, exp[id(lso)]),
                        (w1.t(), w2.t(), wo.t()),
                        tuple(p.grad for p in params),
                    )
                )
                log_scales.append(norm.log_scale)
            self.levels.append(steps)
        self.output = None
        if flow.output is not None:
            out = flow.output
            self.output = (
                self._exp[id(out.log_scale)],
                out.bias,
                out.log_scale.grad,
                out.bias.grad,
            )
            log_scales.append(out.log_scale)
        # the log-determinant: the sums of the flow's own ActNorm log-scales
        # (the conditioners' are not part of the map's Jacobian) and the
        # mixing's constant
        self._log_scales = log_scales
        self._scale = None  # the gradients' scale, as a tensor
        self._constant = 0.5 * flow.n_features * _LOG_2PI - mix_log_det

    @staticmethod
    def supports(flow) -> bool:
        """Whether ``flow`` is a Glow this step computes (else: autograd)."""
        steps = [m for m in flow.modules() if isinstance(m, FlowStep)]
        if not steps or not hasattr(flow, "split_sizes"):
            return False
        norms = [m for m in flow.modules() if isinstance(m, ActNorm)]
        return all(
            step.layers[2].coupling == "additive" and step.layers[2].net is not None
            for step in steps
        ) and all(norm._known_initialized for norm in norms)

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        n = x.shape[0]
        if self._scale is None or float(self._scale) != scale:
            self._scale = torch.tensor(scale, dtype=x.dtype, device=x.device)
        scale_t = self._scale
        for p, e in self._exp_pairs:
            torch.exp(p, out=e)

        # ------------------------------------------------------- forward
        saved, pieces = [], []
        for steps, n_out in zip(self.levels, self.split_sizes):
            level_saved = []
            for first, second, (w1_t, w2_t, wo_t), _ in steps:
                s, b, mix, n_a, _, s1, b1 = first
                _, s2, b2, _, bo, so = second
                y = torch.addcmul(b, x, s)
                m = y.flip(1) if mix is None else torch.mm(y, mix[1])
                m_a = m[:, :n_a]
                h1 = torch.mm(m_a, w1_t)
                r1 = torch.addcmul(b1, h1, s1).relu_()
                h2 = torch.mm(r1, w2_t)
                r2 = torch.addcmul(b2, h2, s2).relu_()
                o = torch.addmm(bo, r2, wo_t)
                m[:, n_a:].addcmul_(o, so)  # z = (m_a, m_b + t): m itself
                level_saved.append((x, m_a, h1, r1, h2, r2, o))
                x = m
            saved.append(level_saved)
            if n_out:
                pieces.append(x[:, x.shape[1] - n_out :])
                x = x[:, : x.shape[1] - n_out]
        pieces.append(x)
        z = latent = torch.cat(pieces, dim=1)
        if self.output is not None:
            s_out, b_out, g_ls_out, g_b_out = self.output
            z = torch.addcmul(b_out, latent, s_out)
        log_det = sum(p.sum() for p in self._log_scales)
        nll = 0.5 * torch.dot(z.view(-1), z.view(-1)) / n - log_det + self._constant

        # ------------------------------------------------------ backward
        g = z * (scale / n)
        if self.output is not None:
            torch.sum(g, 0, out=g_b_out)
            g.mul_(s_out)
            if g_ls_out is not None:  # None: a scale not trained
                torch.sum(g * latent, 0, out=g_ls_out)
                g_ls_out.sub_(scale_t)
        last = g.shape[1] - sum(self.split_sizes)
        blocks = g.split([*self.split_sizes[:-1], last], 1)
        g = blocks[-1]
        for level in range(len(self.levels) - 1, -1, -1):
            if level < len(self.levels) - 1:
                g = torch.cat([g, blocks[level]], dim=1)
            for step, values in zip(
                reversed(self.levels[level]), reversed(saved[level])
            ):
                g = _step_backward(g, *step, *values, scale_t)
        return nll


def _step_backward(g, first, second, _, grads, x, m_a, h1, r1, h2, r2, o, scale):
    """The gradient of a flow step's input; its parameters' gradients written.

    ``g``, the gradient of the step's output, is the caller's and is
    overwritten.
    """
    s, _, mix, n_a, w1, s1, _ = first
    w2, s2, _, wo, _, so = second
    g_ls, g_b, g_w1, g_ls1, g_b1, g_w2, g_ls2, g_b2, g_wo, g_bo, g_lso = grads
    threshold_backward = torch.ops.aten.threshold_backward
    g_o = g[:, n_a:] * so
    torch.sum(g_o * o, 0, out=g_lso)
    torch.mm(g_o.t(), r2, out=g_wo)
    torch.sum(g_o, 0, out=g_bo)
    g_h2 = threshold_backward(torch.mm(g_o, wo), r2, 0)
    torch.sum(g_h2, 0, out=g_b2)
    g_h2.mul_(s2)
    torch.sum(g_h2 * h2, 0, out=g_ls2)
    torch.mm(g_h2.t(), r1, out=g_w2)
    g_h1 = threshold_backward(torch.mm(g_h2, w2), r1, 0)
    torch.sum(g_h1, 0, out=g_b1)
    g_h1.mul_(s1)
    torch.sum(g_h1 * h1, 0, out=g_ls1)
    torch.mm(g_h1.t(), m_a, out=g_w1)
    g[:, :n_a].addmm_(g_h1, w1)  # through the conditioner to its input
    # the reverse permutation is its own inverse
    g_y = g.flip(1) if mix is None else torch.mm(g, mix[0])
    torch.sum(g_y, 0, out=g_b)
    g_y.mul_(s)
    if g_ls is not None:  # None: a scale not trained
        torch.sum(g_y * x, 0, out=g_ls)
        g_ls.sub_(scale)  # the log-determinant's part (a 0-d tensor)
    return g_y
