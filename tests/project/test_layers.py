"""The package's files form one-way layers: each may import only files below it.

The order (lowest first) is the one docs/DESIGN.md explains. A new module must be
placed in it; an import that points up (or sideways into a later file) fails here,
whether it is at the top of the file, inside a function, or under TYPE_CHECKING.
A subpackage (``spark/``) is one entry: its files may import each other and
anything below it.
"""

from __future__ import annotations

import ast
import os

import seglog

LAYERS = [
    "errors", "_html", "_svg", "_verdict", "_metrics", "_platform", "config", "_files", "_format", "_encode",
    "_decode", "codec", "_prefault", "_scheduler", "_aio", "_records", "_columns", "_arrow_batches",
    "_messageset",
    "message", "_notebook", "index", "_scan", "_segment_file", "_segment_read", "_writable_map",
    "_segment_indexes", "segment", "_writers", "_marker", "retention", "cleaner",
    "recovery", "_walk", "repair", "_inflight", "_live", "_append_line", "_close_gate", "_flush_marks", "_end_watch",
    "_shared_mode", "local_log", "_log_reads", "_log_wait", "_log_encode",
    "_log_open", "_log_maintenance", "log", "topic", "_future", "producer", "_assignors",
    "_group_files", "_group_ops", "_group_view", "_group_admin", "_consumer_fetch",
    "_assignment", "_topic_watch", "_membership", "_consumer_args",
    "consumer_group", "kafka", "spark",
    "testing", "_cli_output", "_cli_paths", "_cli_kafka", "_cli_inspect", "_cli_groups", "_cli_maintain", "cli", "__main__",
    "__init__",
]
PKG = os.path.dirname(seglog.__file__)


def _seglog_imports(tree: ast.AST, package: str = "") -> list[tuple[str, int, bool]]:
    """(layer entry, line, at top level) for every import of a seglog module in a file
    of ``package`` (dotted under seglog: "" for a file directly in it, "spark" for
    one in seglog/spark); the entry is the imported module's first part, so an
    import of ``spark._plan`` is one of the entry ``spark``."""
    base = package.split(".") if package else []
    top = {id(n) for n in getattr(tree, "body", [])}
    out = []
    for node in ast.walk(tree):
        paths: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(base):
                    continue          # above the seglog package: not ours
                prefix = base[:len(base) - (node.level - 1)]
                paths = ([prefix + node.module.split(".")] if node.module
                         else [prefix + [a.name] for a in node.names])
            elif node.module and node.module.split(".")[0] == "seglog":
                rest = node.module.split(".")[1:]
                paths = [rest] if rest else [[a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            paths = [a.name.split(".")[1:] for a in node.names if a.name.startswith("seglog.")]
        out += [(path[0], node.lineno, id(node) in top) for path in paths if path]
    return sorted(out, key=lambda x: x[1])


def _modules() -> list[str]:
    """The layer entries: each .py file directly in the package, and each subpackage
    (a directory with an ``__init__.py``) as one."""
    return sorted(f[:-3] if f.endswith(".py") else f for f in os.listdir(PKG)
                  if f.endswith(".py") or os.path.isfile(os.path.join(PKG, f, "__init__.py")))


def _entry_files(entry: str) -> list[tuple[str, str, str]]:
    """(dotted module under seglog, its package under seglog, path) of the files of
    one layer entry: the module, or every file of the subpackage."""
    if not os.path.isdir(os.path.join(PKG, entry)):
        return [(entry, "", os.path.join(PKG, entry + ".py"))]
    return [(mod, mod.rpartition(".")[0], path) for mod, path in _package_files()
            if mod.split(".")[0] == entry]


def _upward_imports(entry: str, package: str, source: str) -> list[tuple[int, str]]:
    """(line, imported entry) for each import in a file of ``entry`` that is not of
    an entry below it; a subpackage's files may import each other."""
    bad = []
    for name, line, _ in _seglog_imports(ast.parse(source), package):
        if name not in LAYERS:
            continue      # a name imported from the package face, checked below
        if package and name == entry:
            continue      # a sibling in the same subpackage
        if LAYERS.index(name) >= LAYERS.index(entry):
            bad.append((line, name))
    return bad


def test_every_module_has_a_layer():
    assert set(_modules()) == set(LAYERS), "place new modules in LAYERS (and docs/DESIGN.md)"


def test_imports_point_down_only():
    bad = []
    for entry in _modules():
        for mod, package, path in _entry_files(entry):
            with open(path, encoding="utf-8") as f:
                source = f.read()
            bad += [f"{mod}.py:{line} imports {name} (not below it)"
                    for line, name in _upward_imports(entry, package, source)]
    assert not bad, "\n".join(bad)


def test_no_deferred_imports_of_seglog_modules():
    late = []
    for entry in _modules():
        for mod, package, path in _entry_files(entry):
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            late += [f"{mod}.py:{line} imports {name} inside a function or block"
                     for name, line, top in _seglog_imports(tree, package) if not top]
    assert not late, "\n".join(late)


def test_nothing_below_log_names_the_log_or_its_privates():
    """Retention, the cleaner and the rest get what they need through narrow
    interfaces, never by naming ``Log``."""
    below = LAYERS[:LAYERS.index("log")]
    found = []
    for entry in below:
        for mod, _, path in _entry_files(entry):
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Name) and node.id == "Log":
                    found.append(f"{mod}.py:{node.lineno}")
    assert not found, found


def test_the_checker_sees_an_upward_import(tmp_path):
    """The check itself can fail: an upward import inside a function is found."""
    tree = ast.parse("def f():\n    from .log import Log\n")
    (name, line, top), = _seglog_imports(tree)
    assert (name, line, top) == ("log", 2, False)
    assert LAYERS.index(name) > LAYERS.index("segment")
    assert _upward_imports("segment", "", "def f():\n    from .log import Log\n") == [(2, "log")]


def test_the_checker_sees_a_subpackage_as_one_layer():
    """Inside a subpackage, ``.`` is the subpackage and ``..`` seglog: its files
    import each other and what is below it; an import pointing up is still found,
    and a top-level module importing the subpackage's files imports the subpackage."""
    source = ("from ._options import Options\n"
              "from . import _plan\n"
              "from .. import errors\n"
              "from ..log import Log\n"
              "import seglog.topic\n"
              "def f():\n"
              "    from ..cli import main\n")
    assert _seglog_imports(ast.parse(source), "spark") == [
        ("spark", 1, True), ("spark", 2, True), ("errors", 3, True), ("log", 4, True),
        ("topic", 5, True), ("cli", 7, False)]
    assert _upward_imports("spark", "spark", source) == [(7, "cli")]
    assert _upward_imports("log", "", "from .spark._plan import plan\n") == [(1, "spark")]
    assert ("spark", "") not in [(m, p) for m, p, _ in _entry_files("spark")]
    assert ("spark._source", "spark") in [(m, p) for m, p, _ in _entry_files("spark")]


# --- who may use which names, and how big a file may grow ---------------------------
#
# A name with a leading underscore belongs to the module that defines it: other modules
# use a module's public names (a module whose own name starts with an underscore, such
# as ``_files``, is package-private as a whole; its public names are the package's).
# Without types the check is by name: ``x._foo`` is fine in a module that itself
# defines ``_foo`` (a def, a class, an assignment, ``self._foo = ...``, a slot, an
# argument), since that is how a class reads its own state.
# a guard against a file growing into several concepts, not a target: a class is never
# cut at a line count (that met this number once by binding free functions back onto
# ``Segment`` and making fields public); who changes which state is checked by
# tests/project/test_state_ownership.py, and a long class that owns one concept stays whole
MAX_MODULE_LINES = 900
# underscore names of the standard library's public API (namedtuple's, os._exit)
_STDLIB_UNDERSCORE_API = {"_exit", "_asdict", "_replace", "_fields", "_make", "_field_defaults"}


def _package_files() -> list[tuple[str, str]]:
    """(dotted module name under seglog, path) of every .py file in the package."""
    out = []
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                out.append((os.path.relpath(path, PKG)[:-3].replace(os.sep, "."), path))
    return sorted(out)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
              and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")):
            names.add(n.attr)
        elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                               for t in n.targets):
            names.update(c.value for c in ast.walk(n.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return names


def foreign_underscore_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each use of another module's underscore name in ``source``."""
    tree = ast.parse(source)
    own = _defined_names(tree)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            from_seglog = n.level >= 1 or (n.module or "").split(".")[0] == "seglog"
            if from_seglog and n.module not in (None, "seglog"):
                found += [(n.lineno, f"imports {a.name} from {n.module}")
                          for a in n.names if _is_private(a.name)]
        elif (isinstance(n, ast.Attribute) and _is_private(n.attr) and n.attr not in own
              and n.attr not in _STDLIB_UNDERSCORE_API):
            found.append((n.lineno, f"uses .{n.attr}, defined in another module"))
    return sorted(found)


def test_underscore_names_are_used_only_in_their_own_module():
    bad = [f"{mod}.py:{line} {what}" for mod, path in _package_files()
           for line, what in foreign_underscore_uses(open(path, encoding="utf-8").read())]
    assert not bad, "\n".join(bad)


def test_no_module_grows_past_the_guard():
    big = []
    for mod, path in _package_files():
        with open(path, encoding="utf-8") as f:
            lines = len(f.read().splitlines())
        if lines > MAX_MODULE_LINES:
            big.append(f"{mod}.py has {lines} lines (at most {MAX_MODULE_LINES})")
    assert not big, "\n".join(big)


def test_the_underscore_checker_sees_foreign_names():
    """The check itself can fail: another module's private name, imported or reached
    through an object, is found; a class's own state and namedtuple's API are not."""
    source = ("from .message import _short, Record\n"
              "from . import _files\n"
              "class C:\n"
              "    def __init__(self):\n"
              "        self._mine = 1\n"
              "    def f(self, seg, rec):\n"
              "        return self._mine, seg._size, rec._replace(), _files.list_dir\n")
    assert foreign_underscore_uses(source) == [
        (1, "imports _short from message"),
        (7, "uses ._size, defined in another module")]
