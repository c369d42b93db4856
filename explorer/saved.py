"""A whole run saved as JSON, and read back to show every view with no model (a talk prepared in advance).

The file holds the `Run` (the model's name, description and config, every step's trace
(`StepTrace.to_dict`, each with its logit lens: a live run computes the lens of the steps never
viewed as it exports), the ids fed so far, the generated text, the text piece
of every token id the views name, and the "equivalent is not identical" experiment where it ran) and, inside each step's attention records, every attention matrix: the live session
gives the ones it gave up to stay within its memory budget again (recomputed), so a saved run keeps
every matrix and draws every view as the live run did. An export that leaves attention out (a
hosted app's size cap) saves every matrix as null and says why under "attention_left_out".
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from explorer.analysis.equivalence import EquivalenceResult
from explorer.errors import ConfigError, ExportError
from explorer.run import AttentionSource, PromptInputs, Run, SavedAttention, SavedLens, step_to_dict
from explorer.run_schema import check_run, read_run
from explorer.trace import LensRecord, StepTrace, dumps, float32_array

FORMAT = "llm-inference-explorer/run-v1"


def run_to_dict(run: Run, attention: AttentionSource | None) -> dict:
    """A run as a JSON-ready dict in `FORMAT`, with every attention matrix `attention` gives (None:
    every matrix saved as null) and every step's logit lens."""
    lenses = [run.lens(index) for index in range(len(run.steps))]  # first: the lens names its top tokens
    return {**run_head(run), "traces": [step_to_dict(step, attention, lens)
                                        for step, lens in zip(run.steps, lenses, strict=True)]}


def run_head(run: Run) -> dict:
    """Everything `run_to_dict` holds but the traces."""
    pieces = run.pieces
    head = {"format": FORMAT, "model": run.model, "description": run.description, "config": run.config,
            "ids": run.ids, "text": run.text, "pieces": {str(i): pieces[i] for i in sorted(pieces)}}
    if run.equivalence is not None:
        head["equivalence"] = run.equivalence.to_dict()
    return head if run.prompt is None else {**head, "prompt": dataclasses.asdict(run.prompt)}


def save_run(run: Run, attention: AttentionSource, path: Path, attention_left_out: str | None = None) -> Path:
    """Write the run to `path` as JSON (strict: no NaN or infinities; `run_to_dict`'s content, written
    by `explorer.trace.dumps`: each float32 as its shortest text) and return the path; with
    `attention_left_out` (why), every matrix is saved as null.

    The JSON is written one trace at a time (one trace's text in memory, not the run's) into a hidden
    file beside `path`, renamed to `path` once complete: a full disk leaves no half-written run.

    Raises:
        ExportError: the file cannot be written (disk full, folder not writable); the partial file
            is removed.
    """
    partial = path.with_name(f".{path.name}.partial")
    lenses = [run.lens(index) for index in range(len(run.steps))]  # before the head: they name their top tokens
    head = run_head(run) if attention_left_out is None else {**run_head(run), "attention_left_out": attention_left_out}
    source = attention if attention_left_out is None else None
    try:
        with partial.open("wb") as file:
            file.write(dumps(head)[:-1] + b',"traces":[')
            for index, (step, lens) in enumerate(zip(run.steps, lenses, strict=True)):
                file.write(b"," if index else b"")
                file.write(dumps(step_to_dict(step, source, lens)))
            file.write(b"]}")
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ExportError(f"Cannot write the run to {path.parent} ({exc.strerror or exc}). Free some disk "
                          "space there, or make it writable, and export again.") from exc
    return path


def run_from_dict(data: dict) -> tuple[Run, SavedAttention]:
    """A saved run and the attention matrices it holds.

    Args:
        data: a dict in `FORMAT` (see `run_to_dict`), untrusted: every field is checked against the
            saved-run schema (`explorer.run_schema.check_run`) before any is used.

    Raises:
        ConfigError: not a saved run of this format, or a field that breaks the schema (the message
            names it).
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"Not a saved run of the LLM Inference Explorer (expected format {FORMAT}).")
    check_run(data)
    run = Run(data["model"], data["description"], data["config"])
    if "prompt" in data:  # files exported before the prompt was saved have none
        run.prompt = PromptInputs(**data["prompt"])
    if "equivalence" in data:  # the experiment, where the page ran it
        run.equivalence = EquivalenceResult.from_dict(data["equivalence"])
    pieces = {int(i): piece for i, piece in data["pieces"].items()}
    matrices, lenses, emitted, last = {}, {}, "", len(data["traces"]) - 1
    for index, trace in enumerate(data["traces"]):
        step = StepTrace.from_dict(trace)
        emitted += step.token_text
        # the file keeps the final text; an earlier step's is the text its tokens added (special tokens shown)
        run.append(step, pieces if index == 0 else {}, data["text"] if index == last else emitted)
        for record in trace["attention"]:
            if record["probs"] is not None:
                matrices[(index, record["layer"])] = float32_array(record["probs"])
        if trace.get("lens") is not None:  # runs saved before the lens have none
            lenses[index] = LensRecord.from_dict(trace["lens"])
    run.lens_source = SavedLens(lenses)
    missing = data.get("attention_left_out") or "the session had given it up to stay within its memory budget"
    return run, SavedAttention(matrices, missing)


def load_run(path: str | Path) -> tuple[Run, SavedAttention]:
    """Read a saved run (a file over `run_schema.MAX_RUN_BYTES` is refused before it is parsed).

    Raises:
        ConfigError: unreadable, too large, not strict JSON, or not a saved run (the message says
            what is wrong and what to do).
    """
    return run_from_dict(read_run(path))
