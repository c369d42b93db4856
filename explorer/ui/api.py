"""What the app offers a program (`gradio_client`): six named endpoints, described here; every other
event of the page is private (`api_visibility="private"`), so "Use via API" lists these alone.

Each endpoint's parameters are named after its handler's (`explorer.ui.handlers`): `prompt`,
`temperature`, `top_k`, ...; a client that omits one gets the page's default. A client's calls share
one session (its `session_hash`), as a browser tab's do.
"""

from __future__ import annotations

from explorer.figures.views import VIEWS
from explorer.lab.table import LAB

STEP_OUTPUTS = ("Returns the step outputs: the status line (Markdown: tokens in, context n, wall time measured, "
                "FLOPs and bytes estimated), the token strip (HTML), the generated text, the step menu, the layer, "
                "then one Plotly figure per view (the forward pass drawn; get any view with /figure).")

API = {
    "prefill": "Start a run: the prefill of `prompt` on `model` (a menu entry) or `custom_model` (a hub id or local "
               "folder), the sampling settings choosing its first token. " + STEP_OUTPUTS,
    "decode": "One decode step of this client's run, with the sampling settings from this step on. " + STEP_OUTPUTS,
    "run": "Up to `count` decode steps of this client's run (fewer where generation ends). " + STEP_OUTPUTS,
    "reset": "Forget this client's run: its KV cache and steps freed, its exports deleted. Returns the emptied "
             "step outputs.",
    "figure": "One view of this client's run as Plotly JSON text (`plotly.io.from_json`), drawn as the app draws "
              "it: `view` is one of " + ", ".join(VIEWS) + "; `step` None is the latest; "
              "`hardware` None is the machine the run ran on.",
    "lab": "One of the lab's experiments (`name`: " + ", ".join(LAB) + ") run for real on this client's prompt; "
           "`first` to `fourth`: its parameters in the order `llm-explorer lab NAME --help` lists them (None: "
           "the default). Returns its figure and its lesson text (Markdown).",
    "export": "This client's run as JSON, every step's trace and attention matrix (`Explorer.open(path)`, or the "
              "app's \"Load a saved run\", shows it with no model). Returns the file.",
}
