"""Prefix caching: a second request that shares the first one's prefix reuses its KV cache and
prefills only its own suffix. The result of running it (`explorer.runner.lab.prefix`), its lines for
the CLI and its lesson text.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.figures.theme import si_text

# The second request: the first request's first P tokens, then this follow-up (its own suffix).
FOLLOW_UP = "\nAnd in one sentence: why?"


@dataclass(frozen=True)
class PrefixCacheResult:
    """Request A (the prompt), then request B = A's first P tokens + a follow-up, run two ways: a full
    prefill of B, and B's suffix alone on A's KV cache cropped to P positions.

    Attributes:
        first_tokens: T_A, request A's tokens.
        prefix_tokens: P, the positions B reuses from A's cache.
        total_tokens: T = P + T_s, request B's tokens.
        full_input_shape: [1, T, d], the embedding's output in the full prefill (measured by a hook).
        suffix_input_shape: [1, T_s, d], the same in the cached prefill (measured).
        reused_kv_shape: [1, h_kv, P, d_h], layer 0's keys reused from A's cache (measured).
        final_kv_shape: [1, h_kv, T, d_h], layer 0's keys after the suffix (measured).
        full_cost, suffix_cost: (FLOPs, bytes moved) of the two prefills, in the model's dtype
            (estimated by the cost model).
        full_ms, suffix_ms: their wall times, medians of `repeats` runs each (measured).
        repeats: runs timed per way.
        max_abs_diff: max |Δlogit| over B's suffix positions and the vocabulary, cached against full
            (measured; float32 rounding, not a different computation).
        max_abs_logit: max |logit| there, for scale (measured).
        full_tokens, cached_tokens: greedy continuations of B by each way (measured).
        pieces: each token's text: B's tokens, then the full way's continuation, then the cached way's.
        device, dtype: where and how it ran.
    """

    first_tokens: int
    prefix_tokens: int
    total_tokens: int
    full_input_shape: tuple[int, ...]
    suffix_input_shape: tuple[int, ...]
    reused_kv_shape: tuple[int, ...]
    final_kv_shape: tuple[int, ...]
    full_cost: tuple[float, float]
    suffix_cost: tuple[float, float]
    full_ms: float
    suffix_ms: float
    repeats: int
    max_abs_diff: float
    max_abs_logit: float
    full_tokens: tuple[int, ...]
    cached_tokens: tuple[int, ...]
    pieces: tuple[str, ...]
    device: str
    dtype: str

    @property
    def full_flops(self) -> float:
        return self.full_cost[0]

    @property
    def suffix_flops(self) -> float:
        return self.suffix_cost[0]

    @property
    def suffix_tokens(self) -> int:
        """T_s = T - P: the tokens B's cached prefill computes."""
        return self.total_tokens - self.prefix_tokens

    @property
    def same_tokens(self) -> bool:
        """Whether both ways chose the same greedy continuation."""
        return self.full_tokens == self.cached_tokens

    def continuation(self, cached: bool) -> str:
        """A way's greedy continuation as text."""
        start = self.total_tokens + (len(self.full_tokens) if cached else 0)
        return "".join(self.pieces[start:start + len(self.full_tokens)])

    def lines(self) -> list[str]:
        """The CLI's table."""
        return [
            f"request A: {self.first_tokens} tokens; request B: its first {self.prefix_tokens} + "
            f"{self.suffix_tokens} of its own = {self.total_tokens} tokens ({self.device}, {self.dtype})",
            f"{'':<22} {'input (measured)':<18} {'KV layer 0 (measured)':<24} {'FLOPs (estimated)':>18} "
            f"{'time (measured)':>16}",
            f"{'full prefill of B':<22} {shape_text(self.full_input_shape):<18} {'none -> ' + shape_text(self.final_kv_shape):<24} "
            f"{si_text(self.full_flops, 'FLOP'):>18} {self.full_ms:>13.1f} ms",
            f"{'suffix on A cache':<22} {shape_text(self.suffix_input_shape):<18} "
            f"{shape_text(self.reused_kv_shape) + ' -> n=' + str(self.final_kv_shape[2]):<24} "
            f"{si_text(self.suffix_flops, 'FLOP'):>18} {self.suffix_ms:>13.1f} ms",
            f"saved: {1 - self.suffix_flops / self.full_flops:.0%} of the FLOPs (estimated); time: "
            f"{time_change(self.suffix_ms, self.full_ms)} (measured, median of {self.repeats})",
            f"logits over B's suffix: max |Δ| {self.max_abs_diff:.2g} (largest |logit| {self.max_abs_logit:.3g}); "
            f"greedy continuation {'identical' if self.same_tokens else 'DIFFERS'}: {self.continuation(False)!r}",
        ]


def lesson_text(result: PrefixCacheResult) -> str:
    """The lesson page: what the reuse saved and that it changed nothing, from the run's numbers."""
    r = result
    return (
        f"**Prefix caching.** Request B shares its first **{r.prefix_tokens}** tokens with request A (your "
        f"prompt), so its keys and values at those positions are A's: the engine keeps A's KV cache "
        f"({shape_text(r.reused_kv_shape)} a layer, measured) and prefills only B's **{r.suffix_tokens}** own "
        f"tokens, an input of {shape_text(r.suffix_input_shape)} instead of {shape_text(r.full_input_shape)} (measured). "
        f"That is **{1 - r.suffix_flops / r.full_flops:.0%} fewer FLOPs** (estimated: "
        f"{si_text(r.suffix_flops, 'FLOP')} against {si_text(r.full_flops, 'FLOP')}) and took "
        f"{r.suffix_ms:.1f} ms against {r.full_ms:.1f} ms, {time_change(r.suffix_ms, r.full_ms)} (measured, median of "
        f"{r.repeats}). "
        f"The logits agree to **{r.max_abs_diff:.1g}** (largest |logit| {r.max_abs_logit:.3g}: float32 "
        f"rounding of the same computation) and the greedy continuation is "
        f"**{'the same token for token' if r.same_tokens else 'different'}**. {_why_time(r)} An engine "
        "does not copy the cache as this experiment does: it points B's block table at the pages that hold "
        "A's prefix."
    )


def time_change(ms: float, reference_ms: float) -> str:
    """A measured time against a reference, said the way it went: "42% less time" or "11% more time
    (slower)"."""
    change = 1 - ms / reference_ms
    return f"{change:.0%} less time" if change >= 0 else f"{-change:.0%} more time (slower)"


def _why_time(r: PrefixCacheResult) -> str:
    """Why the time fell less than the FLOPs, where it did (a short pass still reads every weight), or
    that it did not fall at all, where the cached pass measured slower."""
    flops_share, time_share = r.suffix_flops / r.full_flops, r.suffix_ms / r.full_ms
    if time_share < 1.5 * flops_share:
        return ""
    (full_flops, full_bytes), (flops, moved) = r.full_cost, r.suffix_cost
    if time_share >= 1:
        return (f"Here the time did not fall at all: the cached pass measured {time_change(r.suffix_ms, r.full_ms)} "
                f"than the full prefill, though it does {1 - flops_share:.0%} fewer FLOPs. Passes this short take "
                f"a few ms, so the timing noise of a busy machine can outweigh the difference; besides, B's "
                f"{r.suffix_tokens}-token pass still reads every weight, {si_text(moved, 'B')} against "
                f"{si_text(full_bytes, 'B')} (estimated): a short pass is bound by memory bandwidth, not arithmetic.")
    return (f"The time fell less than the FLOPs: B's {r.suffix_tokens}-token pass still reads every weight, "
            f"{si_text(moved, 'B')} against the full prefill's {si_text(full_bytes, 'B')} (estimated), so it does "
            f"{flops / moved:.1f} FLOPs a byte against {full_flops / full_bytes:.1f}: a short pass is bound by "
            "memory bandwidth, not arithmetic (see the roofline).")


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as the views write it: [1, 12, 576]."""
    return "[" + ", ".join(str(size) for size in shape) + "]"
