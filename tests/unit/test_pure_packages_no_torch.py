"""The analysis and figures packages (and the analysis CLI) never import torch, transformers or gradio."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("package, extra", [("explorer.analysis", "explorer.cli.analysis_cmds"),
                                            ("explorer.figures", "explorer.trace")])
def test_pure_package_imports_neither_torch_nor_gradio(package, extra):
    code = (
        f"import sys, pkgutil, importlib, {package} as p\n"
        f"for m in pkgutil.iter_modules(p.__path__): importlib.import_module('{package}.' + m.name)\n"
        f"import {extra}\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'gradio', 'transformers'))\n"
        "print(len(list(pkgutil.iter_modules(p.__path__))))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, bad = result.stdout.split("\n")[:2]
    assert int(count) >= 3 and bad == ""  # the modules were imported, and none of them pulled torch in
