"""The family table's module paths name real modules of each traced family's transformers model."""

from __future__ import annotations

import pytest
from tiny_models import FAMILY_EXTRAS, tiny_model

from explorer.runner.architectures import model_features, moe_layers, stop_module_names
from explorer.stop_names import parse_stop_name


@pytest.mark.parametrize("model_type", sorted(FAMILY_EXTRAS))
def test_every_module_path_finds_its_module_in_every_layer(model_type):
    """A MoE layer's MLP stops are its router and experts (Qwen3-MoE's tiny layer 1 stays dense)."""
    model = tiny_model(model_type).model
    family = model_features(model)
    names = stop_module_names(model)
    routed = moe_layers(model)
    assert routed == {"mixtral": (True,) * 3, "qwen3_moe": (True, False, True)}.get(model_type, ())
    per_layer = [family.modules_of(bool(routed) and routed[layer]) for layer in range(model.config.num_hidden_layers)]
    assert len(names) == len(family.top_modules) + sum(map(len, per_layer))
    assert {parse_stop_name(name)[1] for name in names.values()} == \
        {stop for modules in per_layer for stop in modules} | set(family.top_modules)
    assert names[model.get_input_embeddings()] == "embed" and names[model.get_output_embeddings()] == "lm_head"
    if routed:
        assert names[model.model.layers[0].mlp.gate] == "layers.0.mlp.router"
        assert names[model.model.layers[0].mlp.experts] == "layers.0.mlp.experts"
