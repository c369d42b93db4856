"""Per-operator FLOPs and bytes: published worked figures (docs/concepts.md) and the conventions' edge cases."""

from __future__ import annotations

import pytest
from analysis_configs import QWEN3_30B_A3B

from explorer.analysis.costs import step_costs, step_total, totals_by_op
from explorer.analysis.stop_costs import experts_touched
from explorer.analysis.precision import Precision
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config


def spec_of(preset: str, **overrides) -> ModelSpec:
    return ModelSpec.from_hf_config({**load_hf_config(preset), **overrides})


def by_op(spec, step, **options) -> dict:
    return {cost.name: cost for cost in totals_by_op(step_costs(spec, step, CostOptions(**options)))}


def test_qwen3_prefill_of_17_tokens_matches_the_domain_figures():
    spec = spec_of("qwen3-0.6b")
    costs = step_costs(spec, Step.prefill(17))
    layer_flops = sum(c.flops for c in costs if c.layer is not None)
    assert layer_flops / 1e9 == pytest.approx(15.0, abs=0.1)
    assert costs[-1].name == "lm_head" and costs[-1].flops == 2 * 1024 * 151936
    all_positions = step_costs(spec, Step.prefill(17), CostOptions(lm_head_all_positions=True))[-1]
    assert all_positions.flops == 2 * 17 * 1024 * 151936  # 5.29 GFLOP
    assert costs[-1].flops / 1e9 == pytest.approx(0.31, abs=0.005)


def test_gemm_follows_the_domain_convention():
    q_proj = by_op(spec_of("llama-3-8b"), Step.decode(1000, batch=8))["attn.q_proj"]
    k = m = 4096
    assert q_proj.flops == 32 * 2 * 8 * k * m
    assert q_proj.weight_bytes == 32 * k * m * 2
    assert q_proj.act_in_bytes == q_proj.act_out_bytes == 32 * 8 * 4096 * 2


@pytest.mark.parametrize("batch,context", [(1, 1), (1, 131_072), (256, 1), (256, 131_072), (64, 4096)])
def test_decode_attention_flops_and_kv_bytes(batch, context):
    spec = spec_of("llama-3-8b")
    ops = by_op(spec, Step.decode(context, batch))
    attention_flops = ops["attn.scores"].matmul_flops + ops["attn.weighted_sum"].matmul_flops
    assert attention_flops == 32 * 4 * batch * 32 * 128 * context
    kv_read = ops["attn.scores"].kv_read_bytes + ops["attn.weighted_sum"].kv_read_bytes
    assert kv_read == 32 * 2 * batch * 8 * 128 * context * 2
    assert ops["attn.kv_cache_write"].kv_write_bytes == 32 * 2 * batch * 8 * 128 * 2


@pytest.mark.parametrize("kv_heads", [1, 8, 32])
def test_fused_decode_attention_intensity_is_about_the_group_size(kv_heads):
    spec = spec_of("llama-3-8b", num_key_value_heads=kv_heads)
    ops = by_op(spec, Step.decode(32_768, batch=16), fused_attention=True)
    matmul = ops["attn.scores"].matmul_flops + ops["attn.weighted_sum"].matmul_flops
    moved = ops["attn.scores"].bytes + ops["attn.weighted_sum"].bytes
    assert matmul / moved == pytest.approx(spec.gqa_group_size, rel=0.01)  # bf16: 4 FLOPs per 2 bytes per group


@pytest.mark.parametrize("batch", [1, 8, 256])
def test_weight_gemm_intensity_is_about_the_batch(batch):
    gate = by_op(spec_of("llama-3-8b"), Step.decode(100, batch))["mlp.gate_proj"]
    k, m = 4096, 14336  # 2Bkm FLOPs over 2km + 2B(k+m) bytes: about B while B << km / (k+m)
    assert gate.arithmetic_intensity == pytest.approx(batch * k * m / (k * m + batch * (k + m)))
    assert gate.arithmetic_intensity == pytest.approx(batch, rel=0.1)


def test_mlp_activation_is_costed_over_the_mlp_width_not_the_hidden_size():
    act = by_op(spec_of("llama-3-8b"), Step.prefill(10))["mlp.act"]
    assert act.act_out_bytes == 32 * 10 * 14336 * 2
    assert act.act_in_bytes == 2 * act.act_out_bytes  # gate and up


def test_merged_projections_keep_flops_and_read_the_input_once():
    spec, step = spec_of("qwen3-0.6b"), Step.prefill(17)
    split, merged = by_op(spec, step), by_op(spec, step, merged_projections=True)
    assert merged["attn.qkv_proj"].flops == sum(split[n].flops for n in ("attn.q_proj", "attn.k_proj", "attn.v_proj"))
    assert merged["attn.qkv_proj"].act_in_bytes == split["attn.q_proj"].act_in_bytes
    assert merged["mlp.gate_up_proj"].weight_bytes == split["mlp.gate_proj"].weight_bytes * 2
    assert step_total(step_costs(spec, step, CostOptions(merged_projections=True))).matmul_flops == \
        step_total(step_costs(spec, step)).matmul_flops


def test_quantized_formats_shrink_only_their_category():
    spec, step = spec_of("llama-3-8b"), Step.decode(4096, 64)
    base = step_total(step_costs(spec, step))
    int4 = step_total(step_costs(spec, step, CostOptions(precision=Precision(weights="int4"))))
    fp8_kv = step_total(step_costs(spec, step, CostOptions(precision=Precision(kv="fp8"))))
    matrices = 8_030_261_248 - 32 * 2 * 4096 - 4096  # all but the norm weights
    lm_and_layers = matrices - 128256 * 4096 + 64 * 4096  # the embedding reads only B rows
    assert base.weight_bytes - int4.weight_bytes == pytest.approx(lm_and_layers * 1.5)
    assert fp8_kv.kv_read_bytes == base.kv_read_bytes / 2
    assert fp8_kv.flops == base.flops and int4.act_in_bytes == base.act_in_bytes


def test_fused_attention_drops_the_score_matrix_traffic_only():
    spec, step = spec_of("qwen3-0.6b"), Step.prefill(2048)
    unfused, fused = by_op(spec, step), by_op(spec, step, fused_attention=True)
    assert unfused["attn.softmax"].act_in_bytes == 28 * 16 * 2048 * 2048 * 2
    assert fused["attn.softmax"].bytes == 0 and fused["attn.softmax"].flops == unfused["attn.softmax"].flops


def test_sliding_window_caps_keys_attended():
    ops = by_op(spec_of("mistral-7b"), Step.decode(100_000))
    assert ops["attn.scores"].kv_read_bytes == 32 * 4096 * 8 * 128 * 2


def test_a_windowed_prefill_counts_what_eager_computes_and_a_fused_kernel_skips_the_rest():
    spec, step = spec_of("mistral-7b"), Step.prefill(8192)  # window 4,096
    eager, fused = by_op(spec, step)["attn.scores"], by_op(spec, step, fused_attention=True)["attn.scores"]
    assert eager.flops == 32 * 2 * 32 * 8192 * 8192 * 128  # 17,592 GFLOP: the full T x T rectangle
    assert fused.flops == 32 * 2 * 32 * 8192 * 4096 * 128  # 8,796 GFLOP: the window only


def test_moe_experts_process_k_rows_per_token_and_read_the_experts_touched():
    """Qwen3-30B-A3B (E = 128, k = 8, d_ff = 768) decoding one token: 8 expert rows per layer, each
    through gate, up (2*d*d_ff FLOPs a row each), SwiGLU (5 a value) and down, then weighted and summed
    (2 a value); the weights of the 8 experts it reaches, 3 matrices each, are read."""
    spec, step = ModelSpec.from_hf_config(QWEN3_30B_A3B), Step.decode(1000, batch=1)
    ops = by_op(spec, step)
    expert_matrix_bytes = 2048 * 768 * 2
    assert ops["mlp.experts"].weight_bytes == pytest.approx(48 * 8 * 3 * expert_matrix_bytes)
    assert ops["mlp.experts"].matmul_flops == 48 * 8 * 3 * 2 * 768 * 2048
    assert ops["mlp.experts"].flops == 48 * 8 * (3 * 2 * 768 * 2048 + 5 * 768 + 2 * 2048)
    assert ops["mlp.router"].flops == 48 * 2 * 2048 * 128
    assert experts_touched(128, 8, 1) == pytest.approx(8)
    assert experts_touched(128, 8, 4096) == pytest.approx(128)


def test_moe_costs_read_the_experts_the_executed_routing_reached():
    """Four sequences decoding: uniform routing expects 128 (1 - (1 - 8/128)^4) = 29.0 experts a layer;
    a run whose routing reached 20 in every layer reads 20 experts' weights, with the same FLOPs."""
    spec = ModelSpec.from_hf_config(QWEN3_30B_A3B)
    expected = by_op(spec, Step.decode(1000, batch=4))["mlp.experts"]
    executed = by_op(spec, Step("decode", 4, 1, 1000, (20,) * 48))["mlp.experts"]
    matrices = 3 * 2048 * 768 * 2
    assert expected.weight_bytes == pytest.approx(48 * 128 * (1 - (1 - 8 / 128) ** 4) * matrices)
    assert executed.weight_bytes == 48 * 20 * matrices
    assert executed.flops == expected.flops


def test_gpt2_has_no_rope_and_adds_positions_at_the_embedding():
    """Two sequences of 5 tokens: B*T token rows gathered, T position rows (the position ids [1, T] are
    shared by the batch), and B*T*d additions (bfloat16: 2 bytes a value)."""
    from analysis_configs import GPT2

    ops = by_op(ModelSpec.from_hf_config(GPT2), Step.prefill(5, batch=2))
    assert "attn.rope" not in ops and "attn.qkv_proj" in ops
    assert ops["embed"].flops == 0 and ops["embed"].weight_bytes == 2 * 5 * 768 * 2
    assert ops["pos_embed"].flops == 0 and ops["pos_embed"].weight_bytes == 5 * 768 * 2
    assert ops["embed_add"].flops == 2 * 5 * 768 and ops["embed_add"].weight_bytes == 0
    assert ops["embed_add"].act_in_bytes == (2 * 5 * 768 + 5 * 768) * 2


def test_step_order_follows_the_stop_table():
    names = [c.name for c in step_costs(spec_of("qwen3-0.6b"), Step.decode(18))][:10]
    assert names == ["embed", "layers.0.input_norm", "layers.0.attn.q_proj", "layers.0.attn.q_norm",
                     "layers.0.attn.k_proj", "layers.0.attn.k_norm", "layers.0.attn.v_proj", "layers.0.attn.rope",
                     "layers.0.attn.kv_cache_write", "layers.0.attn.scores"]


@pytest.mark.parametrize("bad", [dict(stage="decode", batch=1, tokens=2, context=5),
                                 dict(stage="prefill", batch=0, tokens=2, context=2),
                                 dict(stage="prefill", batch=1, tokens=4, context=3),
                                 dict(stage="train", batch=1, tokens=1, context=1)])
def test_invalid_steps_are_rejected(bad):
    with pytest.raises(ValueError):
        Step(**bad)
