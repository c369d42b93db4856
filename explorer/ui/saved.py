"""A whole run saved as JSON, and read back to show every view with no model (a talk prepared in advance).

The file holds the model's name, description and config, every step's trace (`StepTrace.to_dict`),
the ids fed so far, the generated text, and the text piece of every token id the views name (the
ids fed, and each step's top tokens under sampling). Attention a long session gave up to stay
within its memory budget is saved as null; the attention view says so for those steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from explorer.errors import ConfigError, SessionStateError
from explorer.trace import StepTrace

FORMAT = "llm-inference-explorer/run-v1"
PIECES_PER_STEP = 64  # top tokens per step whose pieces are saved (the sampling view draws 20)


def run_to_dict(visit) -> dict:
    """A visit's run (`explorer.ui.views.Visit`, live or saved) as a JSON-ready dict in `FORMAT`."""
    session = visit.session
    named = set(session.ids)
    for trace in session.traces:
        if trace.logits is not None:
            named.update(int(i) for i in np.argsort(trace.logits)[-PIECES_PER_STEP:])
    ids = sorted(named)
    return {
        "format": FORMAT, "model": visit.model_name, "description": visit.description,
        "config": visit.config, "ids": list(session.ids), "text": session.text,
        "pieces": dict(zip(map(str, ids), session.pieces(ids), strict=True)),
        "traces": [trace.to_dict() for trace in session.traces],
    }


def save_run(visit, path: Path) -> Path:
    """Write the visit's run to `path` as JSON (strict: no NaN or infinities) and return the path."""
    path.write_text(json.dumps(run_to_dict(visit), allow_nan=False), encoding="utf-8")
    return path


class SavedSession:
    """What the views read from an `InferenceSession`, read back from a saved run; there is no model,
    so it cannot take a step.

    Args:
        data: a dict in `FORMAT` (see `run_to_dict`).

    Raises:
        ConfigError: not a saved run of this format.
    """

    def __init__(self, data: dict) -> None:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"Not a saved run of the LLM Inference Explorer (expected format {FORMAT}).")
        try:
            self.traces = [StepTrace.from_dict(trace) for trace in data["traces"]]
            self.model_name, self.description = data["model"], data["description"]
            self.config, self.ids, self.text = data["config"], list(data["ids"]), data["text"]
            self._pieces = {int(i): piece for i, piece in data["pieces"].items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"The saved run is incomplete or damaged ({exc!r}).") from exc
        if not self.traces:
            raise ConfigError("The saved run has no steps.")

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
            SessionStateError: the session had given them up before it was saved.
        """
        probs = self.traces[step_index].attention[layer].probs
        if probs is None:
            raise SessionStateError(f"The saved run holds no attention for layer {layer} at step {step_index} "
                                    "(the session had given it up to stay within its memory budget).")
        return probs

    def decode_step(self, settings=None) -> None:
        """Refuse: there is no model to take a step."""
        raise SessionStateError("This is a saved run: there is no model to run. Press Prefill to start a live one.")

    def close(self) -> None:
        """Free the traces."""
        self.traces = []


def load_run(path: str | Path) -> SavedSession:
    """Read a saved run.

    Raises:
        ConfigError: unreadable, not JSON, or not a saved run.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Cannot read the saved run: {exc}") from exc
    return SavedSession(data)
