"""The shared model with another attention implementation, for one experiment's passes, without
switching the model under the other pages.

Transformers picks a layer's attention function from `config._attn_implementation` at every forward
(`ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, ...)` in each family's
attention module, and the mask's kind from the same field): switching the shared model's config
(`set_attn_implementation`) would switch it for every page's pass. A view is a shallow copy of the
module tree whose modules hold a config of their own, set to the implementation wanted, and share
every parameter and buffer with the model (the same tensors: no memory but the modules' own small
objects). Its passes run transformers' own code for that implementation on the model's weights, and
take turns in the model's line (`explorer.runner.locks.share_turns`).
"""

from __future__ import annotations

import copy
import weakref

import torch

from explorer.runner.locks import share_turns
from explorer.runner.passes import model_pass

_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {implementation: view}


def attention_view(model: torch.nn.Module, implementation: str) -> torch.nn.Module:
    """`model` run with attention `implementation` ("eager", "sdpa", ...), its weights shared; the
    model itself is left as it is. Made once per model and implementation (in a turn of the model's,
    so that no other page's traced pass has wrapped its modules meanwhile).

    Raises:
        ValueError (from transformers, at the first pass): an implementation this model cannot run.
    """
    if model.config._attn_implementation == implementation:
        return model
    views = _VIEWS.setdefault(model, {})
    if implementation not in views:
        with model_pass(model):
            configs = _own_configs(model.config, implementation)
            view = _shallow_copy(model, configs)
        share_turns(view, model)
        views[implementation] = view
    return views[implementation]


def _own_configs(config, implementation: str) -> dict[int, object]:
    """A deep copy of `config` set to `implementation` (its sub-configs too), by the id of each
    original config it replaces."""
    own = copy.deepcopy(config)
    own._attn_implementation = implementation  # transformers' setter: the sub-configs too
    replaced = {id(config): own}
    for key in getattr(config, "sub_configs", {}):
        if getattr(config, key, None) is not None:
            replaced[id(getattr(config, key))] = getattr(own, key)
    return replaced


def _shallow_copy(module: torch.nn.Module, configs: dict[int, object]) -> torch.nn.Module:
    """`module` and its submodules copied without their tensors (the same `_parameters` and `_buffers`),
    each hook dictionary copied (a hook added to the model later is not the view's), each `config`
    among `configs` replaced."""
    view = copy.copy(module)
    for name, value in vars(module).items():
        if "hooks" in name and isinstance(value, dict):
            vars(view)[name] = type(value)(value)
    vars(view)["_modules"] = {name: None if child is None else _shallow_copy(child, configs)
                              for name, child in module._modules.items()}
    if id(vars(module).get("config")) in configs:
        vars(view)["config"] = configs[id(vars(module)["config"])]
    return view
