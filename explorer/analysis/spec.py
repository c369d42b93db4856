"""`ModelSpec`: a model's dimensions in the field's names, translated once from a Hugging Face config.

Pure Python (no torch). Every other analysis module reads dimensions from a `ModelSpec`, never from
the raw config, so the translation from each family's field names lives here alone. The config is
the dict transformers resolves (`explorer.runner.configs.resolved_config`, or a loaded model's
`config.to_dict()`), so every default is transformers'. This module fills in none: the dimensions
are required, and an optional key the dict lacks means the option is off (no tied head, no bias, no
window), as transformers' `to_dict()` writes every key the family's config has. The family's own
facts (norms, activation, fused projections) come from `explorer.families`.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.errors import ConfigError, UsageError
from explorer.families import FAMILIES, Family

# The dimensions every config of a family must give; the rest are optional keys the modeling code
# reads with a fallback of its own (head_dim: d / h_q; no `attention_bias`: no bias).
_REQUIRED = {
    "gpt2": ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"),
    "moe": ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
            "num_experts_per_tok"),
    "dense": ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
              "intermediate_size"),
}


@dataclass(frozen=True)
class ModelSpec:
    """The dimensions of a decoder-only transformer, in the symbols of docs/concepts.md.

    Attributes:
        family: HF `model_type`, e.g. "llama", "qwen3", "gpt2"; a key of `explorer.families.FAMILIES`.
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
        context_window: the most positions the model was trained for, its context window (GPT-2:
            `n_positions`, also the rows of its learned position table; Gemma 3: its `text_config`'s
            `max_position_embeddings`; the others: `max_position_embeddings`); 0 where the config
            gives none.
        layer_windows: per layer, the sliding-window length or None for full attention.
        n_experts: routed experts per MoE layer, 0 for dense.
        experts_per_token: experts each token is routed to (k), 0 for dense.
        moe_layers: per layer, True where the MLP is a mixture of experts.
        dense_intermediate_size: d_ff of the dense layers of a model that mixes both (Qwen3-MoE
            `mlp_only_layers`); equals `intermediate_size` for dense models.

    The family's facts (`arch`: norm kind, activation, QK-norm, fused projections) are read from
    `explorer.families`, not stored here.
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
    context_window: int = 0
    layer_windows: tuple[int | None, ...] = ()
    n_experts: int = 0
    experts_per_token: int = 0
    moe_layers: tuple[bool, ...] = ()
    dense_intermediate_size: int = 0

    @property
    def arch(self) -> Family:
        """The family's entry in `explorer.families.FAMILIES`."""
        return FAMILIES[self.family]

    @property
    def norm(self) -> str:
        """"rmsnorm" (weight only) or "layernorm" (weight and bias)."""
        return self.arch.norm

    @property
    def norms_per_layer(self) -> int:
        """Norms over d in each layer: 2, or 4 for Gemma 3's norms before and after attention and MLP."""
        return 4 if self.arch.sandwich_norms else 2

    @property
    def activation(self) -> str:
        """The MLP's activation: "silu" or "gelu_tanh"."""
        return self.arch.activation

    @property
    def gated_mlp(self) -> bool:
        """act(gate) * up then down (three matrices); False: up, act, down (GPT-2)."""
        return self.arch.gated_mlp

    @property
    def qk_norm(self) -> bool:
        """Per-head RMSNorm of queries and keys (Qwen3, Gemma 3), d_h weights each."""
        return self.arch.qk_norm

    @property
    def fused_qkv(self) -> bool:
        """The weights are stored as one qkv matrix (Phi-3, GPT-2 `c_attn`)."""
        return self.arch.fused_qkv

    @property
    def fused_gate_up(self) -> bool:
        """Gate and up are one matrix (Phi-3)."""
        return self.arch.fused_gate_up

    @property
    def embed_scale(self) -> bool:
        """Embeddings are multiplied by sqrt(d) (Gemma 3)."""
        return self.arch.embed_scale

    @property
    def position_table_rows(self) -> int:
        """Rows of a learned position table (GPT-2: the context window), 0 with rotary positions."""
        return self.context_window if self.arch.positions == "learned" else 0

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

    def check_positions(self, positions: int) -> None:
        """The one check of a step's positions (a prefill's T, a decode step's n) against the context
        window, for the CLI, the notebook's and the app's what-ifs alike.

        Raises:
            UsageError: more positions than the context window (where the config gives one); the
                CLI's exit code 2.
        """
        if self.context_window and positions > self.context_window:
            raise UsageError(f"{positions:,} positions exceed this model's context window of "
                              f"{self.context_window:,} tokens: give at most {self.context_window:,}.")

    @classmethod
    def from_hf_config(cls, config: dict) -> ModelSpec:
        """Translate a Hugging Face config dict, as transformers resolves it.

        Args:
            config: `PretrainedConfig.to_dict()` (`explorer.runner.configs.resolved_config` for a
                file or preset); a raw `config.json` dict works only where it lacks no key
                transformers would fill in (the shipped presets are complete).

        Raises:
            ConfigError: the family is unknown (the message names the fields a spec needs), or a
                required field is missing, or the heads do not divide evenly, or a family that
                windows by `layer_types` has a `sliding_window` but no `layer_types`.
        """
        config = config.get("text_config", config) if config.get("model_type") == "gemma3" else config
        family = FAMILIES.get(config.get("model_type", ""))
        if family is None:
            needed = ", ".join(_REQUIRED["dense"] + ("head_dim",))
            raise ConfigError(
                f"Model type '{config.get('model_type') or '(missing model_type)'}' is not one the cost model "
                f"knows ({', '.join(sorted(FAMILIES))}). A spec needs: model_type, {needed}."
            )
        if family.config_names == "gpt2":
            return _from_gpt2(config, family)
        return _from_llama_like(config, family)


def _require(config: dict, names: tuple[str, ...], family: Family) -> None:
    missing = [name for name in names if config.get(name) is None]
    if missing:
        raise ConfigError(f"The '{family.model_type}' config lacks the fields a spec needs: {', '.join(missing)}.")


def _biases(config: dict, family: Family) -> dict[str, bool]:
    """Biases the family always has, or that the config's `attention_bias` / `mlp_bias` switch on
    (a family without those keys has none)."""
    attention = bool(config.get("attention_bias"))
    return {"qkv_bias": family.qkv_bias or attention, "o_bias": family.o_bias or attention,
            "mlp_bias": family.mlp_bias or bool(config.get("mlp_bias"))}


def _from_gpt2(config: dict, family: Family) -> ModelSpec:
    _require(config, _REQUIRED["gpt2"], family)
    hidden, heads = config["n_embd"], config["n_head"]
    _check_heads(hidden, heads, heads, None)
    n_layers = config["n_layer"]
    width = config.get("n_inner") or 4 * hidden  # GPT2MLP: n_inner None means 4d
    return ModelSpec(
        family=family.model_type, hidden_size=hidden, n_layers=n_layers, n_heads=heads, n_kv_heads=heads,
        head_dim=hidden // heads, intermediate_size=width, vocab_size=config["vocab_size"],
        tie_word_embeddings=bool(config.get("tie_word_embeddings")), context_window=config["n_positions"],
        layer_windows=(None,) * n_layers, moe_layers=(False,) * n_layers, dense_intermediate_size=width,
        **_biases(config, family),
    )


def _from_llama_like(config: dict, family: Family) -> ModelSpec:
    _require(config, _REQUIRED["moe" if family.moe else "dense"], family)
    hidden, heads, n_layers = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    kv_heads, head_dim = config["num_key_value_heads"], config.get("head_dim")
    _check_heads(hidden, heads, kv_heads, head_dim)
    moe_layers = _moe_layers(config, n_layers) if family.moe else (False,) * n_layers
    dense_width = config.get("intermediate_size") or 0
    expert_width = config.get("moe_intermediate_size") or dense_width  # Mixtral's experts are d_ff wide
    return ModelSpec(
        family=family.model_type, hidden_size=hidden, n_layers=n_layers, n_heads=heads, n_kv_heads=kv_heads,
        head_dim=head_dim or hidden // heads,  # no head_dim: d / h_q, as the attention modules compute it
        intermediate_size=expert_width if any(moe_layers) else dense_width,
        vocab_size=config["vocab_size"], tie_word_embeddings=bool(config.get("tie_word_embeddings")),
        context_window=config.get("max_position_embeddings") or 0,
        layer_windows=_layer_windows(config, family, n_layers),
        n_experts=_n_experts(config) if any(moe_layers) else 0,
        experts_per_token=config["num_experts_per_tok"] if any(moe_layers) else 0,
        moe_layers=moe_layers, dense_intermediate_size=dense_width, **_biases(config, family),
    )


def _check_heads(hidden: int, heads: int, kv_heads: int, head_dim: int | None) -> None:
    if heads % kv_heads:
        raise ConfigError(f"{heads} query heads cannot be grouped over {kv_heads} key/value heads.")
    if head_dim is None and hidden % heads:
        raise ConfigError(f"hidden_size {hidden} is not a multiple of {heads} heads and head_dim is not given.")


def _n_experts(config: dict) -> int:
    # Qwen3-MoE's published configs name it `num_experts`; Mixtral and transformers' to_dict `num_local_experts`.
    return config.get("num_experts") or config.get("num_local_experts") or 0


def _moe_layers(config: dict, n_layers: int) -> tuple[bool, ...]:
    """Which layers are MoE. Source: Qwen3MoeDecoderLayer (`mlp_only_layers`, `decoder_sparse_step`);
    a config without them (Mixtral) routes every layer."""
    if not _n_experts(config):
        raise ConfigError("An MoE config needs num_experts (or num_local_experts) > 0.")
    skip = set(config.get("mlp_only_layers") or [])
    step = config.get("decoder_sparse_step") or 1
    return tuple(i not in skip and (i + 1) % step == 0 for i in range(n_layers))


def _layer_windows(config: dict, family: Family, n_layers: int) -> tuple[int | None, ...]:
    """Per-layer sliding window, as the family's attention applies the config's `sliding_window`.

    "layer_types" families (Qwen2, Qwen3, Gemma 3) window the layers `layer_types` marks
    "sliding_attention": transformers derives it for Gemma 3 from `sliding_window_pattern`, for
    Qwen2/Qwen3 from `use_sliding_window` and `max_window_layers` (and drops `sliding_window` when
    `use_sliding_window` is false). "all" families (Mistral, Mixtral, Phi-3, Qwen3-MoE) window every layer.

    Raises:
        ConfigError: a "layer_types" family with a window but no `layer_types` (a raw config).
    """
    window = config.get("sliding_window") if family.windows != "none" else None
    if not window:
        return (None,) * n_layers
    if family.windows == "all":
        return (window,) * n_layers
    if not config.get("layer_types"):
        raise ConfigError(f"The '{family.model_type}' config has a sliding_window but no layer_types; read it "
                          "through transformers (explorer.runner.configs.resolved_config), which derives them.")
    return tuple(window if kind == "sliding_attention" else None for kind in config["layer_types"])
