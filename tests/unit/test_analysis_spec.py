"""ModelSpec translation, parameter counts and KV-cache sizes against published exact values.

Configs are read as the explorer reads them, through transformers' config classes (`resolved_spec`).
"""

from __future__ import annotations

import pytest
from analysis_configs import GEMMA3_1B, GPT2, MIXTRAL_8X7B, PHI3_MINI, QWEN3_30B_A3B, QWEN25_05B

from explorer.analysis.kv_cache import kv_bytes_per_token, kv_bytes_per_token_per_layer, kv_cache_size
from explorer.analysis.params import param_counts
from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config
from explorer.errors import ConfigError
from explorer.runner.configs import resolved_spec


def spec_of(preset_or_config) -> ModelSpec:
    return resolved_spec(preset_or_config)


@pytest.mark.parametrize("model,total", [
    ("smollm2-135m", 134_515_008),
    ("qwen3-0.6b", 596_049_920),
    ("tinyllama-1.1b", 1_100_048_384),
    ("llama-3-8b", 8_030_261_248),
    ("mistral-7b", 7_241_732_096),
    ("qwen3-8b", 8_190_735_360),
    (QWEN3_30B_A3B, 30_532_122_624),
    (MIXTRAL_8X7B, 46_702_792_704),
    (GPT2, 124_439_808),
    (GEMMA3_1B, 999_885_952),
    (PHI3_MINI, 3_821_079_552),
    (QWEN25_05B, 494_032_768),
], ids=lambda v: v if isinstance(v, str) else v.get("model_type") if isinstance(v, dict) else str(v))
def test_total_parameters_equal_published_counts(model, total):
    assert param_counts(spec_of(model)).total == total


def test_moe_active_parameters_count_k_experts_and_the_router():
    counts = param_counts(spec_of(QWEN3_30B_A3B))
    assert counts.active_per_token == 3_353_032_704
    mixtral = param_counts(spec_of(MIXTRAL_8X7B))
    unused_experts_per_layer = 6 * 3 * 4096 * 14336  # 8 experts, 2 used
    assert mixtral.active_per_token == 46_702_792_704 - 32 * unused_experts_per_layer


def test_tied_head_is_counted_once_and_excluded_from_non_embedding():
    tied = param_counts(spec_of("qwen3-0.6b"))
    assert tied.embedding == 151936 * 1024
    assert tied.non_embedding == 440_467_456  # Qwen3-0.6B model card: 0.44B non-embedding
    untied = param_counts(spec_of("llama-3-8b"))
    assert untied.embedding == 2 * 128256 * 4096
    assert untied.active_per_token == untied.total


def test_gpt2_counts_its_learned_position_table_as_embedding():
    counts = param_counts(spec_of(GPT2))
    assert counts.embedding == 50257 * 768 + 1024 * 768
    assert counts.non_embedding == 124_439_808 - counts.embedding


def test_head_dim_given_apart_from_hidden_over_heads():
    spec = spec_of("qwen3-0.6b")
    assert (spec.hidden_size, spec.n_heads, spec.head_dim, spec.q_size) == (1024, 16, 128, 2048)


def test_families_translate_their_own_field_names():
    gpt2, phi3, gemma = spec_of(GPT2), spec_of(PHI3_MINI), spec_of(GEMMA3_1B)
    assert (gpt2.n_kv_heads, gpt2.head_dim, gpt2.intermediate_size, gpt2.norm) == (12, 64, 3072, "layernorm")
    assert phi3.fused_qkv and phi3.fused_gate_up and phi3.gqa_group_size == 1
    assert gemma.norms_per_layer == 4 and gemma.qk_norm and gemma.n_kv_heads == 1
    assert spec_of(QWEN25_05B).qkv_bias and not spec_of("llama-3-8b").qkv_bias


@pytest.mark.parametrize("model,expected", [("llama-3-8b", 131_072), ("qwen3-0.6b", 114_688),
                                            ("smollm2-135m", 30 * 2 * 3 * 64 * 2)])
def test_kv_bytes_per_token_bf16(model, expected):
    assert kv_bytes_per_token(spec_of(model), "bf16") == expected


def test_kv_bytes_scale_with_dtype_and_context():
    spec = spec_of("llama-3-8b")
    assert kv_bytes_per_token(spec, "fp8") == 65_536
    assert kv_bytes_per_token(spec, "int4") == 32_768
    assert kv_bytes_per_token_per_layer(spec, "fp32") == 2 * 8 * 128 * 4
    size = kv_cache_size(spec, context=4096, batch=64, kv_dtype="bf16")
    assert size.total_bytes == 64 * 4096 * 131_072
    assert size.per_layer_bytes[0] == 64 * 4096 * 4096


def test_sliding_window_layers_are_capped_at_their_window():
    mistral = spec_of("mistral-7b")  # every layer windowed at 4096
    assert kv_cache_size(mistral, context=10_000).total_bytes == 4096 * 131_072
    gemma = spec_of(GEMMA3_1B)  # every 6th layer global, the others windowed at 512
    size = kv_cache_size(gemma, context=32_768)
    assert size.positions_per_layer[:6] == (512, 512, 512, 512, 512, 32_768)
    per_position = 2 * 256 * 2
    assert size.total_bytes == per_position * (22 * 512 + 4 * 32_768)


def test_windows_follow_transformers_rules():
    assert set(spec_of(QWEN25_05B).layer_windows) == {None}  # use_sliding_window false
    assert spec_of(PHI3_MINI).window(0) == 2047
    assert spec_of({**GEMMA3_1B, "layer_types": ["full_attention"] * 26}).window(0) is None


def test_unknown_family_error_names_the_needed_fields():
    with pytest.raises(ConfigError, match="hidden_size.*num_attention_heads.*num_key_value_heads"):
        ModelSpec.from_hf_config({"model_type": "falcon"})


def test_missing_field_is_named():
    config = dict(load_hf_config("llama-3-8b"))
    del config["intermediate_size"]
    with pytest.raises(ConfigError, match="intermediate_size"):
        ModelSpec.from_hf_config(config)


def test_heads_that_do_not_group_are_rejected():
    with pytest.raises(ConfigError, match="cannot be grouped"):
        ModelSpec.from_hf_config({**load_hf_config("llama-3-8b"), "num_key_value_heads": 5})


@pytest.mark.parametrize("kv_heads,group", [(1, 32), (32, 1), (8, 4)])
def test_mqa_mha_and_gqa(kv_heads, group):
    spec = ModelSpec.from_hf_config({**load_hf_config("llama-3-8b"), "num_key_value_heads": kv_heads})
    assert spec.gqa_group_size == group
    assert kv_bytes_per_token(spec) == 32 * 2 * kv_heads * 128 * 2
