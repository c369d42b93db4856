"""A whole run saved as JSON, and read back to show every view with no model (a talk prepared in advance).

The file holds the model's name, description and config, every step's trace (`StepTrace.to_dict`),
the ids fed so far, the generated text, and the text piece of every token id the views name (the
ids fed, and each step's top tokens under sampling). Attention a long session gave up to stay
within its memory budget is saved as null; the attention view says so for those steps. An export
that leaves all attention out (a hosted app's size cap) saves every matrix as null and says why under
"attention_left_out".
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from explorer.errors import ConfigError, ExportError, SessionStateError
from explorer.trace import AttentionRecord, StepTrace
from explorer.ui.run_schema import check_run, read_run

FORMAT = "llm-inference-explorer/run-v1"
PIECES_PER_STEP = 64  # top tokens per step whose pieces are saved (the sampling view draws 20)


def run_to_dict(visit, attention_left_out: str | None = None) -> dict:
    """A visit's run (`explorer.ui.views.Visit`, live or saved) as a JSON-ready dict in `FORMAT`.

    Args:
        attention_left_out: why the export leaves attention out (every matrix saved as null, the
            reason under "attention_left_out"); None keeps it.
    """
    return {**_run_head(visit, attention_left_out),
            "traces": [trace_dict(trace, attention_left_out is None) for trace in list(visit.session.traces)]}


def trace_dict(trace: StepTrace, keep_attention: bool = True) -> dict:
    """`trace.to_dict()`, its attention matrices saved as null unless `keep_attention`."""
    if not keep_attention:
        trace = replace(trace, attention=[AttentionRecord(a.layer, a.shape) for a in trace.attention])
    return trace.to_dict()


def _run_head(visit, attention_left_out: str | None) -> dict:
    """Everything `run_to_dict` holds but the traces."""
    session = visit.session
    named = set(session.ids)
    for trace in list(session.traces):
        if trace.logits is not None:
            named.update(int(i) for i in np.argsort(trace.logits)[-PIECES_PER_STEP:])
    ids = sorted(named)
    head = {
        "format": FORMAT, "model": visit.model_name, "description": visit.description,
        "config": visit.config, "ids": list(session.ids), "text": session.text,
        "pieces": dict(zip(map(str, ids), session.pieces(ids), strict=True)),
    }
    return head if attention_left_out is None else {**head, "attention_left_out": attention_left_out}


def save_run(visit, path: Path, attention_left_out: str | None = None) -> Path:
    """Write the visit's run to `path` as JSON (strict: no NaN or infinities; `run_to_dict`'s text)
    and return the path.

    The JSON is written one trace at a time (one trace's text in memory, not the run's) into a hidden
    file beside `path`, renamed to `path` once complete: a full disk leaves no half-written run.

    Raises:
        ExportError: the file cannot be written (disk full, folder not writable); the partial file
            is removed.
    """
    partial = path.with_name(f".{path.name}.partial")
    head = json.dumps(_run_head(visit, attention_left_out), allow_nan=False)
    try:
        with partial.open("w", encoding="utf-8") as file:
            file.write(head[:-1] + ', "traces": [')
            for index, trace in enumerate(list(visit.session.traces)):
                text = json.dumps(trace_dict(trace, attention_left_out is None), allow_nan=False)
                file.write(f", {text}" if index else text)
            file.write("]}")
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ExportError(f"Cannot write the run to {path.parent} ({exc.strerror or exc}). Free some disk "
                          "space there, or make it writable, and export again.") from exc
    return path


class SavedSession:
    """What the views read from an `InferenceSession`, read back from a saved run; there is no model,
    so it cannot take a step.

    Args:
        data: a dict in `FORMAT` (see `run_to_dict`), untrusted: every field is checked against the
            saved-run schema (`explorer.ui.run_schema.check_run`) before any is used.

    Raises:
        ConfigError: not a saved run of this format, or a field that breaks the schema (the message
            names it).
    """

    def __init__(self, data: dict) -> None:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"Not a saved run of the LLM Inference Explorer (expected format {FORMAT}).")
        check_run(data)
        self.traces = [StepTrace.from_dict(trace) for trace in data["traces"]]
        self.model_name, self.description = data["model"], data["description"]
        self.config, self.ids, self.text = data["config"], list(data["ids"]), data["text"]
        self._pieces = {int(i): piece for i, piece in data["pieces"].items()}
        self.attention_left_out = data.get("attention_left_out")

    @property
    def finished(self) -> bool:
        """True: a saved run takes no more steps."""
        return True

    def pieces(self, ids: list[int]) -> list[str]:
        """The saved text piece of each id ("?" for an id the file does not name)."""
        return [self._pieces.get(int(i), "?") for i in ids]

    def attention_probs(self, step_index: int, layer: int) -> np.ndarray:
        """The saved probabilities, [h_q, q_len, kv_len] float32.

        Raises:
            SessionStateError: the export left attention out, or the session had given them up before
                it was saved.
        """
        probs = self.traces[step_index].attention[layer].probs
        if probs is None:
            why = self.attention_left_out or "the session had given it up to stay within its memory budget"
            raise SessionStateError(f"The saved run holds no attention for layer {layer} at step {step_index} "
                                    f"({why}).")
        return probs

    def decode_step(self, settings=None) -> None:
        """Refuse: there is no model to take a step."""
        raise SessionStateError("This is a saved run: there is no model to run. Press Prefill to start a live one.")

    def close(self) -> None:
        """Free the traces."""
        self.traces = []


def load_run(path: str | Path) -> SavedSession:
    """Read a saved run (a file over `run_schema.MAX_RUN_BYTES` is refused before it is parsed).

    Raises:
        ConfigError: unreadable, too large, not strict JSON, or not a saved run (the message says
            what is wrong and what to do).
    """
    return SavedSession(read_run(path))
