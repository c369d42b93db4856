"""The README's code blocks, for the tests that run them (so the README cannot drift from the code)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_python(heading: str) -> str:
    """The first ```python block under the README section titled `heading` (a `## ` line)."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
