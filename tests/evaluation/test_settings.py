"""Tests of EvaluationSettings: its docstring, the one place its defaults live."""

from __future__ import annotations

from sklearn_isotropy.evaluation import EvaluationSettings


def test_settings_docstring_agrees_with_the_fields():
    """The literal docstring names every field, its type, default and tasks."""
    import ast
    import dataclasses
    import inspect
    import re

    from sklearn_isotropy._defaults import DEFAULT_MODEL_NAME

    doc = inspect.cleandoc(EvaluationSettings.__doc__)
    params = doc.partition("Parameters\n----------\n")[2]
    entries = re.findall(r"^(\w+) : (.+), default=(.+)\n((?:    .+\n?)+)", params, re.M)
    fields = dataclasses.fields(EvaluationSettings)
    assert [e[0] for e in entries] == [f.name for f in fields]
    names = {"sts": "STS", "retrieval": "retrieval", "classification": "classification"}
    for (name, kind, default, text), f in zip(entries, fields):
        annotation = re.sub(r"tuple\[(\w+), \.\.\.\]", r"tuple of \1", str(f.type))
        assert kind == annotation.replace(" | ", " or "), name
        assert ast.literal_eval(default) == f.default, name
        tasks = f.metadata["tasks"]  # only some tasks: "STS and retrieval only."
        listed = " and ".join(names[t] for t in tasks or ())
        ends = f"{listed[:1].upper()}{listed[1:]} only." if tasks else None
        assert (ends and " ".join(text.split()).endswith(ends)) or (
            not ends and "only." not in text
        ), name
    assert f"({DEFAULT_MODEL_NAME})" in doc
