"""The API reference (docs/api, Sphinx autodoc) builds as scripts/apidoc builds it,
nitpicky and with warnings as errors: a docstring that is not valid
reStructuredText, or a type in a signature that resolves to nothing, fails here. Every
public name users import is in it, and every public callable has a docstring."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
import zlib
from typing import Any

import pytest

import seglog
import seglog.codec
import seglog.consumer_group
import seglog.errors
import seglog.kafka
import seglog.repair
import seglog.spark
import seglog.testing

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# scripts/apidoc's flags: nitpicky (-n), warnings are errors (-W), all of them
# reported (--keep-going), quiet but for warnings (-q)
SPHINX = ["-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n", "-q"]
HAS_PYSPARK = importlib.util.find_spec("pyspark") is not None

def _callables_of(module: Any, names: list[str]) -> dict[str, Any]:
    """The classes and functions among ``names`` of ``module`` (not constants, not
    typing aliases, not C functions it names), by their public dotted name."""
    out = {}
    for n in names:
        obj = getattr(module, n)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out[f"{module.__name__}.{n}"] = obj
    return out


def public_api() -> dict[str, Any]:
    """What users import, by the name they import it under: the package's
    ``__all__`` and the public submodules' names (docs/ and the README name them)."""
    api = _callables_of(seglog, seglog.__all__)
    api |= _callables_of(seglog.errors, [n for n, o in vars(seglog.errors).items()
                                         if inspect.isclass(o) and issubclass(o, Exception)])
    api |= _callables_of(seglog.testing, [n for n, o in vars(seglog.testing).items()
                                          if not n.startswith("_")
                                          and getattr(o, "__module__", "") == "seglog.testing"])
    api |= _callables_of(seglog.codec, seglog.codec.__all__)
    api |= _callables_of(seglog.repair, seglog.repair.__all__)
    # assign (the assignors' entry, for tests and tools) is not an adopter's call
    api |= _callables_of(seglog.consumer_group,
                         [n for n in seglog.consumer_group.__all__ if n != "assign"])
    api |= _callables_of(seglog.kafka, seglog.kafka.__all__)
    api |= _callables_of(seglog.spark, [n for n in seglog.spark.__all__
                                        if HAS_PYSPARK or n != "SeglogDataSource"])
    first: dict[int, str] = {}              # one name per object: the first one listed
    for n, obj in api.items():
        first.setdefault(id(obj), n)
    return {n: obj for n, obj in api.items() if first[id(obj)] == n}


def members(name: str, cls: type) -> dict[str, Any]:
    """The public methods and properties a class defines or inherits from seglog's
    own classes (not from ``tuple``, ``dict``, ``Exception`` or pyspark)."""
    out: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if not base.__module__.startswith("seglog"):
            continue
        for n, v in vars(base).items():
            if n.startswith("_"):
                continue
            if isinstance(v, property):
                out[f"{name}.{n}"] = v.fget
            elif isinstance(v, (classmethod, staticmethod)):
                out[f"{name}.{n}"] = v.__func__
            elif inspect.isfunction(v):
                out[f"{name}.{n}"] = v
    return out


def inventory(build: str) -> dict[str, str]:
    """The built reference's objects.inv: documented name -> its role (py:class ...)."""
    with open(os.path.join(build, "objects.inv"), "rb") as f:
        data = f.read()
    at = 0
    for _ in range(4):                     # four header lines, then zlib
        at = data.index(b"\n", at) + 1
    out = {}
    for line in zlib.decompress(data[at:]).decode().splitlines():
        name, role = line.split(" ", 2)[:2]
        out[name] = role
    return out


def resolve(name: str) -> Any:
    """The object a documented dotted name stands for."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(name)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("apidoc"))
    p = subprocess.run([sys.executable, *SPHINX, os.path.join(ROOT, "docs", "api"), out],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, "the API reference does not build cleanly:\n" + p.stdout + p.stderr
    return out


def test_scripts_apidoc_builds_with_the_same_strict_flags():
    with open(os.path.join(ROOT, "scripts", "apidoc")) as f:
        script = f.read()
    assert " ".join(SPHINX) in script


def test_the_reference_builds_and_names_every_public_name(built):
    documented = inventory(built)
    objects = {id(resolve(n)) for n, role in documented.items()
               if role.startswith("py:") and role != "py:module"}
    missing = sorted(n for n, obj in public_api().items()
                     if n not in documented and id(obj) not in objects)
    assert not missing, f"public names missing from docs/api: {missing}"
    for module in ("seglog", "seglog.errors", "seglog.testing", "seglog.codec",
                   "seglog.repair", "seglog.consumer_group", "seglog.spark"):
        assert documented.get(module) == "py:module", module
    with open(os.path.join(built, "log.html")) as f:
        page = f.read()
    assert 'id="seglog.Log.append"' in page and "Append one message" in page
    # verify() is the notebook's check of every batch: documented with its contract
    assert 'id="seglog.Log.verify"' in page and "what is at stake" in page
    assert documented.get("seglog.Topic.verify") == "py:method"
    assert documented.get("seglog.repair.CheckReport.summary") == "py:method"


def test_every_public_callable_states_its_contract():
    undocumented = set()
    for name, obj in public_api().items():
        todo = {name: obj} | (members(name, obj) if inspect.isclass(obj) else {})
        for n, o in todo.items():
            doc = inspect.getdoc(o) or ""
            if len(doc.split()) < 3:        # a sentence, not nothing or a bare word
                undocumented.add(n)
    assert not undocumented, f"public callables without a docstring: {sorted(undocumented)}"


def test_the_message_module_exports_only_what_users_need():
    """``from seglog.message import *`` gives the names users handle, not the input
    checks and Arrow helpers other seglog modules share."""
    import seglog.message
    assert sorted(seglog.message.__all__) == sorted(
        ["Record", "Message", "Headers", "MessageSet", "Columns", "ArrowColumns", "arrow_schema"])
    names: dict[str, Any] = {}
    exec("from seglog.message import *", names)
    assert set(names) - {"__builtins__"} == set(seglog.message.__all__)
    for n in seglog.message.__all__:
        if n != "Headers":                              # a typing alias
            assert getattr(seglog, n) is getattr(seglog.message, n), n


def test_logs_seams_for_topic_and_producer_are_not_its_api(built):
    """What Topic, Producer, the Spark sink and seglog.testing build on is not a method
    a user's Log shows, nor in the reference."""
    import seglog.log
    documented = inventory(built)
    for name in ("encode", "append_encoded", "check_writable", "abandon"):
        assert not hasattr(seglog.Log, name), name
        assert f"seglog.Log.{name}" not in documented, name
    for seam in (seglog.log.encode_batches, seglog.log.append_encoded,
                 seglog.log.check_writable, seglog.log.abandon):
        assert len((inspect.getdoc(seam) or "").split()) > 10, seam.__name__
    assert "seglog.Log.append_batch" in documented      # the public append stays
