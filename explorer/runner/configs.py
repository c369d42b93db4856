"""A `config.json` read through transformers' own config classes, so every default is transformers'.

A published config often leaves keys out (Gemma-3-1B-it has no `tie_word_embeddings`, most Qwen2
configs no `layer_types`); the config class of the family fills them in exactly as the model that
transformers builds from it will use them. Everything that turns a preset or a config file into
dimensions (`python -m explorer info` and `roofline`, shape-only loading) goes through here, and the
pure analysis (`ModelSpec.from_hf_config`) reads the resolved dict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformers import AutoConfig

from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config
from explorer.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def transformers_config(fields: dict, name: str) -> PretrainedConfig:
    """The transformers config of the family `fields["model_type"]`, built from raw `config.json` fields.

    Args:
        fields: the fields as `config.json` holds them (not changed).
        name: what the config is called in messages (a preset name or a path).

    Raises:
        ConfigError: no `model_type`, or one this transformers does not know.
    """
    fields = dict(fields)
    model_type = fields.pop("model_type", None)
    if not model_type:
        raise ConfigError(f"The config of '{name}' has no model_type; add it (e.g. \"llama\").")
    try:
        return AutoConfig.for_model(model_type, **fields)
    except (ValueError, KeyError) as exc:
        first_line = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise ConfigError(f"transformers does not know model_type '{model_type}' of '{name}' "
                          f"({first_line}). Use a supported family.") from exc


def resolved_config(preset_or_path: str | dict) -> dict:
    """Every field of a config as transformers resolves it (`PretrainedConfig.to_dict()`).

    Args:
        preset_or_path: a shipped preset name, a path to a `config.json` (or its folder), or the raw
            fields themselves.

    Raises:
        UnknownPresetError: neither a preset nor an existing path.
        ConfigError: an unreadable file, or see `transformers_config`.
    """
    if isinstance(preset_or_path, dict):
        return transformers_config(preset_or_path, str(preset_or_path.get("model_type"))).to_dict()
    return transformers_config(load_hf_config(preset_or_path), preset_or_path).to_dict()


def resolved_spec(preset_or_path: str | dict) -> ModelSpec:
    """The `ModelSpec` of a preset, a config file or raw fields, with transformers' defaults.

    Raises:
        UnknownPresetError, ConfigError: see `resolved_config` and `ModelSpec.from_hf_config`.
    """
    return ModelSpec.from_hf_config(resolved_config(preset_or_path))
