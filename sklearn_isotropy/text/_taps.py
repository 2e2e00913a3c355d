"""Reading intermediate hidden states without keeping (or computing) the rest.

A forward pre-hook on every transformer block (a "tap") captures the block's
input, which is Hugging Face's ``hidden_states[index]``, and stops the
forward pass once the deepest state a pooling needs is captured. Taps are
inert unless the calling thread asked for them, so they are safe on models
shared between estimators and threads, and they pickle.
"""

from __future__ import annotations

import threading

_TAP_STATE = threading.local()


class _StopForward(Exception):
    """Raised by a tap once the deepest needed hidden state is captured."""


class _LayerTap:
    """Forward pre-hook on transformer block ``index``.

    Its input is ``hidden_states[index]``. Inert unless the calling thread
    asked for it, so it is safe on models shared between estimators and
    threads; picklable.
    """

    def __init__(self, index):
        self.index = index

    def __call__(self, module, args, kwargs):
        request = getattr(_TAP_STATE, "request", None)
        if request is None:
            return None
        layers = request["layers"]
        if self.index >= len(layers) or layers[self.index] is not module:
            return None
        if self.index in request["wanted"]:
            hidden = args[0] if args else kwargs.get("hidden_states")
            if getattr(hidden, "ndim", None) != 3:
                request["bad"] = True
                raise _StopForward
            request["captured"][self.index] = hidden
        if self.index == request["stop_at"]:
            raise _StopForward
        return None


def find_layer_list(model):
    """The ``nn.ModuleList`` of transformer blocks, or None if not found."""
    import torch

    n_layers = getattr(model.config, "num_hidden_layers", None)
    if not isinstance(n_layers, int):
        return None
    for _, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return module
    return None


def install_taps(layer_list):
    for i, block in enumerate(layer_list):
        if not any(isinstance(h, _LayerTap) for h in block._forward_pre_hooks.values()):
            block.register_forward_pre_hook(_LayerTap(i), with_kwargs=True)


def forward_taps(loaded, inputs, indices, n_layers):
    """Return ``{index: hidden_state}`` for non-negative ``indices``.

    Only the blocks up to the deepest index run (the whole model if it includes
    the last); None if a block's input does not look like hidden states.
    """
    layers = loaded.layer_list
    wanted = {i for i in indices if i < n_layers}
    need_last = n_layers in indices
    request = {
        "layers": layers,
        "wanted": wanted,
        "captured": {},
        "stop_at": None if need_last else max(indices),
        "bad": False,
    }
    _TAP_STATE.request = request
    try:
        try:
            out = loaded.model(**inputs)
        except _StopForward:
            out = None
    finally:
        _TAP_STATE.request = None
    if request["bad"]:
        return None
    states = dict(request["captured"])
    if need_last:
        states[n_layers] = out.last_hidden_state
    return states


def forward_all(loaded, inputs, indices):
    out = loaded.model(**inputs, output_hidden_states=True)
    return {i: out.hidden_states[i] for i in indices}
