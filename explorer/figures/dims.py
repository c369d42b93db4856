"""One colour per dimension symbol (B, T, n, d, h_q, h_kv, d_h, d_ff, V), the same in every view.

`coloured` writes the symbols of a shape written in symbols ("[B, T, h_q·d_h]") in their colours,
for a Plotly label (plotly.js renders `<span style="color: ...">`). Symbols: docs/concepts.md.
Every colour reads at >= 4.5:1 against white (WCAG AA for text).
"""

from __future__ import annotations

import re

DIM_COLOURS = {
    "B": "#57606a",     # batch: grey
    "T": "#0550ae",     # tokens fed this step: blue
    "n": "#953800",     # context length (KV positions): brown-orange
    "d": "#116329",     # hidden size: green
    "h_q": "#8250df",   # query heads: purple
    "h_kv": "#bf3989",  # KV heads: magenta
    "d_h": "#0a6c74",   # head dim: teal
    "d_ff": "#7d4e00",  # MLP width: ochre
    "V": "#cf222e",     # vocabulary: red
}
# longest first, so that "d_ff" and "d_h" are not read as "d"; a symbol stands alone (not inside a word)
_SYMBOL = re.compile(r"(?<![\w])(" + "|".join(sorted(DIM_COLOURS, key=len, reverse=True)) + r")(?![\w])")


def coloured(symbols: str) -> str:
    """`symbols` with every dimension symbol in its colour, e.g. "[B, T, d]" ->
    '[<span style="color:#57606a">B</span>, ...]'. The text must already be safe for a label
    (escaped, see `explorer.figures.theme.plain_label`); only the symbols are wrapped."""
    return _SYMBOL.sub(lambda match: f'<span style="color:{DIM_COLOURS[match[1]]}">{match[1]}</span>', symbols)
