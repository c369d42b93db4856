"""What every figure shares: fonts, colours per operator kind, and the `layout.meta` marker.

Pure plotly (no torch, no gradio). Every view calls `base_layout`, so a figure always carries
`layout.meta = {"view": ..., "step": ...}`: UI tests wait on it to know a figure was redrawn.

Figures are redrawn after every decode step, and plotly validates every property it is given, so
views build each figure in one `go.Figure(data=[...], layout={...})` call from plain dicts (a trace
object passed to `go.Figure` is validated twice), take subplot geometry from `subplot_grid` (computed
once per grid), and share one trimmed template.
"""

from __future__ import annotations

import functools
import html
import json
import re

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

FONT_FAMILY = "Inter, Helvetica, Arial, sans-serif"
FONT_SIZE = 13
TITLE_FONT_SIZE = 17  # plotly's default title size, set so that presenter mode scales it from there
# characters of a 17 px title line (~7.7 px each) on a 1280 px screen's 1,216 px figure, less the 250 px
# of plotly's modebar at its top right (measured in Chromium), so that no title line runs under it
TITLE_CHARS = 120
TITLE_TOP_PX = 10  # above the title's first line
TITLE_ASCENT_PX = 16  # a 17 px title line's height above its baseline
TITLE_LINE_PX = 22  # one 17 px title line
DRAWN_TRACE_TYPES = ("bar", "scatter", "heatmap")
UNUSED_LAYOUT_KEYS = ("polar", "ternary", "geo", "scene", "mapbox", "colorscale")

# One colour per operator kind (colour-blind-safe Okabe-Ito palette, plus greys for data movement).
KIND_COLOURS = {
    "tokenize": "#999999",
    "gather": "#999999",
    "norm": "#56B4E9",
    "gemm": "#0072B2",
    "batched_gemm": "#009E73",
    "softmax": "#E69F00",
    "rope": "#CC79A7",
    "reshape": "#BBBBBB",
    "cache_write": "#D55E00",
    "broadcast": "#BBBBBB",
    "elementwise": "#F0E442",
    "experts": "#003F73",  # GEMMs too (a darker blue): each routed expert's MLP
    "sample": "#000000",
    "detokenize": "#999999",
}
PREFILL_COLOUR = "#0072B2"
DECODE_COLOUR = "#D55E00"
HIGHLIGHT_COLOUR = "#D55E00"


def cartesian_template(name: str = "plotly_white") -> dict:
    """Template `name` cut to what these figures draw: its bar, scatter and heatmap defaults and its
    cartesian layout (no polar, geo or 3-D scene styles; no default colour scales, since every heatmap
    here names its own). The same look at a third of the validation time and ~2 KB less JSON."""
    full = pio.templates[name].to_plotly_json()
    return {"data": {kind: full["data"][kind] for kind in DRAWN_TRACE_TYPES},
            "layout": {key: value for key, value in full["layout"].items() if key not in UNUSED_LAYOUT_KEYS}}


TEMPLATE = cartesian_template()


VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def visible_piece(piece: str, max_chars: int | None = None) -> str:
    """A token piece with its whitespace visible ("␣" space, "↵" newline, "⇥" tab, "␍" return), "∅"
    when empty, cut to `max_chars` characters with "…" when given."""
    text = piece.translate(VISIBLE_WHITESPACE) or "∅"
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: max_chars - 1] + "…"


def plain_label(text: str) -> str:
    """`text` escaped for a Plotly label (title, tick, hover, legend, annotation) so that it shows as
    written: plotly.js renders a subset of HTML in labels (`<a href>` links, `<span style>`, `<b>`,
    `<br>`) and decodes `&amp;`, `&lt;` and `&gt;`, so escaping those three characters leaves no tag.
    For every label that carries text from a run (token pieces, stop names, a device): a saved run's
    text is whoever wrote the file's."""
    return html.escape(text, quote=False)


def si_text(value: float, unit: str) -> str:
    """1.99e9, "FLOP" -> "1.99 GFLOP"; three significant digits."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def kind_colour(kind: str) -> str:
    """The colour of an operator kind; grey for a kind not listed."""
    return KIND_COLOURS.get(kind, "#777777")


def subplot_grid(titles: list[str], **options) -> tuple[dict, dict[tuple[int, int], dict[str, str]]]:
    """`make_subplots`' axes and subplot titles as a plain layout dict, for one `go.Figure` call.

    The grid is computed once per set of `options` (make_subplots costs ~15 ms); each call returns
    fresh dicts that the caller may change.

    Args:
        titles: one title per subplot, in make_subplots' order (row by row); "" leaves one untitled.
        **options: make_subplots' keyword arguments (rows, cols, specs, shared_yaxes, column_widths,
            horizontal_spacing, vertical_spacing, ...), JSON-serialisable.

    Returns:
        (layout, cells): layout holds "xaxis", "yaxis", "xaxis2", ... (domains, anchors, shared-axis
        links) and "annotations", one per non-empty title; cells maps (row, col), 1-based, to the
        trace keywords that place a trace there, e.g. {"xaxis": "x2", "yaxis": "y2"}.

    Raises:
        ValueError: from make_subplots, on inconsistent options.
    """
    layout, cells = json.loads(_grid_json(len(titles), json.dumps(options, sort_keys=True)))
    layout["annotations"] = [{**note, "text": title}
                             for note, title in zip(layout["annotations"], titles, strict=True) if title]
    return layout, {tuple(json.loads(cell)): refs for cell, refs in cells.items()}


@functools.lru_cache(maxsize=64)
def _grid_json(n_titles: int, options_json: str) -> str:
    options = json.loads(options_json)
    fig = make_subplots(subplot_titles=[str(i) for i in range(n_titles)], **options)
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)
    cells = {}
    for row in range(1, options.get("rows", 1) + 1):
        for col in range(1, options.get("cols", 1) + 1):
            subplot = fig.get_subplot(row, col)
            if subplot is not None:
                cells[json.dumps([row, col])] = {"xaxis": _ref(subplot.xaxis), "yaxis": _ref(subplot.yaxis)}
    return json.dumps([layout, cells])


def _ref(axis) -> str:
    """layout.xaxis2 -> "x2", the name a trace uses."""
    return axis.plotly_name.replace("axis", "")


def axis_key(ref: str) -> str:
    """The layout key of the axis a trace names: "x2" -> "xaxis2", "y" -> "yaxis"."""
    return f"{ref[0]}axis{ref[1:]}"


def base_layout(fig: go.Figure, view: str, step: int | None, title: str, height: int = 520) -> go.Figure:
    """Apply the shared look and the `layout.meta` marker to `fig`, in place, and return it.

    Sets (replacing whatever was there, see `set_layout`) the template, title, font, height, margins,
    hover label and `layout.meta`; a view that needs other margins sets all four after this call.

    Args:
        fig: the figure to style.
        view: "journey", "attention", "kv_cache", "sampling" or "roofline".
        step: the step index the figure shows (0 = prefill, k = k-th decode step); None when empty.
        title: the figure's title (kept short: one line).
        height: figure height in pixels.
    """
    return set_layout(fig, template=TEMPLATE,
                      title={"text": title, "x": 0.01, "xanchor": "left", "font": {"size": TITLE_FONT_SIZE}},
                      font={"family": FONT_FAMILY, "size": FONT_SIZE}, height=height,
                      margin={"l": 60, "r": 20, "t": 60, "b": 50}, meta={"view": view, "step": step},
                      hoverlabel={"font": {"family": "monospace", "size": FONT_SIZE}})


def set_layout(fig: go.Figure, **properties) -> go.Figure:
    """Set each top-level layout property of `fig`, replacing (not merging into) its value; in place.

    On a built figure this is ~10x cheaper than `update_layout`, whose merge walks the whole layout.
    A template given here replaces plotly's default one (update_layout would merge the two).
    """
    for key, value in properties.items():
        fig.layout[key] = value
    return fig


def visible_text(label: str) -> str:
    """A Plotly label as it reads: tags dropped, `&lt;`-style entities decoded, `<br>` a line break."""
    return html.unescape(re.sub(r"<[^>]+>", "", label.replace("<br>", "\n")))


def wrapped(segments: list[str], width: int) -> list[str]:
    """`segments` (label text, kept whole) joined by spaces into lines of at most `width` visible
    characters where each segment allows; a segment longer than a line takes a line of its own, and
    one that starts a line loses a leading "· " separator."""
    lines: list[str] = []
    for segment in segments:
        if lines and len(visible_text(lines[-1])) + 1 + len(visible_text(segment)) <= width:
            lines[-1] += " " + segment
        else:
            lines.append(segment.removeprefix("· "))  # a separator that would start a line
    return lines


PRESENTER_SCALE = 1.5  # text size on a projector, relative to a laptop screen (judgement)


def presenter_style(fig: go.Figure) -> go.Figure:
    """Restyle `fig` for a projector, in place: every text (titles, ticks, annotations, text on the
    traces) `PRESENTER_SCALE` times larger, black on white, thicker axis lines, and the figure and its
    margins as much taller and wider so the larger text still fits."""
    def scaled(font) -> dict:
        font = font.to_plotly_json() if font is not None else {}
        return {**font, "size": round((font.get("size") or FONT_SIZE) * PRESENTER_SCALE), "color": "#000000"}

    layout = fig.layout
    annotations = [{**note.to_plotly_json(), "font": scaled(note.font),  # offsets grow with their text
                    **{shift: round(note[shift] * PRESENTER_SCALE) for shift in ("xshift", "yshift") if note[shift]}}
                   for note in layout.annotations]
    axes = {key: {**layout[key].to_plotly_json(), "linecolor": "#000000", "linewidth": 2,
                  "tickfont": scaled(layout[key].tickfont), "title": {**layout[key].title.to_plotly_json(),
                                                                      "font": scaled(layout[key].title.font)}}
            for key in layout.to_plotly_json() if key.startswith(("xaxis", "yaxis"))}
    title = {**layout.title.to_plotly_json(), "font": scaled(layout.title.font)}
    for trace in fig.data:
        if getattr(trace, "text", None) is not None and "textfont" in trace:
            trace.textfont = scaled(trace.textfont)
    margin = {side: round((layout.margin[side] or 0) * PRESENTER_SCALE) if side != "r" else layout.margin[side]
              for side in ("l", "r", "t", "b")}  # room for the larger titles, ticks and legends
    height = round((layout.height or 520) * PRESENTER_SCALE)
    title, added_px = _presenter_title(title, height)
    margin["t"] += added_px
    return set_layout(fig, font=scaled(layout.font), annotations=annotations, title=title, margin=margin,
                      height=height + added_px, **axes)


def _presenter_title(title: dict, height: int) -> tuple[dict, int]:
    """A title whose lines are too long for a line at the presenter's text size, each wrapped at its
    spaces (`_words`) into lines anchored at the top of the figure, and the pixels its added lines
    take (the figure grows by as much, its plot area kept); a view that wraps its title for the
    presenter's size (attention) has nothing left to wrap."""
    given = (title.get("text") or "").split("<br>")
    lines = [line for text in given for line in (wrapped(_words(text), int(TITLE_CHARS / PRESENTER_SCALE)) or [""])]
    if len(lines) == len(given):
        return title, 0
    added_px = round(TITLE_LINE_PX * PRESENTER_SCALE * (len(lines) - len(given)))
    top_px = TITLE_TOP_PX + TITLE_ASCENT_PX * PRESENTER_SCALE
    return {**title, "text": "<br>".join(lines), "yref": "container", "yanchor": "top",
            "y": 1 - top_px / (height + added_px)}, added_px


def _words(text: str) -> list[str]:
    """`text` split at its spaces, except inside a tag or a tagged span (`<span style="...">a b</span>`
    stays one word): an element is open while its text has more "<" than twice its "</"; and a number
    keeps the word after it ("480 B", "0.54 µs": no unit starts a line)."""
    words: list[str] = []
    for piece in text.split(" "):
        unit = bool(words) and words[-1][-1:].isdigit() and piece[:1].isalpha()
        if words and (unit or words[-1].count("<") > 2 * words[-1].count("</")):
            words[-1] += " " + piece
        else:
            words.append(piece)
    return words


def empty_figure(view: str, message: str) -> go.Figure:
    """A figure with no data and `message` in its middle (before the first prefill, or on a step
    that has nothing to show in this view)."""
    fig = go.Figure(layout={
        "annotations": [{"text": message, "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper",
                         "yref": "paper", "font": {"size": FONT_SIZE + 3}}],
        "xaxis": {"visible": False}, "yaxis": {"visible": False}})
    return base_layout(fig, view, None, "", height=300)

