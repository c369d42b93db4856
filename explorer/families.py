"""Every model family the explorer knows, one typed entry each: the one table of family facts.

The runner's hooks read the module paths, `explorer.stops` builds the stop list from the stop facts,
and the cost model and the shape predictions read norms, activation, biases, positions and windows
(through `explorer.analysis.spec.ModelSpec`). What varies between models of one family (sizes,
whether the LM head is tied, which layers are windowed) comes from the config as transformers
resolves it (`explorer.runner.configs`), never from here. Pure Python: no torch, transformers or gradio.

Sources: the `modeling_<family>.py` and `configuration_<family>.py` files of transformers 5.
Adding a family: one `Family` entry below; to trace it, `traced=True`, its module paths, and any hook
its modules need in `explorer.runner`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from explorer.errors import ConfigError


@dataclass(frozen=True)
class Family:
    """How one model family (an HF `model_type`) differs from the Llama block.

    Attributes:
        model_type: the HF `model_type`, e.g. "llama", "gemma3_text".
        traced: the runner hooks its modules and the analysis predicts its shapes; False: only the
            cost model and parameter counts know it.
        layers: attribute path of the decoder layers in the `*ForCausalLM` model.
        top_modules: stop outside the layers -> attribute path in the `*ForCausalLM` model.
        layer_modules: layer-relative stop -> attribute path in one decoder layer, for every stop
            that is a module (the others are timed between modules, see `explorer.runner.assemble`).
            In a MoE layer its "mlp." stops give way to `moe_modules` (`modules_of`).
        moe_modules: the MLP stops of a mixture-of-experts layer -> attribute path in the layer: the
            router ("mlp.router": logits, top-k weights and expert ids) and the experts ("mlp.experts":
            every routed expert's MLP and the weighted sum), as `*SparseMoeBlock.gate` and `.experts`.
        config_names: the config's field names: "llama" (hidden_size, num_hidden_layers, ...) or
            "gpt2" (n_embd, n_layer, n_head, n_inner, n_positions).
        norm: "rmsnorm" (weight only) or "layernorm" (weight and bias).
        sandwich_norms: norms before and after both attention and the MLP, four per layer (Gemma 3).
        activation: the MLP's, "silu" or "gelu_tanh".
        gated_mlp: act(gate) * up, then down; False: up, act, down (GPT-2).
        qk_norm: per-head RMSNorm of queries and keys after their projections (Qwen3, Gemma 3).
        qk_norm_on_heads: QK-norm runs on [B, h, T, d_h], after the transpose to heads (Gemma 3);
            False: on [B, T, h, d_h], before it (Qwen3).
        fused_qkv: q, k and v are one `qkv_proj` matrix (Phi-3, GPT-2 `c_attn`).
        fused_gate_up: gate and up are one `gate_up_proj` matrix (Phi-3).
        qkv_bias: q/k/v always have a bias (Qwen2, GPT-2); elsewhere the config's `attention_bias` says.
        o_bias: o_proj always has a bias (GPT-2); elsewhere `attention_bias` says.
        mlp_bias: the MLP projections always have biases (GPT-2); elsewhere the config's `mlp_bias` says.
        embed_scale: embeddings are multiplied by sqrt(d) (Gemma 3).
        positions: "rope" (rotary, applied to q and k in every layer) or "learned" (a position
            table added at the embedding, GPT-2).
        windows: how the config's `sliding_window` applies: "none" (the family has no sliding
            window), "all" (every layer: Mistral, Phi-3, Mixtral, Qwen3-MoE) or "layer_types"
            (the layers the config's `layer_types` marks "sliding_attention": Qwen2, Qwen3, Gemma 3).
        moe: the MLP is a mixture of experts (on the layers the config says: Qwen3-MoE's
            `mlp_only_layers` and `decoder_sparse_step` keep some dense).
        conv1d: the layers' projections are `Conv1D` modules, weights stored [in_features, out_features]
            and applied as X · W + b (GPT-2); else `nn.Linear`, [out_features, in_features], X · Wᵀ + b.
    """

    model_type: str
    traced: bool = True
    layers: str = "model.layers"
    top_modules: Mapping[str, str] = field(default_factory=dict, hash=False)
    layer_modules: Mapping[str, str] = field(default_factory=dict, hash=False)
    moe_modules: Mapping[str, str] = field(default_factory=dict, hash=False)
    config_names: str = "llama"
    norm: str = "rmsnorm"
    sandwich_norms: bool = False
    activation: str = "silu"
    gated_mlp: bool = True
    qk_norm: bool = False
    qk_norm_on_heads: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    embed_scale: bool = False
    positions: str = "rope"
    windows: str = "none"
    moe: bool = False
    conv1d: bool = False

    def modules_of(self, moe: bool) -> Mapping[str, str]:
        """Layer-relative stop -> path of the modules of a dense layer, or of a MoE layer (`moe`: the
        router and the experts in place of the dense MLP's projections)."""
        if not moe:
            return self.layer_modules
        dense = {stop: path for stop, path in self.layer_modules.items() if not stop.startswith("mlp.")}
        return _paths(dense, self.moe_modules)


def _paths(*groups: Mapping[str, str]) -> Mapping[str, str]:
    """One read-only stop -> path mapping from several."""
    merged: dict[str, str] = {}
    for group in groups:
        merged |= group
    return MappingProxyType(merged)


_TOP = _paths({"embed": "model.embed_tokens", "final_norm": "model.norm", "lm_head": "lm_head"})
_NORMS = {"input_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm"}
_QKV = {"attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj", "attn.v_proj": "self_attn.v_proj"}
_O = {"attn.o_proj": "self_attn.o_proj"}
_GATE_UP = {"mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.up_proj"}
_DOWN = {"mlp.down_proj": "mlp.down_proj"}
_QK_NORM = {"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}
_MLP_NORMS = {"pre_mlp_norm": "pre_feedforward_layernorm", "post_mlp_norm": "post_feedforward_layernorm"}
_LLAMA_LAYER = _paths(_NORMS, _QKV, _O, _GATE_UP, _DOWN)
# Mixtral and Qwen3-MoE (modeling_mixtral.py, modeling_qwen3_moe.py): `mlp` is a `*SparseMoeBlock` whose
# `gate` (`*TopKRouter`) returns (router logits [B*T, E], top-k weights [B*T, k], expert ids [B*T, k]) and
# whose `experts` (`*Experts`, 3-D weights) runs each routed expert on its tokens and sums them, weighted.
_MOE = _paths({"mlp.router": "mlp.gate", "mlp.experts": "mlp.experts"})
# GPT-2 (modeling_gpt2.py): Conv1D projections ([in, out] weights), one `c_attn` for Q, K and V, a
# `c_fc` -> GELU -> `c_proj` MLP, and the learned position table `wpe` beside the token table `wte`.
_GPT2_TOP = _paths({"embed": "transformer.wte", "pos_embed": "transformer.wpe", "final_norm": "transformer.ln_f",
                    "lm_head": "lm_head"})
_GPT2_LAYER = _paths({"input_norm": "ln_1", "attn.qkv_proj": "attn.c_attn", "attn.o_proj": "attn.c_proj",
                      "post_attn_norm": "ln_2", "mlp.up_proj": "mlp.c_fc", "mlp.act": "mlp.act",
                      "mlp.down_proj": "mlp.c_proj"})

_ENTRIES = [
    Family("llama", top_modules=_TOP, layer_modules=_LLAMA_LAYER),
    Family("mistral", top_modules=_TOP, layer_modules=_LLAMA_LAYER, windows="all"),
    Family("qwen2", top_modules=_TOP, layer_modules=_LLAMA_LAYER, qkv_bias=True, windows="layer_types"),
    Family("qwen3", top_modules=_TOP, layer_modules=_paths(_LLAMA_LAYER, _QK_NORM), qk_norm=True,
           windows="layer_types"),
    Family("gemma3_text", top_modules=_TOP,
           layer_modules=_paths(_LLAMA_LAYER, _QK_NORM, _MLP_NORMS),
           sandwich_norms=True, activation="gelu_tanh", qk_norm=True, qk_norm_on_heads=True, embed_scale=True,
           windows="layer_types"),
    Family("phi3", top_modules=_TOP,
           layer_modules=_paths(_NORMS, {"attn.qkv_proj": "self_attn.qkv_proj"}, _O,
                                {"mlp.gate_up_proj": "mlp.gate_up_proj"}, _DOWN),
           fused_qkv=True, fused_gate_up=True, windows="all"),
    Family("mixtral", top_modules=_TOP, layer_modules=_LLAMA_LAYER, moe_modules=_MOE, windows="all", moe=True),
    Family("qwen3_moe", top_modules=_TOP, layer_modules=_paths(_LLAMA_LAYER, _QK_NORM), moe_modules=_MOE,
           qk_norm=True, windows="all", moe=True),
    Family("gpt2", layers="transformer.h", top_modules=_GPT2_TOP, layer_modules=_GPT2_LAYER,
           config_names="gpt2", norm="layernorm",
           activation="gelu_tanh", gated_mlp=False, fused_qkv=True, qkv_bias=True, o_bias=True, mlp_bias=True,
           positions="learned", conv1d=True),
]

FAMILIES: Mapping[str, Family] = MappingProxyType({family.model_type: family for family in _ENTRIES})


def traced_family(model_type: str) -> Family:
    """The entry of a family the runner traces.

    Raises:
        ConfigError: the family is unknown or not traced yet (the message lists the traced ones).
    """
    family = FAMILIES.get(model_type)
    if family is None or not family.traced:
        traced = ", ".join(sorted(name for name, entry in FAMILIES.items() if entry.traced))
        raise ConfigError(f"Model type '{model_type}' is not traced yet; supported: {traced}.")
    return family
