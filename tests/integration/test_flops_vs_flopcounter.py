"""The analytic matmul FLOPs equal what torch's FlopCounterMode counts while a tiny model runs.

Tiny random models of each family, every dimension distinct (vocab 97, hidden 32, 4 query heads,
2 KV heads, head_dim 8 or 12, 3 layers, d_ff 37), eager attention so the score and weighted-sum
matmuls run as matmuls the counter sees.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from explorer.analysis.costs import step_costs  # noqa: E402
from explorer.analysis.records import CostOptions, Step  # noqa: E402
from explorer.analysis.spec import ModelSpec  # noqa: E402

COMMON = dict(vocab_size=97, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=3, intermediate_size=37, max_position_embeddings=128, pad_token_id=0)

TINY_CONFIGS = {
    "llama": COMMON,
    "qwen2": {**COMMON, "tie_word_embeddings": True},
    "qwen3": {**COMMON, "head_dim": 12},
    "mistral": {**COMMON, "sliding_window": 64},
    "gemma3_text": {**COMMON, "head_dim": 12, "sliding_window": 64, "sliding_window_pattern": 2,
                    "query_pre_attn_scalar": 12},
    "phi3": {**COMMON, "num_key_value_heads": 4, "tie_word_embeddings": False},
    "gpt2": dict(vocab_size=97, n_embd=32, n_head=4, n_layer=3, n_inner=37, n_positions=128),
    "qwen3_moe": {**COMMON, "head_dim": 12, "num_experts": 5, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 19, "mlp_only_layers": [1]},
    "mixtral": {**COMMON, "num_key_value_heads": 1, "num_local_experts": 5, "num_experts_per_tok": 2},
}


def _tiny_model(family: str):
    config = transformers.AutoConfig.for_model(family, **TINY_CONFIGS[family])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", experts_implementation="eager")
    return model.eval(), config


def _counted_flops(run) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def _analytic_matmul_flops(spec: ModelSpec, step: Step) -> float:
    return sum(cost.matmul_flops for cost in step_costs(spec, step))


@pytest.mark.parametrize("family", sorted(TINY_CONFIGS))
@pytest.mark.parametrize("batch,tokens", [(1, 7), (3, 5)])
def test_prefill_and_decode_matmul_flops_equal_flop_counter(family, batch, tokens):
    model, config = _tiny_model(family)
    spec = ModelSpec.from_hf_config(config.to_dict())
    ids = torch.randint(0, 97, (batch, tokens))
    with torch.inference_mode():
        cache = transformers.DynamicCache(config=config)
        prefill = _counted_flops(lambda: model(ids, cache=cache, use_cache=True, logits_to_keep=1))
        next_ids = torch.randint(0, 97, (batch, 1))
        decode = _counted_flops(lambda: model(next_ids, cache=cache, use_cache=True, logits_to_keep=1))
    assert prefill == _analytic_matmul_flops(spec, Step.prefill(tokens, batch))
    assert decode == _analytic_matmul_flops(spec, Step.decode(tokens + 1, batch))


def test_a_windowed_prefill_counts_the_full_rectangle_eager_computes():
    """Mistral with a 4-token sliding window on a 7-token prompt: eager attention computes all 7 x 7
    scores and masks those outside the window, so the cost model counts 7 keys per query (not 4),
    as FlopCounterMode counts; a fused kernel (the what-if) skips the scores outside the window."""
    config = transformers.AutoConfig.for_model("mistral", **{**COMMON, "sliding_window": 4})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    spec = ModelSpec.from_hf_config(config.to_dict())
    ids = torch.randint(0, 97, (1, 7))
    with torch.inference_mode():
        cache = transformers.DynamicCache(config=config)
        prefill = _counted_flops(lambda: model(ids, cache=cache, use_cache=True, logits_to_keep=1))
    assert spec.window(0) == 4
    assert prefill == _analytic_matmul_flops(spec, Step.prefill(7))
    windowed = sum(c.matmul_flops for c in step_costs(spec, Step.prefill(7), CostOptions(fused_attention=True)))
    assert windowed < prefill  # a fused kernel skips the scores outside the window
