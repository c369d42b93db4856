"""The analysis package and its CLI module never import torch or gradio."""

from __future__ import annotations

import subprocess
import sys


def test_analysis_imports_neither_torch_nor_gradio():
    code = (
        "import sys, pkgutil, importlib, explorer.analysis as a\n"
        "for m in pkgutil.iter_modules(a.__path__): importlib.import_module('explorer.analysis.' + m.name)\n"
        "import explorer.cli.analysis_cmds\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'gradio', 'transformers'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
