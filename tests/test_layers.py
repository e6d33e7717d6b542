"""The package's files form one-way layers: each may import only files below it.

The order (lowest first) is the one docs/DESIGN.md explains. A new module must be
placed in it; an import that points up (or sideways into a later file) fails here,
whether it is at the top of the file, inside a function, or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import os

import seglog

LAYERS = [
    "errors", "_html", "_metrics", "_platform", "config", "_files", "_format", "_encode",
    "_decode", "codec", "_prefault", "_scheduler", "_records", "_columns", "_messageset",
    "message", "index", "_scan", "segment", "_marker", "retention", "cleaner",
    "recovery", "repair", "_live", "local_log", "log", "topic", "consumer_group", "spark",
    "testing", "cli", "__main__", "__init__",
]
PKG = os.path.dirname(seglog.__file__)


def _seglog_imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """(module, line, at top level) for every import of a seglog module."""
    top = {id(n) for n in getattr(tree, "body", [])}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
            elif node.module and (node.module == "seglog" or node.module.startswith("seglog.")):
                rest = node.module[len("seglog."):] if "." in node.module else ""
                names = [rest] if rest else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name[len("seglog."):] for a in node.names if a.name.startswith("seglog.")]
        for name in names:
            out.append((name.split(".")[0], node.lineno, id(node) in top))
    return out


def _modules() -> list[str]:
    return sorted(f[:-3] for f in os.listdir(PKG) if f.endswith(".py"))


def test_every_module_has_a_layer():
    assert set(_modules()) == set(LAYERS), "place new modules in LAYERS (and docs/DESIGN.md)"


def test_imports_point_down_only():
    bad = []
    for mod in _modules():
        with open(os.path.join(PKG, mod + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for name, line, _ in _seglog_imports(tree):
            if name not in LAYERS:
                continue      # a name imported from the package face, checked below
            if LAYERS.index(name) >= LAYERS.index(mod):
                bad.append(f"{mod}.py:{line} imports {name} (not below it)")
    assert not bad, "\n".join(bad)


def test_no_deferred_imports_of_seglog_modules():
    late = []
    for mod in _modules():
        with open(os.path.join(PKG, mod + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        late += [f"{mod}.py:{line} imports {name} inside a function or block"
                 for name, line, top in _seglog_imports(tree) if not top]
    assert not late, "\n".join(late)


def test_nothing_below_log_names_the_log_or_its_privates():
    """Retention, the cleaner and the rest get what they need through narrow
    interfaces, never by naming ``Log``."""
    below = LAYERS[:LAYERS.index("log")]
    found = []
    for mod in below:
        with open(os.path.join(PKG, mod + ".py"), encoding="utf-8") as f:
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


# --- who may use which names, and how big a file or class may grow -----------------
#
# A name with a leading underscore belongs to the module that defines it: other modules
# use a module's public names (a module whose own name starts with an underscore, such
# as ``_files``, is package-private as a whole; its public names are the package's).
# Without types the check is by name: ``x._foo`` is fine in a module that itself
# defines ``_foo`` (a def, a class, an assignment, ``self._foo = ...``, a slot, an
# argument), since that is how a class reads its own state.
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 450
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


def test_modules_and_classes_stay_small():
    big = []
    for mod, path in _package_files():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            big.append(f"{mod}.py has {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_CLASS_LINES:
                    big.append(f"{mod}.py: class {node.name} has {n} lines (at most {MAX_CLASS_LINES})")
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
