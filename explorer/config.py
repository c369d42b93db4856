"""Shape-only presets (real `config.json` values) and the sampling settings.

Pure Python: no torch, no gradio.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import platformdirs

from explorer.errors import ConfigError, SamplingSettingsError, UnknownPresetError

CACHE_ENV_VAR = "EXPLORER_CACHE_DIR"

# The shape-only preset whose vocabulary is the embedded model's (SmolLM2-135M base and Instruct share
# it): it reads text with that tokenizer.
SMOLLM2_PRESET = "smollm2-135m"

# Each preset is the `config.json` published with these weights (copied verbatim into explorer/presets/).
PRESET_SOURCES = {
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "tinyllama-1.1b": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "gpt2": "openai-community/gpt2",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
}


def cache_dir() -> Path:
    """The explorer's cache directory (converted model, machine probe): `$EXPLORER_CACHE_DIR` if set,
    else `platformdirs.user_cache_dir("llm-inference-explorer")`. The folder may not exist yet."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("llm-inference-explorer"))


def data_dir() -> Path:
    """Where the explorer keeps files fetched once (the embedded model's GGUF): the user data directory,
    `platformdirs.user_data_dir("llm-inference-explorer")`, whatever `$EXPLORER_CACHE_DIR` says. The
    folder may not exist yet."""
    return Path(platformdirs.user_data_dir("llm-inference-explorer"))


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
    try:
        if path.is_dir():
            path = path / "config.json"
        found = path.is_file()
    except OSError:  # a name no file system takes (too long)
        found = False
    if not found:
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


# The lowest temperature: below about 1e-37 the scaled float32 logits overflow to inf and the draw
# fails; 0.01 already makes the top token all but certain (turn sampling off for exact greedy).
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 100.0
SEED_LIMIT = 2**63  # torch.Generator.manual_seed takes a 64-bit signed value
# The most sequences one run takes together (`InferenceSession.prefill(batch=...)`).
MAX_BATCH = 256


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is chosen, in the order transformers' `generate` applies the filters.

    Attributes:
        do_sample: False for greedy (argmax of the raw logits); True to draw from the filtered distribution.
        temperature: logits are divided by it; in [0.01, 100]. 1.0 leaves them unchanged.
        top_k: keep the k largest logits; 0 disables.
        top_p: nucleus: keep the smallest set whose cumulative probability reaches p; 1.0 disables.
        min_p: drop tokens whose probability is below min_p x the largest probability; 0.0 disables.
        max_new_tokens: decode steps after which generation stops.
        seed: seed of the session's own random generator for the multinomial draw, in [0, 2^63).

    Raises:
        SamplingSettingsError: a value of the wrong type (not a number, not whole, NaN), or out of
            its range; the message names the field and its range.
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
            (_is_real(self.temperature) and MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE,
             f"temperature must be in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE:g}]; for greedy decoding "
             "(temperature 0) turn sampling off"),
            (_is_whole(self.top_k) and self.top_k >= 0, "top-k must be a whole number >= 0 (0 disables it)"),
            (_is_real(self.top_p) and 0 < self.top_p <= 1, "top-p must be in (0, 1] (1 disables it)"),
            (_is_real(self.min_p) and 0 <= self.min_p <= 1, "min-p must be in [0, 1] (0 disables it)"),
            (_is_whole(self.max_new_tokens) and self.max_new_tokens >= 1,
             "max new tokens must be a whole number >= 1"),
            (_is_whole(self.seed) and 0 <= self.seed < SEED_LIMIT, "the seed must be a whole number in [0, 2^63)"),
        ]
        for ok, message in checks:
            if not ok:
                raise SamplingSettingsError(message)
        for name in ("temperature", "top_p", "min_p"):  # transformers' warpers insist on a float
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("top_k", "max_new_tokens", "seed"):  # a numpy integer becomes a JSON-ready int
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "do_sample", bool(self.do_sample))

    @classmethod
    def from_controls(cls, do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens) -> SamplingSettings:
        """Settings from a form's raw values (numbers as floats, a cleared box as None).

        A whole-valued float (8.0) counts as whole; a fraction, NaN or infinity is refused by the range
        check of its field, never truncated.

        Raises:
            SamplingSettingsError: a field left empty, a value that is not a number (text, a bool), a
                fractional top-k, seed or max new tokens, NaN or infinity, or a value out of its range.
        """
        fields = {"temperature": temperature, "top-k": top_k, "top-p": top_p, "min-p": min_p, "the seed": seed,
                  "max new tokens": max_new_tokens}
        if any(value is None for value in fields.values()):
            raise SamplingSettingsError("Fill in every sampling field (an empty seed or max new tokens has no value).")
        for name, value in fields.items():
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise SamplingSettingsError(f"{name} must be a number; type digits only.")
        return cls(do_sample=bool(do_sample), temperature=temperature, top_k=_whole(top_k), top_p=top_p,
                   min_p=min_p, seed=_whole(seed), max_new_tokens=_whole(max_new_tokens))

    def to_dict(self) -> dict:
        """The settings as a plain dict (JSON-serialisable)."""
        return asdict(self)


def _is_real(value) -> bool:
    """A finite real number: an int of any size, or a finite float (not a bool, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return isinstance(value, numbers.Integral) or math.isfinite(value)


def _is_whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _whole(value: float):
    """`value` as an int when it is whole (8.0 -> 8); else unchanged, for the range check to refuse."""
    if isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    return value
