"""Chunked prefill: the prompt prefilled C tokens at a time on one KV cache, each chunk attending to
the positions cached before it plus its own causal C x C block. The chunk plan, each chunk's cost by
the cost model, the result of running it (`explorer.runner.lab.chunked`), its lines for the CLI and its
lesson text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from explorer.analysis.costs import step_costs, step_total
from explorer.analysis.hardware import catalogue_key_for, get_hardware
from explorer.analysis.precision import Precision
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError
from explorer.figures.theme import si_text
from explorer.lab.prefix import shape_text

MAX_CHUNKS = 512  # forward passes one run may make: C = 1 on a long prompt would take minutes
REFERENCE_HARDWARE = "h100-sxm"  # whose ridge point the chunks are set against off a catalogued GPU


def plan_chunks(prompt_tokens: int, chunk_size: int, max_chunks: int = MAX_CHUNKS) -> list[tuple[int, int]]:
    """The chunks of a prompt: (first position, tokens) each, in order; the last may be shorter.

    Args:
        prompt_tokens: T >= 1.
        chunk_size: C, tokens per chunk; 0 (or C >= T): the whole prompt in one chunk.
        max_chunks: the most chunks allowed.

    Raises:
        PromptError: C negative, or more than `max_chunks` chunks (ceil(T / C)).
    """
    if chunk_size < 0:
        raise PromptError(f"The chunk size must be 0 (the whole prompt at once) or more tokens, not {chunk_size}.")
    size = min(chunk_size or prompt_tokens, prompt_tokens)
    count = math.ceil(prompt_tokens / size)
    if count > max_chunks:
        raise PromptError(f"Chunks of {size} tokens cut this {prompt_tokens}-token prompt into {count} chunks; "
                          f"the lab runs at most {max_chunks}: take chunks of at least "
                          f"{math.ceil(prompt_tokens / max_chunks)} tokens.")
    return [(start, min(size, prompt_tokens - start)) for start in range(0, prompt_tokens, size)]


def band_cells(start: int, tokens: int) -> int:
    """The (query, key) pairs a chunk's attention computes unmasked: its C rows of the causal
    triangle, each query at position i seeing keys 0..i: C * start + C (C + 1) / 2 (computed).
    Summed over any chunking of T tokens this is T (T + 1) / 2, the whole triangle."""
    return tokens * start + tokens * (tokens + 1) // 2


@dataclass(frozen=True)
class ChunkCost:
    """A chunk's cost by the cost model (estimated, `explorer.analysis.costs.step_costs`, batch 1,
    the run's dtype everywhere, the LM head over the chunk's every position).

    Attributes:
        flops, bytes: every operator's FLOPs and bytes moved.
        gemm_flops, gemm_bytes: the weight GEMMs' alone (projections, MLP, LM head): each reads its
            whole weight matrix for the C rows, so their intensity is about C FLOP/byte in bf16 (C / 2 in
            float32).
    """

    flops: float
    bytes: float
    gemm_flops: float
    gemm_bytes: float

    @property
    def intensity(self) -> float:
        """The chunk's arithmetic intensity, FLOP/byte."""
        return self.flops / self.bytes

    @property
    def gemm_intensity(self) -> float:
        """The weight GEMMs' arithmetic intensity, FLOP/byte."""
        return self.gemm_flops / self.gemm_bytes


def chunk_cost(spec: ModelSpec, tokens: int, context: int, dtype: str = "bf16") -> ChunkCost:
    """The cost of a chunk of `tokens` positions whose cache holds `context` positions after it, with
    weights, activations and KV cache in `dtype` (torch's or the short name)."""
    options = CostOptions(Precision(dtype, dtype, dtype), lm_head_all_positions=True)
    costs = step_costs(spec, Step("prefill", 1, tokens, context), options)
    total, gemms = step_total(costs), step_total([cost for cost in costs if cost.kind == "gemm"])
    return ChunkCost(total.flops, total.bytes, gemms.flops, gemms.bytes)


def ridge(device_name: str | None, dtype: str = "bf16") -> tuple[str, float]:
    """(the machine's name, its ridge point in `dtype`, FLOP/byte): peak FLOP/s over memory bandwidth
    from the hardware catalogue's datasheet numbers (computed). `device_name` is the GPU the run is on
    (`torch.cuda.get_device_name`); None, or a GPU the catalogue lacks: `REFERENCE_HARDWARE`, named as
    a reference GPU."""
    key = device_name and catalogue_key_for(device_name)
    hardware = get_hardware(key or REFERENCE_HARDWARE)
    return (hardware.name if key else f"{hardware.name} (a reference GPU)"), hardware.ridge_point(dtype)


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk of the chunked prefill.

    Attributes:
        start: its first position.
        input_shape: [1, C, d], the embedding's output (measured by a hook).
        kv_shape: [1, h_kv, n, d_h], layer 0's keys after the chunk (measured).
        ms: its wall time, the median over the timed runs (measured).
        cost: its FLOPs and bytes (estimated).
    """

    start: int
    input_shape: tuple[int, ...]
    kv_shape: tuple[int, ...]
    ms: float
    cost: ChunkCost

    @property
    def tokens(self) -> int:
        """C, the chunk's tokens (measured: the input's second dimension)."""
        return self.input_shape[1]

    @property
    def context(self) -> int:
        """n, the positions cached after the chunk (measured: layer 0's keys)."""
        return self.kv_shape[2]

    @property
    def band(self) -> tuple[int, int]:
        """[C, n]: the chunk's block of the attention scores, a band of the causal triangle."""
        return self.tokens, self.context


@dataclass(frozen=True)
class ChunkedPrefillResult:
    """The prompt prefilled in chunks of C on one `DynamicCache`, against one prefill of all T tokens.

    Attributes:
        requested_chunk: C as asked (0: all of it).
        chunks: each chunk, in order.
        full_input_shape: [1, T, d], the one prefill's embedding output (measured).
        full_ms: the one prefill's wall time, median of `repeats` (measured).
        full_cost: the one prefill's cost (estimated).
        repeats: runs timed per way.
        max_abs_diff: max |Δlogit| over every position and the vocabulary, chunked against one prefill
            (measured; float32 rounding, not a different computation).
        last_abs_diff: the same over the last position alone, the one generation uses (measured).
        max_abs_logit: max |logit| of the one prefill, for scale (measured).
        full_tokens, chunked_tokens: greedy continuations after each way (measured).
        pieces: each token's text: the prompt's, then the one prefill's continuation, then the chunked one's.
        ridge_hardware, ridge_flops_per_byte: the machine whose ridge point the chunks are set against,
            and that ridge in the run's dtype (computed from its datasheet).
        device, dtype: where and how it ran; the costs are estimated in `dtype` too.
    """

    requested_chunk: int
    chunks: tuple[ChunkRecord, ...]
    full_input_shape: tuple[int, ...]
    full_ms: float
    full_cost: ChunkCost
    repeats: int
    max_abs_diff: float
    last_abs_diff: float
    max_abs_logit: float
    full_tokens: tuple[int, ...]
    chunked_tokens: tuple[int, ...]
    pieces: tuple[str, ...]
    ridge_hardware: str
    ridge_flops_per_byte: float
    device: str
    dtype: str

    @property
    def prompt_tokens(self) -> int:
        """T, the prompt's tokens."""
        return self.full_input_shape[1]

    @property
    def chunk_size(self) -> int:
        """C as run: the first chunk's tokens."""
        return self.chunks[0].tokens

    @property
    def chunked_ms(self) -> float:
        """The chunks' wall times summed (measured)."""
        return sum(chunk.ms for chunk in self.chunks)

    @property
    def chunked_flops(self) -> float:
        """The chunks' FLOPs summed (estimated)."""
        return sum(chunk.cost.flops for chunk in self.chunks)

    @property
    def same_tokens(self) -> bool:
        """Whether both ways chose the same greedy continuation."""
        return self.full_tokens == self.chunked_tokens

    def continuation(self) -> str:
        """The one prefill's greedy continuation as text."""
        return "".join(self.pieces[self.prompt_tokens:self.prompt_tokens + len(self.full_tokens)])

    def lines(self) -> list[str]:
        """The CLI's table: one row per chunk (the first and last 8 where there are more than 16)."""
        shown = self.chunks if len(self.chunks) <= 16 else self.chunks[:8] + self.chunks[-8:]
        rows = [f"{'chunk':>5} {'input (measured)':<17} {'KV layer 0 (meas.)':<20} {'band [C, n]':<12} "
                f"{'FLOPs (est.)':>12} {'GEMM FLOP/B (est.)':>19} {'time (meas.)':>13}"]
        for chunk in shown:
            index = self.chunks.index(chunk)
            rows.append(f"{index:>5} {shape_text(chunk.input_shape):<17} {shape_text(chunk.kv_shape):<20} "
                        f"{shape_text(chunk.band):<12} {si_text(chunk.cost.flops, 'FLOP'):>12} "
                        f"{chunk.cost.gemm_intensity:>19.1f} {chunk.ms:>10.2f} ms")
        return [
            f"prompt: {self.prompt_tokens} tokens in {chunks_text(len(self.chunks))} of C = {self.chunk_size} "
            f"({self.device}, {self.dtype}; costs estimated in {self.dtype})",
            *rows,
            f"{'all':>5} {'':<17} {'':<20} {'':<12} {si_text(self.chunked_flops, 'FLOP'):>12} {'':>19} "
            f"{self.chunked_ms:>10.2f} ms   (one prefill: {si_text(self.full_cost.flops, 'FLOP')}, "
            f"{self.full_ms:.2f} ms, weight GEMMs at {self.full_cost.gemm_intensity:.0f} FLOP/byte)",
            f"time per token: chunked {self.chunked_ms / self.prompt_tokens:.3f} ms, one prefill "
            f"{self.full_ms / self.prompt_tokens:.3f} ms (measured, medians of {self.repeats}); ridge point of "
            f"the {self.ridge_hardware}: {self.ridge_flops_per_byte:.0f} FLOP/byte ({self.dtype}, computed)",
            f"logits: max |Δ| {self.max_abs_diff:.2g} over all positions, {self.last_abs_diff:.2g} at the last "
            f"(largest |logit| {self.max_abs_logit:.3g}); greedy continuation "
            f"{'identical' if self.same_tokens else 'DIFFERS'}: {self.continuation()!r}",
        ]


def lesson_text(result: ChunkedPrefillResult) -> str:
    """The lesson page: what each chunk computed and cost, and that the chunking changed nothing."""
    r, first = result, result.chunks[0]
    return (
        f"**Chunked prefill.** The **{r.prompt_tokens}**-token prompt went through the model in "
        f"**{chunks_text(len(r.chunks))}** of up to **{r.chunk_size}** tokens on one KV cache: each chunk's input is "
        f"{shape_text(first.input_shape)} (measured) and the cache grows by C after it, to n = "
        f"{r.chunks[-1].context}. A chunk's queries attend to the n - C positions cached before it plus "
        f"their own causal C x C block: a [C, n] band of the causal triangle, and the bands together are "
        f"the whole triangle. Every weight GEMM reads its whole matrix for only C rows, so it sits at an "
        f"arithmetic intensity of about C: **{first.cost.gemm_intensity:.1f} FLOP/byte** for this chunk "
        f"(estimated, {r.dtype}) against **{r.full_cost.gemm_intensity:.0f}** for one prefill of all "
        f"{r.prompt_tokens}, while the {r.ridge_hardware}'s ridge point is "
        f"{r.ridge_flops_per_byte:.0f} FLOP/byte in {r.dtype} (computed from its datasheet): below it a chunk is memory-bound. "
        f"The chunks took **{r.chunked_ms:.1f} ms** against {r.full_ms:.1f} ms for one prefill "
        f"(measured, medians of {r.repeats}), for {si_text(r.chunked_flops, 'FLOP')} against "
        f"{si_text(r.full_cost.flops, 'FLOP')} (estimated): the weight GEMMs' FLOPs are the same, and the "
        f"chunks' attention computes only their bands where one prefill computes the whole [T, T] square "
        f"of scores and masks half of it. "
        f"The logits agree to **{r.max_abs_diff:.1g}** over every position (largest |logit| "
        f"{r.max_abs_logit:.3g}: float32 rounding of the same computation) and the greedy continuation is "
        f"**{'the same token for token' if r.same_tokens else 'different'}**. An engine chunks a long prompt "
        "so that its prefill shares each step with other requests' decode tokens instead of stalling them: "
        "a chunk big enough to stay near the ridge point costs little extra."
    )


def chunks_text(count: int) -> str:
    """"1 chunk", "5 chunks"."""
    return f"{count} chunk{'s' if count != 1 else ''}"
