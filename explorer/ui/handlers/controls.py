"""The page's controls as typed values, built once per event from what Gradio passes.

Gradio calls a handler with its input components' values by position. Each handler turns them into
these frozen dataclasses on its first line; the layout wires the components in the order of the
fields (`PROMPT_INPUTS`, `SAMPLING_FIELDS`, `VIEW_INPUTS`, `WHAT_IF_FIELDS`), so each order is
written once, here, and the layout's component names are the fields' names.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, fields
from typing import TYPE_CHECKING

from explorer.analysis.hardware import link_names
from explorer.analysis.measured import Scenario
from explorer.analysis.precision import DTYPE_BITS
from explorer.config import SamplingSettings
from explorer.errors import ConfigError, SamplingSettingsError
from explorer.figures.views import ViewOptions

if TYPE_CHECKING:
    from explorer.ui.hosting import Limits
    from explorer.ui.views import Visit


@dataclass(frozen=True)
class PromptControls:
    """What the prefill runs: the model, the prompt and how it is wrapped."""

    model_choice: str | None = None  # a model menu entry
    custom_model: str | None = None  # a hub id or local folder instead (if not empty)
    prompt: str | None = None
    prompt_tokens: float | None = None  # a token count instead (shape-only models without a tokenizer)
    use_chat_template: bool = True
    system_prompt: str | None = None  # chat template only
    enable_thinking: bool = False  # Qwen3's chat-template switch
    batch_lines: bool = False  # a batch: one prompt per line of `prompt`
    lm_head_all: bool = False  # the LM head over every position ([B, T, V] logits)

    def prompts(self) -> list[str] | None:
        """A batch's prompts (the prompt box's non-empty lines, one sequence each); None for one prompt."""
        return prompt_lines(self.prompt) if self.batch_lines else None

    def system(self) -> str | None:
        """The system prompt, None where it is empty or blank."""
        return (self.system_prompt or "").strip() or None


@dataclass(frozen=True)
class SamplingControls:
    """The sampling controls' raw values (numbers as floats, a cleared box as None)."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: float = 0
    max_new_tokens: float = 64

    def settings(self) -> SamplingSettings:
        """The settings the controls give (`SamplingSettings.from_controls`).

        Raises:
            SamplingSettingsError: a field left empty, not a number, or a value out of its range.
        """
        return SamplingSettings.from_controls(*astuple(self))

    def allowed(self, limits: Limits) -> SamplingSettings:
        """`settings()`, within `limits`.

        Raises:
            SamplingSettingsError: as `settings()`, or more new tokens than the app allows.
        """
        return allowed_settings(self.settings(), limits)


@dataclass(frozen=True)
class ViewControls:
    """How the views are drawn: the shown layer, the heads averaged, the roofline's machine and what-if,
    the view on screen, presenter mode and the attention zoom."""

    layer: int = 0
    average_heads: bool = False
    hardware: str = ""  # the roofline's machine; empty: the one the run ran on, where it says
    shown: str = "forward"  # the view whose tab is selected: the only one drawn per step
    presenter: bool = False
    zoom: int | None = None  # attention: the first token of a window; None: the whole matrix
    what_if: Scenario | None = None

    def options(self, visit: Visit, step: int | None = None) -> ViewOptions:
        """The views' options for `step` of the visit's run (None, or past the latest: the latest), the
        layer clamped to the model's, the visit's lens statistic and sink threshold."""
        latest = len(visit.run.steps) - 1
        scenario = self.what_if if isinstance(self.what_if, Scenario) else Scenario()
        return ViewOptions(index(step, latest, latest), index(self.layer, 0, len(visit.run.steps[0].kv) - 1),
                           bool(self.average_heads), self.hardware, bool(self.presenter), zoom_start(self.zoom),
                           scenario, visit.lens_stat, visit.sink_threshold)


def field_names(controls: type) -> tuple[str, ...]:
    """A controls dataclass's field names, in order: the components the layout wires to it."""
    return tuple(f.name for f in fields(controls))


PROMPT_INPUTS = field_names(PromptControls)
SAMPLING_FIELDS = field_names(SamplingControls)
VIEW_INPUTS = field_names(ViewControls)
AS_RUN = "as run"  # a what-if that keeps the step's own count or format
MAX_WHAT_IF_BATCH = 1024  # the largest batch a what-if takes
# the roofline's what-if controls, in `scenario_from` order
WHAT_IF_FIELDS = ("wi_batch", "wi_context", "wi_tokens", "wi_weights", "wi_activations", "wi_kv", "wi_merged",
                  "wi_fused", "wi_lm_head_all", "wi_tp", "wi_link")


def split_controls(values: tuple) -> tuple[SamplingControls, ViewControls]:
    """The sampling controls, then the view controls, from a handler's values in that order (the view
    controls may stop early: the ones left out keep their defaults)."""
    count = len(SAMPLING_FIELDS)
    return SamplingControls(*values[:count]), ViewControls(*values[count:])


def allowed_settings(settings: SamplingSettings, limits: Limits) -> SamplingSettings:
    """`settings` if within `limits`.

    Raises:
        SamplingSettingsError: more new tokens than the app allows.
    """
    if settings.max_new_tokens > limits.max_new_tokens:
        raise SamplingSettingsError(f"This explorer allows at most {limits.max_new_tokens} new tokens per session.")
    return settings


def prompt_lines(prompt: str | None) -> list[str]:
    """A batch's prompts: the prompt box's non-empty lines, one sequence each."""
    return [line for line in (prompt or "").splitlines() if line.strip()]


def scenario_from(batch: float | str | None, context: float | str | None, tokens: float | str | None,
                  weights: str | None, activations: str | None, kv: str | None, merged: bool, fused: bool,
                  lm_head_all: bool, tp: float | str | None = None, link: str | None = None) -> Scenario:
    """The what-if controls as a `Scenario`: a count that is empty, "as run" (or not a whole number
    >= 1) and a format "as run" keep the step's own; a count's menu takes a typed number too; the TP
    degree R likewise (empty or 1: one device), its link a name of `link_names` (else NVLink 4).

    Raises:
        ConfigError: a count typed that is not a number, or a batch over `MAX_WHAT_IF_BATCH`.
    """
    def fmt(value) -> str | None:
        return value if value in DTYPE_BITS else None

    sequences = what_if_count(batch, "batch B")
    if sequences is not None and sequences > MAX_WHAT_IF_BATCH:
        raise ConfigError(f"The what-if batch B is at most {MAX_WHAT_IF_BATCH} sequences here, not {sequences}.")
    return Scenario(sequences, what_if_count(context, "decode n"), what_if_count(tokens, "prefill T"), fmt(weights),
                    fmt(activations), fmt(kv), bool(merged), bool(fused), bool(lm_head_all),
                    what_if_count(tp, "TP degree R"), link if link in link_names() else None)


def what_if_count(value: float | str | None, name: str) -> int | None:
    """A what-if menu's count (a number, or its text as typed); None for empty, "as run", or a
    number under 1.

    Raises:
        ConfigError: text that is not a number.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", AS_RUN):
            return None
        try:
            value = float(text.replace(",", "").replace("_", ""))
        except ValueError:
            raise ConfigError(f"The what-if {name} is a whole number of 1 or more, or “{AS_RUN}”: not “{text}”.") \
                from None
    return int(value) if isinstance(value, int | float) and math.isfinite(value) and value >= 1 else None


def index(value: float | None, default: int, top: int) -> int:
    """A control's number as an index in [0, top]; `default` for an empty box, NaN or infinity."""
    if value is None or not math.isfinite(value):
        return default
    return max(0, min(int(value), top))


def zoom_start(value: str | float | None) -> int | None:
    """The attention zoom box (a number; text from an older link or client) as a first token; None (the
    whole matrix) for an empty box, anything that is not a whole number, NaN or infinity."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0, int(value)) if math.isfinite(value) else None
    try:
        return max(0, int(str(value).strip()))
    except ValueError:
        return None
