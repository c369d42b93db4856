"""Text from a saved run or typed by a person, shown in Markdown as plain text.

A saved run's model name, description and token texts come from whoever wrote the file; Gradio renders
Markdown (the status line, a component's `info`) with images, links and HTML tags, so such text is
escaped before it is put into Markdown. HTML (the token strip) uses `html.escape`, a toast
`explorer.ui.toasts.toast_text`, a Plotly label `explorer.figures.theme.plain_label`.
"""

from __future__ import annotations

import re

# Every ASCII punctuation character: CommonMark lets any of them be backslash-escaped, and escaped
# they start no emphasis, link, image, autolink, HTML tag, entity, heading, list or table.
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def markdown_text(text: str) -> str:
    """`text` as Markdown that renders exactly as the text, on one line: every ASCII punctuation
    character backslash-escaped, and runs of whitespace (newlines included) one space, so the text
    can neither start a block (heading, list, code) nor form a tag, link or image.

    The Markdown component must also not render LaTeX (`latex_delimiters=[]`): KaTeX reads the
    rendered text, where an escaped `$$` is a delimiter again.
    """
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", " ".join(text.split()))


def markdown_plain(markdown: str) -> str:
    """A lesson's Markdown as plain text for a terminal: its bold and italic markers dropped, its
    backslash escapes (`markdown_text`'s) undone, so "**5%**" reads "5%" and "\\<s\\>" reads "<s>"."""
    text = re.sub(r"(?<!\\)\*+", "", markdown)
    return _ESCAPED.sub(r"\1", text)


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


# Gradio 6 renders a component's `info` line with a small Markdown of its own (after escaping HTML):
# `code`, [text](address) links, **bold**, __bold__, *em* and _em_ at a word's edge, with no backslash
# escapes (`markdown_text`'s would show as written). Each of those marks is broken or replaced by a
# character that looks alike, so the line shows the text as written.
_INFO_MARKS = (("](", "]\u200b("), ("`", "\u02cb"), ("*", "\u2217"), ("__", "_\u200b_"))


def info_text(text: str) -> str:
    """`text` for a component's `info` line, shown as written on one line: runs of whitespace one
    space, and none of the marks of Gradio's `info` Markdown left to act (`_INFO_MARKS`; an
    underscore at a word's start becomes U+FF3F, the full-width low line)."""
    text = " ".join(text.split())
    for mark, shown in _INFO_MARKS:
        text = text.replace(mark, shown)
    return re.sub(r"(?<!\w)_", "\uff3f", text)
