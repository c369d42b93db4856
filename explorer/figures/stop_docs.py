"""What each stop computes, for the hovers of the forward-pass and journey views: its formula, its
shapes and weight in symbols (B, T, n, d, h_q, h_kv, d_h, d_ff, V: docs/concepts.md), the weight's
measured shape, and what inference engines do at that stop. Pure Python over traces.
"""

from __future__ import annotations

from explorer.families import Family
from explorer.trace import OpRecord

NORM = ("x̂ = x / √(mean(x²) + ε) ⊙ γ", "[B, T, d] → [B, T, d]", "γ [d]")
RESIDUAL = "[B, T, d] [B, T, d] → [B, T, d]"
# Relative stop name → (formula, shapes in symbols, weight in symbols or None). Symbols: docs/concepts.md.
STOP_DOCS = {
    "tokenize": ("text → token ids (chat template, then the tokenizer)", "text → [B, T]", None),
    "embed": ("x_t = E[id_t]: a row lookup, no arithmetic", "[B, T] → [B, T, d]", "E [V, d]"),
    "pos_embed": ("p_t = P[t]: a row of the learned position table per position (GPT-2)", "[1, T] → [1, T, d]",
                  None),
    "embed_add": ("x_t = E[id_t] + P[t]: positions added once, at the input (no RoPE)",
                  "[B, T, d] [1, T, d] → [B, T, d]", None),
    "input_norm": NORM, "post_attn_norm": NORM, "pre_mlp_norm": NORM, "post_mlp_norm": NORM, "final_norm": NORM,
    "attn.q_proj": ("Q = X · W_qᵀ", "[B, T, d] → [B, T, h_q·d_h]", "W_q [h_q·d_h, d]"),
    "attn.k_proj": ("K = X · W_kᵀ", "[B, T, d] → [B, T, h_kv·d_h]", "W_k [h_kv·d_h, d]"),
    "attn.v_proj": ("V = X · W_vᵀ", "[B, T, d] → [B, T, h_kv·d_h]", "W_v [h_kv·d_h, d]"),
    "attn.qkv_proj": ("[Q K V] = X · W_qkvᵀ", "[B, T, d] → [B, T, (h_q+2·h_kv)·d_h]",
                      "W_qkv [(h_q+2·h_kv)·d_h, d]"),
    "attn.q_norm": ("q̂ = RMSNorm(q) over d_h, per head", "[B, T, h_q, d_h] → same", "γ [d_h]"),
    "attn.k_norm": ("k̂ = RMSNorm(k) over d_h, per head", "[B, T, h_kv, d_h] → same", "γ [d_h]"),
    "attn.split_heads": ("view [B, T, h·d_h] as [B, h, T, d_h] (no copy, no kernel)",
                         "[B, T, h_q·d_h] [B, T, h_kv·d_h]×2 → [B, h_q, T, d_h] [B, h_kv, T, d_h]×2", None),
    "attn.rope": ("q' = q·cos + rotate_half(q)·sin, the same for k (not v)",
                  "[B, h_q, T, d_h] [B, h_kv, T, d_h] → same", None),
    "attn.kv_cache_write": ("K_cache = [K_cache; K], V_cache = [V_cache; V]",
                            "[B, h_kv, T, d_h]×2 → [B, h_kv, n, d_h]×2", None),
    "attn.gqa_expand": ("query head h reads K and V head ⌊h / g⌋, g = h_q / h_kv (a broadcast, no copy)",
                        "[B, h_kv, n, d_h]×2 → [B, h_q, n, d_h]×2", None),
    "attn.scores": ("S = Q·Kᵀ / √d_h + causal mask", "[B, h_q, T, d_h] [B, h_q, n, d_h] → [B, h_q, T, n]", None),
    "attn.softmax": ("P = softmax(S) along each row (float32)", "[B, h_q, T, n] → [B, h_q, T, n]", None),
    "attn.weighted_sum": ("O = P · V", "[B, h_q, T, n] [B, h_q, n, d_h] → [B, h_q, T, d_h]", None),
    "attn.merge_heads": ("O: [B, h_q, T, d_h] → [B, T, h_q·d_h]", "[B, h_q, T, d_h] → [B, T, h_q·d_h]", None),
    "attn.o_proj": ("Y = O · W_oᵀ", "[B, T, h_q·d_h] → [B, T, d]", "W_o [d, h_q·d_h]"),
    "attn_residual": ("x = x + attn(x)", RESIDUAL, None),
    "mlp.gate_proj": ("G = X · W_gateᵀ", "[B, T, d] → [B, T, d_ff]", "W_gate [d_ff, d]"),
    "mlp.up_proj": ("U = X · W_upᵀ", "[B, T, d] → [B, T, d_ff]", "W_up [d_ff, d]"),
    "mlp.gate_up_proj": ("[G U] = X · W_gate_upᵀ", "[B, T, d] → [B, T, 2·d_ff]", "W_gate_up [2·d_ff, d]"),
    "mlp.act": ("A = silu(gate) ⊙ up (SwiGLU; Gemma 3: gelu); GPT-2: A = gelu(U), no gate",
                "[B, T, d_ff]×2 → [B, T, d_ff] (GPT-2: [B, T, d_ff] → [B, T, d_ff])", None),
    "mlp.down_proj": ("Y = A · W_downᵀ", "[B, T, d_ff] → [B, T, d]", "W_down [d, d_ff]"),
    "mlp.router": ("r = X · W_routerᵀ; p = softmax(r); each row's k largest p pick its experts and weigh them "
                   "(Mixtral: renormalised to sum to 1; Qwen3-MoE: only with norm_topk_prob)",
                   "[B·T, d] → logits [B·T, E], weights [B·T, k], expert ids [B·T, k]", "W_router [E, d]"),
    "mlp.experts": ("each expert e that got tokens runs its MLP on its tokens_e rows: [tokens_e, d] → "
                    "[tokens_e, 2·d_ff] → [tokens_e, d_ff] → [tokens_e, d]; y = Σ over a row's k experts of "
                    "weight · output (tokens_e computed from the measured routing)",
                    "[B·T, d] [B·T, k]×2 → [B·T, d]", None),
    "mlp_residual": ("x = x + mlp(x)", RESIDUAL, None),
    "lm_head": ("logits = x_last · W_lmᵀ (last position only)", "[B, 1, d] → [B, 1, V]", "W_lm [V, d]"),
    "sample": ("next id: processors (temperature, top-k, top-p, min-p) then a draw, or argmax",
               "[B, V] → [B]", None),
    "detokenize": ("id → text piece (may be an incomplete UTF-8 character)", "[B] → text", None),
}


LAYER_NORM_FORMULA = "x̂ = (x − mean(x)) / √(var(x) + ε) ⊙ γ + β (LayerNorm)"


def stop_doc(relative: str, family: Family | None = None) -> tuple[str, str, str | None]:
    """(formula, shapes in symbols, weight in symbols as stored) of the stop `relative` (e.g.
    "attn.q_proj") in `family`: `STOP_DOCS` (the Llama block, also for None), with a LayerNorm's mean
    and bias where the family's norms are LayerNorms, and GPT-2's `Conv1D` layer GEMMs as X · W + b with
    W [in, out]; a stop the docs do not know (a saved run's own name) has ("", "", None)."""
    formula, symbols, weight = STOP_DOCS.get(relative, ("", "", None))
    if family is None:
        return formula, symbols, weight
    if family.norm == "layernorm" and weight == NORM[2]:
        formula = LAYER_NORM_FORMULA
    if family.conv1d and weight and weight.startswith("W_") and relative != "lm_head":
        formula, weight = f"{formula.replace('ᵀ', '')} + b (Conv1D)", stored_symbols(weight, True)
    return formula, symbols, weight


def stored_symbols(weight_symbols: str, in_out: bool) -> str:
    """A weight in symbols as the model stores it: "W_q [h_q·d_h, d]" (`nn.Linear`), or with `in_out`
    (GPT-2's `Conv1D`) "W_q [d, h_q·d_h]"."""
    if not in_out or " [" not in weight_symbols:
        return weight_symbols
    name, dims = weight_symbols.split(" [", 1)
    out_features, in_features = dims.rstrip("]").split(", ")
    return f"{name} [{in_features}, {out_features}]"


def weight_shape(op: OpRecord, vocab: int, in_out: bool = False) -> list[int] | None:
    """The weight a stop multiplies by, from its shapes: [out_features, in_features] for a GEMM
    (`nn.Linear`), [d] for a norm (d_h for QK-norm), [V, d] for the embedding; None for a stop without
    weights.

    Args:
        op: the stop.
        vocab: V, the vocabulary size (the embedding's shapes do not show it).
        in_out: the layers' GEMMs are GPT-2's `Conv1D`, stored [in_features, out_features] (its LM head
            is an `nn.Linear`, tied to the embedding).
    """
    if op.kind == "gemm":
        shape = [op.output_shapes[0][-1], op.input_shapes[0][-1]]
        return shape[::-1] if in_out and op.layer is not None else shape
    if op.kind == "norm":
        return [op.output_shapes[0][-1]]
    if op.name == "embed":
        return [vocab, op.output_shapes[0][-1]]
    return None


# What inference engines do differently at each stop (vLLM, SGLang, TensorRT-LLM, llama.cpp): one line each.
_FUSED_NORM = "Engines fuse the residual add into this RMSNorm: one kernel reads x once (vLLM fused_add_rms_norm)."
_FLASH = ("FlashAttention fuses scores, softmax and the weighted sum in one kernel: the [T, n] matrix never "
          "reaches memory.")
_MERGED_QKV = "Engines merge W_q, W_k and W_v into one GEMM (vLLM QKVParallelLinear): x is read once."
_MERGED_GATE_UP = "Engines merge W_gate and W_up into one GEMM (vLLM MergedColumnParallelLinear)."
ENGINE_NOTES = {
    "tokenize": "Engines tokenize on the CPU while the GPU runs other requests' steps.",
    "embed": "A gather of T rows of E; with a tied LM head E is also the LM head's weight.",
    "input_norm": _FUSED_NORM, "post_attn_norm": _FUSED_NORM, "pre_mlp_norm": _FUSED_NORM,
    "post_mlp_norm": _FUSED_NORM, "final_norm": _FUSED_NORM,
    "attn.q_proj": _MERGED_QKV, "attn.k_proj": _MERGED_QKV, "attn.v_proj": _MERGED_QKV,
    "attn.qkv_proj": "Already one merged GEMM here, as engines do for every model.",
    "attn.q_norm": "Engines fuse QK-norm with RoPE (and the KV-cache write) in one kernel.",
    "attn.k_norm": "Engines fuse QK-norm with RoPE (and the KV-cache write) in one kernel.",
    "attn.split_heads": "A view of the same memory: no copy, no kernel, in engines too.",
    "attn.rope": "Engines rotate q and k in place, often in the kernel that writes the KV cache.",
    "attn.kv_cache_write": ("Paged KV cache: vLLM writes K and V into fixed-size blocks (PagedAttention), "
                            "so a growing sequence never reallocates."),
    "attn.gqa_expand": "Attention kernels read each KV head once for its g query heads: no expanded copy.",
    "attn.scores": _FLASH, "attn.softmax": _FLASH, "attn.weighted_sum": _FLASH,
    "attn.merge_heads": "A view back to [B, T, h_q·d_h] (a copy only if not contiguous).",
    "attn.o_proj": "With tensor parallelism each GPU holds a slice of W_o and the outputs are all-reduced here.",
    "attn_residual": "Fused into the next RMSNorm's kernel in engines.",
    "mlp_residual": "Fused into the next layer's input RMSNorm in engines.",
    "mlp.gate_proj": _MERGED_GATE_UP, "mlp.up_proj": _MERGED_GATE_UP,
    "mlp.gate_up_proj": "Already one merged GEMM here, as engines do.",
    "mlp.act": "One fused silu-and-mul kernel in engines (no separate gate and up tensors written).",
    "mlp.down_proj": "Decode reads all of W_down for one row per sequence: batching many sequences amortises it.",
    "mlp.router": "A tiny GEMM (E columns); engines fuse its softmax and top-k into one kernel.",
    "mlp.experts": ("Engines sort the rows by expert and run all experts in one grouped GEMM (vLLM fused_moe); "
                    "with expert parallelism each GPU holds some experts and the rows travel to them."),
    "lm_head": "Logits for the last position only (done here too): engines skip the prompt's other positions.",
    "sample": "Engines sample on the GPU for the whole batch; CUDA graphs replay a decode step's kernels at once.",
    "detokenize": "Engines detokenize incrementally, holding back an incomplete UTF-8 character.",
}
