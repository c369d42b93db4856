"""Weight quantization: every linear weight of the decoder layers rounded to INT8 (one scale per output
channel) or INT4 (one scale per group of G input weights), symmetric round-to-nearest, then run. The
quantizer (pure numpy), the result of the run (`explorer.runner.lab.quant`), its lines for the CLI and
its lesson text.

This is fake quantization: the integers are dequantized back to float32 (w ≈ code x scale) and the
model multiplies in float32, so its outputs are those of the INT model but its step time is not an INT
kernel's. The speed a real INT8/INT4 kernel would gain is the roofline's predicted decode bound
(`explorer.analysis.roofline.what_if`), given beside it. The embedding and the LM head stay float, as
weight-only quantizers (GPTQ, AWQ, bitsandbytes) usually keep them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.figures.theme import si_text
from explorer.lab.fidelity import TEXT_SOURCE, Variant

REFERENCE = "float32's"  # what a variant's greedy continuation is compared with, in the lesson

OFFERED_BITS = (8, 4)
SCALE_BYTES = 2  # each scale stored as fp16, as GPTQ/AWQ checkpoints store theirs


def quantize(weight: np.ndarray, bits: int, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric round-to-nearest: code = round(w / s), clipped to ±(2^(bits-1) - 1), with one scale s =
    max|w| / (2^(bits-1) - 1) per group of `group_size` consecutive input weights of each output row
    (the last group of a row may be shorter), s rounded up to the next fp16 value (so |code| never
    exceeds the range).

    Args:
        weight: [out, in] float32 (an nn.Linear's weight: one row per output channel).
        bits: 8 or 4.
        group_size: G, input weights per scale; G >= in: one scale per output channel.

    Returns:
        codes: [out, in] int8 (INT4 codes in -7..7, one per int8 here), scales: [out, ceil(in / G)] float32
        (fp16 values; 1 where a group is all zero).

    Raises:
        ValueError: bits not one of `OFFERED_BITS`, or group_size < 1.
    """
    if bits not in OFFERED_BITS or group_size < 1:
        raise ValueError(f"bits must be one of {OFFERED_BITS} and group_size >= 1, not {bits}, {group_size}.")
    qmax = 2 ** (bits - 1) - 1
    groups = _grouped(weight, group_size)  # [out, n_groups, G], zero-padded
    amax = np.abs(groups).max(axis=-1)
    scales = np.where(amax > 0, amax / qmax, 1.0).astype(np.float16)
    scales = np.where(scales.astype(np.float32) * qmax < amax, np.nextafter(scales, np.float16(np.inf)), scales)
    scales = scales.astype(np.float32)
    steps = np.divide(groups, scales[..., None], out=groups)  # w / s, in place of the padded copy
    codes = np.clip(np.rint(steps, out=steps), -qmax, qmax, out=steps).astype(np.int8)
    return codes.reshape(weight.shape[0], -1)[:, :weight.shape[1]], scales


def dequantize(codes: np.ndarray, scales: np.ndarray, group_size: int) -> np.ndarray:
    """w ≈ code x its group's scale. Args: codes [out, in] int8, scales [out, n_groups] float32.
    Returns: [out, in] float32."""
    per_weight = np.repeat(scales, min(group_size, codes.shape[1]), axis=1)[:, :codes.shape[1]]
    return (codes.astype(np.float32) * per_weight).astype(np.float32)


def _grouped(weight: np.ndarray, group_size: int) -> np.ndarray:
    """[out, in] -> [out, ceil(in / G), G], the last group zero-padded."""
    out, inputs = weight.shape
    size = min(group_size, inputs)
    padded = np.zeros((out, -(-inputs // size) * size), dtype=np.float32)
    padded[:, :inputs] = weight
    return padded.reshape(out, -1, size)


def stored_bytes(shape: tuple[int, int], bits: int, group_size: int) -> float:
    """Bytes a quantized [out, in] weight takes: the codes (bits / 8 each) and its fp16 scales (computed)."""
    out, inputs = shape
    return out * inputs * bits / 8 + out * -(-inputs // min(group_size, inputs)) * SCALE_BYTES


def variant_name(bits: int, group_size: int, row_inputs: tuple[int, ...] = ()) -> str:
    """A variant's name: "int8 per channel", "int4 g32"; a group at least as long as every row of
    `row_inputs` (the quantized weights' input counts) is one scale a row: "int4 per channel"; one as
    long as some rows only: "int4 g1000, some rows per channel"."""
    if bits == 8 or (row_inputs and group_size >= max(row_inputs)):
        return f"int{bits} per channel"
    if row_inputs and group_size >= min(row_inputs):
        return f"int{bits} g{group_size}, some rows per channel"
    return f"int{bits} g{group_size}"


@dataclass(frozen=True)
class QuantResult:
    """The float model and its weight-quantized variants on the prompt and the shipped text.

    Attributes:
        prompt_tokens: T, the prompt's tokens.
        text_tokens: the shipped text's tokens scored (its first ones, up to the run's cap).
        group_size: G of the INT4 variant (INT8 is per output channel).
        quantized_linears: the nn.Linear (or GPT-2 Conv1D) modules quantized, all in the decoder layers.
        quantized_weights: their weights, in elements.
        kept_float: what stayed float32 (embedding, LM head, norms, biases).
        max_error_over_bound: max over every quantized weight of |w - q(w)| / (s / 2): <= 1 is the
            round-to-nearest bound held (computed on the run's weights).
        variants: float32 first, then each quantized variant (`Variant`).
        pieces: each continuation token's text, by id.
        hardware: the GPU whose roofline predicts the decode bound (batch 1, context T + 1).
        device, dtype: where and how it ran.
    """

    prompt_tokens: int
    text_tokens: int
    group_size: int
    quantized_linears: int
    quantized_weights: int
    kept_float: str
    max_error_over_bound: float
    variants: tuple[Variant, ...]
    pieces: dict[int, str]
    hardware: str
    device: str
    dtype: str

    def text_of(self, tokens: tuple[int, ...]) -> str:
        return "".join(self.pieces.get(token, f"[{token}]") for token in tokens)

    def lines(self) -> list[str]:
        """The CLI's table."""
        rows = [f"prompt {self.prompt_tokens} tokens; text: {self.text_tokens} tokens of {TEXT_SOURCE}; "
                f"{self.quantized_linears} linears ({si_text(self.quantized_weights, '') + ' weights'}) quantized, "
                f"{self.kept_float} float ({self.device}, {self.dtype})",
                f"{'variant':<17} {'B/weight':>8} {'KL text':>9} {'KL max':>8} {'top-1':>6} {'max|Δ|':>7} "
                f"{'ppl':>7} {'diverges':>8} {'step ms':>8} {'decode bound':>16}",
                f"{'':<17} {'computed':>8} {'measured':>9} {'measured':>8} {'meas.':>6} {'meas.':>7} "
                f"{'meas.':>7} {'meas.':>8} {'measured':>8} {'estimated':>16}"]
        for v in self.variants:
            f = v.fidelity
            diverges = "never" if v.diverges_at is None else f"at {v.diverges_at}"  # a position from 0
            rows.append(f"{v.name:<17} {v.bytes_per_element:>8.3f} {f.text_kl_mean:>9.2e} {f.text_kl_max:>8.2e} "
                        f"{f.text_top1:>6.1%} {f.text_max_abs_diff:>7.3f} {f.text_perplexity:>7.2f} {diverges:>8} "
                        f"{v.step_ms:>8.1f} {si_text(v.predicted_step_s * 1e6, 'µs'):>16}")
        rows.append(f"round-trip error: max |w - q(w)| = {self.max_error_over_bound:.3f} x s/2 (bound: 1); "
                    f"diverges: the first generated position (counted from 0) that leaves float's; decode bound: "
                    f"batch 1 on the {self.hardware}")
        rows += [f"{v.name:<17} continues: {self.text_of(v.tokens)!r}" for v in self.variants]
        return rows


def lesson_text(result: QuantResult) -> str:
    """The lesson page: what each bit width cost in fidelity and what the roofline says it buys."""
    r = result
    base = r.variants[0]
    parts = [
        f"**Weight quantization.** The {r.quantized_linears} linear layers of the decoder "
        f"({si_text(r.quantized_weights, '') + ' weights'}) were rounded to integers with one scale per output channel "
        f"(INT8) or per group of {r.group_size} weights (INT4{_group_note(r)}), symmetric round-to-nearest; the {r.kept_float} "
        f"stayed float32. The float model scores the shipped text ({r.text_tokens} tokens) at perplexity "
        f"**{base.fidelity.text_perplexity:.2f}** (measured)."]
    for v in r.variants[1:]:
        f = v.fidelity
        parts.append(
            f"**{v.name}** ({v.bytes_per_element:.3f} bytes a weight with its scales, computed): perplexity "
            f"**{f.text_perplexity:.2f}** ({f.text_perplexity / base.fidelity.text_perplexity - 1:+.1%}), mean KL "
            f"{f.text_kl_mean:.2g} nats from the float model's next-token distribution, the same greedy token at "
            f"**{f.text_top1:.1%}** of the text's positions, and a greedy continuation that "
            f"{v.divergence(REFERENCE)} (measured). The roofline puts its decode step at "
            f"{v.predicted_step_s * 1e6:.3g} µs on the {r.hardware} against {base.predicted_step_s * 1e6:.3g} µs "
            f"in float32 (**{base.predicted_step_s / v.predicted_step_s:.1f}x**, estimated: it reads fewer bytes)."
        )
    parts.append(
        "These weights were dequantized back to float32 before each matmul (fake quantization), so the step "
        f"times measured here ({', '.join(f'{v.step_ms:.0f}' for v in r.variants)} ms) are float32's, not an INT "
        "kernel's; the what-if stores the LM head in the same format too, and leaves the scales out. "
        "The gain is the bytes; the cost is the distance above: accuracy must be measured, not assumed.")
    return " ".join(parts)



def _group_note(result: QuantResult) -> str:
    """Where G reaches a row's length the group is the row (groups never cross rows): said so."""
    name = result.variants[-1].name
    if name.endswith("some rows per channel"):
        return "; a group never crosses a row, so the rows of at most G inputs have one scale each"
    return "; G is at least every row's inputs, so that is one scale a row: per channel" if \
        name.startswith("int4 per channel") else ""
