"""The package's long description, made when the package is built: the README with its pictures and
relative links turned to plain text, since the package index has no files beside it to resolve them.
Everything else is declared in pyproject.toml (`readme` is dynamic there)."""

from __future__ import annotations

import re
from pathlib import Path

RELATIVE_IMAGE = re.compile(r"!\[[^\]]*\]\((?![a-z]+://)[^)]*\)\n\n?")  # a picture: dropped
RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z]+://)[^)]*\)")  # a link: its text kept


def long_description(readme: str) -> str:
    """`readme` (Markdown) without relative pictures, its relative links as their text."""
    return RELATIVE_LINK.sub(r"\1", RELATIVE_IMAGE.sub("", readme))


if __name__ == "__main__":  # setuptools runs this file as __main__
    from setuptools import setup

    setup(long_description=long_description(Path(__file__).with_name("README.md").read_text(encoding="utf-8")),
          long_description_content_type="text/markdown")
