"""Predicted stop shapes: published worked figures (docs/concepts.md) and the stop table's names."""

from __future__ import annotations

import pytest
from analysis_configs import GEMMA3_1B, PHI3_MINI

from explorer.analysis.shapes import cache_length, expert_load, expert_shapes, predict_shapes
from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config, preset_names
from explorer.families import traced_family
from explorer.runner.configs import resolved_spec
from explorer.stops import stop_table

QWEN3 = ModelSpec.from_hf_config(load_hf_config("qwen3-0.6b"))
LLAMA = ModelSpec.from_hf_config(load_hf_config("llama-3-8b"))
NOT_TENSORS = {"tokenize", "sample", "detokenize"}


def out(shapes, name):
    return shapes[name][1]


def test_qwen3_17_token_prefill_and_first_decode_step():
    prefill = predict_shapes(QWEN3, "prefill", 1, 17, 17)
    assert out(prefill, "layers.0.attn.q_proj") == [[1, 17, 2048]]
    assert out(prefill, "layers.0.attn.k_proj") == [[1, 17, 1024]]
    assert out(prefill, "layers.0.attn.kv_cache_write") == [[1, 8, 17, 128]] * 2
    assert out(prefill, "layers.0.mlp.gate_proj") == [[1, 17, 3072]]
    assert prefill["layers.0.attn.q_norm"] == ([[1, 17, 16, 128]], [[1, 17, 16, 128]])
    assert out(prefill, "lm_head") == [[1, 1, 151936]]
    decode = predict_shapes(QWEN3, "decode", 1, 1, 18)
    assert out(decode, "layers.0.attn.kv_cache_write") == [[1, 8, 18, 128]] * 2


def test_llama3_decode_batch_8_at_context_1001():
    shapes = predict_shapes(LLAMA, "decode", 8, 1, 1001)
    assert out(shapes, "layers.0.attn.q_proj") == [[8, 1, 4096]]
    assert out(shapes, "layers.0.attn.split_heads")[0] == [8, 32, 1, 128]
    assert out(shapes, "layers.0.attn.kv_cache_write") == [[8, 8, 1001, 128]] * 2
    assert out(shapes, "layers.0.attn.gqa_expand") == [[8, 32, 1001, 128]] * 2
    assert out(shapes, "layers.0.attn.scores") == [[8, 32, 1, 1001]]
    assert shapes["layers.0.attn.weighted_sum"] == ([[8, 32, 1, 1001], [8, 32, 1001, 128]], [[8, 32, 1, 128]])
    assert shapes["layers.0.attn.merge_heads"] == ([[8, 32, 1, 128]], [[8, 1, 4096]])
    assert out(shapes, "layers.0.mlp.gate_proj") == [[8, 1, 14336]]
    assert shapes["layers.0.mlp.act"] == ([[8, 1, 14336]] * 2, [[8, 1, 14336]])
    assert out(shapes, "lm_head") == [[8, 1, 128256]]
    assert shapes["embed"] == ([[8, 1]], [[8, 1, 4096]])


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("stage,tokens,context", [("prefill", 12, 12), ("decode", 1, 13)])
def test_every_preset_predicts_every_tensor_stop(preset, stage, tokens, context):
    spec = ModelSpec.from_hf_config(load_hf_config(preset))
    shapes = predict_shapes(spec, stage, 2, tokens, context)
    table = [name for name, _, _ in stop_table(traced_family(spec.family), spec.n_layers, stage, spec.moe_layers)]
    assert list(shapes) == [name for name in table if name not in NOT_TENSORS]


def test_fused_families_use_their_merged_stops():
    phi3 = predict_shapes(ModelSpec.from_hf_config(PHI3_MINI), "prefill", 1, 5, 5)
    assert phi3["layers.0.attn.qkv_proj"] == ([[1, 5, 3072]], [[1, 5, 3 * 3072]])
    assert phi3["layers.0.attn.split_heads"][0] == [[1, 5, 9216]]
    assert out(phi3, "layers.0.mlp.gate_up_proj") == [[1, 5, 2 * 8192]]


def test_sliding_window_layers_return_window_minus_one_past_positions_plus_the_new():
    gemma = resolved_spec(GEMMA3_1B)
    assert cache_length(gemma, 0, 1, 2000) == 512 and cache_length(gemma, 5, 1, 2000) == 2000
    assert cache_length(gemma, 0, 1000, 1000) == 1000  # the prefill returns all its keys
    shapes = predict_shapes(gemma, "decode", 1, 1, 2000)
    assert out(shapes, "layers.0.attn.scores") == [[1, 4, 1, 512]]
    assert out(shapes, "layers.5.attn.scores") == [[1, 4, 1, 2000]]


def test_a_moe_layer_routes_the_b_times_t_rows_and_expects_b_t_k_over_e_rows_per_expert():
    """Mixtral-8x7B (E = 8, k = 2, d_ff = 14336), two sequences of 5 tokens: the router and the experts
    work on the 10 token rows; each expert expects 10 * 2 / 8 = 2.5 rows before any routing is run."""
    from analysis_configs import MIXTRAL_8X7B

    spec = ModelSpec.from_hf_config(MIXTRAL_8X7B)
    shapes = predict_shapes(spec, "prefill", 2, 5, 5)
    assert shapes["layers.31.mlp.router"] == ([[10, 4096]], [[10, 8], [10, 2], [10, 2]])
    assert shapes["layers.31.mlp.experts"] == ([[10, 4096], [10, 2], [10, 2]], [[10, 4096]])
    assert shapes["layers.31.mlp_residual"] == ([[2, 5, 4096]] * 2, [[2, 5, 4096]])
    assert "layers.0.mlp.gate_proj" not in shapes
    assert expert_load(spec, 10) == [2.5] * 8
    assert expert_load(spec, 10, [3, 0, 5, 2, 4, 1, 2, 3]) == [3.0, 0.0, 5.0, 2.0, 4.0, 1.0, 2.0, 3.0]
    assert expert_shapes(spec, 3) == [("gate_up_proj", [3, 4096], [3, 28672]), ("act", [3, 28672], [3, 14336]),
                                      ("down_proj", [3, 14336], [3, 4096]), ("weighted sum", [3, 4096], [3, 4096])]
    with pytest.raises(ValueError, match="no experts"):
        expert_load(QWEN3, 10)


