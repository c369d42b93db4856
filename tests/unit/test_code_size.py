"""Small files of one concern and short functions: no module of `explorer` over 400 lines, no
function over 60 (its docstring included)."""

from __future__ import annotations

import ast
from pathlib import Path

import explorer

PACKAGE = Path(explorer.__file__).parent
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_no_module_is_over_400_lines():
    long = {str(path.relative_to(PACKAGE)): lines for path in PACKAGE.rglob("*.py")
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert long == {}


def test_no_function_is_over_60_lines():
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and \
                    (lines := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                long[f"{path.relative_to(PACKAGE)}:{node.name}"] = lines
    assert long == {}
