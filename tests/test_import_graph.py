"""The modules and the packages of ``optsched`` import one another without circles.

Every ``optsched.*`` import statement of every module is read with ``ast``: the top level and
inside functions (a deferred import is still a dependency; deferring it only hides a circle).
Imports under ``if TYPE_CHECKING:`` never run and are left out, so a module may name a type
of a module above it. ``from optsched.a import b`` counts as an import of ``optsched.a.b``
when that is a module, else of ``optsched.a``. A module that calls ``importlib.import_module``
imports, deferred, every module its string constants name (``"optsched.engine.epoch"``,
``"optsched.engine.backends.highs:HighsBackend"``): the lazy registries of ``optsched``,
``optsched.sim`` and the backends.

Packages: each ``optsched.<name>`` is one node (``engine``, ``sim``, ``hosts``, ``cli``,
``predict``, ``schema``; the modules ``errors``, ``instances``, ``testing``; the root facade
``optsched``). A sub-package is part of its parent's node (``optsched.engine.workflows`` and
``optsched.engine.backends`` are ``optsched.engine``): a stage of the engine and the engine call
each other by design, and the module graph above already forbids circles inside a package.
The package graph is the module graph, deferred imports included, with each module replaced by
its package; it must be acyclic, so the layers stay one way round (schema and errors below
predict, predict below engine, engine below sim and hosts, everything below cli).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx

PKG = Path(__file__).resolve().parents[1] / "optsched"

# Edges allowed to close a circle, each with the reason; keep empty.
KNOWN_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """``(imported module, at top level)`` for every runtime ``optsched`` import."""
    found: list[tuple[str, bool]] = []
    strings: list[str] = []
    calls_import_module = False

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_one(stmt, top)
                continue
            visit_one(child, top)

    def visit_one(node: ast.AST, top: bool) -> None:
        nonlocal calls_import_module
        if isinstance(node, ast.Import):
            found.extend((a.name, top) for a in node.names if a.name.split(".")[0] == "optsched")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 0 and mod.split(".")[0] == "optsched":
                for a in node.names:
                    sub = f"{mod}.{a.name}"
                    found.append((sub if sub in modules else mod, top))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            visit(node, False)
        else:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append(node.value)
            elif isinstance(node, ast.Call):
                f = node.func
                calls_import_module |= (isinstance(f, ast.Name) and f.id == "import_module") or (
                    isinstance(f, ast.Attribute) and f.attr == "import_module"
                )
            visit(node, top)

    visit(tree, True)
    if calls_import_module:
        named = (s.split(":")[0] for s in strings)
        found.extend((n, False) for n in named if n.split(".")[0] == "optsched" and n in modules)
    return found


@functools.cache
def _graphs() -> tuple[nx.DiGraph, nx.DiGraph]:
    """(every runtime import, top-level imports only)."""
    modules = _modules()
    every, top = nx.DiGraph(), nx.DiGraph()
    every.add_nodes_from(modules)
    top.add_nodes_from(modules)
    for name, path in modules.items():
        for target, at_top in _imports(ast.parse(path.read_text()), modules):
            if target == name:
                continue
            every.add_edge(name, target)
            if at_top:
                top.add_edge(name, target)
    every.remove_edges_from(KNOWN_EXCEPTIONS)
    top.remove_edges_from(KNOWN_EXCEPTIONS)
    return every, top


def _cycles(g: nx.DiGraph) -> list[str]:
    return sorted(" -> ".join([*c, c[0]]) for c in nx.simple_cycles(g))


def _package(module: str) -> str:
    """The package node of ``module``: ``optsched.<name>``, sub-packages included."""
    return ".".join(module.split(".")[:2])


def _package_graph(modules: nx.DiGraph) -> nx.DiGraph:
    """One node per package; each edge keeps, as ``via``, the first module import behind it."""
    g = nx.DiGraph()
    g.add_nodes_from(_package(m) for m in modules)
    for a, b in sorted(modules.edges):
        pa, pb = _package(a), _package(b)
        if pa != pb and not g.has_edge(pa, pb):
            g.add_edge(pa, pb, via=f"{a} imports {b}")
    return g


def _package_circles(g: nx.DiGraph) -> list[str]:
    """Each circle with the imports that close it, one line each (sorted)."""
    out = []
    for c in nx.simple_cycles(g):
        start = c.index(min(c))
        c = c[start:] + c[:start]
        edges = zip(c, [*c[1:], c[0]], strict=True)
        out.append(" -> ".join([*c, c[0]]) + ": " + "; ".join(g.edges[e]["via"] for e in edges))
    return sorted(out)


def test_top_level_imports_form_a_dag() -> None:
    assert _cycles(_graphs()[1]) == []


def test_imports_inside_functions_close_no_circle() -> None:
    assert _cycles(_graphs()[0]) == []


def test_packages_import_one_another_without_circles() -> None:
    circles = _package_circles(_package_graph(_graphs()[0]))
    assert circles == [], "package circles:\n" + "\n".join(circles)


def test_a_circle_between_packages_is_found_and_sub_packages_belong_to_their_parent() -> None:
    modules = nx.DiGraph(
        [
            # the shape before the workflow split: a stage outside the engine, used by it
            ("optsched.engine.epoch", "optsched.workflows.pool"),
            ("optsched.workflows.pool", "optsched.engine.state"),
            # a sub-package and its parent: one node, no circle
            ("optsched.engine.check", "optsched.engine.workflows.check"),
            ("optsched.engine.workflows.check", "optsched.engine.state"),
            ("optsched.sim.workflows.joint", "optsched.engine.epoch"),
        ]
    )
    g = _package_graph(modules)
    assert sorted(g.nodes) == ["optsched.engine", "optsched.sim", "optsched.workflows"]
    assert _package_circles(g) == [
        "optsched.engine -> optsched.workflows -> optsched.engine: "
        "optsched.engine.epoch imports optsched.workflows.pool; "
        "optsched.workflows.pool imports optsched.engine.state"
    ]


def test_the_reader_sees_deferred_and_type_only_imports_correctly() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from optsched.errors import OptschedError\n"
        "if TYPE_CHECKING:\n"
        "    from optsched.engine.state import ClusterState\n"
        "def f():\n"
        "    from optsched.predict import fallback\n"
        "    import optsched.engine.check\n"
    )
    found = _imports(tree, _modules())
    assert found == [
        ("optsched.errors", True),
        ("optsched.predict.fallback", False),
        ("optsched.engine.check", False),
    ]


def test_the_reader_sees_modules_named_for_import_module() -> None:
    tree = ast.parse(
        "import importlib\n"
        "_LAZY = {'solve_epoch': 'optsched.engine.epoch', 'x': 'optsched.no.such.module'}\n"
        "BACKENDS = {'highs': 'optsched.engine.backends.highs:HighsBackend'}\n"
        "def get(name):\n"
        "    return importlib.import_module(_LAZY[name])\n"
    )
    assert _imports(tree, _modules()) == [
        ("optsched.engine.epoch", False),
        ("optsched.engine.backends.highs", False),
    ]
    # without a call of import_module a string is only a string (a logger's name, a message)
    assert _imports(ast.parse("NAME = 'optsched.engine.epoch'\n"), _modules()) == []
