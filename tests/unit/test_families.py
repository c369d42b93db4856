"""The family table: each traced family's stop list pinned literally, the stop names built and
parsed one way, and the module paths covering exactly the stops that are modules."""

from __future__ import annotations

import pytest

from explorer.errors import ConfigError
from explorer.families import FAMILIES, traced_family
from explorer.stop_names import parse_stop_name, stop_name
from explorer.stops import layer_stops, stop_table

LLAMA_LIKE = [
    ("tokenize", "tokenize"), ("embed", "gather"),
    ("layers.0.input_norm", "norm"),
    ("layers.0.attn.q_proj", "gemm"), ("layers.0.attn.k_proj", "gemm"), ("layers.0.attn.v_proj", "gemm"),
    ("layers.0.attn.split_heads", "reshape"), ("layers.0.attn.rope", "rope"),
    ("layers.0.attn.kv_cache_write", "cache_write"), ("layers.0.attn.gqa_expand", "broadcast"),
    ("layers.0.attn.scores", "batched_gemm"), ("layers.0.attn.softmax", "softmax"),
    ("layers.0.attn.weighted_sum", "batched_gemm"), ("layers.0.attn.merge_heads", "reshape"),
    ("layers.0.attn.o_proj", "gemm"), ("layers.0.attn_residual", "elementwise"), ("layers.0.post_attn_norm", "norm"),
    ("layers.0.mlp.gate_proj", "gemm"), ("layers.0.mlp.up_proj", "gemm"), ("layers.0.mlp.act", "elementwise"),
    ("layers.0.mlp.down_proj", "gemm"), ("layers.0.mlp_residual", "elementwise"),
    ("final_norm", "norm"), ("lm_head", "gemm"), ("sample", "sample"), ("detokenize", "detokenize"),
]
QWEN3 = [
    ("tokenize", "tokenize"), ("embed", "gather"),
    ("layers.0.input_norm", "norm"),
    ("layers.0.attn.q_proj", "gemm"), ("layers.0.attn.q_norm", "norm"), ("layers.0.attn.k_proj", "gemm"),
    ("layers.0.attn.k_norm", "norm"), ("layers.0.attn.v_proj", "gemm"),
    ("layers.0.attn.split_heads", "reshape"), ("layers.0.attn.rope", "rope"),
    ("layers.0.attn.kv_cache_write", "cache_write"), ("layers.0.attn.gqa_expand", "broadcast"),
    ("layers.0.attn.scores", "batched_gemm"), ("layers.0.attn.softmax", "softmax"),
    ("layers.0.attn.weighted_sum", "batched_gemm"), ("layers.0.attn.merge_heads", "reshape"),
    ("layers.0.attn.o_proj", "gemm"), ("layers.0.attn_residual", "elementwise"), ("layers.0.post_attn_norm", "norm"),
    ("layers.0.mlp.gate_proj", "gemm"), ("layers.0.mlp.up_proj", "gemm"), ("layers.0.mlp.act", "elementwise"),
    ("layers.0.mlp.down_proj", "gemm"), ("layers.0.mlp_residual", "elementwise"),
    ("final_norm", "norm"), ("lm_head", "gemm"), ("sample", "sample"), ("detokenize", "detokenize"),
]
GEMMA3 = [
    ("tokenize", "tokenize"), ("embed", "gather"),
    ("layers.0.input_norm", "norm"),
    ("layers.0.attn.q_proj", "gemm"), ("layers.0.attn.q_norm", "norm"), ("layers.0.attn.k_proj", "gemm"),
    ("layers.0.attn.k_norm", "norm"), ("layers.0.attn.v_proj", "gemm"),
    ("layers.0.attn.split_heads", "reshape"), ("layers.0.attn.rope", "rope"),
    ("layers.0.attn.kv_cache_write", "cache_write"), ("layers.0.attn.gqa_expand", "broadcast"),
    ("layers.0.attn.scores", "batched_gemm"), ("layers.0.attn.softmax", "softmax"),
    ("layers.0.attn.weighted_sum", "batched_gemm"), ("layers.0.attn.merge_heads", "reshape"),
    ("layers.0.attn.o_proj", "gemm"), ("layers.0.post_attn_norm", "norm"), ("layers.0.attn_residual", "elementwise"),
    ("layers.0.pre_mlp_norm", "norm"),
    ("layers.0.mlp.gate_proj", "gemm"), ("layers.0.mlp.up_proj", "gemm"), ("layers.0.mlp.act", "elementwise"),
    ("layers.0.mlp.down_proj", "gemm"), ("layers.0.post_mlp_norm", "norm"), ("layers.0.mlp_residual", "elementwise"),
    ("final_norm", "norm"), ("lm_head", "gemm"), ("sample", "sample"), ("detokenize", "detokenize"),
]
PHI3 = [
    ("tokenize", "tokenize"), ("embed", "gather"),
    ("layers.0.input_norm", "norm"),
    ("layers.0.attn.qkv_proj", "gemm"),
    ("layers.0.attn.split_heads", "reshape"), ("layers.0.attn.rope", "rope"),
    ("layers.0.attn.kv_cache_write", "cache_write"), ("layers.0.attn.gqa_expand", "broadcast"),
    ("layers.0.attn.scores", "batched_gemm"), ("layers.0.attn.softmax", "softmax"),
    ("layers.0.attn.weighted_sum", "batched_gemm"), ("layers.0.attn.merge_heads", "reshape"),
    ("layers.0.attn.o_proj", "gemm"), ("layers.0.attn_residual", "elementwise"), ("layers.0.post_attn_norm", "norm"),
    ("layers.0.mlp.gate_up_proj", "gemm"), ("layers.0.mlp.act", "elementwise"),
    ("layers.0.mlp.down_proj", "gemm"), ("layers.0.mlp_residual", "elementwise"),
    ("final_norm", "norm"), ("lm_head", "gemm"), ("sample", "sample"), ("detokenize", "detokenize"),
]
GPT2 = [  # modeling_gpt2.py: wte + wpe, ln_1, c_attn, attention, c_proj, ln_2, c_fc, GELU, c_proj, ln_f, lm_head
    ("tokenize", "tokenize"), ("embed", "gather"), ("pos_embed", "gather"), ("embed_add", "elementwise"),
    ("layers.0.input_norm", "norm"),
    ("layers.0.attn.qkv_proj", "gemm"), ("layers.0.attn.split_heads", "reshape"),
    ("layers.0.attn.kv_cache_write", "cache_write"), ("layers.0.attn.gqa_expand", "broadcast"),
    ("layers.0.attn.scores", "batched_gemm"), ("layers.0.attn.softmax", "softmax"),
    ("layers.0.attn.weighted_sum", "batched_gemm"), ("layers.0.attn.merge_heads", "reshape"),
    ("layers.0.attn.o_proj", "gemm"), ("layers.0.attn_residual", "elementwise"), ("layers.0.post_attn_norm", "norm"),
    ("layers.0.mlp.up_proj", "gemm"), ("layers.0.mlp.act", "elementwise"),
    ("layers.0.mlp.down_proj", "gemm"), ("layers.0.mlp_residual", "elementwise"),
    ("final_norm", "norm"), ("lm_head", "gemm"), ("sample", "sample"), ("detokenize", "detokenize"),
]
MOE_MLP = [("layers.0.mlp.router", "gemm"), ("layers.0.mlp.experts", "experts")]


def _routed(dense: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A one-layer list whose MLP is a mixture of experts: the router and the experts in place of the
    dense MLP's stops, between the norm and the residual add."""
    return [stop for stop in dense if not stop[0].startswith("layers.0.mlp.")][:-5] + MOE_MLP + dense[-5:]


MIXTRAL, QWEN3_MOE = _routed(LLAMA_LIKE), _routed(QWEN3)  # modeling_mixtral.py, modeling_qwen3_moe.py
PREFILL_OF_ONE_LAYER = {"llama": LLAMA_LIKE, "mistral": LLAMA_LIKE, "qwen2": LLAMA_LIKE, "qwen3": QWEN3,
                        "gemma3_text": GEMMA3, "phi3": PHI3, "gpt2": GPT2}


@pytest.mark.parametrize("model_type", sorted(PREFILL_OF_ONE_LAYER))
def test_each_traced_family_has_its_pinned_stop_list(model_type):
    family, pinned = traced_family(model_type), PREFILL_OF_ONE_LAYER[model_type]
    layer_of = [0 if name.startswith("layers.") else None for name, _ in pinned]
    prefill = [(name, kind, layer) for (name, kind), layer in zip(pinned, layer_of, strict=True)]
    assert stop_table(family, 1, "prefill") == prefill
    assert prefill[0] == ("tokenize", "tokenize", None)
    assert stop_table(family, 1, "decode") == prefill[1:]  # a decode step feeds an id: no tokenize


@pytest.mark.parametrize("model_type", sorted(PREFILL_OF_ONE_LAYER))
def test_every_layer_repeats_the_pinned_layer(model_type):
    family = traced_family(model_type)
    relative = [parse_stop_name(name)[1] for name, _ in PREFILL_OF_ONE_LAYER[model_type] if name.startswith("layers.")]
    table = stop_table(family, 3, "decode")
    assert [name for name, _, layer in table if layer == 2] == [stop_name(2, stop) for stop in relative]
    outside = 5 + (2 if family.positions == "learned" else 0)  # GPT-2: pos_embed, embed_add
    assert len(table) == outside + 3 * len(relative)


def test_the_traced_families_are_exactly_the_pinned_ones():
    traced = {name for name, family in FAMILIES.items() if family.traced}
    assert traced == set(PREFILL_OF_ONE_LAYER) | {"mixtral", "qwen3_moe"}
    assert {name for name, family in FAMILIES.items() if family.moe} == {"mixtral", "qwen3_moe"}


@pytest.mark.parametrize(("model_type", "pinned"), [("mixtral", MIXTRAL), ("qwen3_moe", QWEN3_MOE)])
def test_a_moe_layer_has_the_router_then_the_experts_and_a_dense_layer_its_mlp(model_type, pinned):
    """Qwen3-MoE's `mlp_only_layers` keep a dense MLP: the table follows the layers it is given."""
    family = traced_family(model_type)
    assert stop_table(family, 1, "prefill", (True,)) == [
        (name, kind, 0 if name.startswith("layers.") else None) for name, kind in pinned]
    dense = PREFILL_OF_ONE_LAYER["qwen3" if model_type == "qwen3_moe" else "llama"]
    second = [stop_name(1, parse_stop_name(name)[1]) for name, _ in dense if name.startswith("layers.")]
    assert [name for name, _, layer in stop_table(family, 2, "decode", (True, False)) if layer == 1] == second


@pytest.mark.parametrize("model_type", ["falcon", ""])
def test_families_that_are_not_traced_are_refused_by_name(model_type):
    with pytest.raises(ConfigError, match=f"'{model_type}' is not traced yet; supported: gemma3_text, gpt2, llama"):
        traced_family(model_type)


@pytest.mark.parametrize("model_type", sorted(PREFILL_OF_ONE_LAYER) + ["mixtral", "qwen3_moe"])
def test_module_paths_cover_exactly_the_stops_that_are_modules(model_type):
    family = traced_family(model_type)
    modules = {name for name, kind in layer_stops(family) if kind in ("gemm", "norm")}
    if not family.gated_mlp:
        modules.add("mlp.act")  # GPT-2's GELU is a module of its own
    assert set(family.layer_modules) == modules
    if family.moe:  # the router and the experts are modules; the experts' GEMMs run inside theirs
        routed = {name for name, kind in layer_stops(family, moe=True) if kind in ("gemm", "norm", "experts")}
        assert set(family.modules_of(True)) == routed
    positions = {"pos_embed"} if family.positions == "learned" else set()
    assert set(family.top_modules) == {"embed", "final_norm", "lm_head"} | positions


@pytest.mark.parametrize("name, parsed", [
    ("layers.3.attn.q_proj", (3, "attn.q_proj")), ("layers.12.input_norm", (12, "input_norm")),
    ("lm_head", (None, "lm_head")), ("attn.q_proj", (None, "attn.q_proj")), ("embed", (None, "embed")),
])
def test_stop_names_are_built_and_parsed_one_way(name, parsed):
    assert parse_stop_name(name) == parsed
    assert stop_name(*parsed) == name
