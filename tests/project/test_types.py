"""``Any`` in parameter annotations stays where the public API needs it: values of
users (what they append, their serializers and callbacks, ``**options``), parsed
JSON, and objects of foreign modules that ship no type information (pyarrow,
numpy, pandas, pyspark's DataSource objects). Everything else is typed; a
segment or a report passed below its class is a ``Protocol`` (docs/DESIGN.md,
"Types").

``ALLOWED`` holds, per module, how many parameters may mention ``Any`` and why.
A module not listed that gains one, or a listed one that gains more, fails here:
type the parameter (a Protocol when the type lives above the module), or, when
``Any`` is the honest type, list the module with its reason.
"""

from __future__ import annotations

import ast
import os

import seglog

PKG = os.path.dirname(seglog.__file__)

_JSON = "parsed JSON / JSON documents (dict[str, Any])"
_ARROW = "pyarrow and numpy modules and arrays: they ship no type information"
ALLOWED: dict[str, tuple[int, str]] = {
    "_cli.groups": (1, "the --json document printed"),
    "_cli.inspect": (1, "the --json document printed"),
    "_cli.maintain": (1, "the --json document printed"),
    "_codec.arrow_batches": (26, _ARROW),
    "_codec.columns": (7, _ARROW),
    "_codec.decode": (13, "the caller's message type and the lead values it is built with "
                          "(a Message, a consumer's ConsumerMessage, a plain tuple)"),
    "_codec.messageset": (4, "the caller's message type and lead values (as _codec.decode)"),
    "_codec.records": (3, "user values checked at run time: what append takes"),
    "_groups.args": (1, "the user's callbacks"),
    "_groups.files": (8, _JSON + ": the group's files, checked as parsed"),
    "_groups.view": (3, "describe_group's JSON-shaped description"),
    "_log.batching": (2, "user values checked at run time: what append takes"),
    "_log.opening": (6, "Log.open's **options: the user's keywords, checked there"),
    "_log.reads": (2, "a pread that gives bytes or an Arrow buffer (pyarrow: no types), "
                      "through the iterator's step and its one try"),
    "_runtime.future": (2, "a Future's result: the user's value"),
    "_runtime.scheduler": (4, "a job's owner (any object, held weakly) and its callback"),
    "_storage.marker": (3, _JSON + ": seglog.json"),
    "_views.notebook": (9, "pyarrow tables and pandas frames (no type information), "
                           "IPython's printer, stats and metrics dicts (JSON-shaped)"),
    "config": (3, "the user's settings, checked at run time"),
    "kafka._arrow": (13, _ARROW),
    "kafka._copy": (2, "Log.open's **options (the user's keywords); Kafka's messages"),
    "kafka._reads": (1, "the caller's message type (as _codec.decode)"),
    "kafka._uniform": (1, "a column cutter giving a run or a tuple starting with one"),
    "log": (2, "Log.open's **options and what append takes: user values"),
    "producer": (10, "user values and keys, their serializers, and Futures of them"),
    "recovery": (3, _JSON + ": seglog.json"),
    "segment": (1, "an encoded batch: bytes or a list of bytes pieces"),
    "spark._arrow": (2, _ARROW),
    "spark._encode": (4, _ARROW),
    "spark._plan": (2, _JSON + ": Spark's offsets; an opener of a Log or a Kafka partition"),
    "spark._publish": (1, _JSON + ": the job's manifest"),
    "spark._sink": (9, "pyspark's DataSource objects: rows as Arrow batches, commit "
                        "messages, the options map"),
    "spark._sink_options": (1, "a field of pyspark's schema, or None"),
    "spark._source": (5, _JSON + ": Spark's offsets, as pyspark's DataSource API types them"),
    "spark._stage": (5, _ARROW),
    "topic": (3, "Topic.open's **config: the user's settings, checked there"),
}


def _mentions_any(ann: ast.expr | None) -> bool:
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        ann = ast.parse(ann.value, mode="eval").body        # a string annotation
    return any((isinstance(n, ast.Name) and n.id == "Any")
               or (isinstance(n, ast.Attribute) and n.attr == "Any") for n in ast.walk(ann))


def any_parameters(source: str) -> list[tuple[int, str, str]]:
    """(line, function, parameter) of every parameter, ``*args`` and ``**kwargs``
    included, whose annotation mentions ``Any``, in every function of ``source``
    (methods and nested functions too)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and _mentions_any(arg.annotation):
                    out.append((node.lineno, node.name, arg.arg))
    return sorted(out)


def _counts() -> dict[str, list[tuple[int, str, str]]]:
    found = {}
    for d, _, files in os.walk(PKG):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(d, f)
                mod = os.path.relpath(path, PKG)[:-3].replace(os.sep, ".")
                with open(path, encoding="utf-8") as fh:
                    hits = any_parameters(fh.read())
                if hits:
                    found[mod] = hits
    return found


def test_no_module_gains_an_any_parameter():
    grown = {mod: hits for mod, hits in _counts().items()
             if len(hits) > ALLOWED.get(mod, (0, ""))[0]}
    assert not grown, (
        "parameters typed Any beyond the allowance (type them, a Protocol when the type "
        "lives above the module; or list the module in ALLOWED with its reason): "
        + "; ".join(f"{m} ({len(h)} > {ALLOWED.get(m, (0,))[0]}): "
                    + ", ".join(f"{fn}({p}) line {ln}" for ln, fn, p in h)
                    for m, h in sorted(grown.items())))


def test_the_allowances_are_not_stale():
    """A module typed further lowers its number here, so it cannot grow back."""
    counts = _counts()
    stale = {m: (n, len(counts.get(m, []))) for m, (n, _) in ALLOWED.items()
             if len(counts.get(m, [])) < n}
    assert not stale, f"lower these allowances to the counts found: {stale}"
    assert all(reason for _, reason in ALLOWED.values())


def test_the_counter_sees_an_any_parameter():
    src = ("from typing import Any\n"
           "def f(seg: Any, n: int, *a: 'Any', **kw: dict[str, Any]) -> Any:\n"
           "    def g(x: 'list[Any]') -> None: ...\n"
           "class C:\n"
           "    def m(self, v: object, w: typing.Any) -> Any: ...\n")
    assert any_parameters(src) == [(2, "f", "a"), (2, "f", "kw"), (2, "f", "seg"),
                                   (3, "g", "x"), (5, "m", "w")]
