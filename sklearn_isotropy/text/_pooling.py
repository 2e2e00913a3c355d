"""Pooling presets (the registry) and the pooling of one batch of hidden states.

A preset names the Hugging Face ``hidden_states`` a pooling averages over the
tokens, or a reader of one vector (``"cls"``, ``"pooler"``). The registry
:data:`POOLING_PRESETS` is the one place presets are defined: the
vectorizer's ``pooling`` parameter, the command line's ``--pooling`` choices
and the documentation all read it, so :func:`register_pooling` adds a preset
everywhere at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ._taps import forward_all, forward_taps

logger = logging.getLogger(__name__)

__all__ = ["POOLING_PRESETS", "PoolingPreset", "register_pooling"]

_READERS = ("mean", "cls", "pooler")


@dataclass(frozen=True)
class PoolingPreset:
    """How a pooling preset turns token vectors into one vector.

    Parameters
    ----------
    name : str
        The value of ``BertPoolingVectorizer(pooling=...)``.
    layers : tuple of int or None
        Hugging Face ``hidden_states`` indices averaged before the masked
        token mean (``0`` = embedding output, ``-1`` = last block); None for
        the readers of a single vector.
    reader : {"mean", "cls", "pooler"}
        ``"mean"``: masked mean over tokens of the averaged ``layers``;
        ``"cls"``: the last layer's first token; ``"pooler"``: the model's
        ``pooler_output``.
    description : str
        One line for ``--help`` and the documentation.
    """

    name: str
    layers: tuple[int, ...] | None
    reader: str
    description: str


#: Every pooling preset, by name, in the order they are listed to users.
POOLING_PRESETS: dict[str, PoolingPreset] = {}


def register_pooling(
    name: str,
    *,
    layers: Sequence[int] | None = None,
    reader: str = "mean",
    description: str = "",
) -> PoolingPreset:
    """Add a pooling preset to :data:`POOLING_PRESETS` (and so everywhere).

    Parameters
    ----------
    name : str
        The new ``pooling=`` value; must not be taken.
    layers : tuple of int, default=None
        Hugging Face ``hidden_states`` indices averaged (``reader="mean"``
        only, where it is required).
    reader : {"mean", "cls", "pooler"}, default="mean"
        See :class:`PoolingPreset`.
    description : str, default=""
        One line for ``--help`` and the documentation.

    Returns
    -------
    preset : PoolingPreset
        The registered preset.

    Examples
    --------
    >>> from sklearn_isotropy.text import POOLING_PRESETS, register_pooling
    >>> preset = register_pooling("emb_last_avg", layers=(0, -1),
    ...                           description="embedding layer and last block")
    >>> "emb_last_avg" in POOLING_PRESETS
    True
    >>> del POOLING_PRESETS["emb_last_avg"]  # keep the registry as it was
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"A pooling name must be a non-empty str; got {name!r}.")
    if name in POOLING_PRESETS:
        raise ValueError(f"The pooling {name!r} is already registered; pick another.")
    if reader not in _READERS:
        raise ValueError(f"reader must be one of {_READERS}; got {reader!r}.")
    if reader == "mean":
        if not layers or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in layers
        ):
            raise ValueError(
                f"A mean pooling preset needs a non-empty tuple of int layers; "
                f"got layers={layers!r}."
            )
        layers = tuple(layers)
    elif layers is not None:
        raise ValueError(f"reader={reader!r} reads one vector; pass layers=None.")
    preset = PoolingPreset(name, layers, reader, description)
    POOLING_PRESETS[name] = preset
    return preset


register_pooling(
    "mean", layers=(-1,), description="token mean of the last block (SBERT)"
)
register_pooling(
    "cls", reader="cls", description="first token of the last block, no pooler"
)
register_pooling(
    "first_last_avg",
    layers=(1, -1),
    description="token mean of block 1 and the last block (BERT-flow's code)",
)
register_pooling(
    "last2_avg", layers=(-2, -1), description="token mean of the last two blocks"
)
register_pooling(
    "embeddings_avg",
    layers=(0,),
    description="token mean of the embedding layer (static-vector regime)",
)
register_pooling("pooler", reader="pooler", description="the model's pooler_output")


def pooled_batch(loaded, inputs, mask, reader, indices, n_layers):
    """Pool one batch with a preset's ``reader``.

    ``indices`` are the non-negative Hugging Face layer indices averaged by a
    ``"mean"`` reader.
    """
    model = loaded.model
    if reader == "pooler":
        return model(**inputs).pooler_output
    if reader == "cls":
        return model(**inputs).last_hidden_state[:, 0]
    if indices == (n_layers,):
        hidden = model(**inputs).last_hidden_state
    else:
        states = None
        if loaded.taps_ok:
            states = forward_taps(loaded, inputs, indices, n_layers)
            if states is None:  # a block's input is not a hidden-state tensor
                loaded.taps_ok = False
                logger.info(
                    "Reading hidden states through output_hidden_states for %s",
                    type(model).__name__,
                )
        if states is None:
            states = forward_all(loaded, inputs, indices)
        hidden = states[indices[0]]
        for i in indices[1:]:
            hidden = hidden + states[i]
        if len(indices) > 1:
            hidden = hidden / len(indices)
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    return summed / counts
