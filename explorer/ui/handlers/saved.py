"""The events that save, share and load runs: export the run (JSON) or the view on screen (HTML), a
link to the prompt and settings, and a saved run loaded back (no model needed).
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from explorer.analysis.measured import Scenario
from explorer.errors import SamplingSettingsError, SessionStateError
from explorer.saved import load_run
from explorer.ui.export import export_label, plan_export, size_text, write_export, write_view_html
from explorer.ui.handlers.controls import SamplingControls, ViewControls
from explorer.ui.handlers.outputs import replay_outputs, restored_controls
from explorer.ui.handlers.redraw import is_open
from explorer.ui.hosting import Served
from explorer.ui.links import LINK_FIELDS, query_string
from explorer.ui.live import visitor_of
from explorer.ui.toasts import shows_errors
from explorer.ui.views import Visit, render


def open_saved(served: Served, page: str, request: gr.Request | None, path: str, view: ViewControls) -> tuple:
    """Make the saved run at `path` the page's session, checked against the saved-run schema and
    every view drawn first (a file that cannot be shown is refused, the page's session kept).
    Returns the step outputs with every view drawn, then the run's prompt and sampling controls."""
    served.registry.pending.wait()  # the views import the runner, which the start-up load imports first
    visit = Visit.replay(*load_run(path), served.limits)
    outputs = replay_outputs(visit, view)
    served.live.admit(page, visit, visitor_of(request))
    return (*outputs, *restored_controls(visit.run))


@shows_errors
def on_export_click(visit: Visit | None) -> str:
    """Save this page's run as JSON (every step's trace and attention matrix; `explorer.saved`), to
    download: its estimated size (and whether attention is left out, over a hosted app's cap) said in
    a message before it is written, the file in Gradio's cache folder (served without a copy), the
    page's previous export deleted (`explorer.ui.export`). Returns the file's path (the download
    button then shows it: `show_download`)."""
    if visit is None:
        raise SessionStateError("Nothing to export yet: run the prefill first.")
    plan = plan_export(visit)
    left_out = f" ({plan.attention_left_out})" if plan.attention_left_out else ""
    gr.Info(f"Writing the run as JSON: {plan.summary()}{left_out}.", title="Export")
    return str(write_export(visit, plan))


@shows_errors
def on_view_html_click(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
                       shown: str, presenter: bool = False, zoom: int | None = None, what_if: Scenario | None = None,
                       *sampling) -> str:
    """The view on screen as one HTML page that opens offline (for slides): the figure drawn as on
    screen (the sampling view's preview too, `sampling` being the seven sampling controls), plotly.js
    inlined; the page's previous one deleted (`explorer.ui.export.write_view_html`). Returns the file's
    path (the download button then shows it: `show_download`)."""
    if not is_open(visit):
        raise SessionStateError("Nothing to export yet: run the prefill first.")
    options = ViewControls(layer, average_heads, hardware, shown, presenter, zoom, what_if).options(visit, step)
    try:
        preview = SamplingControls(*sampling).settings() if shown == "sampling" else None
    except SamplingSettingsError:
        preview = None  # the screen shows no preview for settings it cannot read either
    figure = render(visit, options, shown, preview)
    return str(write_view_html(visit, figure, f"explorer-{shown}-step-{options.step}.html"))


def show_download(path: str | None) -> dict:
    """A download button once its file is written: shown, named after the file with its size."""
    if not path:
        return gr.update(visible=False)
    size_bytes = Path(path).stat().st_size
    return gr.update(visible=True, label=f"⬇ Download {Path(path).name} ({size_text(size_bytes)})")


def no_export() -> tuple[dict, dict]:
    """The download buttons hidden: a new prefill or Reset freed the session whose exports they
    offered (and deleted the files)."""
    return gr.update(value=None, visible=False), gr.update(value=None, visible=False)


def on_export_label(visit: Visit | None):
    """The export button after a step: its label gives the export's estimated size."""
    return gr.update(value=export_label(visit))


def on_share_click(*values) -> str:
    """The query string of a link that fills in the current prompt, model and settings
    (`values` in `LINK_FIELDS` order); the page puts its own address in front."""
    return query_string(dict(zip(LINK_FIELDS, values, strict=True)))
