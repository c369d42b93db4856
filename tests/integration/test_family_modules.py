"""The family table's module paths name real modules of each traced family's transformers model."""

from __future__ import annotations

import pytest
from tiny_models import FAMILY_EXTRAS, tiny_model

from explorer.runner.architectures import model_features, stop_module_names
from explorer.stops import parse_stop_name


@pytest.mark.parametrize("model_type", sorted(FAMILY_EXTRAS))
def test_every_module_path_finds_its_module_in_every_layer(model_type):
    model = tiny_model(model_type).model
    family = model_features(model)
    names = stop_module_names(model)
    assert len(names) == len(family.top_modules) + model.config.num_hidden_layers * len(family.layer_modules)
    assert {parse_stop_name(name)[1] for name in names.values()} == set(family.layer_modules) | set(family.top_modules)
    assert names[model.get_input_embeddings()] == "embed" and names[model.get_output_embeddings()] == "lm_head"
