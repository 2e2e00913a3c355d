"""Tests of the settings: each task's class, its docstring, its defaults once."""

from __future__ import annotations

import dataclasses
import re

import pytest

from sklearn_isotropy.evaluation import (
    TASKS,
    ClassificationSettings,
    EncodingSettings,
    EvaluationSettings,
    MethodSettings,
    RetrievalSettings,
    STSSettings,
)

TASK_SETTINGS = [
    EvaluationSettings,
    STSSettings,
    RetrievalSettings,
    ClassificationSettings,
]
SETTINGS = [EncodingSettings, MethodSettings, *TASK_SETTINGS]


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_settings_docstring_agrees_with_the_fields(cls):
    """The docstring names every field, inherited ones first, its type and default."""
    import ast
    import inspect

    from sklearn_isotropy._defaults import DEFAULT_MODEL_NAME

    doc = inspect.cleandoc(cls.__doc__)
    params = doc.partition("Parameters\n----------\n")[2]
    entries = re.findall(r"^(\w+) : (.+), default=(.+)\n((?:    .+\n?)+)", params, re.M)
    fields = dataclasses.fields(cls)
    assert [e[0] for e in entries] == [f.name for f in fields]
    for (name, kind, default, _), f in zip(entries, fields):
        annotation = re.sub(r"tuple\[(\w+), \.\.\.\]", r"tuple of \1", str(f.type))
        assert kind == annotation.replace(" | ", " or "), name
        if f.default is dataclasses.MISSING:  # a group: its class's defaults
            assert default == f"{f.default_factory.__name__}()", name
        else:
            assert ast.literal_eval(default) == f.default, name
    if "model" in cls.__dataclass_fields__:
        assert f"({DEFAULT_MODEL_NAME})" in doc


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_each_settings_class_has_at_most_14_fields(cls):
    # issue 51: the one class of 28 fields, 17 of them tagged per task, is
    # a base of the shared fields and a class per task of its own; the
    # base holds the encoder's options and the methods' as two groups, so
    # a task's class stays small counted with the fields it inherits
    assert len(dataclasses.fields(cls)) <= 14


def test_each_task_reads_its_own_settings_class():
    classes = {name: task.settings_class for name, task in TASKS.items()}
    assert classes == {
        "sts": STSSettings,
        "retrieval": RetrievalSettings,
        "classification": ClassificationSettings,
    }
    # a field only one task reads is not offered to the others
    assert not hasattr(STSSettings(), "quantizations")
    assert not hasattr(RetrievalSettings(), "protocol")
    assert not hasattr(ClassificationSettings(), "grid_k")
    # the dimension has one name: one k, or the study's several
    assert STSSettings().n_components == ClassificationSettings().n_components == 256
    assert RetrievalSettings().n_components == (32, 64, 128, 256)


def test_shared_settings_are_converted_and_another_tasks_refused():
    encoding = EncodingSettings(poolings=("mean",), cache="here")
    shared = EvaluationSettings(encoding=encoding, seed=3)
    settings = RetrievalSettings.coerce(shared)
    assert isinstance(settings, RetrievalSettings)
    assert (settings.encoding, settings.seed) == (encoding, 3)
    assert settings.postprocessing == MethodSettings()
    assert settings.quantizations == RetrievalSettings().quantizations
    mine = RetrievalSettings(min_score=3.0)
    assert RetrievalSettings.coerce(mine) is mine
    assert RetrievalSettings.coerce(None) == RetrievalSettings()
    with pytest.raises(TypeError, match="settings must be RetrievalSettings or the"):
        RetrievalSettings.coerce(STSSettings(cv=3))


def test_a_default_two_tasks_share_is_written_once():
    # STS and classification read the same k, folds and grid powers; STS
    # and retrieval the same STS data options: one declaration each
    for name in ("n_components", "cv", "grid_power"):
        assert getattr(STSSettings(), name) == getattr(ClassificationSettings(), name)
    for name in ("format", "max_pairs"):
        assert getattr(STSSettings(), name) == getattr(RetrievalSettings(), name)


@pytest.mark.parametrize(
    "cls, name, text, expected",
    [
        (EvaluationSettings, "seed", "4294967295", 4294967295),
        (EvaluationSettings, "power", "0.5", 0.5),
        (RetrievalSettings, "n_components", "8, 16,", (8, 16)),
        (RetrievalSettings, "quantizations", "int8,float32,int8", ("int8", "float32")),
        (ClassificationSettings, "tasks", "mr,trec", ("MR", "TREC")),
    ],
)
def test_a_field_declares_how_its_text_is_read(cls, name, text, expected):
    (f,) = [f for f in cls.options() if f.name == name]
    assert f.metadata["cli"]["type"](text) == expected


@pytest.mark.parametrize(
    "cls, name, text, message",
    [
        (EvaluationSettings, "seed", "-1", "an integer from 0 to 4294967295"),
        (EvaluationSettings, "power", "nan", "a finite value >= 0"),
        (STSSettings, "cv", "1", "an integer >= 2, got '1'"),
        (RetrievalSettings, "n_components", "0", "an integer >= 1"),
        (RetrievalSettings, "latency_queries", "-1", "an integer >= 0"),
        (RetrievalSettings, "quantizations", "int4", "unknown precision(s) ['int4']"),
    ],
)
def test_a_field_declares_its_bounds(cls, name, text, message):
    (f,) = [f for f in cls.options() if f.name == name]
    with pytest.raises(ValueError, match=re.escape(message)):
        f.metadata["cli"]["type"](text)


@pytest.mark.parametrize("cls", TASK_SETTINGS, ids=lambda c: c.__name__)
def test_the_command_line_names_each_field_alone_and_fills_its_group(cls):
    # the flags stay flat: a group's fields are offered in the group's
    # place, each name once, and the values go back to their groups
    names = [f.name for f in cls.options()]
    assert len(names) == len(set(names))
    assert names[:7] == [
        "model",
        "encoder",
        "poolings",
        "batch_size",
        "device",
        "cache",
        "seed",
    ]
    assert names[7:10] == ["power", "natsv_components", "flow_epochs"]
    settings = cls.from_options(
        {"poolings": ("mean",), "progress": None, "seed": 3, "power": 0.5}
    )
    assert settings == cls(
        encoding=EncodingSettings(poolings=("mean",), progress=None),
        seed=3,
        postprocessing=MethodSettings(power=0.5),
    )
    with pytest.raises(TypeError):
        cls.from_options({"no_such_option": 1})


def test_the_json_settings_nest_as_the_groups_do():
    settings = STSSettings(encoding=EncodingSettings(poolings=("mean",)), cv=3)
    written = dataclasses.asdict(settings)
    assert written["encoding"]["poolings"] == ("mean",)
    assert written["postprocessing"] == {
        "power": 1.0,
        "natsv_components": 5,
        "flow_epochs": 1,
    }
    assert (written["seed"], written["cv"]) == (0, 3)


@pytest.mark.parametrize("cls", SETTINGS[2:], ids=lambda c: c.__name__)
def test_the_defaults_pass_the_checks(cls):
    cls().check()


@pytest.mark.parametrize(
    "settings, message",
    [
        (EvaluationSettings(seed=-1), "settings.seed: expected an integer from 0"),
        (EvaluationSettings(seed=2**32), "settings.seed: expected an integer from 0"),
        (
            EvaluationSettings(encoding=EncodingSettings(batch_size=0)),
            "settings.encoding.batch_size: expected an integer >= 1, got '0'",
        ),
        (
            EvaluationSettings(postprocessing=MethodSettings(power=float("inf"))),
            "settings.postprocessing.power: expected a finite value >= 0",
        ),
        (
            EvaluationSettings(postprocessing=MethodSettings(power="1")),
            "settings.postprocessing.power: expected a number, got '1'",
        ),
        (
            EvaluationSettings(postprocessing=MethodSettings(flow_epochs=True)),
            "settings.postprocessing.flow_epochs: expected an integer, got True",
        ),
        (
            EvaluationSettings(postprocessing=MethodSettings(natsv_components=2.0)),
            "settings.postprocessing.natsv_components: expected an integer",
        ),
        (STSSettings(cv=1), "settings.cv: expected an integer >= 2, got '1'"),
        (STSSettings(max_pairs=0), "settings.max_pairs: expected an integer >= 1"),
        (
            RetrievalSettings(n_components=(32, 0)),
            "settings.n_components: expected an integer >= 1, got '0'",
        ),
        (RetrievalSettings(n_components=()), "settings.n_components: expected"),
        (
            RetrievalSettings(latency_queries=-1),
            "settings.latency_queries: expected an integer >= 0",
        ),
    ],
)
def test_settings_built_in_python_are_checked_like_the_flags(settings, message):
    """What the command line refuses, ``check`` (run before any work) refuses."""
    with pytest.raises(ValueError, match=re.escape(message)):
        settings.check()


def test_a_numpy_integer_and_a_none_default_pass():
    import numpy as np

    STSSettings(seed=np.int64(3), max_pairs=None, n_components=np.int32(8)).check()
    RetrievalSettings(n_components=[8, 16]).check()
