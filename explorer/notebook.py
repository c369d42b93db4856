"""`Explorer`: the explorer from Python (a notebook, a script), without the app.

A thin front end over what the app uses: `explorer.runner.loading.load` loads the model (or a config,
shape-only), an `InferenceSession` runs the prefill and the decode steps, `explorer.figures.views.render`
draws any view as a Plotly figure (`fig.show()`, `fig.write_html(...)`), and `explorer.saved` writes
and reads a run as the app's export does (a saved run draws every view with no model).

    from explorer import Explorer
    ex = Explorer.load()                       # the embedded SmolLM2-135M-Instruct
    ex.prefill("The capital of France is")
    ex.decode(3)
    ex.figure("attention", step=1, layer=0).show()
    ex.save("run.json")
    Explorer.open("run.json").figure("kv_cache").write_html("kv.html", include_plotlyjs=True)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import plotly.graph_objects as go

from explorer.analysis.measured import Scenario
from explorer.config import SamplingSettings
from explorer.errors import ConfigError, SessionStateError
from explorer.figures.view_fetch import own_hardware
from explorer.figures.view_types import ViewOptions, ViewSources
from explorer.figures.views import VIEWS, render
from explorer.run import AttentionSource, Run
from explorer.run_summary import summary_html, summary_line
from explorer.runner.drive import decode_steps
from explorer.runner.loading import LoadedModel, load
from explorer.runner.session import InferenceSession
from explorer.runner.view_services import RUNNER_SERVICES
from explorer.saved import load_run, save_run
from explorer.trace import StepTrace


class Explorer:
    """One inference to explore: a model to run (`load`) or a saved run to look at (`open`).

    Args:
        loaded: the model (`explorer.runner.loading.load`); None for a saved run (no model).
        settings: the sampling settings of the next prefill and decode steps (default greedy).
    """

    def __init__(self, loaded: LoadedModel | None = None, settings: SamplingSettings | None = None) -> None:
        self.loaded = loaded
        self.settings = settings or SamplingSettings()
        self._session: InferenceSession | None = None
        self._saved: tuple[Run, AttentionSource] | None = None

    @classmethod
    def load(cls, model: str | None = None, *, config: str | None = None, device: str = "auto",
             dtype: str = "auto", **sampling) -> Explorer:
        """An explorer on a model: the embedded SmolLM2-135M-Instruct by default, a hub id or a local
        folder, or with `config` (a preset such as "qwen3-8b" or a config.json path) shape-only, on
        the `meta` device with no weights.

        Args:
            sampling: `SamplingSettings` fields (do_sample, temperature, top_k, top_p, min_p, seed,
                max_new_tokens); the rest keep their defaults (greedy).

        Raises:
            ConfigError, UnknownPresetError, ModelLoadError: see `explorer.runner.loading.load`.
            SamplingSettingsError: a sampling value out of its range.
            TypeError: a keyword that is no sampling setting.
        """
        return cls(load(model, config, device, dtype), SamplingSettings(**sampling))

    @classmethod
    def open(cls, path: str | Path) -> Explorer:
        """A saved run (the app's export or `save`): every view and step, no model.

        Raises:
            ConfigError: the file is unreadable, too large, or not a saved run (the message says which).
        """
        explorer = cls()
        explorer._saved = load_run(path)
        return explorer

    @property
    def run(self) -> Run:
        """The steps so far (`explorer.run.Run`: its `steps`, `text`, `pieces`, ...).

        Raises:
            SessionStateError: nothing run or opened yet.
        """
        if self._saved is not None:
            return self._saved[0]
        if self._session is None or not self._session.run.steps:
            raise SessionStateError("Nothing to show yet: call prefill(...) first.")
        return self._session.run

    @property
    def text(self) -> str:
        """The generated text so far."""
        return self.run.text

    def prefill(self, prompt: str | None = None, *, use_chat_template: bool = True, system_prompt: str | None = None,
                prompt_tokens: int | None = None, enable_thinking: bool = False) -> StepTrace:
        """Start a new run: the prompt's prefill on a fresh KV cache (and a generator seeded with
        `settings.seed`), which chooses the first token. A shape-only model without a tokenizer
        takes `prompt_tokens` (a count) instead of text. See `InferenceSession.prefill`.

        Raises:
            SessionStateError: a saved run (no model).
            PromptError: an empty or too long prompt, text for a model without a tokenizer, ...
        """
        if self.loaded is None:
            raise SessionStateError("This is a saved run: there is no model to run. Use Explorer.load() for one.")
        self._session = InferenceSession(self.loaded, self.settings)
        return self._session.prefill(prompt, use_chat_template, system_prompt, prompt_tokens,
                                     enable_thinking=enable_thinking)

    def decode(self, steps: int = 1, **sampling) -> list[StepTrace]:
        """Run up to `steps` decode steps (fewer where generation ends: an EOS token, max_new_tokens,
        a full context) and return them; `sampling` changes settings from this step on.

        Raises:
            ConfigError: `steps` is not a whole number >= 1.
            SessionStateError: no prefill yet, a saved run, or generation already ended.
            SamplingSettingsError: a sampling value out of its range.
        """
        if not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"steps must be a whole number >= 1, not {steps!r}.")
        if self._session is None:
            raise SessionStateError("Call prefill(...) first: a decode step continues a prompt."
                                    if self.loaded is not None else "This is a saved run: there is no model to run.")
        if sampling:
            self.settings = replace(self.settings, **sampling)
        return list(decode_steps(self._session, steps, self.settings))

    def figure(self, view: str = "forward", step: int | None = None, layer: int = 0, *, average_heads: bool = False,
               hardware: str | None = None, zoom: int | None = None, presenter: bool = False,
               what_if: Scenario | None = None, preview: SamplingSettings | None = None) -> go.Figure:
        """The figure of one view, as the app draws it.

        Args:
            view: one of "forward", "journey", "attention", "kv_cache", "sampling", "roofline", "lens".
            step: 0 for the prefill, k for the k-th decode step; None: the latest.
            layer: the decoder layer of the forward, journey and attention views.
            average_heads: attention: the mean over query heads instead of one panel per head.
            hardware: the roofline's machine (a catalogue key, e.g. "h100-sxm", or "this-machine");
                None: the machine the run ran on (a saved run: "this-machine").
            zoom: attention: the first token of a 48-token window drawn at full resolution.
            presenter: larger text for a projector.
            what_if: the roofline's what-if (`explorer.analysis.measured.Scenario`).
            preview: sampling: other settings applied to the step's stored logits (no model run).

        Raises:
            ConfigError: an unknown view or machine, or a step or layer the run does not have.
            SessionStateError: nothing run yet, or a saved run without that attention.
        """
        run = self.run
        if view not in VIEWS:
            raise ConfigError(f"Unknown view {view!r}: pick one of {', '.join(VIEWS)}.")
        step = len(run.steps) - 1 if step is None else step
        n_layers = len(run.steps[0].kv)
        if not 0 <= step < len(run.steps) or not 0 <= layer < n_layers:
            raise ConfigError(f"The run has steps 0 to {len(run.steps) - 1} and layers 0 to {n_layers - 1}.")
        if hardware is None:
            hardware = own_hardware(run.step(step).device, RUNNER_SERVICES, saved=self._saved is not None)
        options = ViewOptions(step, layer, average_heads, hardware, presenter, zoom, what_if or Scenario(),
                              preview=preview)
        return render(run, ViewSources(self._attention(), RUNNER_SERVICES, self._saved is not None), options, view)

    def save(self, path: str | Path) -> Path:
        """Write the run with every attention matrix as JSON (the app's export format) and return the path.

        Raises:
            SessionStateError: nothing run yet.
            ExportError: the file cannot be written.
        """
        return save_run(self.run, self._attention(), Path(path))

    def __repr__(self) -> str:
        """One line: the model and, once there is a run, its steps, tokens and text (`explorer.run_summary`)."""
        return summary_line(*self._model_said()[:1], self._run_or_none(), saved=self._saved is not None)

    def _repr_html_(self) -> str:
        """The run at a glance in a notebook: the model, the prompt, the steps and tokens so far, the
        text, and a table of the steps (`explorer.run_summary`)."""
        return summary_html(*self._model_said(), self._run_or_none(), saved=self._saved is not None)

    def _model_said(self) -> tuple[str, str]:
        """The model's name and description: the loaded model's, or the saved run's."""
        if self._saved is not None:
            return self._saved[0].model, self._saved[0].description
        if self.loaded is None:
            return "no model", ""
        return self.loaded.name, self.loaded.description

    def _run_or_none(self) -> Run | None:
        return self._saved[0] if self._saved is not None else self._session.run if self._session else None

    def _attention(self) -> AttentionSource:
        return self._saved[1] if self._saved is not None else self._session.attention
