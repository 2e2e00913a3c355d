"""The token table of :class:`~sklearn_isotropy.StaticEmbeddingVectorizer`.

A table is one float32 row per token id of a fast tokenizer. It is either
distilled from a Hugging Face encoder (every vocabulary token run alone
through the model, in batches; :func:`distill`) or read from a folder that
already holds one: a model2vec model (``model.safetensors`` with an
``embeddings`` tensor, ``tokenizer.json``) or a sentence-transformers
``StaticEmbedding`` module (``model.safetensors`` with ``embedding.weight``,
``tokenizer.json``), alone or as the first module of a sentence-transformers
model folder (``modules.json``). Distilled tables are cached on disk
(``_table_cache.py``), keyed by the encoder's fingerprint. A folder written
by this package's exporters says so in its configuration
(:func:`read_export_record`): its rows carry their token weights already.

The modules a sentence-transformers model runs after its ``StaticEmbedding``
are folded into the table where that is exact (:func:`fold_modules`), and
refused by name where it is not: a model is never read as less than it
computes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..._utils import EXPORT_RECORD_KEY, import_optional, progress_bar
from .. import _loading
from .._base import is_model_name
from ._table_cache import cached_table

logger = logging.getLogger(__name__)

#: How the outputs of a token run alone through the encoder become its row:
#: ``"mean"``, the mean over every position (the special tokens around it
#: included), which is the encoder's mean-pooled embedding of the one-token
#: text; ``"token"``, the output at the token's own position.
DISTILL_POOLINGS = ("mean", "token")

#: Version of the distilled tables (input layout, pooling); part of the key
#: of the cache, so a change is distilled anew.
DISTILL_VERSION = 1

_PURPOSE = "StaticEmbeddingVectorizer"
_ST_KEY, _M2V_KEY = "embedding.weight", "embeddings"
#: The features a sentence-transformers module must read and write to act on
#: the sentence embedding (their default).
_SENTENCE = "sentence_embedding"


@dataclass
class TokenTable:
    """A token table and the tokenizer whose ids index its rows."""

    embeddings: np.ndarray  # (n_tokens, dim) float32
    tokenizer: object  # tokenizers.Tokenizer, without padding or truncation
    kind: str  # "distilled", "model2vec" or "sentence-transformers"
    source: str  # where it came from, for messages and model cards
    #: what sklearn-isotropy's exporter recorded in a folder it wrote (whose
    #: rows carry their token weights already, see :func:`read_export_record`);
    #: None for any other table
    exported: dict | None = None


def plain_tokenizer(tokenizer):
    """A copy of a fast tokenizer as a ``tokenizers.Tokenizer``.

    Without the padding or truncation it may carry (a static table has no
    length limit).
    """
    tokenizers = import_optional("tokenizers", purpose=_PURPOSE, extra="text")
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not isinstance(backend, tokenizers.Tokenizer):
        raise TypeError(
            f"{_PURPOSE} needs a fast (Rust-backed) tokenizer, as model2vec and "
            f"sentence-transformers' StaticEmbedding do; got "
            f"{type(tokenizer).__name__}. Load the model's tokenizer with "
            "AutoTokenizer.from_pretrained(..., use_fast=True)."
        )
    copy = tokenizers.Tokenizer.from_str(backend.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


def vocabulary_size(tokenizer):
    """One more than the largest token id of a ``tokenizers.Tokenizer``."""
    return max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1


# ------------------------------------------------------------ static folders
def _modules_folder(path):
    """The folder of a model folder's first module, if it is a StaticEmbedding.

    For a sentence-transformers model folder whose first module is a
    ``StaticEmbedding``; else None.
    """
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        first = modules[0]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    if not str(first.get("type", "")).endswith("StaticEmbedding"):
        return None
    return path / str(first.get("path", ""))


def _tensor_names(file):
    """The tensor names of a safetensors file; None if it cannot be read."""
    safetensors = import_optional("safetensors", purpose=_PURPOSE, extra="text")
    try:
        with safetensors.safe_open(str(file), framework="numpy") as handle:
            return set(handle.keys())
    except Exception:  # noqa: BLE001 - any failure: not a readable file
        return None


def _static_problems(path):
    """What keeps ``path`` from being a static model folder.

    Phrases for a message; none when it is one.
    """
    problems = []
    weights = path / "model.safetensors"
    if not weights.is_file():
        problems.append("it has no model.safetensors")
    else:
        names = _tensor_names(weights)
        if names is None:
            problems.append(f"{weights} is not a readable safetensors file")
        elif not names & {_ST_KEY, _M2V_KEY}:
            problems.append(
                f"{weights} has no {_M2V_KEY!r} (model2vec) or {_ST_KEY!r} "
                f"(StaticEmbedding) tensor, only {sorted(names)[:5]!r}"
            )
    if not (path / "tokenizer.json").is_file():
        problems.append("it has no tokenizer.json")
    return problems


def _looks_static(path):
    """Whether ``path`` was meant as a static model.

    So it was with model2vec's config, a static tensor, or a model file
    without the config.json that every Hugging Face encoder has.
    """
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and config.get("model_type") == "model2vec":
        return True
    names = _tensor_names(path / "model.safetensors") or set()
    if names & {_ST_KEY, _M2V_KEY}:
        return True
    files = ("model.safetensors", "tokenizer.json")
    return config is None and any((path / f).is_file() for f in files)


def static_folder(model):
    """The folder holding a static table named by ``model``, or None.

    A folder qualifies when it holds ``tokenizer.json`` and a
    ``model.safetensors`` with an ``embeddings`` (model2vec) or
    ``embedding.weight`` (``StaticEmbedding``) tensor, or is a
    sentence-transformers model whose first module is a ``StaticEmbedding``.
    A folder that looks like a static model but lacks one of these (see
    :func:`_looks_static`) is a ValueError saying what is missing, not a
    Hugging Face encoder to try.
    """
    if model is None or not isinstance(model, (str, os.PathLike)):
        return None
    path = Path(os.fspath(model)).expanduser()
    if not path.is_dir():
        return None
    meant = False
    if (path / "modules.json").is_file():
        path = _modules_folder(path)
        if path is None:
            return None
        meant = True  # its first module is a StaticEmbedding
    problems = _static_problems(path)
    if not problems:
        return path
    if meant or _looks_static(path):
        encoder = (
            ""
            if meant or (path / "config.json").is_file()
            else " If it is a Hugging Face encoder instead, its config.json is missing."
        )
        raise ValueError(
            f"{str(path)!r} looks like a static (model2vec) model, but "
            f"{'; '.join(problems)}. A static model folder holds tokenizer.json "
            f"and a model.safetensors with an {_M2V_KEY!r} tensor (model2vec) or "
            f"{_ST_KEY!r} (sentence-transformers StaticEmbedding); restore the "
            f"missing or damaged files (download or save the model again).{encoder}"
        )
    return None


def _model2vec_rows(tensors, file):
    """model2vec's rows per token id.

    ``embeddings[mapping] * weights``, as sentence-transformers folds them
    (``mapping`` and ``weights`` are optional; vocabulary-quantised models have
    them).
    """
    rows = np.asarray(tensors[_M2V_KEY], dtype=np.float32)
    if rows.ndim != 2:
        raise ValueError(
            f"The tensor {_M2V_KEY!r} of {str(file)!r} has shape {rows.shape}, "
            "not (n_rows, dim); the file is damaged."
        )
    if "mapping" in tensors:
        mapping = np.asarray(tensors["mapping"])
        if mapping.dtype.kind not in "iu" or mapping.ndim != 1:
            raise ValueError(
                f"The tensor 'mapping' of {str(file)!r} must be a 1-D array of "
                f"integer row indices; got {mapping.dtype} of shape "
                f"{mapping.shape}. The file is damaged."
            )
        if mapping.size and not (0 <= mapping.min() and mapping.max() < len(rows)):
            raise ValueError(
                f"The tensor 'mapping' of {str(file)!r} holds row indices from "
                f"{mapping.min()} to {mapping.max()}, but {_M2V_KEY!r} has "
                f"{len(rows)} rows (indices 0 to {len(rows) - 1}). The file is "
                "damaged or its tensors come from different models."
            )
        rows = rows[mapping.astype(np.intp)]
    if "weights" in tensors:
        weights = np.asarray(tensors["weights"], dtype=np.float32)
        if weights.shape != (len(rows),):
            raise ValueError(
                f"The tensor 'weights' of {str(file)!r} has shape {weights.shape}, "
                f"but there are {len(rows)} token rows (one weight each). The "
                "file is damaged or its tensors come from different models."
            )
        rows = rows * weights[:, None]
    return rows


#: sentence-transformers' own configuration file of a model folder.
_ST_CONFIG = "config_sentence_transformers.json"


def read_export_record(root, folder):
    """What an exporter of sklearn-isotropy recorded in a static folder, or None.

    ``to_model2vec`` writes it into model2vec's ``config.json`` and
    ``to_sentence_transformers`` of a static pipeline into
    ``config_sentence_transformers.json``, under ``EXPORT_RECORD_KEY``
    (``"sklearn_isotropy"``). Such a folder's rows are each token's weight
    times its row: a plain mean of them is the exported pipeline's output
    times a positive number per text, so reading them back with another
    weighting weighs them twice. ``root`` is the folder the user named,
    ``folder`` the one holding the table (the same, or the first module's
    of a sentence-transformers model).
    """
    for file in (Path(root) / _ST_CONFIG, Path(folder) / "config.json"):
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        record = config.get(EXPORT_RECORD_KEY) if isinstance(config, dict) else None
        if isinstance(record, dict):
            return record
    return None


def read_static_folder(folder):
    """The :class:`TokenTable` of a folder found by :func:`static_folder`."""
    tokenizers = import_optional("tokenizers", purpose=_PURPOSE, extra="text")
    safetensors_numpy = import_optional(
        "safetensors.numpy", purpose=_PURPOSE, extra="text"
    )
    file = folder / "model.safetensors"
    try:
        tensors = safetensors_numpy.load_file(str(file))
    except Exception as exc:  # noqa: BLE001 - the library's errors vary
        raise ValueError(
            f"Cannot read the static model's tensors {str(file)!r} ({exc}); the "
            "file is damaged. Restore it (download or save the model again)."
        ) from exc
    if _ST_KEY in tensors:
        kind, rows = "sentence-transformers", tensors[_ST_KEY]
    else:
        kind, rows = "model2vec", _model2vec_rows(tensors, file)
    # float16 and int8 tables are read as float32: a common scale of the
    # rows changes no cosine
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    tokenizer_file = folder / "tokenizer.json"
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises bare Exception
        raise ValueError(
            f"Cannot read the static model's tokenizer {str(tokenizer_file)!r} "
            f"({exc}); the file is damaged or not a tokenizers JSON file. "
            "Restore it (download or save the model again)."
        ) from exc
    tokenizer = plain_tokenizer(tokenizer)
    n_tokens = vocabulary_size(tokenizer)
    if rows.ndim != 2 or rows.shape[0] < n_tokens:
        raise ValueError(
            f"The static model in {str(folder)!r} has a table of shape "
            f"{rows.shape}, but its tokenizer has {n_tokens} token ids: a table "
            "needs one row per id. The folder is damaged or its files come from "
            "different models."
        )
    if not np.all(np.isfinite(rows)):
        raise ValueError(
            f"The static model in {str(folder)!r} has non-finite values in its "
            "table; the file is damaged."
        )
    return TokenTable(rows[:n_tokens], tokenizer, kind, str(folder))


def _sentence_transformer_table(model):
    """The table of a ``SentenceTransformer`` starting with a ``StaticEmbedding``."""
    if type(model).__module__.split(".")[0] != "sentence_transformers":
        return None
    first = model[0]
    if type(first).__name__ != "StaticEmbedding":
        return None
    rows = first.embedding.weight.detach().to("cpu").float().numpy()
    tokenizer = plain_tokenizer(first.tokenizer)
    description = f"SentenceTransformer(StaticEmbedding({rows.shape[1]}))"
    return TokenTable(
        np.ascontiguousarray(rows[: vocabulary_size(tokenizer)]),
        tokenizer,
        "sentence-transformers",
        description,
    )


# ------------------------------------------- modules after the StaticEmbedding
@dataclass(frozen=True)
class LinearModule:
    """A module after a ``StaticEmbedding``: an affine map, or a Normalize.

    ``x @ weight + bias`` for a ``Dense`` with the identity activation;
    ``weight`` and ``bias`` are None for a ``Normalize``.
    """

    label: str  # for messages: "Dense (1_Dense)", "Normalize (module 2)"
    weight: np.ndarray | None  # (in_features, out_features), float64
    bias: np.ndarray | None  # (out_features,), float64


class _Unreadable(Exception):
    """Why a module after the StaticEmbedding cannot be folded (internal)."""


def _refuse(where, labels, label, reason):
    return ValueError(
        f"{where} runs {', '.join(labels)} after its StaticEmbedding. "
        "StaticEmbeddingVectorizer folds a Dense with the identity activation "
        "into its table (a text's weights sum to one, so the mean of the rows' "
        "affine images is the affine image of their mean) and leaves out a "
        "Normalize at the end (a positive scale per text, which changes no "
        f"cosine), but cannot compute {label}: {reason}. Encode with "
        "SentenceTransformer itself, or save the model without the modules "
        "after its StaticEmbedding to read its table alone."
    )


def _dense_config_problem(config):
    """Why a Dense with this config is not an affine map of the sentence embedding.

    None when it is one.
    """
    activation = config.get("activation_function")
    if activation is None:
        return "its config.json names no activation_function (Tanh, then)"
    if activation != "torch.nn.modules.linear.Identity":
        return f"its activation is {activation}, not the identity"
    if config.get("use_residual"):
        return "it adds its input back (use_residual)"
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, _SENTENCE) not in (None, _SENTENCE):
            return f"its {key} is {config[key]!r}, not {_SENTENCE!r}"
    return None


def _read_dense(folder, label):
    """The affine map of a saved ``Dense`` module."""
    safetensors_numpy = import_optional(
        "safetensors.numpy", purpose=_PURPOSE, extra="text"
    )
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _Unreadable(
            f"its {folder / 'config.json'} cannot be read ({exc})"
        ) from exc
    problem = _dense_config_problem(config)
    if problem is not None:
        raise _Unreadable(problem)
    file = folder / "model.safetensors"
    if not file.is_file():
        raise _Unreadable(
            f"it has no {file} (a pytorch_model.bin needs torch to read; save "
            "the model again, which writes safetensors)"
        )
    try:
        tensors = safetensors_numpy.load_file(str(file))
        weight = np.asarray(tensors["linear.weight"], dtype=np.float64)
        bias = tensors.get("linear.bias")
    except Exception as exc:  # noqa: BLE001 - the library's errors vary
        raise _Unreadable(f"its weights {file} cannot be read ({exc})") from exc
    bias = np.zeros(len(weight)) if bias is None else np.asarray(bias, np.float64)
    if weight.ndim != 2 or bias.shape != (len(weight),):
        raise _Unreadable(
            f"its weights {file} hold a linear.weight of shape {weight.shape} and "
            f"a linear.bias of shape {bias.shape}, not (out, in) and (out,); the "
            "file is damaged"
        )
    return LinearModule(label, weight.T, bias)


def folder_modules(model):
    """The modules after the ``StaticEmbedding`` of a model folder, in order.

    ``model`` is what :func:`static_folder` found a table in; a folder
    without ``modules.json`` (model2vec's or a bare ``StaticEmbedding``'s
    files) has none. A ValueError names a module that is not a ``Dense``
    with the identity activation or a ``Normalize``.
    """
    root = Path(os.fspath(model)).expanduser()
    try:
        entries = json.loads((root / "modules.json").read_text(encoding="utf-8"))
    except OSError:
        return []
    entries = [e if isinstance(e, dict) else {} for e in entries[1:]]
    labels = [
        f"{str(e.get('type', '')).rsplit('.', 1)[-1]} ({e.get('path', '')})"
        for e in entries
    ]
    out = []
    for entry, label in zip(entries, labels, strict=True):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
        folder = root / str(entry.get("path", ""))
        try:
            if kind == "Dense":
                out.append(_read_dense(folder, label))
            elif kind == "Normalize":
                try:  # model2vec writes none; sentence-transformers its names
                    text = (folder / "config.json").read_text(encoding="utf-8")
                    config = json.loads(text)
                except (OSError, ValueError):
                    config = {}
                if config.get("module_input_name", _SENTENCE) != _SENTENCE:
                    raise _Unreadable("it normalizes another feature than the mean")
                out.append(LinearModule(label, None, None))
            else:
                raise _Unreadable("it is not a linear map of the mean")
        except _Unreadable as exc:
            where = f"The sentence-transformers model in {str(root)!r}"
            raise _refuse(where, labels, label, exc) from None
    return out


def object_modules(model):
    """The modules after the ``StaticEmbedding`` of a ``SentenceTransformer``.

    As :func:`folder_modules` reads them from a folder.
    """
    modules = list(model)[1:]
    labels = [f"{type(m).__name__} (module {i})" for i, m in enumerate(modules, 1)]
    out = []
    for module, label in zip(modules, labels, strict=True):
        kind = type(module).__name__
        names = {
            getattr(module, "module_input_name", _SENTENCE),
            getattr(module, "module_output_name", _SENTENCE),
        }
        try:
            if names != {_SENTENCE}:
                raise _Unreadable(f"it reads or writes {sorted(names)}")
            if kind == "Dense":
                activation = type(module.activation_function)
                if activation.__name__ != "Identity":
                    raise _Unreadable(
                        f"its activation is {activation.__name__}, not the identity"
                    )
                if getattr(module, "use_residual", False):
                    raise _Unreadable("it adds its input back (use_residual)")
                linear = module.linear
                weight = linear.weight.detach().to("cpu").double().numpy()
                bias = np.zeros(len(weight))
                if linear.bias is not None:
                    bias = linear.bias.detach().to("cpu").double().numpy()
                out.append(LinearModule(label, weight.T, bias))
            elif kind == "Normalize":
                out.append(LinearModule(label, None, None))
            else:
                raise _Unreadable("it is not a linear map of the mean")
        except _Unreadable as exc:
            where = "The SentenceTransformer passed as model"
            raise _refuse(where, labels, label, exc) from None
    return out


def fold_modules(table, modules):
    """``table`` with the ``Dense`` modules after it folded into its rows.

    A text's output is the weighted mean of its rows, the weights summing to
    one, so a ``Dense`` ``x @ W + b`` after the mean equals the mean of the
    rows ``row @ W + b``: folded, each text with a token gets exactly the
    model's output (before a final ``Normalize``). A text without tokens
    stays a row of zeros, where sentence-transformers gives the modules'
    image of zeros (the bias ``b``).
    A ``Normalize`` at the end scales each text by a positive number, which
    changes no cosine: it is left out, as model2vec's ``normalize`` setting
    is. One before a ``Dense`` is not: that ``Dense`` then maps unit-length
    means, which no table gives, and the model is refused.
    """
    if not modules:
        return table
    rows = table.embeddings.astype(np.float64)
    normalize = None
    for module in modules:
        if module.weight is None:
            normalize = module
            continue
        if normalize is not None:
            raise ValueError(
                f"{table.source!r} applies {module.label} after "
                f"{normalize.label}: a Dense of unit-length means, which no "
                "table of token rows can give (only a Normalize at the end, which "
                "changes no cosine, is left out). Encode with SentenceTransformer "
                "itself."
            )
        if module.weight.shape[0] != rows.shape[1]:
            raise ValueError(
                f"{module.label} of {table.source!r} takes "
                f"{module.weight.shape[0]} features, but the embeddings before it "
                f"have {rows.shape[1]}; the model is damaged or its modules come "
                "from different models."
            )
        rows = rows @ module.weight + module.bias
    if not np.all(np.isfinite(rows)):
        raise ValueError(
            f"Folding the modules after the StaticEmbedding of {table.source!r} "
            "into its table gives non-finite values; the model is damaged."
        )
    logger.info(
        "Folded %s into the table of %s",
        ", ".join(m.label for m in modules if m.weight is not None) or "nothing",
        table.source,
    )
    embeddings = np.ascontiguousarray(rows, dtype=np.float32)
    return replace(table, embeddings=embeddings)


# -------------------------------------------------------------- distilling
def _template(tokenizer):
    """``(prefix, suffix)``: the special-token ids around a one-token text.

    Those the tokenizer adds: ``[CLS]`` and ``[SEP]`` for BERT.
    """
    encoding = tokenizer.encode("a", add_special_tokens=True)
    inner = [i for i, special in enumerate(encoding.special_tokens_mask) if not special]
    if not inner:
        raise ValueError(
            "The tokenizer turns the text 'a' into special tokens only; cannot "
            "find where a token goes between its special tokens."
        )
    ids = encoding.ids
    return ids[: inner[0]], ids[inner[-1] + 1 :]


def distill(loaded, pooling, batch_size, *, verbose=0):
    """Run each vocabulary token alone through the encoder.

    Returns the ``(n_tokens, hidden_size)`` float32 table of
    :data:`DISTILL_POOLINGS` ``pooling``.

    Each token id ``t`` becomes the input ``prefix + [t] + suffix`` (``[CLS] t
    [SEP]`` for BERT, token type 0): inputs of one length, so batches have no
    padding.
    """
    torch, _ = _loading.import_text_deps()
    tokenizer = plain_tokenizer(loaded.tokenizer)
    prefix, suffix = _template(tokenizer)
    n_tokens = vocabulary_size(tokenizer)
    model = loaded.model
    n_rows = model.get_input_embeddings().num_embeddings
    if n_tokens > n_rows:
        raise ValueError(
            f"The tokenizer has token ids up to {n_tokens - 1}, but the model "
            f"embeds only {n_rows} ids; the tokenizer and the model do not match."
        )
    width = len(prefix) + 1 + len(suffix)
    inputs = np.empty((n_tokens, width), dtype=np.int64)
    inputs[:, : len(prefix)] = prefix
    inputs[:, len(prefix)] = np.arange(n_tokens)
    inputs[:, len(prefix) + 1 :] = suffix
    needs_types = "token_type_ids" in getattr(loaded.tokenizer, "model_input_names", ())
    device = next(model.parameters()).device
    out = np.empty((n_tokens, model.config.hidden_size), dtype=np.float32)
    start = time.perf_counter()
    bar = progress_bar(
        total=n_tokens, desc="Distilling", unit="token", enabled=bool(verbose)
    )
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), bar:
            for begin in range(0, n_tokens, batch_size):
                ids = torch.from_numpy(inputs[begin : begin + batch_size]).to(device)
                feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
                if needs_types:
                    feed["token_type_ids"] = torch.zeros_like(ids)
                output = model(**feed)
                hidden = getattr(output, "last_hidden_state", None)
                hidden = output[0] if hidden is None else hidden
                rows = (
                    hidden.mean(dim=1) if pooling == "mean" else hidden[:, len(prefix)]
                )
                out[begin : begin + len(ids)] = rows.float().cpu().numpy()
                bar.update(len(ids))
    finally:
        if was_training:
            model.train()
    logger.info(
        "Distilled %d tokens of %s in %.1f s",
        n_tokens,
        loaded.source,
        time.perf_counter() - start,
    )
    return out, tokenizer


def load_table(model, pooling, batch_size, device, *, verbose=0):
    """The :class:`TokenTable` of ``model``.

    Read from a static model, or distilled from an encoder (read from the cache
    when distilled before).
    """
    folder = static_folder(model)
    if folder is not None:
        modules = folder_modules(model)  # refused before the table is read
        table = fold_modules(read_static_folder(folder), modules)
        root = Path(os.fspath(model)).expanduser()
        return replace(table, exported=read_export_record(root, folder))
    if not is_model_name(model):
        table = _sentence_transformer_table(model)
        if table is not None:
            return fold_modules(table, object_modules(model))
    loaded = _loading.load_encoder(model, device)
    tokenizer = plain_tokenizer(loaded.tokenizer)  # fail before the work
    spec = {
        "model": loaded.fingerprint(),
        "pooling": pooling,
        "version": DISTILL_VERSION,
    }

    def compute():
        return distill(loaded, pooling, batch_size, verbose=verbose)[0]

    shape = (vocabulary_size(tokenizer), loaded.model.config.hidden_size)
    rows = cached_table(spec, shape, compute)
    return TokenTable(rows, tokenizer, "distilled", loaded.source)
