"""The modules of ``optsched`` import one another without circles.

Every ``optsched.*`` import statement of every module is read with ``ast``: the top level and
inside functions (a deferred import is still a dependency; deferring it only hides a circle).
Imports under ``if TYPE_CHECKING:`` never run and are left out, so a module may name a type
of a module above it. ``from optsched.a import b`` counts as an import of ``optsched.a.b``
when that is a module, else of ``optsched.a``.
"""

from __future__ import annotations

import ast
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

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_one(stmt, top)
                continue
            visit_one(child, top)

    def visit_one(node: ast.AST, top: bool) -> None:
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
            visit(node, top)

    visit(tree, True)
    return found


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


def test_top_level_imports_form_a_dag() -> None:
    assert _cycles(_graphs()[1]) == []


def test_imports_inside_functions_close_no_circle() -> None:
    assert _cycles(_graphs()[0]) == []


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
