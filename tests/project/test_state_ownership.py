"""Who may change which state (docs/DESIGN.md, "Who owns what"), checked on the code:

* the header several writer processes share (``.writers``) is read and written by
  ``_shared/writers.py`` alone, as SQLite's ``wal.c`` alone touches the WAL index header:
  no other module names the file, its words or the layout's constants, and the
  others import only its narrow interface;
* no module assigns attributes of another module's objects: state changes through
  its owner's methods. The exceptions are listed below, each with its reason.

A sibling of tests/project/test_layers.py (which checks imports and private names).
"""

from __future__ import annotations

import ast
import os

import seglog

PKG = os.path.dirname(seglog.__file__)

# the header's owner, and the module that names its file
HEADER_OWNER = os.path.join("_shared", "writers.py")
FILE_NAMES = os.path.join("_runtime", "files.py")
# what other modules may import from the header's owner
WRITERS_API = {"WritersFile", "Shared", "follow", "invalidate", "exists",
               "stray_segments", "rolling_cut", "adopt", "remove_unwritten"}
# attribute assignments to objects of other modules that are allowed, and why
ALLOWED_FOREIGN_ASSIGNMENTS = {
    # ctypes' way of declaring a C function's signature: attributes of the foreign
    # function object ctypes hands back
    ("_runtime/prefault.py", "madvise.argtypes"): "ctypes declares a C signature so",
    ("_runtime/prefault.py", "madvise.restype"): "ctypes declares a C signature so",
}


def _package_files() -> list[tuple[str, str]]:
    out = []
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                out.append((os.path.relpath(path, PKG), path))
    return sorted(out)


def header_reaches(rel: str, source: str) -> list[str]:
    """Uses of the shared header outside its owner in one module's ``source``."""
    if rel == HEADER_OWNER:
        return []
    found = []
    tree = ast.parse(source)
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[-1] == "writers":
            found += [f"{rel}:{n.lineno} imports {a.name} from writers"
                      for a in n.names if a.name not in WRITERS_API]
        elif isinstance(n, ast.Attribute) and n.attr in ("words", "_words") and \
                not (isinstance(n.value, ast.Name) and n.value.id == "self"):
            found.append(f"{rel}:{n.lineno} reaches .{n.attr}")
        elif isinstance(n, ast.Name) and n.id == "WRITERS_FILE" and rel != FILE_NAMES:
            found.append(f"{rel}:{n.lineno} names the writers' file")
        elif isinstance(n, ast.Attribute) and n.attr == "WRITERS_FILE":
            found.append(f"{rel}:{n.lineno} names the writers' file")
    return found


def _own_attributes(tree: ast.AST) -> set[str]:
    """Attributes the module's own classes define (``self.x = ...``, class-level names,
    slots): a module may set those on any object of its own classes."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")):
            names.add(n.attr)
        elif isinstance(n, ast.ClassDef):
            for b in n.body:
                if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
                    names.add(b.target.id)
                elif isinstance(b, ast.Assign):
                    for t in b.targets:
                        if isinstance(t, ast.Name):
                            names.add(t.id)
                            if t.id == "__slots__":
                                names.update(c.value for c in ast.walk(b.value)
                                             if isinstance(c, ast.Constant)
                                             and isinstance(c.value, str))
    return names


def foreign_assignments(rel: str, source: str) -> list[tuple[int, str]]:
    """(line, target) for each assignment in ``source`` to an attribute of an object
    that is not the method's own (``self``/``cls``) and that the module's own
    classes do not define."""
    tree = ast.parse(source)
    own = _own_attributes(tree)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
            targets = [n.target]
        else:
            continue
        for target in targets:
            for x in ast.walk(target):
                if not (isinstance(x, ast.Attribute) and isinstance(x.ctx, ast.Store)):
                    continue
                if isinstance(x.value, ast.Name) and x.value.id in ("self", "cls"):
                    continue
                if x.attr in own:
                    continue
                what = ast.unparse(x)
                if (rel, what) not in ALLOWED_FOREIGN_ASSIGNMENTS:
                    found.append((n.lineno, what))
    return found


def test_only_the_header_owner_touches_the_shared_header():
    bad = []
    for rel, path in _package_files():
        with open(path, encoding="utf-8") as f:
            bad += header_reaches(rel, f.read())
    assert not bad, "\n".join(bad)


def test_no_module_assigns_attributes_of_another_modules_objects():
    bad = []
    for rel, path in _package_files():
        with open(path, encoding="utf-8") as f:
            bad += [f"{rel}:{line} assigns {what}"
                    for line, what in foreign_assignments(rel, f.read())]
    assert not bad, "\n".join(bad)


def test_every_listed_exception_is_still_there():
    """An exception no longer needed is taken off the list."""
    seen = set()
    for rel, path in _package_files():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                seen.add((rel, ast.unparse(n)))
    assert set(ALLOWED_FOREIGN_ASSIGNMENTS) <= seen


def test_the_checkers_see_what_they_forbid():
    """The checks themselves can fail."""
    source = ("from .._shared.writers import WritersFile, _CURRENT\n"
              "def f(w, local, seg):\n"
              "    w._words[3] = 0\n"
              "    local.end = 5\n"
              "    seg.next_offset += 1\n"
              "    local.metrics.flushes = 1\n")
    assert header_reaches("local_log.py", source) == [
        "local_log.py:1 imports _CURRENT from writers", "local_log.py:3 reaches ._words"]
    assert foreign_assignments("local_log.py", source) == [
        (4, "local.end"), (5, "seg.next_offset"), (6, "local.metrics.flushes")]
    own = ("class C:\n"
           "    def __init__(self):\n"
           "        self.end = 0\n"
           "    def merge(self, other):\n"
           "        other.end = self.end\n")
    assert foreign_assignments("x.py", own) == []
