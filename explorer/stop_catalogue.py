"""The stop catalogue: one row per stop of a forward pass, everything the explorer knows about it.

A row names the stop (layer-relative, "attn.q_proj", or outside the layers, "lm_head"), its kind, how
its shapes are predicted (`explorer.analysis.stop_shapes`), how it is costed
(`explorer.analysis.stop_costs`), and its docs: formula, shapes and weight in the symbols of
docs/concepts.md (B, T, n, d, h_q, h_kv, d_h, d_ff, V) and what inference engines do there. The stop
lists (`explorer.stops`), the recorder (`explorer.runner.assemble`), the shape predictions
(`explorer.analysis.shapes`), the cost model (`explorer.analysis.costs`) and the figures' hovers
(`explorer.figures.stop_docs`) all read these rows.

Adding a stop: one row here, its place in a family's list in `explorer.stops`, and where it is
recorded in `explorer.runner` (a module hook, or a span between neighbours in `assemble`). Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from explorer.analysis import stop_costs as cost
from explorer.analysis import stop_shapes as shape
from explorer.analysis.stop_costs import CostRule
from explorer.analysis.stop_shapes import ShapeRule
from explorer.stop_names import StopKind


@dataclass(frozen=True)
class Stop:
    """One stop of a forward pass.

    Attributes:
        name: layer-relative ("attn.q_proj") or, outside the layers, the canonical name ("lm_head").
        kind: what the operator does (`explorer.stop_names.StopKind`).
        formula: what it computes, in symbols.
        symbols: its shapes in -> out, in symbols.
        weight: its weight as `nn.Linear` stores it, in symbols ("W_q [h_q·d_h, d]"), or None.
        engines: what inference engines (vLLM, SGLang, TensorRT-LLM, llama.cpp) do at this stop.
        shapes: predicts its (input shapes, output shapes); None for a stop that holds no tensor
            (tokenize, sample, detokenize).
        cost: its cost records; None for a stop that moves nothing (a view, an indexing broadcast)
            or runs on the CPU.
        short: its label in the forward-pass diagram where the name's last part is not clear enough.
    """

    name: str
    kind: StopKind
    formula: str
    symbols: str
    weight: str | None
    engines: str
    shapes: ShapeRule | None = None
    cost: CostRule | None = None
    short: str = ""

    @property
    def label(self) -> str:
        """The stop's label in the forward-pass diagram: `short`, else the name's last part ("q_proj")."""
        return self.short or self.name.split(".")[-1]


_NORM = ("x̂ = x / √(mean(x²) + ε) ⊙ γ", "[B, T, d] → [B, T, d]", "γ [d]")
_RESIDUAL = "[B, T, d] [B, T, d] → [B, T, d]"
_FUSED_NORM = "Engines fuse the residual add into this RMSNorm: one kernel reads x once (vLLM fused_add_rms_norm)."
_FLASH = ("FlashAttention fuses scores, softmax and the weighted sum in one kernel: the [T, n] matrix never "
          "reaches memory.")
_MERGED_QKV = "Engines merge W_q, W_k and W_v into one GEMM (vLLM QKVParallelLinear): x is read once."
_MERGED_GATE_UP = "Engines merge W_gate and W_up into one GEMM (vLLM MergedColumnParallelLinear)."
_QK_NORM = "Engines fuse QK-norm with RoPE (and the KV-cache write) in one kernel."


def _norm(name: str, short: str = "") -> Stop:
    return Stop(name, "norm", *_NORM, _FUSED_NORM, shape.on_residual(1), cost.norm(name), short)


def _attention_gemm(name: str, formula: str, symbols: str, weight: str, engines: str, width) -> Stop:
    return Stop(name, "gemm", formula, symbols, weight, engines, shape.projection(width),
                cost.attention_projection(name))


def _mlp_gemm(name: str, formula: str, symbols: str, weight: str, engines: str, width) -> Stop:
    return Stop(name, "gemm", formula, symbols, weight, engines, shape.projection(width), cost.mlp_projection(name))


_ROWS = [
    Stop("tokenize", "tokenize", "text → token ids (chat template, then the tokenizer)", "text → [B, T]", None,
         "Engines tokenize on the CPU while the GPU runs other requests' steps.", short="token ids"),
    Stop("embed", "gather", "x_t = E[id_t]: a row lookup, no arithmetic", "[B, T] → [B, T, d]", "E [V, d]",
         "A gather of T rows of E; with a tied LM head E is also the LM head's weight.", shape.embed, cost.embed),
    Stop("pos_embed", "gather", "p_t = P[t]: a row of the learned position table per position (GPT-2)",
         "[1, T] → [1, T, d]", None, "", shape.pos_embed, cost.pos_embed),
    Stop("embed_add", "elementwise", "x_t = E[id_t] + P[t]: positions added once, at the input (no RoPE)",
         "[B, T, d] [1, T, d] → [B, T, d]", None, "", shape.embed_add, cost.embed_add),
    _norm("input_norm"), _norm("post_attn_norm"), _norm("pre_mlp_norm"), _norm("post_mlp_norm"),
    _attention_gemm("attn.q_proj", "Q = X · W_qᵀ", "[B, T, d] → [B, T, h_q·d_h]", "W_q [h_q·d_h, d]", _MERGED_QKV,
                    lambda spec: spec.q_size),
    _attention_gemm("attn.k_proj", "K = X · W_kᵀ", "[B, T, d] → [B, T, h_kv·d_h]", "W_k [h_kv·d_h, d]",
                    _MERGED_QKV, lambda spec: spec.kv_size),
    _attention_gemm("attn.v_proj", "V = X · W_vᵀ", "[B, T, d] → [B, T, h_kv·d_h]", "W_v [h_kv·d_h, d]",
                    _MERGED_QKV, lambda spec: spec.kv_size),
    _attention_gemm("attn.qkv_proj", "[Q K V] = X · W_qkvᵀ", "[B, T, d] → [B, T, (h_q+2·h_kv)·d_h]",
                    "W_qkv [(h_q+2·h_kv)·d_h, d]", "Already one merged GEMM here, as engines do for every model.",
                    lambda spec: spec.q_size + 2 * spec.kv_size),
    Stop("attn.q_norm", "norm", "q̂ = RMSNorm(q) over d_h, per head", "[B, T, h_q, d_h] → same", "γ [d_h]",
         _QK_NORM, shape.qk_norm(query=True), cost.qk_norm(query=True)),
    Stop("attn.k_norm", "norm", "k̂ = RMSNorm(k) over d_h, per head", "[B, T, h_kv, d_h] → same", "γ [d_h]",
         _QK_NORM, shape.qk_norm(query=False), cost.qk_norm(query=False)),
    Stop("attn.split_heads", "reshape", "view [B, T, h·d_h] as [B, h, T, d_h] (no copy, no kernel)",
         "[B, T, h_q·d_h] [B, T, h_kv·d_h]×2 → [B, h_q, T, d_h] [B, h_kv, T, d_h]×2", None,
         "A view of the same memory: no copy, no kernel, in engines too.", shape.split_heads,
         short="split heads"),
    Stop("attn.rope", "rope", "q' = q·cos + rotate_half(q)·sin, the same for k (not v)",
         "[B, h_q, T, d_h] [B, h_kv, T, d_h] → same", None,
         "Engines rotate q and k in place, often in the kernel that writes the KV cache.", shape.rope, cost.rope),
    Stop("attn.kv_cache_write", "cache_write", "K_cache = [K_cache; K], V_cache = [V_cache; V]",
         "[B, h_kv, T, d_h]×2 → [B, h_kv, n, d_h]×2", None,
         "Paged KV cache: vLLM writes K and V into fixed-size blocks (PagedAttention), so a growing sequence "
         "never reallocates.", shape.kv_cache_write, cost.kv_cache_write, short="KV write"),
    Stop("attn.gqa_expand", "broadcast", "query head h reads K and V head ⌊h / g⌋, g = h_q / h_kv (a broadcast, no "
         "copy)", "[B, h_kv, n, d_h]×2 → [B, h_q, n, d_h]×2", None,
         "Attention kernels read each KV head once for its g query heads: no expanded copy.", shape.gqa_expand,
         short="GQA"),
    Stop("attn.scores", "batched_gemm", "S = Q·Kᵀ / √d_h + causal mask",
         "[B, h_q, T, d_h] [B, h_q, n, d_h] → [B, h_q, T, n]", None, _FLASH, shape.scores, cost.scores),
    Stop("attn.softmax", "softmax", "P = softmax(S) along each row (float32)", "[B, h_q, T, n] → [B, h_q, T, n]",
         None, _FLASH, shape.softmax, cost.softmax),
    Stop("attn.weighted_sum", "batched_gemm", "O = P · V", "[B, h_q, T, n] [B, h_q, n, d_h] → [B, h_q, T, d_h]",
         None, _FLASH, shape.weighted_sum, cost.weighted_sum, short="P·V"),
    Stop("attn.merge_heads", "reshape", "O: [B, h_q, T, d_h] → [B, T, h_q·d_h]", "[B, h_q, T, d_h] → [B, T, h_q·d_h]",
         None, "A view back to [B, T, h_q·d_h] (a copy only if not contiguous).", shape.merge_heads,
         short="merge heads"),
    Stop("attn.o_proj", "gemm", "Y = O · W_oᵀ", "[B, T, h_q·d_h] → [B, T, d]", "W_o [d, h_q·d_h]",
         "With tensor parallelism each GPU holds a slice of W_o and the outputs are all-reduced here.",
         shape.o_proj, cost.attention_projection("attn.o_proj")),
    Stop("attn_residual", "elementwise", "x = x + attn(x)", _RESIDUAL, None,
         "Fused into the next RMSNorm's kernel in engines.", shape.on_residual(2), cost.residual("attn_residual")),
    _mlp_gemm("mlp.gate_proj", "G = X · W_gateᵀ", "[B, T, d] → [B, T, d_ff]", "W_gate [d_ff, d]", _MERGED_GATE_UP,
              lambda spec: spec.dense_intermediate_size),
    _mlp_gemm("mlp.up_proj", "U = X · W_upᵀ", "[B, T, d] → [B, T, d_ff]", "W_up [d_ff, d]", _MERGED_GATE_UP,
              lambda spec: spec.dense_intermediate_size),
    _mlp_gemm("mlp.gate_up_proj", "[G U] = X · W_gate_upᵀ", "[B, T, d] → [B, T, 2·d_ff]", "W_gate_up [2·d_ff, d]",
              "Already one merged GEMM here, as engines do.", lambda spec: 2 * spec.dense_intermediate_size),
    Stop("mlp.act", "elementwise", "A = silu(gate) ⊙ up (SwiGLU; Gemma 3: gelu); GPT-2: A = gelu(U), no gate",
         "[B, T, d_ff]×2 → [B, T, d_ff] (GPT-2: [B, T, d_ff] → [B, T, d_ff])", None,
         "One fused silu-and-mul kernel in engines (no separate gate and up tensors written).",
         shape.mlp_act, cost.mlp_act),
    Stop("mlp.down_proj", "gemm", "Y = A · W_downᵀ", "[B, T, d_ff] → [B, T, d]", "W_down [d, d_ff]",
         "Decode reads all of W_down for one row per sequence: batching many sequences amortises it.",
         shape.down_proj, cost.mlp_projection("mlp.down_proj")),
    Stop("mlp.router", "gemm", "r = X · W_routerᵀ; p = softmax(r); each row's k largest p pick its experts and weigh "
         "them (Mixtral: renormalised to sum to 1; Qwen3-MoE: only with norm_topk_prob)",
         "[B·T, d] → logits [B·T, E], weights [B·T, k], expert ids [B·T, k]", "W_router [E, d]",
         "A tiny GEMM (E columns); engines fuse its softmax and top-k into one kernel.", shape.router, cost.router),
    Stop("mlp.experts", "experts", "each expert e that got tokens runs its MLP on its tokens_e rows: [tokens_e, d] → "
         "[tokens_e, 2·d_ff] → [tokens_e, d_ff] → [tokens_e, d]; y = Σ over a row's k experts of weight · output "
         "(tokens_e computed from the measured routing)", "[B·T, d] [B·T, k]×2 → [B·T, d]", None,
         "Engines sort the rows by expert and run all experts in one grouped GEMM (vLLM fused_moe); with expert "
         "parallelism each GPU holds some experts and the rows travel to them.", shape.experts, cost.experts),
    Stop("mlp_residual", "elementwise", "x = x + mlp(x)", _RESIDUAL, None,
         "Fused into the next layer's input RMSNorm in engines.", shape.on_residual(2), cost.residual("mlp_residual")),
    _norm("final_norm", short="final norm"),
    Stop("lm_head", "gemm", "logits = x_last · W_lmᵀ (last position only)", "[B, 1, d] → [B, 1, V]", "W_lm [V, d]",
         "Logits for the last position only (done here too): engines skip the prompt's other positions.",
         shape.lm_head, cost.lm_head),
    Stop("sample", "sample", "next id: processors (temperature, top-k, top-p, min-p) then a draw, or argmax",
         "[B, V] → [B]", None,
         "Engines sample on the GPU for the whole batch; CUDA graphs replay a decode step's kernels at once."),
    Stop("detokenize", "detokenize", "id → text piece (may be an incomplete UTF-8 character)", "[B] → text", None,
         "Engines detokenize incrementally, holding back an incomplete UTF-8 character."),
]

CATALOGUE: Mapping[str, Stop] = MappingProxyType({row.name: row for row in _ROWS})
NORM_WEIGHT = _NORM[2]  # the weight of the residual stream's norms, "γ [d]"
