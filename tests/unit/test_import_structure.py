"""The direction of imports: no module of `explorer` (any package, or the top-level modules) reaches
itself through the modules it imports, an import made inside a function counting as one made at the
top; and the pure packages reach neither the runner nor the UI."""

from __future__ import annotations

import ast
from pathlib import Path

import explorer

PACKAGE = Path(explorer.__file__).parent


def module_names() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own: `explorer.ui`)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


MODULES = module_names()


def explorer_imports(path: Path) -> set[str]:
    """The `explorer` modules a file imports, anywhere in it (a function-level import counts too):
    `from explorer.x import y` imports the module `explorer.x.y` where there is one, else `explorer.x`."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("explorer"):
            names.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                         for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("explorer"))
    return names & MODULES.keys()


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's cycles, each as the sorted modules of one strongly connected component of two or more."""
    reach = {name: set() for name in graph}
    for name in graph:  # the modules each one reaches, by a walk from it
        todo = list(graph[name])
        while todo:
            step = todo.pop()
            if step not in reach[name]:
                reach[name].add(step)
                todo.extend(graph[step])
    components = {frozenset({name} | {other for other in reach[name] if name in reach[other]})
                  for name in graph if name in reach[name]}
    return sorted(sorted(component) for component in components)


def test_no_module_of_the_package_reaches_itself_through_its_imports():
    graph = {name: explorer_imports(path) - {name} for name, path in MODULES.items()}
    assert len(graph) >= 100 and {"explorer.ui.handlers", "explorer.runner.session", "explorer.notebook"} <= graph.keys()
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_the_pure_packages_import_neither_the_runner_nor_the_ui():
    for folder in ("analysis", "figures"):
        for path in (PACKAGE / folder).glob("*.py"):
            bad = {name for name in explorer_imports(path) if name.startswith(("explorer.runner", "explorer.ui"))}
            assert bad == set(), (path.name, bad)
