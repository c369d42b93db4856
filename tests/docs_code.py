"""The code blocks the README and the documentation pages show, for the tests that run them (so no
page can drift from the code).

A fenced block's info string is its language, then optional attributes in braces, as MkDocs'
attr_list reads them: ```` ```bash {skip="why it cannot run offline"} ```` (never run; the reason is
required), ```` ```python {tested_by="tests/ui/test_api.py"} ```` (run by that test, which names the
page it reads). Every other `bash` and `python` block is run by tests/integration/test_docs_snippets.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGUAGES = ("bash", "python")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[ \t]*(?:\{(?P<attrs>[^}]*)\})?[ \t]*\n(?P<code>.*?)^```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
ATTRIBUTE = re.compile(r'(?P<key>[\w-]+)="(?P<value>[^"]*)"')


@dataclass(frozen=True)
class Snippet:
    """One fenced block of a page.

    Attributes:
        page: its file, relative to the repository root (`README.md`, `docs/cli.md`).
        line: the 1-based line of its opening fence.
        lang: its language (`bash`, `python`, ... or "" for none).
        code: its text, without the fences.
        attrs: the attributes in braces after the language (`skip`, `tested_by`).
    """

    page: str
    line: int
    lang: str
    code: str
    attrs: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """The README and every Markdown page of the documentation site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def page_snippets(path: Path) -> list[Snippet]:
    """The fenced blocks of one page, in order."""
    text = path.read_text(encoding="utf-8")
    return [Snippet(path.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1, m["lang"], m["code"],
                    {a["key"]: a["value"] for a in ATTRIBUTE.finditer(m["attrs"] or "")})
            for m in FENCE.finditer(text)]


def snippets() -> list[Snippet]:
    """Every fenced block of the README and the documentation pages."""
    return [snippet for path in pages() for snippet in page_snippets(path)]


def doc_python(page: str) -> str:
    """The first ```python block of `page` (e.g. "docs/notebook.md").

    Raises:
        LookupError: the page shows no Python block.
    """
    for snippet in page_snippets(ROOT / page):
        if snippet.lang == "python":
            return snippet.code
    raise LookupError(f"{page} shows no python block")
