"""The package's files form one-way layers: each may import only files below it.

The order (lowest first) is the one docs/DESIGN.md explains. The package's top level
holds the modules users import and one folder per subsystem; each is one entry of
``LAYERS``. Inside a private subsystem folder (``_log/``, ``_codec/`` ...) the modules
have their own order (``FOLDERS``), so imports point one way there too; a public
subpackage (``spark/``, ``kafka/``) is one entry whose files may import each other.
A new module must be placed in the order; an import that points up (or sideways into
a later file) fails here, whether it is at the top of the file, inside a function, or
under TYPE_CHECKING. No folder holds more than ``MAX_FOLDER_MODULES`` modules.
"""

from __future__ import annotations

import ast
import os

import seglog

LAYERS = [
    "errors", "_runtime", "config", "_views", "_codec", "codec", "message", "index", "_storage",
    "segment", "_shared", "retention", "cleaner", "recovery", "_log", "repair", "log", "topic",
    "producer", "_groups", "consumer_group", "kafka", "spark", "testing", "_cli", "cli",
    "__main__", "__init__",
]
# the order inside each private subsystem folder, lowest first (its __init__ imports nothing)
FOLDERS = {
    "_runtime": ["points", "platform", "files", "scheduler", "aio", "future", "prefault"],
    "_views": ["html", "svg", "verdict", "notebook"],
    "_codec": ["format", "encode", "decode", "records", "columns", "arrow_batches", "messageset"],
    "_storage": ["scan", "segment_file", "segment_read", "writable_map", "segment_indexes",
                 "marker"],
    "_shared": ["writers", "mode"],
    "_log": ["metrics", "inflight", "walk", "live", "append_line", "close_gate", "flush_marks",
             "end_watch", "local_log", "reads", "wait", "batching", "opening", "maintenance"],
    "_groups": ["assignors", "files", "ops", "view", "admin", "fetch", "assignment",
                "topic_watch", "membership", "args"],
    "_cli": ["output", "paths", "kafka", "inspect", "groups", "maintain"],
}
# a guard on a folder growing into several subsystems
MAX_FOLDER_MODULES = 20
PKG = os.path.dirname(seglog.__file__)


def _seglog_import_paths(tree: ast.AST, package: str = "") -> list[tuple[list[str], int, bool]]:
    """(module path under seglog, line, at top level) for every import of a seglog
    module in a file of ``package`` (dotted under seglog: "" for a file directly in
    it, "_log" for one in seglog/_log); ``from . import x`` is a path ending in x."""
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
        out += [(path, node.lineno, id(node) in top) for path in paths if path]
    return sorted(out, key=lambda x: x[1])


def _seglog_imports(tree: ast.AST, package: str = "") -> list[tuple[str, int, bool]]:
    """(layer entry, line, at top level) for every import of a seglog module: the
    entry is the imported module's first part, so an import of ``spark._plan`` is
    one of the entry ``spark``."""
    return [(path[0], line, top) for path, line, top in _seglog_import_paths(tree, package)]


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


def _upward_imports(entry: str, package: str, source: str,
                    module: str = "") -> list[tuple[int, str]]:
    """(line, imported entry or module) for each import in a file of ``entry`` that
    is not of an entry below it; in a private folder, an import of a sibling must be
    of one below ``module`` (the file's name) in the folder's order; a public
    subpackage's files may import each other."""
    bad = []
    for path, line, _ in _seglog_import_paths(ast.parse(source), package):
        name = path[0]
        if name not in LAYERS:
            continue      # a name imported from the package face, checked below
        if package and name == entry:
            order = FOLDERS.get(entry)
            if order is not None and len(path) > 1 and (
                    path[1] not in order or module not in order
                    or order.index(path[1]) >= order.index(module)):
                bad.append((line, ".".join(path[:2])))
            continue      # a public subpackage's sibling
        if LAYERS.index(name) >= LAYERS.index(entry):
            bad.append((line, name))
    return bad


def test_every_module_has_a_layer():
    assert set(_modules()) == set(LAYERS), "place new modules in LAYERS (and docs/DESIGN.md)"


def test_every_folder_module_has_a_place_in_its_folder():
    private = {e for e in _modules() if e.startswith("_") and os.path.isdir(os.path.join(PKG, e))}
    assert private == set(FOLDERS), "give a new folder its order in FOLDERS (and docs/DESIGN.md)"
    for folder, order in FOLDERS.items():
        files = {f[:-3] for f in os.listdir(os.path.join(PKG, folder))
                 if f.endswith(".py") and f != "__init__.py"}
        assert files == set(order), f"{folder}: place new modules in FOLDERS[{folder!r}]"


def test_each_folder_says_what_it_owns_and_imports_nothing():
    """A subsystem folder's ``__init__`` is its docstring: what it owns. Importing
    its modules is the importer's business, so the folder adds no import order of
    its own."""
    for folder in FOLDERS:
        with open(os.path.join(PKG, folder, "__init__.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        assert ast.get_docstring(tree), f"{folder}/__init__.py says what the folder owns"
        assert len(tree.body) == 1, f"{folder}/__init__.py holds its docstring only"


def test_no_folder_passes_the_guard():
    crowded = []
    for dirpath, _, files in os.walk(PKG):
        n = sum(f.endswith(".py") for f in files)
        if n > MAX_FOLDER_MODULES:
            crowded.append(f"{os.path.relpath(dirpath, PKG)} holds {n} modules")
    assert not crowded, "\n".join(crowded)


def test_imports_point_down_only():
    bad = []
    for entry in _modules():
        for mod, package, path in _entry_files(entry):
            with open(path, encoding="utf-8") as f:
                source = f.read()
            leaf = mod.rpartition(".")[2]
            bad += [f"{mod}.py:{line} imports {name} (not below it)"
                    for line, name in _upward_imports(entry, package, source, leaf)]
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


def test_the_checker_sees_an_upward_import_inside_a_folder():
    """Inside a private folder, siblings are imported in the folder's order: the
    local log may import its flush marks, not the read path above it; an import of
    another folder is judged by the top-level order."""
    source = ("from . import flush_marks as _flush_marks\n"
              "from .reads import read\n"
              "from .._codec.format import HEADER\n"
              "from .._groups.files import Flock\n")
    assert _upward_imports("_log", "_log", source, "local_log") == [
        (2, "_log.reads"), (4, "_groups")]
    assert _upward_imports("_log", "_log", "from .nowhere import x\n", "local_log") == [
        (1, "_log.nowhere")]


# --- who may use which names, and how big a file may grow ---------------------------
#
# A name with a leading underscore belongs to the module that defines it: other modules
# use a module's public names (a module whose own name starts with an underscore, such
# as ``_runtime.files``, is package-private as a whole; its public names are the package's).
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
