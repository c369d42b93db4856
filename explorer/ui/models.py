"""The models a visitor can pick: the one the app started with, the shape-only presets, or any
causal LM by hub id or folder. Loaded once, shared read-only by every session."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from explorer.closed_pipe import again_if_closed
from explorer.config import preset_names
from explorer.errors import ModelLoadError
from explorer.ui.startup import ModelFacts, PendingModel

if TYPE_CHECKING:
    from explorer.runner.loading import LoadedModel

SHAPE_ONLY_PREFIX = "shape-only: "
# Models loaded on request besides the start-up one: each may hold GBs, so only the most
# recently used few stay (judgement: two fit beside the default on a 24 GB laptop at 0.6B-1B).
MAX_EXTRA_MODELS = 2


class ModelRegistry:
    """The start-up model plus models loaded on request, least recently used dropped first.

    Args:
        default: the model the app was started with (never dropped), loaded or still loading
            (a `PendingModel`: whatever needs it waits for it).
        device: where models picked by hub id or folder are loaded ("auto", "cpu", "cuda:0") when the
            start-up model has no device of its own (shape-only) or failed to load; else on its device.
        allowed: the hub ids that may be loaded by name; None allows any hub id or local folder.
    """

    def __init__(self, default: LoadedModel | PendingModel, device: str = "cpu",
                 allowed: tuple[str, ...] | None = None) -> None:
        self.pending = default if isinstance(default, PendingModel) else PendingModel.ready(default)
        self.allowed = allowed
        self._device = device
        self._extra: OrderedDict[str, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def default(self) -> LoadedModel:
        """The start-up model (waits for its load).

        Raises:
            ModelLoadError: its load failed (the message says why).
        """
        return self.pending.result()

    @property
    def facts(self) -> ModelFacts:
        """What the page shows of the start-up model (known before it is loaded)."""
        return self.pending.facts

    @property
    def device(self) -> str:
        """Where models picked by hub id or folder are loaded (waits for the start-up model's load)."""
        try:
            device = self.default.device
        except ModelLoadError:
            return self._device
        return self._device if device == "meta" else device

    def choices(self) -> list[str]:
        """The model menu: the start-up model, the allowed hub models (a hosted app's), then each
        shape-only preset."""
        presets = [SHAPE_ONLY_PREFIX + name for name in preset_names()]
        return list(dict.fromkeys([self.default_choice, *(self.allowed or ()), *presets]))

    @property
    def default_choice(self) -> str:
        """The menu entry of the start-up model."""
        facts = self.pending.expected
        if facts.shape_only and facts.name in preset_names():
            return SHAPE_ONLY_PREFIX + facts.name
        return facts.name

    def takes_text(self, choice: str) -> bool:
        """Whether the menu entry's model has a tokenizer here (a text prompt) rather than taking a
        prompt length (a shape-only preset without one)."""
        if choice in (self.pending.expected.name, self.default_choice):
            return self.facts.takes_text
        if not choice.startswith(SHAPE_ONLY_PREFIX):
            return True
        self.pending.wait()  # the runner is imported by the start-up load, never beside it
        from explorer.runner.loading import preset_has_tokenizer

        return preset_has_tokenizer(choice.removeprefix(SHAPE_ONLY_PREFIX))

    def get(self, choice: str, custom: str = "") -> LoadedModel:
        """The model for a menu entry, or for `custom` (a hub id or folder) when it is not blank;
        waits for the start-up model's load first.

        Raises:
            UnknownPresetError, ConfigError, ModelLoadError: the model is not allowed here or cannot be
                loaded (the message says why and what to do), or the start-up model, asked for,
                failed to load.
        """
        custom = (custom or "").strip()
        key = custom or choice
        if key in (self.pending.expected.name, self.default_choice):
            return self.default
        if custom and self.allowed is not None and custom not in self.allowed:
            raise ModelLoadError(f"This hosted explorer loads only {', '.join(self.allowed)} besides the menu's "
                                 "models; run it on your own machine (python app.py) for any other.")
        if not custom and choice not in self.choices():
            raise ModelLoadError(f"'{choice}' is not in the model menu.")
        with self._lock:
            if key not in self._extra:
                self._extra[key] = self._load(choice, custom)
                while len(self._extra) > MAX_EXTRA_MODELS:
                    self._extra.popitem(last=False)
            self._extra.move_to_end(key)
            return self._extra[key]

    def resolve(self, custom: str) -> None:
        """Read the config of `custom` (a hub id or folder) where it is not loaded yet
        (`explorer.runner.loading.resolved_model_config`): a name the hub lacks, or a hub out of reach,
        is said before the Prefill takes its place in the model's queue, so that the look-up holds no
        other page's step. A blank, loaded or not allowed name is left to `get`.

        Raises:
            ConfigError, ModelLoadError: the name is no folder here and no model the hub (or its
                cache) has, said as `load_model` would.
        """
        custom = (custom or "").strip()
        if not custom or custom in self._extra or custom == self.pending.expected.name or (
                self.allowed is not None and custom not in self.allowed):
            return
        self.pending.wait()  # the runner is imported by the start-up load, never beside it
        from explorer.runner.loading import resolved_model_config

        resolved_model_config(model=custom)

    def _load(self, choice: str, custom: str) -> LoadedModel:
        device = self.device  # waits for the start-up load, which imports the runner
        from explorer.runner.loading import load_model, load_shape_only

        if custom or choice in (self.allowed or ()):
            return again_if_closed(lambda: load_model(custom or choice, device=device))
        return load_shape_only(choice.removeprefix(SHAPE_ONLY_PREFIX))
