"""The direction of imports: no module of `explorer.analysis` imports another that imports it back,
and the pure packages reach neither the runner nor the UI."""

from __future__ import annotations

import ast
from pathlib import Path

import explorer

PACKAGE = Path(explorer.__file__).parent


def explorer_imports(path: Path) -> set[str]:
    """The `explorer.*` modules a file imports, anywhere in it (a function-level import counts too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("explorer"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("explorer"))
    return names


def module_graph(folder: str) -> dict[str, set[str]]:
    """Module -> the modules of the same folder it imports."""
    modules = {f"explorer.{folder}.{path.stem}": path for path in (PACKAGE / folder).glob("*.py")}
    return {name: explorer_imports(path) & modules.keys() for name, path in modules.items()}


def test_no_analysis_module_imports_one_that_imports_it_back():
    graph = module_graph("analysis")
    assert len(graph) >= 10

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(step == goal or (step not in seen and reaches(step, goal, seen | {step}))
                   for step in graph[start])

    cycles = sorted(name for name in graph if reaches(name, name, {name}))
    assert cycles == []


def test_the_pure_packages_import_neither_the_runner_nor_the_ui():
    for folder in ("analysis", "figures"):
        for path in (PACKAGE / folder).glob("*.py"):
            bad = {name for name in explorer_imports(path) if name.startswith(("explorer.runner", "explorer.ui"))}
            assert bad == set(), (path.name, bad)
