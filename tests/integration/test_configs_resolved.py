"""A config that leaves keys out takes transformers' defaults: the spec the explorer counts and costs
equals the model transformers builds from the same file (on `meta`, no weights)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import DIMS, FAMILY_EXTRAS
from transformers import AutoModelForCausalLM

from explorer.analysis.params import param_counts
from explorer.analysis.spec import ModelSpec
from explorer.cli import main
from explorer.config import load_hf_config, preset_names
from explorer.runner.configs import resolved_spec, transformers_config

# google/gemma-3-1b-it, config.json as published (it has no `tie_word_embeddings`; transformers ties).
GEMMA3_1B_IT = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144,
}
GEMMA3_1B_PARAMETERS = 999_885_952  # Gemma 3 technical report / Keras Hub preset "gemma3_instruct_1b"


def tiny_fields(family: str, omit: tuple[str, ...] = (), **overrides) -> dict:
    """Raw `config.json` fields of a tiny `family` model (tests/tiny_models.py dimensions), keys left out."""
    fields = {"model_type": family, **DIMS, **FAMILY_EXTRAS.get(family, {}), **overrides}
    return {key: value for key, value in fields.items() if key not in omit}


def built(fields: dict) -> torch.nn.Module:
    """The model transformers builds from the raw fields, on `meta`."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(transformers_config(fields, "test"))


def built_parameters(model: torch.nn.Module) -> int:
    """Parameter elements, each `nn.Parameter` once (a tied LM head is the embedding's own Parameter)."""
    return sum(p.numel() for p in model.parameters())


def built_windows(model: torch.nn.Module) -> tuple[int | None, ...]:
    """Per layer, the sliding window the built attention applies: its own (families with `layer_types`)
    or the config's, which Mistral, Phi-3, Mixtral and Qwen3-MoE apply to every layer."""
    default = getattr(model.config, "sliding_window", None)
    return tuple(getattr(layer.self_attn, "sliding_window", default) for layer in model.model.layers)


LEFT_OUT = {
    "gemma3_text without tie_word_embeddings (ties)": tiny_fields("gemma3_text", omit=("tie_word_embeddings",)),
    "gemma3_text without head_dim and num_key_value_heads (256, 4)": tiny_fields(
        "gemma3_text", omit=("head_dim", "num_key_value_heads"), num_attention_heads=8),
    "qwen2 without use_sliding_window (off)": tiny_fields("qwen2", sliding_window=5, max_window_layers=1),
    "qwen2 windowed from max_window_layers": tiny_fields("qwen2", sliding_window=5, use_sliding_window=True,
                                                         max_window_layers=1),
    "qwen3 without head_dim (128)": tiny_fields("qwen3", omit=("head_dim",)),
    "mistral without sliding_window (4096 on every layer)": tiny_fields("mistral", omit=("sliding_window",)),
    "mistral without num_key_value_heads (8)": tiny_fields(
        "mistral", omit=("num_key_value_heads", "head_dim"), num_attention_heads=16),
    "phi3 windowed": tiny_fields("phi3", sliding_window=9),
    "llama without tie_word_embeddings (unties)": tiny_fields("llama"),
    "mixtral without num_local_experts (8)": tiny_fields("mixtral", num_experts_per_tok=2),
    "qwen3_moe without moe_intermediate_size (768)": tiny_fields(
        "qwen3_moe", num_experts=5, num_experts_per_tok=2, mlp_only_layers=[1]),
    "gpt2 without tie_word_embeddings (ties)": {"model_type": "gpt2", "vocab_size": 101, "n_embd": 48,
                                                "n_head": 6, "n_layer": 3, "n_positions": 160},
}


@pytest.mark.parametrize("fields", LEFT_OUT.values(), ids=LEFT_OUT.keys())
def test_left_out_keys_count_as_the_model_transformers_builds(fields):
    model, spec = built(fields), resolved_spec(fields)
    assert param_counts(spec).total == built_parameters(model)
    if spec.family != "gpt2":
        assert spec.layer_windows == built_windows(model)
        assert (spec.n_kv_heads, spec.head_dim) == (model.config.num_key_value_heads,
                                                    model.model.layers[0].self_attn.head_dim)


@pytest.mark.parametrize("preset", preset_names())
def test_presets_count_as_built_and_need_no_default(preset):
    assert param_counts(resolved_spec(preset)).total == built_parameters(built(load_hf_config(preset)))
    if preset != "gpt2":  # GPT-2's published config leaves tie_word_embeddings to transformers' default (True)
        assert ModelSpec.from_hf_config(load_hf_config(preset)) == resolved_spec(preset)  # complete as shipped
    else:
        assert resolved_spec(preset).tie_word_embeddings and param_counts(resolved_spec(preset)).total == 124_439_808


def test_published_gemma3_1b_it_config_counts_its_tied_head_once(tmp_path, capsys):
    spec = resolved_spec(GEMMA3_1B_IT)
    assert spec.tie_word_embeddings
    assert param_counts(spec).total == GEMMA3_1B_PARAMETERS == built_parameters(built(GEMMA3_1B_IT))
    assert spec.layer_windows[:6] == (512,) * 5 + (None,)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3_1B_IT))
    assert main(["info", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tied LM head                    yes" in out and f"{GEMMA3_1B_PARAMETERS:,}" in out
