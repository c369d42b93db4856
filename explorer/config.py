"""Shape-only presets (real `config.json` values) and the sampling settings.

Pure Python: no torch, no gradio.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import platformdirs

from explorer.errors import ConfigError, SamplingSettingsError, UnknownPresetError

CACHE_ENV_VAR = "EXPLORER_CACHE_DIR"

# Each preset is the `config.json` published with these weights (copied verbatim into explorer/presets/).
PRESET_SOURCES = {
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "tinyllama-1.1b": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
}


def cache_dir() -> Path:
    """The explorer's cache directory (converted model, machine probe): `$EXPLORER_CACHE_DIR` if set,
    else `platformdirs.user_cache_dir("llm-inference-explorer")`. The folder may not exist yet."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("llm-inference-explorer"))


def preset_names() -> list[str]:
    """Names of the shipped shape-only presets, sorted."""
    return sorted(PRESET_SOURCES)


def load_hf_config(preset_or_path: str) -> dict:
    """The raw Hugging Face config dict for a preset name or a path to a `config.json` (or its folder).

    Raises:
        UnknownPresetError: the name is neither a preset nor an existing path.
        ConfigError: the file is not valid JSON or not a JSON object.
    """
    if preset_or_path in PRESET_SOURCES:
        text = resources.files("explorer.presets").joinpath(f"{preset_or_path}.json").read_text()
        return json.loads(text)
    path = Path(preset_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UnknownPresetError(
            f"'{preset_or_path}' is neither a preset nor a config.json file. "
            f"Presets: {', '.join(preset_names())}."
        )
    return read_json_object(path, "config fields")


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in the file at `path`.

    Args:
        path: the file.
        what: what the object holds, for the error message ("config fields", "a hardware entry").

    Raises:
        ConfigError: the file cannot be read, is not JSON, or holds something other than an object.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Cannot read {path} as JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds JSON but not one object of {what}.")
    return data


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is chosen, in the order transformers' `generate` applies the filters.

    Attributes:
        do_sample: False for greedy (argmax of the raw logits); True to draw from the filtered distribution.
        temperature: logits are divided by it; > 0. 1.0 leaves them unchanged.
        top_k: keep the k largest logits; 0 disables.
        top_p: nucleus: keep the smallest set whose cumulative probability reaches p; 1.0 disables.
        min_p: drop tokens whose probability is below min_p x the largest probability; 0.0 disables.
        max_new_tokens: decode steps after which generation stops.
        seed: seed of the session's own random generator for the multinomial draw.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    max_new_tokens: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.temperature > 0 and self.temperature <= 100, "temperature must be in (0, 100]"),
            (isinstance(self.top_k, int) and self.top_k >= 0, "top-k must be a whole number >= 0 (0 disables it)"),
            (0 < self.top_p <= 1, "top-p must be in (0, 1] (1 disables it)"),
            (0 <= self.min_p <= 1, "min-p must be in [0, 1] (0 disables it)"),
            (isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1, "max new tokens must be >= 1"),
            (isinstance(self.seed, int) and 0 <= self.seed < 2**63, "the seed must be a whole number in [0, 2^63)"),
        ]
        for ok, message in checks:
            if not ok:
                raise SamplingSettingsError(message)

    def to_dict(self) -> dict:
        """The settings as a plain dict (JSON-serialisable)."""
        return asdict(self)
