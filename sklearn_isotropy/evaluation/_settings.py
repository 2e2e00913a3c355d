"""The options every evaluation task shares, and how a task declares its own.

:class:`EvaluationSettings` holds the options every task reads, in three
fields: how texts become embeddings (:class:`EncodingSettings`, a group of
its own), how the post-processing methods are built
(:class:`MethodSettings`, another group), and the seed. Each task's
settings class adds the fields only it reads, in the task's own module
(:class:`~sklearn_isotropy.evaluation.STSSettings` in ``_sts.py``,
:class:`~sklearn_isotropy.evaluation.RetrievalSettings` in
``_retrieval.py``,
:class:`~sklearn_isotropy.evaluation.ClassificationSettings` in
``_classification.py``), and the task names it (``Task.settings_class``).

A field is declared once, with :func:`option`: its default, and for the
fields the command line exposes, its flag, its help line and the type that
reads its text, bounds included (:class:`Number`, :class:`Integers`,
:class:`Names`). The ``--help`` and the parsing of ``sklearn-isotropy
evaluate``, ``retrieval`` and ``classify`` are generated from the fields;
a group (declared with :func:`group`) offers its fields' flags in its place,
so the command line stays flat while the settings nest. The few fields two
tasks read (but not the third) are declared by the functions at the end, so
their defaults are written once too. Each class
docstring documents its own fields, after those of its base
(:func:`inherit_parameters`); ``tests/evaluation/test_settings.py`` checks
that each class's documentation names every field with its type and default.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields

from .._defaults import DEFAULT_MODEL_NAME, ENCODE_BATCH_SIZE

__all__ = [
    "EncodingSettings",
    "EvaluationSettings",
    "Integers",
    "MethodSettings",
    "Names",
    "Number",
    "group",
    "inherit_parameters",
    "option",
]


def option(
    default,
    *,
    flag: bool | str | None = None,
    help: str | None = None,
    type: Callable | None = None,
    choices: tuple | Callable | None = None,
    append: bool = False,
    listing: str | None = None,
    shown: str | None = None,
    deprecated: tuple = (),
    check: Callable | None = None,
) -> Field:
    """Return a settings field: its default and, with a ``flag``, its option.

    Parameters
    ----------
    default : object
        The field's default; this declaration is the only place it is written.
    flag : bool or str, default=None
        The command-line flag: True for ``--`` and the field name with
        dashes, a string for another spelling; None keeps the field off the
        command line.
    help : str, default=None
        The flag's help line.
    type : callable, default=None
        Reads the flag's text into the field's value; raises ``ValueError``
        with the message the command line shows (:class:`Number`...).
    choices : tuple or callable, default=None
        The values allowed: a tuple, or a registry, a callable returning
        ``{name: description}``, read when the parser is built (so a name
        registered later is offered).
    append : bool, default=False
        Whether the flag is repeated, each time adding one value
        (``--pooling``).
    listing : str, default=None
        The heading under which ``--help`` lists the names and descriptions
        of the registry of ``choices`` (or of ``type``, a :class:`Names`).
    shown : str, default=None
        How ``--help`` names the default, if not by its value.
    deprecated : tuple of str, default=()
        Older spellings of the flag that still work, with an
        ``IsotropyDeprecationWarning``.
    check : callable, default=None
        ``check(values)`` raises if a non-empty tuple of names cannot run;
        :meth:`EvaluationSettings.check` calls it before any work.

    Returns
    -------
    dataclasses.Field
        The field, its command-line description in its metadata.
    """
    cli = None
    if flag:
        cli = {
            "flag": flag,
            "help": help,
            "type": type,
            "choices": choices,
            "append": append,
            "listing": listing,
            "shown": shown,
            "deprecated": tuple(deprecated),
        }
    return field(default=default, metadata={"cli": cli, "check": check, "group": None})


def group(cls: type) -> Field:
    """Return a field holding a group of options: an instance of ``cls``.

    The group's fields are declared with :func:`option` in ``cls``; the
    command line offers their flags in the group's place
    (:meth:`EvaluationSettings.options`), and builds the group from them
    (:meth:`EvaluationSettings.from_options`), so a group changes how the
    options nest in Python and in the JSON report, not the flags.

    Parameters
    ----------
    cls : type
        A dataclass whose fields are declared with :func:`option`, each
        with a default; ``cls()`` is the field's default.

    Returns
    -------
    dataclasses.Field
        The field, ``cls`` in its metadata.
    """
    return field(
        default_factory=cls, metadata={"cli": None, "check": None, "group": cls}
    )


@dataclass(frozen=True)
class Number:
    """Read a finite number from ``low`` to ``high``; an int with ``integer``.

    Parameters
    ----------
    integer : bool, default=False
        Read an int instead of a float.
    low, high : float, default=None
        The bounds, both included; None is no bound.
    """

    integer: bool = False
    low: float | None = None
    high: float | None = None

    def __call__(self, text: str) -> int | float:
        """Return the number ``text`` writes; a ``ValueError`` saying what is expected.

        Parameters
        ----------
        text : str
            The flag's text (``"0.5"``, ``"3"``).

        Returns
        -------
        int or float
            The number.
        """
        kind = "an integer" if self.integer else "a number"
        try:
            value = int(text) if self.integer else float(text)
        except ValueError:
            raise ValueError(f"expected {kind}, got {text!r}") from None
        too_low = self.low is not None and value < self.low
        too_high = self.high is not None and value > self.high
        # an int is finite (and math.isfinite overflows on one past float's range)
        if (not self.integer and not math.isfinite(value)) or too_low or too_high:
            kind = "an integer" if self.integer else "a finite value"
            if self.high is not None:
                bound = f" from {self.low} to {self.high}"
            else:
                bound = "" if self.low is None else f" >= {self.low}"
            raise ValueError(f"expected {kind}{bound}, got {text!r}")
        return value

    def check(self, value) -> None:
        """Raise a ``ValueError`` if ``value`` is not a number this reads.

        For settings built in Python: the same bounds as the flag's text,
        and a number of the right kind (an int for ``integer``, never a
        bool or a string).

        Parameters
        ----------
        value : object
            The field's value.
        """
        kind = numbers.Integral if self.integer else numbers.Real
        if not isinstance(value, kind) or isinstance(value, bool):
            what = "an integer" if self.integer else "a number"
            raise ValueError(f"expected {what}, got {value!r}")
        self(str(value))


@dataclass(frozen=True)
class Integers:
    """Read comma-separated integers of at least ``low``, as a tuple.

    Parameters
    ----------
    low : int, default=1
        The smallest integer allowed.
    """

    low: int = 1

    def __call__(self, text: str) -> tuple:
        """Return the integers ``text`` lists; a ``ValueError`` if there are none.

        Parameters
        ----------
        text : str
            The flag's text: integers separated by commas (``"32,64"``);
            empty items are skipped.

        Returns
        -------
        tuple of int
            The integers, in order.
        """
        read = Number(integer=True, low=self.low)
        values = [read(v) for v in text.split(",") if v.strip()]
        if not values:
            raise ValueError(f"expected integers >= {self.low}, got {text!r}")
        return tuple(values)

    def check(self, value) -> None:
        """Raise a ``ValueError`` if ``value`` is not a tuple of such integers.

        Parameters
        ----------
        value : object
            The field's value (settings built in Python).
        """
        if not isinstance(value, (tuple, list)) or not value:
            raise ValueError(f"expected integers >= {self.low}, got {value!r}")
        for item in value:
            Number(integer=True, low=self.low).check(item)


@dataclass(frozen=True)
class Names:
    """Read comma-separated names of a registry, each once, as a tuple.

    Parameters
    ----------
    registry : callable
        Returns the registry (``{name: description}``), when a text is read.
    what : str
        What the names are, for the message (``"precision(s)"``).
    normalize : callable, default=None
        Applied to each name first (``str.upper``).
    """

    registry: Callable
    what: str
    normalize: Callable | None = None

    def __call__(self, text: str) -> tuple:
        """Return the names ``text`` lists; a ``ValueError`` naming unknown ones.

        Parameters
        ----------
        text : str
            The flag's text: names separated by commas (``"int8,binary"``).

        Returns
        -------
        tuple of str
            The names, in order, each once.
        """
        registry = self.registry()
        names = [m.strip() for m in text.split(",") if m.strip()]
        names = [self.normalize(m) for m in names] if self.normalize else names
        unknown = [m for m in names if m not in registry]
        if unknown or not names:
            raise ValueError(
                f"unknown {self.what} {unknown or [text]}; choose from "
                f"{', '.join(registry)}"
            )
        return tuple(dict.fromkeys(names))


def _poolings():
    from ..text import POOLING_PRESETS

    return {name: p.description for name, p in POOLING_PRESETS.items()}


def _parameters(doc):
    """The head of a docstring, and the entries of its Parameters section."""
    head, _, entries = inspect.cleandoc(doc).partition("Parameters\n----------\n")
    return head, entries.strip("\n")


def inherit_parameters(cls: type) -> type:
    """Write the parameters of the base of ``cls`` before its own in its docstring.

    A dataclass's signature holds its base's fields, and numpydoc wants every
    parameter documented; the shared ones are written once, in the base's
    docstring, and a task's settings class documents its own after them.

    Parameters
    ----------
    cls : type
        A subclass of :class:`EvaluationSettings` whose docstring ends with
        a Parameters section of its own fields.

    Returns
    -------
    type
        ``cls``, its docstring completed.
    """
    head, own = _parameters(cls.__doc__)
    _, inherited = _parameters(cls.__mro__[1].__doc__)
    cls.__doc__ = f"{head}Parameters\n----------\n{inherited}\n{own}\n"
    return cls


@dataclass
class EncodingSettings:
    """How texts become embeddings: the encoder, its poolings, batches and device.

    The ``encoding`` of every task's settings
    (:class:`~sklearn_isotropy.evaluation.EvaluationSettings`); the command
    line offers each field as a flag of its own (``--model``, ``--pooling``,
    ``--batch-size``...), as the field declares it.

    Parameters
    ----------
    model : str or None, default=None
        Hugging Face model name or local directory of the encoder; None is
        the embedded default (all-MiniLM-L6-v2).
    encoder : str, default="transformer"
        ``transformer`` encodes per pooling; ``static`` is
        :class:`~sklearn_isotropy.StaticEmbeddingVectorizer` of ``model`` with
        its defaults, fitted on texts the task sets apart for it (STS: the
        train split's sentences, under every protocol; see
        the task's ``encoder_texts``); the
        poolings are not used.
    poolings : tuple of str, default=("mean", "embeddings_avg")
        Pooling presets to evaluate, in order.
    batch_size : int, default=32
        Encoding batch size.
    device : str, default="cpu"
        Torch device of the encoder and the flow.
    cache : str or None, default=None
        Directory caching sentence encodings across runs (``memory=``).
    progress : bool or None, default=False
        Progress bars of long steps (encoding, the flow's training, the grid
        search): True shows them, False hides them, None shows them when
        stderr is interactive.
    """

    model: str | None = option(
        None,
        flag=True,
        help="Hugging Face model name or local directory",
        shown=f"the embedded {DEFAULT_MODEL_NAME}",
    )
    encoder: str = option(
        "transformer",
        flag=True,
        choices=("transformer", "static"),
        help="transformer (per pooling) or static token means (fitted on the "
        "train split's sentences where there is one)",
    )
    poolings: tuple[str, ...] = option(
        ("mean", "embeddings_avg"),
        flag="--pooling",
        choices=_poolings,
        append=True,
        listing="poolings",
        help="pooling preset; repeat for several",
    )
    batch_size: int = option(
        ENCODE_BATCH_SIZE,
        flag=True,
        type=Number(integer=True, low=1),
        help="encoding batch size",
    )
    device: str = option(
        "cpu", flag=True, help="torch device of the encoder and the flow"
    )
    cache: str | None = option(
        None, flag=True, help="directory caching sentence encodings across runs"
    )
    progress: bool | None = option(False)

    @property
    def show_bars(self) -> bool:
        """Whether progress bars are drawn (``progress`` with None resolved)."""
        from .._utils import interactive_stderr

        return interactive_stderr() if self.progress is None else bool(self.progress)


@dataclass
class MethodSettings:
    """How the post-processing methods are built: their parameters every task shares.

    The ``postprocessing`` of every task's settings
    (:class:`~sklearn_isotropy.evaluation.EvaluationSettings`), read by the
    builds of :data:`~sklearn_isotropy.evaluation.METHODS`. The dimension
    ``n_components`` is the task's (one ``k``, or the retrieval study's
    several), as are the ``grid`` method's candidates and folds.

    Parameters
    ----------
    power : float, default=1.0
        Power of ``whitening`` (1 whitens fully, 0 is PCA).
    natsv_components : int, default=5
        Top principal directions removed by ``natsv`` (at most ``d - 1``).
    flow_epochs : int, default=1
        Training epochs of ``flow`` (1 is BERT-flow's protocol).
    """

    power: float = option(
        1.0,
        flag=True,
        type=Number(low=0),
        help="power of whitening (1 whitens fully, 0 is PCA)",
    )
    natsv_components: int = option(
        5,
        flag=True,
        type=Number(integer=True, low=1),
        help="top directions removed by natsv",
    )
    flow_epochs: int = option(
        1,
        flag=True,
        type=Number(integer=True, low=1),
        help="training epochs of flow",
    )


def _leaves(cls):
    """Yield ``(group, field)`` for the fields of ``cls``, a group's in its place.

    ``group`` is the name of the field holding the group, None for a field
    of ``cls`` itself.
    """
    for f in fields(cls):
        if f.metadata["group"] is None:
            yield None, f
        else:
            for inner in fields(f.metadata["group"]):
                yield f.name, inner


@dataclass
class EvaluationSettings:
    """Options every evaluation reads: the encoding, the seed, the methods.

    Each task reads its own class, a subclass that adds the task's fields
    (:class:`~sklearn_isotropy.evaluation.STSSettings`,
    :class:`~sklearn_isotropy.evaluation.RetrievalSettings`,
    :class:`~sklearn_isotropy.evaluation.ClassificationSettings`); a task
    converts these shared options into it (:meth:`coerce`). The encoder's
    options and the methods' are two groups,
    :class:`~sklearn_isotropy.evaluation.EncodingSettings` and
    :class:`~sklearn_isotropy.evaluation.MethodSettings`
    (``STSSettings(encoding=EncodingSettings(poolings=("mean",)))``); the
    command line offers their flags beside the task's. Every default is
    written once, where its field is declared; the command line's flags,
    help and parsing are generated from the fields.

    Parameters
    ----------
    encoding : EncodingSettings, default=EncodingSettings()
        How texts become embeddings: the model, the encoder, the poolings,
        the batch size, the device, the cache and the progress bars.
    seed : int, default=0
        Seeds the subset, the flow, the grid's folds and the timed queries;
        0 to 2**32 - 1, as numpy's seeds.
    postprocessing : MethodSettings, default=MethodSettings()
        How the post-processing methods are built: the power of whitening,
        the directions NATSV removes, the flow's epochs.
    """

    encoding: EncodingSettings = group(EncodingSettings)
    seed: int = option(
        0,
        flag=True,
        type=Number(integer=True, low=0, high=2**32 - 1),
        help="seeds the subset, the flow, the grid's folds and the timed queries; "
        "0 to 2**32 - 1",
    )
    postprocessing: MethodSettings = group(MethodSettings)

    def check(self) -> None:
        """Raise before any work if a value is out of bounds or a list cannot run.

        Settings built in Python get the checks of the command line: each
        number within its flag's bounds (the flag's ``type``; None where
        None is the default), and each list of names not empty and known.

        Raises
        ------
        ValueError
            If a number is out of its bounds or of the wrong kind, or a list
            of names is empty or names something unknown.
        EvaluationError
            If a name needs a module that is not installed.
        """
        for where, f in _leaves(type(self)):
            owner = self if where is None else getattr(self, where)
            values = getattr(owner, f.name)
            name = f.name if where is None else f"{where}.{f.name}"
            read = (f.metadata["cli"] or {}).get("type")
            if isinstance(read, (Number, Integers)) and not (
                values is None and f.default is None
            ):
                try:
                    read.check(values)
                except ValueError as exc:
                    raise ValueError(f"settings.{name}: {exc}") from None
            check = f.metadata["check"]
            if check is None:
                continue
            if not values:
                raise ValueError(f"settings.{name} is empty; name at least one")
            check(values)

    @classmethod
    def options(cls) -> list[Field]:
        """Return the fields the command line exposes, in declaration order.

        A group's fields come in the group's place, so the flags are those
        of the fields, whichever group holds them.

        Returns
        -------
        list of dataclasses.Field
            The fields with a flag: the base's, then the class's own.
        """
        return [f for _, f in _leaves(cls) if f.metadata["cli"] is not None]

    @classmethod
    def from_options(cls, values: dict) -> EvaluationSettings:
        """Return the settings of ``values``, each named by its field alone.

        The command line reads each flag into its field's name
        (:meth:`options`), whichever group holds the field; each value goes
        to its group here.

        Parameters
        ----------
        values : dict
            Values by field name, a group's fields included (``{"poolings":
            ("mean",), "seed": 3}``); a field left out keeps its default.

        Returns
        -------
        EvaluationSettings
            An instance of this class.

        Raises
        ------
        TypeError
            If a name is no field of this class or of its groups.
        """
        values = dict(values)
        groups = {}
        for f in fields(cls):
            kind = f.metadata["group"]
            if kind is not None:
                names = [inner.name for inner in fields(kind)]
                groups[f.name] = kind(
                    **{n: values.pop(n) for n in names if n in values}
                )
        return cls(**groups, **values)

    @classmethod
    def coerce(cls, settings: EvaluationSettings | None = None) -> EvaluationSettings:
        """Return ``settings`` as an instance of this class.

        A task reads its own settings class; the shared options may come as a
        plain :class:`EvaluationSettings`, whose fields are kept and the
        others take this class's defaults.

        Parameters
        ----------
        settings : EvaluationSettings, default=None
            The options: None for the defaults, a plain
            :class:`EvaluationSettings`, or an instance of this class (returned
            as it is).

        Returns
        -------
        EvaluationSettings
            ``settings`` if it is an instance of this class already, else a
            new instance.

        Raises
        ------
        TypeError
            If ``settings`` are another task's settings.
        """
        if settings is None:
            return cls()
        if isinstance(settings, cls):
            return settings
        if type(settings) is EvaluationSettings:
            shared = {f.name: getattr(settings, f.name) for f in fields(settings)}
            return cls(**shared)
        raise TypeError(
            f"settings must be {cls.__name__} or the shared EvaluationSettings; "
            f"got {type(settings).__name__}, another task's: pass "
            f"{cls.__name__}(...) with the same options"
        )


# ----------------------------------------------- fields two tasks read
def sts_format_field() -> Field:
    """Return the ``format`` field: the file format of STS data (STS, retrieval)."""
    from ..datasets import STS_FORMATS

    return option(
        None,
        flag=True,
        choices=tuple(STS_FORMATS),
        help="file format of STS data",
        shown="detected from the files",
    )


def max_pairs_field() -> Field:
    """Return the ``max_pairs`` field: a subset of each split (STS, retrieval)."""
    return option(
        None,
        flag=True,
        type=Number(integer=True, low=1),
        help="keep a random subset of at most this many pairs per STS split",
        shown="all",
    )


def n_components_field() -> Field:
    """Return the ``n_components`` field of one dimension (STS, classification)."""
    return option(
        256,
        flag=True,
        type=Number(integer=True, low=1),
        help="dimension k of whitening, pca and truncate",
    )


def cv_field() -> Field:
    """Return the ``cv`` field: the grid search's folds (STS, classification)."""
    return option(
        5,
        flag=True,
        type=Number(integer=True, low=2),
        help="folds of the grid search (on the dev pairs, or inside each "
        "training fold), at least 2",
    )


def grid_power_field() -> Field:
    """Return the ``grid_power`` field: the grid's powers (STS, classification)."""
    return option((0.0, 0.5, 1.0))
