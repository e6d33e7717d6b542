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
    "errors", "_html", "_metrics", "_platform", "config", "_files", "codec", "_prefault", "_scheduler",
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
