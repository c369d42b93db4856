"""KV-cache quantization: every key and value the model caches stored as INT8 or FP8 (e4m3) codes with
one fp16 scale per token per KV head (the scale of each [d_h] row of K and of V), and dequantized
whenever attention reads them; the model's weights and arithmetic stay as loaded. The cache's bytes per
token (pure arithmetic), the result of the run (`explorer.runner.lab.kvquant`), its lines for the CLI
and its lesson text.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.figures.theme import si_text
from explorer.lab.fidelity import TEXT_SOURCE, Variant

REFERENCE = "the float cache's"  # what a variant's greedy continuation is compared with, in the lesson

# The `kv_format` parameter's codes: 0 runs both.
FORMATS = {1: "int8", 2: "fp8"}
FORMAT_NAMES = {"int8": "int8", "fp8": "fp8 e4m3"}
CODE_BYTES = 1  # INT8 and FP8 codes: one byte each
SCALE_BYTES = 2  # each scale stored as fp16
BOUND_BATCH = 64  # the batch the roofline's decode bound is predicted at


def cache_bytes_per_token(layers: int, kv_heads: int, head_dim: int, code_bytes: float, scale_bytes: float) -> float:
    """Bytes one token adds to the KV cache: K and V (2) in each of L layers, h_kv heads of d_h codes,
    plus one scale per head for K and one for V: 2·L·h_kv·(d_h·bytes + scale bytes) (computed).

    Args:
        layers, kv_heads, head_dim: L, h_kv, d_h of the model.
        code_bytes: bytes per cached element (4 for float32, 1 for INT8 / FP8).
        scale_bytes: bytes per scale (0: an unscaled float cache).
    """
    return 2 * layers * kv_heads * (head_dim * code_bytes + scale_bytes)


@dataclass(frozen=True)
class KVQuantResult:
    """The float KV cache and its quantized variants on the prompt and the shipped text.

    Attributes:
        prompt_tokens: T, the prompt's tokens.
        text_tokens: the shipped text's tokens scored (its first ones, up to the run's cap).
        layers, kv_heads, head_dim: L, h_kv, d_h, the cache's dimensions.
        variants: the float cache first, then each quantized one (`Variant`; `bytes_per_element` is bytes
            of KV cache per token, computed and checked against the stored tensors' sizes).
        stored_bytes_per_token: each variant's cache tensors' actual bytes (`nbytes`, summed over layers,
            codes and scales) over the tokens they hold (measured).
        bound_context: the positions each of the `BOUND_BATCH` sequences holds in the predicted decode step
            (the text's tokens).
        pieces: each continuation token's text, by id.
        hardware: the GPU whose roofline predicts the decode bound.
        device, dtype: where and how it ran.
    """

    prompt_tokens: int
    text_tokens: int
    layers: int
    kv_heads: int
    head_dim: int
    variants: tuple[Variant, ...]
    stored_bytes_per_token: tuple[float, ...]
    bound_context: int
    pieces: dict[int, str]
    hardware: str
    device: str
    dtype: str

    def text_of(self, tokens: tuple[int, ...]) -> str:
        return "".join(self.pieces.get(token, f"[{token}]") for token in tokens)

    def lines(self) -> list[str]:
        """The CLI's table."""
        bound = f"bound B={BOUND_BATCH}"
        rows = [f"prompt {self.prompt_tokens} tokens; text: {self.text_tokens} tokens of {TEXT_SOURCE}; KV cache "
                f"L={self.layers}, h_kv={self.kv_heads}, d_h={self.head_dim}, one fp16 scale per token per head "
                f"({self.device}, {self.dtype})",
                f"{'variant':<10} {'B/token':>8} {'KL text':>9} {'KL max':>8} {'top-1':>6} {'max|Δ|':>7} "
                f"{'ppl':>7} {'diverges':>8} {'step ms':>8} {bound:>12}",
                f"{'':<10} {'computed':>8} {'measured':>9} {'measured':>8} {'meas.':>6} {'meas.':>7} "
                f"{'meas.':>7} {'meas.':>8} {'measured':>8} {'estimated':>12}"]
        for v in self.variants:
            f = v.fidelity
            diverges = "never" if v.diverges_at is None else f"at {v.diverges_at}"  # a position from 0
            rows.append(f"{v.name:<10} {v.bytes_per_element:>8.0f} {f.text_kl_mean:>9.2e} {f.text_kl_max:>8.2e} "
                        f"{f.text_top1:>6.1%} {f.text_max_abs_diff:>7.3f} {f.text_perplexity:>7.2f} {diverges:>8} "
                        f"{v.step_ms:>8.1f} {si_text(v.predicted_step_s * 1e6, 'µs'):>12}")
        rows.append(f"cache bytes per token: 2·L·h_kv·(d_h·bytes + scale) = "
                    f"{', '.join(f'{v.bytes_per_element:.0f}' for v in self.variants)} (computed); stored tensors' "
                    f"nbytes / tokens = {', '.join(f'{b:.0f}' for b in self.stored_bytes_per_token)} (measured)")
        rows.append(f"decode bound: batch {BOUND_BATCH}, {self.bound_context} positions each, on the {self.hardware} "
                    f"(estimated by the roofline, scales not counted); diverges: the first generated position (counted "
                    f"from 0) that leaves the float cache's")
        rows += [f"{v.name:<10} continues: {self.text_of(v.tokens)!r}" for v in self.variants]
        return rows


def lesson_text(result: KVQuantResult) -> str:
    """The lesson page: what each cache format cost in fidelity and what its bytes buy at batch 64."""
    r = result
    base = r.variants[0]
    element_bytes = base.bytes_per_element / (2 * r.layers * r.kv_heads * r.head_dim)
    parts = [
        f"**KV-cache quantization.** Every key and value the model cached ({r.layers} layers x {r.kv_heads} KV heads "
        f"x {r.head_dim} dimensions, K and V) was stored as one-byte codes with one fp16 scale per token per head, "
        f"and dequantized each time attention read it; the weights stayed {r.dtype}. The float cache holds "
        f"**{base.bytes_per_element:.0f} bytes a token** (2·L·h_kv·d_h·{element_bytes:.0f}, computed) and scores the shipped text ({r.text_tokens} tokens) at perplexity "
        f"**{base.fidelity.text_perplexity:.2f}** (measured)."]
    for v in r.variants[1:]:
        f = v.fidelity
        parts.append(
            f"**{v.name}** ({v.bytes_per_element:.0f} bytes a token with its scales, "
            f"{base.bytes_per_element / v.bytes_per_element:.1f}x smaller, computed and equal to the stored tensors' "
            f"size): perplexity **{f.text_perplexity:.2f}** ({f.text_perplexity / base.fidelity.text_perplexity - 1:+.2%})"
            f", mean KL {f.text_kl_mean:.2g} nats from the float cache's next-token distribution, max |Δlogit| "
            f"{f.text_max_abs_diff:.3g}, the same greedy token at **{f.text_top1:.1%}** of the text's positions, and a "
            f"greedy continuation that {v.divergence(REFERENCE)} (measured). At batch {BOUND_BATCH} with {r.bound_context} "
            f"positions a sequence, the roofline puts a decode step at {v.predicted_step_s * 1e6:.3g} µs on the "
            f"{r.hardware} against {base.predicted_step_s * 1e6:.3g} µs with the float cache "
            f"(**{base.predicted_step_s / v.predicted_step_s:.2f}x**, estimated: the cache is read every step).")
    parts.append(
        f"The step times here ({', '.join(f'{v.step_ms:.1f}' for v in r.variants)} ms, measured at batch 1 on this "
        "machine) include dequantizing the whole cache every step in Python, which a fused kernel does inside "
        "attention instead, so they say nothing of the gain. At batch 1 and a short context the weights dominate the bytes read, so the gain "
        "appears with many long sequences; the cost is the distance above: accuracy must be measured, not assumed.")
    return " ".join(parts)

