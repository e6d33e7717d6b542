"""Tests reach no private name of seglog, except the white-box ones listed here.

A test proves what a user can observe: the API, the files on disk, ``metrics()``,
the errors raised, the process's mappings; a fault it needs is injected through
``seglog.testing`` (``FaultyFS``; ``at`` for a race window the code names). Should a
test ever need to reach inside, the reach is one entry of ``ALLOWED`` with its
reason, so that it is seen in one place and a new one is a decision, not an accident.

A reach is ``x._name`` (read, written, or monkeypatched by ``setattr(x, "_name")``),
or ``from seglog... import _name``, where ``_name`` is not a dunder, not a name the test file
defines itself, and not a module: private modules (``seglog._codec``) are the
package's layout, and unit tests of them import them. Names of other libraries'
public protocols that start with ``_`` are ignored (``IGNORED``).
"""

from __future__ import annotations

import ast
import importlib.util
import os

from test_layers import _defined_names

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# public protocols that happen to start with "_"
IGNORED = {
    "_repr_html_", "_repr_pretty_",             # IPython's display protocol
    "_getframe", "_current_frames", "_exit",    # sys's and os's documented functions
    "_replace", "_asdict", "_fields", "_make",  # namedtuple's API
}

# (test file under tests/, name reached): why the test must reach it. Empty: a race
# window a test forces is a named point of the code (``seglog.testing.at``), a fault
# is injected through ``FaultyFS``, and what a test waits for is in ``metrics()``.
ALLOWED: dict[tuple[str, str], str] = {
    ("topics/test_producer.py", "_RETRY_S"):
        "a durable producer retries owed records after this long without a round; set "
        "past the test's deadline, only a later round's fsync can resolve them: steady "
        "traffic (which never leaves the syncer idle that long) made deterministic",
    ("topics/test_unit_future.py", "_STATES"):
        "a round's plain-Future way is for a Python whose Future keeps other fields, "
        "which this one is not: the test makes the module find it so",
}

_ACCESSORS = {"setattr", "getattr", "delattr", "hasattr"}


def _defined(tree: ast.AST) -> set[str]:
    """Names the file defines itself (functions, classes, variables, arguments, its own
    ``self``/``cls`` fields: test_layers' rule for the package) and its import aliases."""
    return _defined_names(tree) | {n.asname for n in ast.walk(tree)
                                   if isinstance(n, ast.alias) and n.asname}


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted module path, for every import in the file."""
    out: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    out[top] = top
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            for a in n.names:
                out[a.asname or a.name] = f"{n.module}.{a.name}"
    return out


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` as a dotted path through the file's imports, None if not a chain of names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id)] + parts[::-1])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in IGNORED


def reaches(source: str) -> list[tuple[int, str]]:
    """(line, name) for every reach of a private name in one test file's ``source``."""
    tree = ast.parse(source)
    own, aliases = _defined(tree), _aliases(tree)
    found: list[tuple[int, str]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _private(n.attr) and n.attr not in own:
            dotted = _dotted(n, aliases)
            if dotted is None or not _is_module(dotted):
                found.append((n.lineno, n.attr))
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "seglog":
            found += [(n.lineno, a.name) for a in n.names
                      if _private(a.name) and not _is_module(f"{n.module}.{a.name}")]
        elif isinstance(n, ast.Call):
            fn = n.func
            called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if called not in _ACCESSORS or not n.args:
                continue
            strings = [a.value for a in n.args[:2]
                       if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for s in strings:
                name = s.rsplit(".", 1)[-1]
                if _private(name) and name not in own and not _is_module(s):
                    found.append((n.lineno, name))
    return sorted(set(found))


def _test_files() -> list[tuple[str, str]]:
    out = []
    for dirpath, _, files in os.walk(TESTS):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                out.append((os.path.relpath(path, TESTS).replace(os.sep, "/"), path))
    return sorted(out)


def test_no_test_reaches_a_private_name_off_the_list():
    seen: set[tuple[str, str]] = set()
    off_list = []
    for rel, path in _test_files():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for line, name in reaches(source):
            seen.add((rel, name))
            if (rel, name) not in ALLOWED:
                off_list.append(f"{rel}:{line} reaches {name}")
    assert not off_list, ("test through public behaviour or seglog.testing, or list the "
                          "reach in ALLOWED with its reason:\n" + "\n".join(off_list))
    # an entry whose reach is gone is removed, so that the list stays the truth
    assert set(ALLOWED) <= seen, f"stale entries: {sorted(set(ALLOWED) - seen)}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_checker_sees_every_kind_of_reach():
    source = (
        "import seglog\n"
        "import seglog._runtime.platform\n"
        "from seglog import log as logmod\n"
        "from seglog.cleaner import _Writer\n"
        "def t(log, monkeypatch):\n"
        "    log._local.waiters\n"                               # an object's field
        "    log._maint = None\n"                                # written
        "    logmod._TAIL_1H\n"                                  # a module's private name
        "    seglog._runtime.platform._reserve_by_writing\n"     # through a module path
        "    monkeypatch.setattr(logmod, '_time_ns', None)\n"    # patched by name
        "    monkeypatch.setattr('seglog.cleaner._READ_CHUNK', 1)\n"
        "    getattr(log, '_view')\n"
    )
    assert [name for _, name in reaches(source)] == [
        "_Writer", "_local", "_maint", "_TAIL_1H", "_reserve_by_writing", "_time_ns",
        "_READ_CHUNK", "_view"]


def test_the_checker_passes_what_is_not_a_reach():
    source = (
        "import seglog._runtime.platform\n"
        "from seglog.spark import _plan\n"                     # a private module
        "from seglog._views import notebook as _nb\n"
        "class Spy:\n"
        "    def __init__(self):\n"
        "        self._count = 0\n"                            # the test's own field
        "    def bump(self):\n"
        "        self._count += 1\n"
        "def _helper(m):\n"
        "    return m._repr_html_(), m._replace(a=1)\n"       # public protocols
        "def t():\n"
        "    seglog._runtime.platform.reserve\n"               # a public name of a module
        "    _plan.plan, _nb.timeline, _helper(None), Spy().bump()\n"
        "    import sys; sys._getframe(0)\n"
    )
    assert reaches(source) == []
