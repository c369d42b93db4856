"""The `Run`: one inference as every view sees it, live or saved; and where its attention comes from.

A `Run` holds the model's name, description and resolved config, the frozen `StepTrace` of every
step so far (the prefill, then each decode step), the generated text, and the text piece of every
token id a view names. The runner appends a step once it is complete, or drops the steps after an
earlier one to continue from it; nothing edits a step. A
run read back from a file is the same type as a live one, so every view is drawn the same way from
either, with no model.

The attention probabilities are the one large quantity a run does not hold itself: an
`AttentionSource` gives them, the live session (kept matrices within one memory budget, the others
recomputed from kept queries) or a loaded file (every matrix it was saved with). Each step's logit lens
comes from the run's `LensSource` (`Run.lens`): the live session computes a step's on first request
(not during the step, which keeps only what it needs), a loaded file gives what it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from explorer.analysis.equivalence import EquivalenceResult
from explorer.analysis.measured import StepCosts, trace_costs
from explorer.analysis.pooling import matrix_part
from explorer.analysis.spec import ModelSpec
from explorer.errors import ConfigError, SessionStateError
from explorer.trace import LensRecord, StepTrace

UNKNOWN_PIECE = "?"  # the piece of a token id the run does not name


class AttentionSource(Protocol):
    """Where a run's attention probabilities come from."""

    def probs(self, step: int, layer: int, rows: tuple[int, int] | None = None, key_factor: int = 1) -> np.ndarray:
        """A layer's attention probabilities at a step: [h_q, q_len, kv_len] float32, rows sum to 1
        (prefill [h_q, T, T], decode [h_q, 1, n]); or a part of them, as
        `explorer.analysis.pooling.matrix_part` takes it: query rows `rows` (first, last + 1) only,
        and with `key_factor` > 1 each row's mass on blocks of that many keys ([h_q, rows,
        ceil(kv_len / key_factor)]), so that a long prefill's whole matrix need not be held.

        Raises:
            IndexError: no such step or layer.
            SessionStateError: the source has no values for it (shape-only mode, or a saved run that
                left attention out).
        """
        ...

    def has(self, step: int, layer: int) -> bool:
        """Whether `probs(step, layer)` gives values (it may compute them)."""
        ...

    def kept(self, step: int, layer: int) -> bool:
        """Whether `probs(step, layer)` gives values without computing them."""
        ...


class LensSource(Protocol):
    """Where a run's logit lens comes from (`Run.lens`)."""

    def lens(self, step: int) -> LensRecord | None:
        """Step `step`'s logit lens; None where there is none (shape-only mode, a run saved before the lens).

        Raises:
            IndexError: no such step.
        """
        ...

    def truncate(self, steps: int) -> None:
        """Forget every step from `steps` on (the run continues from an earlier step)."""
        ...


class SavedLens:
    """The logit lens a saved run (or a run built by hand) holds: step -> record."""

    def __init__(self, records: dict[int, LensRecord]) -> None:
        self._records = records

    def lens(self, step: int) -> LensRecord | None:
        """The saved record, or None where the file holds none."""
        return self._records.get(step)

    def truncate(self, steps: int) -> None:
        """Forget the records of every step from `steps` on."""
        self._records = {step: record for step, record in self._records.items() if step < steps}


@dataclass(frozen=True)
class PromptInputs:
    """What the person gave the prefill, so a saved run can fill the prompt controls again.

    Attributes:
        text: the prompt as typed; None for a prompt given as a token count (shape-only mode).
        use_chat_template: whether the prompt was wrapped in the tokenizer's chat template.
        system_prompt: the system message ("" for none).
        prompt_tokens: the token count of a prompt given as one; None for a text prompt.
        enable_thinking: the chat template's `enable_thinking` (Qwen3's thinking mode); templates
            without that switch ignore it. Runs saved before it existed lack it: False.
    """

    text: str | None
    use_chat_template: bool = True
    system_prompt: str = ""
    prompt_tokens: int | None = None
    enable_thinking: bool = False


class Run:
    """The steps of one inference, appended one at a time (`truncate` drops the later ones).

    Args:
        model: the model's name ("smollm2-135m-instruct", a hub id, a folder, a preset).
        description: one line on the model and its weights.
        config: the model's config as transformers resolved it (`PretrainedConfig.to_dict()`).
    """

    def __init__(self, model: str, description: str, config: dict) -> None:
        self.model, self.description, self.config = model, description, config
        self.prompt: PromptInputs | None = None  # set by the prefill; None for an older saved run
        self.equivalence: EquivalenceResult | None = None  # the experiment on the prompt, once run
        self._texts: list[str] = []  # the generated text after each step
        self._steps: list[StepTrace] = []
        self._pieces: dict[int, str] = {}
        self._costs: dict[int, StepCosts] = {}
        self.lens_source: LensSource | None = None  # the live session's, or the file's; None: no lens
        try:
            self.spec: ModelSpec | None = ModelSpec.from_hf_config(config)
        except ConfigError:
            self.spec = None  # a family the cost model does not know: no roofline

    def append(self, step: StepTrace, pieces: Mapping[int, str], text: str) -> None:
        """Add the next step.

        Args:
            step: its trace; `step.step_index` must be the number of steps so far.
            pieces: the text piece of each token id the step names (the ids it fed, the token it
                chose, its top tokens), added to those of earlier steps.
            text: the generated text after this step.

        Raises:
            ValueError: `step.step_index` is not the next index.
        """
        if step.step_index != len(self._steps):
            raise ValueError(f"step {step.step_index} appended after {len(self._steps)} steps")
        self._steps.append(step)
        self._pieces.update(pieces)
        self._texts.append(text)

    def add_pieces(self, pieces: Mapping[int, str]) -> None:
        """Name more token ids (the top tokens of a logit lens computed after its step)."""
        self._pieces.update(pieces)

    def truncate(self, count: int) -> None:
        """Keep the first `count` steps only (a session continuing from an earlier step); the pieces
        the later steps named stay known.

        Raises:
            ValueError: `count` is not between 1 and the number of steps.
        """
        if not 1 <= count <= len(self._steps):
            raise ValueError(f"cannot keep {count} of {len(self._steps)} steps")
        del self._steps[count:], self._texts[count:]
        self._costs = {index: costs for index, costs in self._costs.items() if index < count}
        if self.lens_source is not None:
            self.lens_source.truncate(count)

    @property
    def text(self) -> str:
        """The generated text after the latest step ("" before the prefill)."""
        return self._texts[-1] if self._texts else ""

    def text_at(self, index: int) -> str:
        """The generated text after step `index` (clamped to the steps run so far)."""
        return self._texts[max(0, min(index, len(self._texts) - 1))] if self._texts else ""

    @property
    def steps(self) -> tuple[StepTrace, ...]:
        """The prefill, then each decode step."""
        return tuple(self._steps)

    @property
    def latest(self) -> StepTrace:
        """The newest step. Raises IndexError before the prefill."""
        return self._steps[-1]

    @property
    def finished(self) -> bool:
        """True once a step ended generation."""
        return bool(self._steps) and self._steps[-1].finished

    @property
    def ids(self) -> list[int]:
        """Every token id fed so far, then the one the latest step chose (0 in shape-only mode)."""
        fed = [i for step in self._steps for i in step.input_ids]
        if not self._steps:
            return fed
        chosen = self._steps[-1].sampling
        return [*fed, chosen.token_id if chosen else 0]

    @property
    def pieces(self) -> dict[int, str]:
        """Token id -> text piece, for every id the run names."""
        return dict(self._pieces)

    def step(self, index: int) -> StepTrace:
        """The step `index` (0 = prefill), clamped to the steps run so far."""
        return self._steps[max(0, min(index, len(self._steps) - 1))]

    def piece(self, token_id: int) -> str:
        """A token id's text piece (`UNKNOWN_PIECE` for one the run does not name)."""
        return self._pieces.get(int(token_id), UNKNOWN_PIECE)

    def pieces_until(self, index: int) -> list[str]:
        """The pieces of the tokens the model has seen up to and including step `index` (n of them)."""
        return [piece for step in self._steps[: index + 1] for piece in step.input_pieces]

    def costs(self, index: int) -> StepCosts | None:
        """Step `index`'s analytic costs and measured times (`trace_costs`), computed once per step on
        first use (not during the step: a decode step stays as fast as the model's); None where the
        cost model does not know the family."""
        if self.spec is None:
            return None
        if index not in self._costs:
            self._costs[index] = trace_costs(self.spec, self._steps[index])
        return self._costs[index]

    def lens(self, index: int) -> LensRecord | None:
        """Step `index`'s logit lens from the run's `lens_source` (a live session computes it on first
        request, under the model's lock; a saved run gives what its file holds); None where there is none.

        Raises:
            IndexError: no such step.
        """
        if not 0 <= index < len(self._steps):
            raise IndexError(f"step {index} of {len(self._steps)}")
        return None if self.lens_source is None else self.lens_source.lens(index)


class SavedAttention:
    """The attention matrices a saved run holds.

    Args:
        matrices: (step, layer) -> [h_q, q_len, kv_len] float32.
        missing: why a matrix the file does not hold is missing (said in the error).
    """

    def __init__(self, matrices: dict[tuple[int, int], np.ndarray], missing: str) -> None:
        self._matrices, self._missing = matrices, missing

    def has(self, step: int, layer: int) -> bool:
        """Whether the file holds the matrix."""
        return (step, layer) in self._matrices

    kept = has  # a saved matrix is never computed

    def probs(self, step: int, layer: int, rows: tuple[int, int] | None = None, key_factor: int = 1) -> np.ndarray:
        """The saved matrix, or its part (see `AttentionSource.probs`).

        Raises:
            SessionStateError: the file holds none for this step and layer.
        """
        probs = self._matrices.get((step, layer))
        if probs is None:
            raise SessionStateError(f"The saved run holds no attention for layer {layer} at step {step} "
                                    f"({self._missing}).")
        return matrix_part(probs, rows, key_factor)


def step_to_dict(step: StepTrace, attention: AttentionSource | None, lens: LensRecord | None = None) -> dict:
    """`step.to_dict()` with its "lens" (`lens.to_dict()`, or None: null) and each attention record's
    "probs": the matrix from `attention` ([h_q, q_len, kv_len] float32, a numpy array for
    `explorer.trace.dumps`), or None (null) where there is no source or it has none (shape-only mode, a
    saved run without it)."""
    data = {**step.to_dict(), "lens": None if lens is None else lens.to_dict()}
    for record in data["attention"]:
        index, layer = step.step_index, record["layer"]
        has = attention is not None and attention.has(index, layer)
        record["probs"] = attention.probs(index, layer) if has else None
    return data
