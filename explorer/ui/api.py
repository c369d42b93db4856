"""What the app offers a program (`gradio_client`): six named endpoints, described here; every other
event of the page is private (`api_visibility="private"`), so "Use via API" lists these alone.

Each endpoint's parameters are named after its handler's (`explorer.ui.handlers`): `prompt`,
`temperature`, `top_k`, ...; a client that omits one gets the page's default. Each is described in its
endpoint's description (`described`: Gradio lists an event's parameters by their component's label and
type, with no text of their own). A client's calls share one session (its `session_hash`), as a browser
tab's do.
"""

from __future__ import annotations

from explorer.figures.views import VIEWS
from explorer.lab.table import LAB

# What each parameter of the API is, by name; the page's own state (visit, shown, what_if) is no parameter.
PARAMETERS = {
    "model": "a model menu entry: the start-up model, an allowed hub id, or \"shape-only: PRESET\"",
    "custom_model": "a hub id or local folder to load instead of `model` (empty: `model`)",
    "prompt": "the prompt text (one prompt per line with `batch_lines`)",
    "prompt_tokens": "a prompt of this many tokens, for a shape-only model without a tokenizer",
    "use_chat_template": "wrap the prompt in the model's chat template",
    "system_prompt": "the chat template's system prompt (empty: none)",
    "enable_thinking": "the chat template's thinking switch (Qwen3's `enable_thinking`)",
    "batch_lines": "a batch, one prompt per line of `prompt` (up to 8, left-padded; the views show the first)",
    "lm_head_all": "the LM head over every position ([B, T, V] logits) instead of the last one",
    "do_sample": "sample the next token (false: greedy, the most likely)",
    "temperature": "divides the logits before sampling",
    "top_k": "keep the k most likely tokens (0: off)",
    "top_p": "keep the fewest most likely tokens whose probabilities reach p (1: off)",
    "min_p": "drop tokens less likely than min_p times the most likely one (0: off)",
    "seed": "the seed of the run's own random generator (the same seed, the same draws)",
    "max_new_tokens": "the run ends after this many new tokens",
    "count": "decode steps to run, 1 to the app's cap",
    "view": "the view: " + ", ".join(VIEWS),
    "step": "0 for the prefill, k for the k-th decode step (None: the latest)",
    "layer": "the decoder layer the views show, from 0",
    "average_heads": "attention: the mean over the query heads instead of one panel per head",
    "hardware": "the roofline's machine, a catalogue name or this-machine (empty or None: the one the run ran on)",
    "presenter": "larger text and lines, for a projector",
    "zoom": "attention: the first token of a 48-token window drawn at full resolution (None: the whole matrix)",
    "name": "the experiment: " + ", ".join(LAB),
    "first": "the experiment's first number parameter (None: its default)",
    "second": "its second number parameter (None: its default)",
    "third": "its third number parameter (None: its default)",
    "fourth": "its fourth number parameter (None: its default)",
    "choice": "its menu's name, where it has one (quant's weight format: both, int8, int4; kvquant's KV-cache "
              "format: both, int8, fp8-e4m3; evict's positions: as-cached, renumbered; None: its default)",
}


def described(summary: str, names: list[str] | tuple[str, ...], returns: str = "") -> str:
    """An endpoint's description: `summary`, then each of its parameters `names` (in order; a name
    without an entry in `PARAMETERS` is the page's own state, not sent by a client) with what it is,
    then `returns`."""
    parameters = "; ".join(f"`{name}`: {PARAMETERS[name]}" for name in names if name in PARAMETERS)
    return " ".join(part for part in (summary, f"Parameters: {parameters}." if parameters else "", returns) if part)


STEP_OUTPUTS = ("Returns the step outputs: the status line (Markdown: tokens in, context n, wall time measured, "
                "FLOPs and bytes estimated), the token strip (HTML), the generated text, the step menu, the layer, "
                "then one Plotly figure per view (the forward pass drawn; get any view with /figure).")

SAMPLING = ("do_sample", "temperature", "top_k", "top_p", "min_p", "seed", "max_new_tokens")
VIEW = ("layer", "average_heads", "hardware", "presenter", "zoom")
PROMPT = ("model", "custom_model", "prompt", "prompt_tokens", "use_chat_template", "system_prompt", "enable_thinking",
          "batch_lines", "lm_head_all")

API = {
    "prefill": described("Start a run: the prefill of `prompt` on `model` (a menu entry) or `custom_model` (a hub id "
                         "or local folder), the sampling settings choosing its first token.", (*PROMPT, *SAMPLING, *VIEW),
                         STEP_OUTPUTS),
    "decode": described("One decode step of this client's run, with the sampling settings from this step on.",
                        (*SAMPLING, *VIEW), STEP_OUTPUTS),
    "run": described("Up to `count` decode steps of this client's run (fewer where generation ends).",
                     ("count", *SAMPLING, *VIEW), STEP_OUTPUTS),
    "reset": described("Forget this client's run: its KV cache and steps freed, its exports deleted.", (),
                       "Returns the emptied step outputs."),
    "figure": described("One view of this client's run, drawn as the app draws it.",
                        ("view", "step", "layer", "average_heads", "hardware", "zoom", "presenter"),
                        "Returns the figure as Plotly JSON text (`plotly.io.from_json`)."),
    "lab": described("One of the lab's experiments run for real on this client's prompt; `first` to `fourth` are its "
                     "number parameters in the order `llm-explorer lab NAME --help` lists them, `choice` its menu.",
                     ("name", "first", "second", "third", "fourth", "choice", "presenter"),
                     "Returns its figure and its lesson text (Markdown)."),
    "export": described("This client's run as JSON, every step's trace and attention matrix (`Explorer.open(path)`, "
                        "or the app's \"Load a saved run\", shows it with no model).", (), "Returns the file."),
}
