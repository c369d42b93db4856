"""The start-up model loaded behind the served page: what the page shows of it before it is loaded
(`ModelFacts`), the load in a background thread (`PendingModel`) and the page's note once it is
ready (`on_model_ready`).

The page is served first: torch, transformers and the weights take seconds to load, Gradio and the
app's layout do not need them. Every handler that runs the model waits for the load
(`ModelRegistry.get`); a load that fails is said to the visitor as a message.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

from explorer.analysis.hardware import THIS_MACHINE
from explorer.config import SMOLLM2_PRESET
from explorer.errors import ExplorerError, ModelLoadError
from explorer.runner.embedded import NAME as EMBEDDED_NAME
from explorer.ui.plain import markdown_text

if TYPE_CHECKING:
    from explorer.runner.loading import LoadedModel

LOADING = "Loading the model…"
LOADING_STATUS = f"**{LOADING}** Prefill and the other steps wait for it."  # the status line meanwhile


@dataclass(frozen=True)
class ModelFacts:
    """What the page's controls show of the start-up model.

    Attributes:
        name: what was asked for, as `LoadedModel.name` says it (the model menu's entry).
        shape_only: a config on the meta device, no weights.
        takes_text: it has a tokenizer (a text prompt) rather than taking a prompt length.
        description: one line on the weights, their device and dtype (`LOADING` before the load).
        num_layers: decoder layers; None until the model is loaded.
        hardware: the roofline's machine for its steps (a catalogue key, or "this-machine").
    """

    name: str
    shape_only: bool
    takes_text: bool
    description: str = LOADING
    num_layers: int | None = None
    hardware: str = THIS_MACHINE

    @classmethod
    def expected(cls, model: str | None = None, config: str | None = None) -> ModelFacts:
        """The facts of what `explorer.runner.loading.load(model, config)` will load, known without
        torch: its name and kind; whether it reads text is a guess (a real model: yes; a preset:
        the one the embedded tokenizer serves), set right once it is loaded."""
        if config is not None:
            return cls(config, True, config == SMOLLM2_PRESET)
        return cls(model or EMBEDDED_NAME, False, True)

    @classmethod
    def of(cls, loaded: LoadedModel) -> ModelFacts:
        """The facts of a loaded model."""
        from explorer.runner.devices import roofline_hardware_key

        hardware = THIS_MACHINE if loaded.shape_only else roofline_hardware_key(loaded.device)
        return cls(loaded.name, loaded.shape_only, loaded.tokenizer is not None, loaded.description,
                   loaded.model.config.num_hidden_layers, hardware)


class PendingModel:
    """The start-up model, loaded by `load` in a background thread once `start` is called.

    Args:
        expected: what the page shows before the load ends (`ModelFacts.expected`).
        load: loads the model (it may raise; its error is kept for whoever waits).
    """

    def __init__(self, expected: ModelFacts, load: Callable[[], LoadedModel]) -> None:
        self.expected = expected
        self._load = load
        self._future: Future = Future()
        self._facts: ModelFacts | None = None  # the loaded model's, once loaded

    @classmethod
    def ready(cls, loaded: LoadedModel) -> PendingModel:
        """A model already loaded (nothing to start)."""
        pending = cls(ModelFacts.of(loaded), lambda: loaded)
        pending._facts = pending.expected
        pending._future.set_result(loaded)
        return pending

    def start(self) -> None:
        """Start loading in a daemon thread (its progress is the load function's)."""
        threading.Thread(target=self._run, name="explorer-model-load", daemon=True).start()

    def _run(self) -> None:
        try:
            loaded = self._load()
            self._facts = ModelFacts.of(loaded)
            self._future.set_result(loaded)
        except BaseException as exc:  # noqa: BLE001 - kept for every handler that waits, said as a message
            self._future.set_exception(exc)

    def done(self) -> bool:
        """Whether the load has ended (loaded or failed)."""
        return self._future.done()

    def wait(self) -> None:
        """Wait for the load to end, loaded or failed (it raises nothing)."""
        wait([self._future])

    def result(self) -> LoadedModel:
        """The loaded model, once loaded (waits for it).

        Raises:
            ModelLoadError: the load failed; the message names the model and says why (its
                `ExplorerError` message, or the first line of another error).
        """
        try:
            return self._future.result()
        except Exception as exc:  # noqa: BLE001 - one clear message for every visitor
            reason = str(exc) if isinstance(exc, ExplorerError) else (str(exc).strip().splitlines() or [""])[0]
            raise ModelLoadError(f"The model {self.expected.name} could not be loaded: "
                                 f"{reason or type(exc).__name__}") from exc

    @property
    def facts(self) -> ModelFacts:
        """The loaded model's facts once it is loaded, the expected ones before (or after a failed load)."""
        return self._facts or self.expected


def ready_text(facts: ModelFacts) -> str:
    """The status line once the start-up model is loaded (Markdown)."""
    return f"**Model loaded:** {markdown_text(facts.description)}."


def prompt_label(takes_text: bool) -> str:
    """The prompt box's label: plain, or saying that a model without a tokenizer does not read it."""
    return "Prompt" if takes_text else "Prompt (not used: this shape-only model has no tokenizer; set its length below)"


def on_model_ready(pending: PendingModel) -> tuple:
    """The page's controls once the start-up model is loaded (it waits; the status line says
    `LOADING_STATUS` meanwhile): the status line, the model menu's note, the layer slider's range,
    the roofline's machine, and the prompt's controls where the model reads no text after all.

    A load that failed is said on the status line (the page stays usable: saved runs, other models).
    """
    import gradio as gr

    pending.wait()
    try:
        pending.result()
    except ModelLoadError as exc:
        return (f"**Error:** {markdown_text(str(exc))}", gr.update(info=str(exc)),
                gr.update(interactive=True), *[gr.skip()] * 6)
    facts = pending.facts
    text = facts.takes_text
    prompt = ((gr.update(label=prompt_label(text)), gr.update(visible=not text), *[gr.update(visible=text)] * 3)
              if text != pending.expected.takes_text else [gr.skip()] * 5)
    return (ready_text(facts), gr.update(info=facts.description),
            gr.update(maximum=facts.num_layers - 1, interactive=True), facts.hardware, *prompt)
