"""Exporting a page's run as JSON: its size told before it is written, bounded in a hosted app, and
its file deleted again.

Attention dominates an export: a 533-token prefill of SmolLM2 and 3 decode steps hold 77 M
probabilities, most of the 662 MiB of JSON, written by orjson in about 15 s here
(benchmarks/bench_export.py; the hand-written writer it replaced wrote 12.8 M such values 58 times
slower, the same text less its spaces). So the
size is estimated first (`plan_export`, in about 0.1 s) and shown on the export button after every
step and in a message before writing; over a hosted app's cap (`Limits.max_export_bytes`) attention
is left out, and a run still over the cap is refused. The file is written into Gradio's cache
folder, which Gradio serves without copying it (and cleans with `delete_cache`); a page's previous
export is deleted when it exports again, and its last one when its session ends (`Visit.close`),
so disk use returns to where it started. The view on screen exported as HTML (`write_view_html`) is
kept and deleted the same way. What aborted uploads and killed apps leave in that folder
is removed at start and after each export.
"""

from __future__ import annotations

import math
import secrets
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gradio.utils import get_upload_folder

from explorer.errors import ExportError
from explorer.run import step_to_dict
from explorer.saved import run_head, save_run
from explorer.trace import dumps

EXPORT_FOLDER_NAME = "explorer-exports"  # inside Gradio's cache folder
SAMPLE_ARRAYS = 64  # arrays whose values are sampled to estimate the text length of a value
SAMPLE_VALUES = 64  # values sampled per array
SAMPLE_ROWS = 16  # query rows recomputed to sample a matrix the session does not keep
ZERO_BYTES, NULL_BYTES = len("0.0,"), len("null,")  # an exact 0 (attention above the diagonal), a -inf
LEFTOVER_S = 3600  # an upload's temporary file or an export untouched this long is no longer in use


@dataclass(frozen=True)
class ExportPlan:
    """What an export will write.

    Attributes:
        estimated_bytes: the file's size, estimated (within about 10%).
        attention_left_out: why attention is left out (saved as null), or None when it is kept.
    """

    estimated_bytes: int
    attention_left_out: str | None = None

    def summary(self) -> str:
        """E.g. "about 252 MB" or "about 8.9 MB, attention left out"."""
        return f"about {size_text(self.estimated_bytes)}" + (", attention left out" if self.attention_left_out else "")


def plan_export(visit) -> ExportPlan:
    """The export of a visit's run (`explorer.ui.views.Visit`) under its app's `max_export_bytes`:
    with attention when it fits, else without.

    Raises:
        ExportError: over the cap even without attention.
    """
    most_bytes = visit.limits.max_export_bytes
    full_bytes = estimated_bytes(visit, keep_attention=True)
    if most_bytes is None or full_bytes <= most_bytes:
        return ExportPlan(full_bytes)
    bare_bytes = estimated_bytes(visit, keep_attention=False)
    if bare_bytes > most_bytes:
        raise ExportError(f"This run would export to about {size_text(bare_bytes)} even without attention, more "
                          f"than the {size_text(most_bytes)} this explorer writes. Export earlier in a run (after "
                          "fewer decode steps), or run the explorer on your own machine for longer runs.")
    return ExportPlan(bare_bytes, f"this explorer writes at most {size_text(most_bytes)} per export, and with "
                                  f"attention the run would be about {size_text(full_bytes)}")


def export_label(visit) -> str:
    """The export button's label: its estimated size, or why it cannot be exported (no visit: plain)."""
    if visit is None:
        return "Export run (JSON)"
    try:
        return f"Export run (JSON, {plan_export(visit).summary()})"
    except ExportError:
        return f"Export run (over the {size_text(visit.limits.max_export_bytes)} this explorer writes)"


def write_export(visit, plan: ExportPlan, cache_folder: str | Path | None = None) -> Path:
    """Write the visit's run as planned into a fresh folder under Gradio's cache folder (default:
    `gradio.utils.get_upload_folder()`), delete the page's previous export, and return the file.

    Raises:
        ExportError: the disk is full or the folder not writable (nothing is left behind).
    """
    name = f"explorer-run-step-{len(visit.run.steps) - 1}.json"
    return _written(visit, "run", name, lambda path: save_run(visit.run, visit.attention, path,
                                                              plan.attention_left_out), cache_folder)


def write_view_html(visit, figure, name: str, cache_folder: str | Path | None = None) -> Path:
    """Write `figure` as one self-contained HTML page called `name` (plotly.js inlined, about 4.7 MB:
    it opens with no network, as on a lecture-hall laptop), delete the page's previous one, and return
    the file (in Gradio's cache folder, as `write_export`).

    Raises:
        ExportError: the disk is full or the folder not writable (nothing is left behind).
    """
    return _written(visit, "view", name, lambda path: figure.write_html(path, include_plotlyjs=True), cache_folder)


def _written(visit, kind: str, name: str, write, cache_folder: str | Path | None) -> Path:
    """`write(path)` into a fresh folder under Gradio's cache folder; the file becomes the visit's
    export of `kind` ("run" or "view"), its previous one deleted, and what stopped apps left is removed."""
    folder = Path(cache_folder or get_upload_folder()) / EXPORT_FOLDER_NAME / secrets.token_hex(8)
    path = folder / name
    try:
        folder.mkdir(parents=True)
        write(path)
    except BaseException as exc:
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, OSError):
            raise ExportError(f"Cannot write the {kind} to {folder.parent} ({exc.strerror or exc}). Free some disk "
                              "space there, or make it writable, and export again.") from exc
        raise
    remove_export(visit.exports.pop(kind, None))
    visit.exports[kind] = path
    remove_leftovers(cache_folder)
    return path


def remove_export(path: Path | None) -> None:
    """Delete an export written by `write_export` or `write_view_html` and its folder (a file already
    gone is ignored)."""
    if path is not None:
        shutil.rmtree(path.parent, ignore_errors=True)


def remove_leftovers(cache_folder: str | Path | None = None, older_than_s: float = LEFTOVER_S) -> int:
    """Delete what aborted uploads and stopped apps left in Gradio's cache folder (default
    `get_upload_folder()`) and return how many files and folders were removed.

    Gradio streams an upload into a `tmp*` file at the folder's top and moves it into a subfolder once
    complete; a client that disconnects midway leaves that file behind (Gradio 6.31, measured), up to
    `max_file_size` bytes. An app killed before its sessions ended leaves their exports. Only what has
    not been written to for `older_than_s` is removed: no upload in flight, no export a page still
    shows (several apps may share the folder). Errors (a file already gone, a read-only folder) are
    ignored.
    """
    folder = Path(cache_folder or get_upload_folder())
    try:
        candidates = [*folder.glob("tmp*"), *(folder / EXPORT_FOLDER_NAME).glob("*")]
    except OSError:
        return 0
    removed = 0
    for path in candidates:
        try:
            if time.time() - path.stat().st_mtime <= older_than_s:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed += 1
        except OSError:
            continue
    return removed


def estimated_bytes(visit, keep_attention: bool = True) -> int:
    """The size of the visit's export as JSON, bytes, from its arrays' sizes without writing it: each
    exact zero and each -inf counted at its fixed text length, every other value at the mean text
    length of a sample of them, plus the text of everything else (one trace's, times the traces)."""
    run = visit.run
    steps = run.steps
    logits = [step.logits for step in steps if step.logits is not None]
    logits += [stage.logits for step in steps if step.sampling for stage in step.sampling.stages]
    value_bytes = _mean_text_bytes(logits, blank=-np.inf) if logits else 0.0
    values_bytes = _logits_text_bytes(logits, value_bytes) + _lens_text_bytes(run, logits, value_bytes)
    if keep_attention:
        values_bytes += _attention_text_bytes(visit)
    bare = step_to_dict(replace(steps[-1], logits=None, sampling=None, attention=[]), None)
    other_bytes = len(dumps(bare)) * len(steps) + len(dumps(run_head(run)))
    return round(other_bytes + values_bytes)


def _logits_text_bytes(logits: list[np.ndarray], value_bytes: float) -> float:
    """Estimated JSON text of the float32 logits (raw and each sampling stage's) as `StepTrace.to_dict`
    writes them, bytes: each -inf (a token a stage filtered out) as null, every other value at `value_bytes`."""
    values = sum(array.size for array in logits)
    blanks = sum(np.count_nonzero(array == -np.inf) for array in logits)
    return blanks * NULL_BYTES + (values - blanks) * value_bytes


def _lens_text_bytes(run, logits: list[np.ndarray], float_bytes: float) -> float:
    """Estimated JSON text of the run's logit-lens records, bytes, from their shapes (computed or not:
    a live run computes the lenses no view asked for as it exports, `explorer.runner.lens`): per step,
    (L + 1) x P cells of `LENS_TOP` ids and probabilities, a probability of the next token and an
    entropy, each float at `float_bytes` (the logits' mean text length); 0 without a lens (shape-only)."""
    if run.lens_source is None or not logits:
        return 0.0
    from explorer.runner.lens import LENS_TOP, lens_positions  # torch: imported when needed, not with the app

    id_bytes = len(str(logits[0].size)) + 1  # "12345,"
    cells = sum((len(step.kv) + 1) * lens_positions(len(step.input_ids), len(step.kv)) for step in run.steps)
    return cells * (LENS_TOP * (id_bytes + float_bytes) + 2 * float_bytes)


def _attention_text_bytes(visit) -> float:
    """Estimated JSON text of the attention matrices the visit's export writes, bytes: every matrix its
    source gives (`AttentionSource.has`), counted from the records' shapes (the q_len (q_len - 1) / 2
    zeros per head above the causal diagonal exactly), the other values at the mean text length of a
    sample of the newest matrices the source keeps; where it keeps none (a long prompt's session), of
    `SAMPLE_ROWS` evenly spaced query rows of the newest one, recomputed row by row: its whole matrix
    would be [h_q, T, T] (2.4 GB and over 25 s of CPU at 8,180 tokens on the embedded model here)."""
    source = visit.attention
    records = [(step.step_index, record) for step in visit.run.steps for record in step.attention
               if source.has(step.step_index, record.layer)]
    if not records:
        return 0.0
    values = sum(math.prod(record.shape) for _, record in records)
    zeros = sum(heads * rows * (rows - 1) // 2 for heads, rows, _ in (record.shape for _, record in records))
    kept = [(index, record) for index, record in records if source.kept(index, record.layer)]
    if kept:
        sample = [source.probs(index, record.layer) for index, record in kept[-SAMPLE_ARRAYS:]]
    else:
        index, record = records[-1]
        q_len = record.shape[1]
        rows = np.unique(np.linspace(0, q_len - 1, min(q_len, SAMPLE_ROWS)).astype(np.int64)).tolist()
        sample = [source.probs(index, record.layer, rows=(row, row + 1)) for row in rows]
    return zeros * ZERO_BYTES + (values - zeros) * _mean_text_bytes(sample, blank=0)


def _mean_text_bytes(arrays: list[np.ndarray], blank: float) -> float:
    """The mean JSON text length ("x,") of an evenly spaced sample (`_sampled`) of the arrays' values
    other than `blank` (0 above attention's diagonal, -inf for a filtered-out token), bytes."""
    sample = np.concatenate([picked[picked != blank] for picked in _sampled(arrays)])
    return len(dumps(sample)) / max(sample.size, 1)


def _sampled(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Up to `SAMPLE_VALUES` evenly spaced values of each of up to `SAMPLE_ARRAYS` evenly spaced arrays."""
    picks = []
    for index in np.linspace(0, len(arrays) - 1, min(len(arrays), SAMPLE_ARRAYS)).astype(np.int64):
        flat = arrays[index].reshape(-1)
        picks.append(flat[np.linspace(0, flat.size - 1, min(flat.size, SAMPLE_VALUES)).astype(np.int64)])
    return picks


def size_text(n_bytes: float) -> str:
    """A size for people: "740 KB", "3.1 MB", "252 MB", in the units of Gradio's file component beside
    the export button (1 KB = 1,024 bytes)."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n_bytes:.0f} bytes"
