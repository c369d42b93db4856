"""Where each stop lives in a loaded transformers model, from its family's module paths.

The paths are `explorer.families.Family.top_modules` and `layer_modules`. Stops that are modules
are hooked by path; the others (split into heads, RoPE, cache write, the attention core, residual
adds, the MLP activation) are timed between module boundaries or inside the attention function (see
`explorer.runner.hooks`).
"""

from __future__ import annotations

import weakref

from torch import nn

from explorer.families import Family, traced_family
from explorer.stop_names import stop_name

_NAMES_BY_MODEL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def model_features(model: nn.Module) -> Family:
    """The family entry of a loaded transformers causal LM (raises ConfigError if not traced)."""
    return traced_family(model.config.model_type)


def stop_module_names(model: nn.Module) -> dict[nn.Module, str]:
    """Every hooked module of `model` -> its canonical name (e.g. `layers.3.attn.k_proj`); built once per model.

    Raises:
        ConfigError: the model's family is not traced.
        AttributeError: a module path of the family is missing from the model (a misdescribed family).
    """
    names = _NAMES_BY_MODEL.get(model)
    if names is None:
        family = model_features(model)
        names = {_module(model, path): stop for stop, path in family.top_modules.items()}
        routed = moe_layers(model)
        for index, layer in enumerate(_module(model, family.layers)):
            modules = family.modules_of(bool(routed) and routed[index])
            names |= {_module(layer, path): stop_name(index, stop) for stop, path in modules.items()}
        _NAMES_BY_MODEL[model] = names
    return names


def moe_layers(model: nn.Module) -> tuple[bool, ...]:
    """Per decoder layer, whether the loaded model's MLP there is a mixture of experts (it has the
    family's experts module: Qwen3-MoE keeps the `mlp_only_layers` dense); () for a dense family.

    Raises:
        ConfigError: the model's family is not traced.
    """
    family = model_features(model)
    if not family.moe:
        return ()
    path = family.moe_modules["mlp.experts"]
    return tuple(_has(layer, path) for layer in _module(model, family.layers))


def _has(root: nn.Module, path: str) -> bool:
    try:
        _module(root, path)
    except AttributeError:
        return False
    return True


def _module(root: nn.Module, path: str) -> nn.Module:
    """The submodule at a dotted attribute path ("self_attn.q_proj")."""
    module = root
    for part in path.split("."):
        module = getattr(module, part)
    return module
