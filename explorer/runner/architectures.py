"""Where each stop lives in a transformers model, per family: a declarative table.

Stops that are modules are hooked by path; the others (split into heads, RoPE, cache write, the
attention core, residual adds, the MLP activation) are timed between module boundaries or inside
the attention function (see `explorer.runner.hooks`).
"""

from __future__ import annotations

import weakref

from torch import nn

from explorer.stops import ArchFeatures, features_for

# Canonical stop name (relative to a decoder layer) -> attribute path inside the HF decoder layer.
LAYER_MODULES = {
    "input_norm": "input_layernorm",
    "attn.q_proj": "self_attn.q_proj",
    "attn.k_proj": "self_attn.k_proj",
    "attn.v_proj": "self_attn.v_proj",
    "attn.qkv_proj": "self_attn.qkv_proj",
    "attn.q_norm": "self_attn.q_norm",
    "attn.k_norm": "self_attn.k_norm",
    "attn.o_proj": "self_attn.o_proj",
    "post_attn_norm": "post_attention_layernorm",
    "pre_mlp_norm": "pre_feedforward_layernorm",
    "post_mlp_norm": "post_feedforward_layernorm",
    "mlp.gate_proj": "mlp.gate_proj",
    "mlp.up_proj": "mlp.up_proj",
    "mlp.gate_up_proj": "mlp.gate_up_proj",
    "mlp.down_proj": "mlp.down_proj",
}

_NAMES_BY_MODEL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def model_features(model: nn.Module) -> ArchFeatures:
    """The stop features of a loaded transformers causal LM (raises ConfigError if unsupported)."""
    return features_for(model.config.model_type)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a `*ForCausalLM` model (`model.model.layers`)."""
    return model.model.layers


def top_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Stops outside the layers: embedding, final norm, LM head."""
    return {
        "embed": model.get_input_embeddings(),
        "final_norm": model.model.norm,
        "lm_head": model.get_output_embeddings(),
    }


def stop_module_names(model: nn.Module) -> dict[nn.Module, str]:
    """Every hooked module of `model` -> its canonical key (e.g. `layers.3.attn.k_proj`); built once per model."""
    names = _NAMES_BY_MODEL.get(model)
    if names is None:
        names = {module: name for name, module in top_modules(model).items()}
        for index, layer in enumerate(decoder_layers(model)):
            names |= {module: f"layers.{index}.{name}" for name, module in layer_modules(layer).items()}
        _NAMES_BY_MODEL[model] = names
    return names


def layer_modules(layer: nn.Module) -> dict[str, nn.Module]:
    """The stops of `LAYER_MODULES` that one decoder layer has, by canonical relative name."""
    found = {name: _get(layer, path) for name, path in LAYER_MODULES.items()}
    return {name: module for name, module in found.items() if module is not None}


def _get(root: nn.Module, path: str) -> nn.Module | None:
    module = root
    for part in filter(None, path.split(".")):
        module = getattr(module, part, None)
        if not isinstance(module, nn.Module):
            return None
    return module
