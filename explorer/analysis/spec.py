"""`ModelSpec`: a model's dimensions in the field's names, translated once from a Hugging Face config.

Pure Python (no torch). Every other analysis module reads dimensions from a `ModelSpec`, never from
the raw config, so the translation from each family's field names lives here alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.errors import ConfigError

# HF `model_type` -> how the family differs from the Llama block. Sources: the `modeling_<family>.py`
# files of transformers 5 (module names, biases, norms, activations).
_FAMILY_TRAITS = {
    "llama": {},
    "mistral": {},
    "mixtral": {"moe": True},
    "qwen2": {"qkv_bias": True},
    "qwen3": {"qk_norm": True},
    "qwen3_moe": {"qk_norm": True, "moe": True},
    "gemma3_text": {"qk_norm": True, "norms_per_layer": 4, "embed_scale": True, "act": "gelu_tanh"},
    "phi3": {"fused_qkv": True, "fused_gate_up": True},
    "gpt2": {"fused_qkv": True, "gated_mlp": False, "norm": "layernorm", "act": "gelu_tanh",
             "qkv_bias": True, "o_bias": True, "mlp_bias": True},
}

# Field names each family's config must provide (GPT-2 uses its own names).
_REQUIRED = {
    "gpt2": ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"),
    "moe": ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "num_experts_per_tok"),
    "dense": ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"),
}


@dataclass(frozen=True)
class ModelSpec:
    """The dimensions of a decoder-only transformer, in the symbols of docs/concepts.md.

    Attributes:
        family: HF `model_type`, e.g. "llama", "qwen3", "gpt2".
        hidden_size: d.
        n_layers: L.
        n_heads: h_q, query heads.
        n_kv_heads: h_kv, key/value heads (h_q for MHA, 1 for MQA).
        head_dim: d_h; given apart from d / h_q where the config says so (Qwen3, Gemma 3).
        intermediate_size: d_ff of a dense MLP (of each expert for MoE: `moe_intermediate_size`).
        vocab_size: V.
        tie_word_embeddings: the LM head reuses the embedding matrix (counted once).
        qkv_bias: q/k/v projections have a bias (Qwen2, GPT-2; Llama-like with `attention_bias`).
        o_bias: o_proj has a bias (GPT-2; Llama-like with `attention_bias`).
        mlp_bias: the MLP projections have biases (GPT-2; Llama with `mlp_bias`).
        qk_norm: per-head RMSNorm of queries and keys (Qwen3, Gemma 3).
        fused_qkv: the weights are stored as one qkv matrix (Phi-3, GPT-2 `c_attn`).
        fused_gate_up: gate and up are one matrix (Phi-3).
        gated_mlp: act(gate) * up then down (three matrices); False: up, act, down (GPT-2).
        norm: "rmsnorm" (weight only) or "layernorm" (weight and bias).
        norms_per_layer: 2, or 4 for Gemma 3's norms before and after attention and MLP.
        activation: "silu" or "gelu_tanh".
        embed_scale: embeddings are multiplied by sqrt(d) (Gemma 3).
        max_positions: rows of a learned position table (GPT-2), else 0.
        layer_windows: per layer, the sliding-window length or None for full attention.
        n_experts: routed experts per MoE layer, 0 for dense.
        experts_per_token: experts each token is routed to (k), 0 for dense.
        moe_layers: per layer, True where the MLP is a mixture of experts.
        dense_intermediate_size: d_ff of the dense layers of a model that mixes both (Qwen3-MoE
            `mlp_only_layers`); equals `intermediate_size` for dense models.
    """

    family: str
    hidden_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    gated_mlp: bool = True
    norm: str = "rmsnorm"
    norms_per_layer: int = 2
    activation: str = "silu"
    embed_scale: bool = False
    max_positions: int = 0
    layer_windows: tuple[int | None, ...] = ()
    n_experts: int = 0
    experts_per_token: int = 0
    moe_layers: tuple[bool, ...] = ()
    dense_intermediate_size: int = 0

    @property
    def gqa_group_size(self) -> int:
        """g = h_q / h_kv: query heads that share one key/value head (1 for MHA)."""
        return self.n_heads // self.n_kv_heads

    @property
    def q_size(self) -> int:
        """h_q * d_h: width of the query projection's output."""
        return self.n_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """h_kv * d_h: width of the key (and of the value) projection's output."""
        return self.n_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        """True when any layer routes tokens to experts."""
        return any(self.moe_layers)

    def window(self, layer: int) -> int | None:
        """The sliding-window length of `layer`, None for full attention."""
        return self.layer_windows[layer] if self.layer_windows else None

    @classmethod
    def from_hf_config(cls, config: dict) -> ModelSpec:
        """Translate a Hugging Face `config.json` dict.

        Args:
            config: the config as a dict (see `explorer.config.load_hf_config`).

        Raises:
            ConfigError: the family is unknown (the message names the fields a spec needs), or a
                required field is missing, or the heads do not divide evenly.
        """
        config = config.get("text_config", config) if config.get("model_type") == "gemma3" else config
        family = config.get("model_type", "")
        if family not in _FAMILY_TRAITS:
            needed = ", ".join(_REQUIRED["dense"] + ("num_key_value_heads", "head_dim"))
            raise ConfigError(
                f"Model type '{family or '(missing model_type)'}' is not one the cost model knows "
                f"({', '.join(sorted(_FAMILY_TRAITS))}). A spec needs: model_type, {needed}."
            )
        traits = _FAMILY_TRAITS[family]
        if family == "gpt2":
            return _from_gpt2(config, traits)
        _require(config, _REQUIRED["moe" if traits.get("moe") else "dense"], family)
        return _from_llama_like(config, family, traits)


def _require(config: dict, names: tuple[str, ...], family: str) -> None:
    missing = [name for name in names if config.get(name) is None]
    if missing:
        raise ConfigError(f"The '{family}' config lacks the fields a spec needs: {', '.join(missing)}.")


def _common_traits(traits: dict) -> dict:
    keys = ("qkv_bias", "o_bias", "mlp_bias", "qk_norm", "fused_qkv", "fused_gate_up", "gated_mlp",
            "norm", "norms_per_layer", "embed_scale")
    renamed = {key: traits[key] for key in keys if key in traits}
    if "act" in traits:
        renamed["activation"] = traits["act"]
    return renamed


def _from_gpt2(config: dict, traits: dict) -> ModelSpec:
    _require(config, _REQUIRED["gpt2"], "gpt2")
    hidden, heads = config["n_embd"], config["n_head"]
    _check_heads(hidden, heads, heads, None)
    n_layers = config["n_layer"]
    return ModelSpec(
        family="gpt2", hidden_size=hidden, n_layers=n_layers, n_heads=heads, n_kv_heads=heads,
        head_dim=hidden // heads, intermediate_size=config.get("n_inner") or 4 * hidden,
        vocab_size=config["vocab_size"], tie_word_embeddings=config.get("tie_word_embeddings", True),
        max_positions=config["n_positions"], layer_windows=(None,) * n_layers,
        moe_layers=(False,) * n_layers, dense_intermediate_size=config.get("n_inner") or 4 * hidden,
        **_common_traits(traits),
    )


def _from_llama_like(config: dict, family: str, traits: dict) -> ModelSpec:
    hidden, heads, n_layers = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or None
    _check_heads(hidden, heads, kv_heads, head_dim)
    moe_layers = _moe_layers(config, n_layers) if traits.get("moe") else (False,) * n_layers
    dense_width = config.get("intermediate_size") or 0
    expert_width = config.get("moe_intermediate_size") or dense_width
    return ModelSpec(
        family=family, hidden_size=hidden, n_layers=n_layers, n_heads=heads, n_kv_heads=kv_heads,
        head_dim=head_dim or hidden // heads,
        intermediate_size=expert_width if any(moe_layers) else dense_width,
        vocab_size=config["vocab_size"], tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(traits.get("qkv_bias") or config.get("attention_bias")),
        o_bias=bool(config.get("attention_bias")), mlp_bias=bool(config.get("mlp_bias")),
        layer_windows=_layer_windows(config, family, n_layers),
        n_experts=_n_experts(config) if any(moe_layers) else 0,
        experts_per_token=config.get("num_experts_per_tok", 0) if any(moe_layers) else 0,
        moe_layers=moe_layers, dense_intermediate_size=dense_width,
        **{k: v for k, v in _common_traits(traits).items() if not k.endswith("_bias")},
    )


def _check_heads(hidden: int, heads: int, kv_heads: int, head_dim: int | None) -> None:
    if heads % kv_heads:
        raise ConfigError(f"{heads} query heads cannot be grouped over {kv_heads} key/value heads.")
    if head_dim is None and hidden % heads:
        raise ConfigError(f"hidden_size {hidden} is not a multiple of {heads} heads and head_dim is not given.")


def _n_experts(config: dict) -> int:
    # Qwen3-MoE names it `num_experts`, Mixtral `num_local_experts`.
    return config.get("num_experts") or config.get("num_local_experts") or 0


def _moe_layers(config: dict, n_layers: int) -> tuple[bool, ...]:
    """Which layers are MoE. Source: Qwen3MoeDecoderLayer (`mlp_only_layers`, `decoder_sparse_step`)."""
    if not _n_experts(config):
        raise ConfigError("An MoE config needs num_experts (or num_local_experts) > 0.")
    skip = set(config.get("mlp_only_layers") or [])
    step = config.get("decoder_sparse_step") or 1
    return tuple(i not in skip and (i + 1) % step == 0 for i in range(n_layers))


def _layer_windows(config: dict, family: str, n_layers: int) -> tuple[int | None, ...]:
    """Per-layer sliding window, as transformers 5 decides it.

    Sources: `layer_types` where the config lists it; Gemma3TextConfig's default pattern (every
    `sliding_window_pattern`-th layer, default 6, is global); Qwen2/Qwen3 configs apply the window
    only when `use_sliding_window` is true, from layer `max_window_layers` on; Mistral, Mixtral and
    Phi-3 apply `sliding_window` to every layer.
    """
    window = config.get("sliding_window")
    if config.get("layer_types"):
        return tuple(window if kind == "sliding_attention" else None for kind in config["layer_types"])
    if not window:
        return (None,) * n_layers
    if family == "gemma3_text":
        pattern = config.get("sliding_window_pattern", 6)
        return tuple(window if (i + 1) % pattern else None for i in range(n_layers))
    if family.startswith("qwen"):
        if not config.get("use_sliding_window", False):
            return (None,) * n_layers
        first = config.get("max_window_layers", 0)
        return tuple(window if i >= first else None for i in range(n_layers))
    return (window,) * n_layers
