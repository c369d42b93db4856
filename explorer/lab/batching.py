"""Continuous batching with a page table: R requests of different prompt lengths and different numbers
of tokens to generate, admitted one per engine step and retired when done; each step one forward
pass over the requests that are in. The schedule, each step's packed and padded layouts, the page
table and the memory accounting are computed here (pure, hand-checkable); the run
(`explorer.runner.lab.batching`) measures the logits, tokens and times.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from explorer.errors import PromptError
from explorer.figures.theme import si_text

PHASES = ("waiting", "prefill", "decode", "done")  # a request's state at an engine step
MIN_REQUESTS, MAX_REQUESTS = 3, 8


@dataclass(frozen=True)
class Request:
    """One request of the batch.

    Attributes:
        prompt_tokens: its prompt's length (its first step's tokens in).
        new_tokens: the greedy tokens it generates (the prefill gives the first, each decode one more).
        admitted_step: the engine step that prefills it.
    """

    prompt_tokens: int
    new_tokens: int
    admitted_step: int

    @property
    def last_step(self) -> int:
        """The step that generates its last token; it is retired (its pages freed) after it."""
        return self.admitted_step + self.new_tokens - 1

    def phase(self, step: int) -> str:
        """Its state at `step`: one of `PHASES`."""
        if step < self.admitted_step:
            return "waiting"
        if step > self.last_step:
            return "done"
        return "prefill" if step == self.admitted_step else "decode"

    def context(self, step: int) -> int:
        """n, its KV cache positions after `step`'s cache write (its last generated token is never fed)."""
        return self.prompt_tokens + min(step, self.last_step) - self.admitted_step


def plan_requests(prompt_tokens: int, requests: int, new_tokens: int) -> tuple[Request, ...]:
    """The batch built from one prompt of `prompt_tokens` tokens: request i (0-based) is the prompt's
    first floor(T * (i + 1) / R) tokens, generates min(new_tokens, 2 + 3i) tokens and is admitted at
    step i (one new request per step).

    Raises:
        PromptError: R outside 3..8, new_tokens < 1, or a prompt shorter than R tokens (the R prefixes
            would not all be distinct).
    """
    if not MIN_REQUESTS <= requests <= MAX_REQUESTS:
        raise PromptError(f"Continuous batching runs {MIN_REQUESTS} to {MAX_REQUESTS} requests, not {requests}.")
    if new_tokens < 1:
        raise PromptError(f"Each request generates at least 1 token, not {new_tokens}.")
    if prompt_tokens < requests:
        raise PromptError(f"The prompt has {prompt_tokens} tokens: {requests} requests of distinct lengths (request i "
                          f"is its first T(i+1)/R tokens) need at least {requests}. Write a longer prompt or ask "
                          "for fewer requests.")
    return tuple(Request(prompt_tokens * (i + 1) // requests, min(new_tokens, 2 + 3 * i), i) for i in range(requests))


@dataclass(frozen=True)
class StepLayout:
    """One engine step's batch, as the packed and the padded layouts hold it (computed).

    Attributes:
        step: the engine step.
        requests: the requests in the batch (prefill or decode), by index.
        lengths: each one's tokens in this step (its prompt in prefill, 1 in decode).
        contexts: each one's n after the step's cache write.
    """

    step: int
    requests: tuple[int, ...]
    lengths: tuple[int, ...]
    contexts: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        """The packed input's rows: [num_tokens, d]."""
        return sum(self.lengths)

    @property
    def cu_seqlens(self) -> tuple[int, ...]:
        """The cumulative offsets varlen attention reads: request k's rows are cu[k]:cu[k+1]."""
        offsets = [0]
        for length in self.lengths:
            offsets.append(offsets[-1] + length)
        return tuple(offsets)

    @property
    def padded_tokens(self) -> int:
        """The padded input's positions: [B, T_max, d] holds B * T_max."""
        return len(self.lengths) * max(self.lengths)

    @property
    def wasted_tokens(self) -> int:
        """Positions of the padded input that hold padding."""
        return self.padded_tokens - self.num_tokens


def step_layouts(requests: tuple[Request, ...]) -> tuple[StepLayout, ...]:
    """Every engine step's batch, from step 0 to the last request's last step."""
    layouts = []
    for step in range(max(request.last_step for request in requests) + 1):
        live = [i for i, request in enumerate(requests) if request.phase(step) in ("prefill", "decode")]
        layouts.append(StepLayout(
            step, tuple(live),
            tuple(requests[i].prompt_tokens if requests[i].phase(step) == "prefill" else 1 for i in live),
            tuple(requests[i].context(step) for i in live)))
    return tuple(layouts)


@dataclass(frozen=True)
class PageTable:
    """The paged KV cache after one step's allocations (computed).

    Attributes:
        step: the engine step.
        block_tables: request index -> its physical pages in logical order (block j holds positions
            j*block_size .. (j+1)*block_size - 1), for each request in the batch.
        pages_total: the physical pages ever allocated (the pool's size so far).
    """

    step: int
    block_tables: dict[int, tuple[int, ...]]
    pages_total: int

    @property
    def pages_held(self) -> int:
        return sum(len(table) for table in self.block_tables.values())


def page_tables(layouts: tuple[StepLayout, ...], block_size: int) -> tuple[PageTable, ...]:
    """Allocate pages as the requests grow: before each step, a request that left the batch frees its
    pages; each request in the step then takes pages (the lowest free id first, else a new one) until it
    holds ceil(n / block_size) for its n after the step.

    Raises:
        PromptError: block_size < 1.
    """
    if block_size < 1:
        raise PromptError(f"The block size must be at least 1 position, not {block_size}.")
    tables: dict[int, list[int]] = {}
    free: list[int] = []
    total = 0
    result = []
    for layout in layouts:
        for request in [r for r in tables if r not in layout.requests]:
            for page in tables.pop(request):
                heapq.heappush(free, page)
        for request, context in zip(layout.requests, layout.contexts, strict=True):
            table = tables.setdefault(request, [])
            while len(table) < math.ceil(context / block_size):
                if free:
                    table.append(heapq.heappop(free))
                else:
                    table.append(total)
                    total += 1
        result.append(PageTable(layout.step, {r: tuple(t) for r, t in tables.items()}, total))
    return tuple(result)


def kv_bytes_per_position(layers: int, kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """One position's K and V over every layer: 2 * L * h_kv * d_h * bytes per element."""
    return 2 * layers * kv_heads * head_dim * element_bytes


@dataclass(frozen=True)
class StepMemory:
    """One step's KV cache in positions (computed): what the requests hold, what their pages hold, and
    what a padded cache [B, h_kv, n_max, d_h] per layer would hold for the same requests."""

    used_positions: int
    paged_positions: int
    padded_positions: int


def step_memory(layout: StepLayout, table: PageTable, block_size: int) -> StepMemory:
    return StepMemory(sum(layout.contexts), table.pages_held * block_size,
                      len(layout.contexts) * max(layout.contexts))


@dataclass(frozen=True)
class BatchingResult:
    """The requests run two ways: continuously batched (one forward pass per engine step over the
    requests that are in) and one after another, each alone on its own KV cache.

    Attributes:
        requests: the batch (`plan_requests`).
        layouts: each step's batch, packed and padded (computed).
        packed_shapes: each step's embedding output, [1, num_tokens, d] (measured by a hook).
        tables: the page table after each step (computed) for `block_size` positions a page.
        block_size: positions a page holds.
        bytes_per_position: one position's K and V over every layer (computed from the config and dtype).
        batched_tokens, alone_tokens: each request's greedy tokens by each way (measured).
        max_abs_diff: max |Δlogit| over every request's generated positions and the vocabulary, batched
            against alone (measured; float32 rounding of the same computation).
        max_abs_logit: max |logit| there, for scale (measured).
        batched_ms, alone_ms: wall time of the whole batch by each way, medians of `repeats` (measured).
        repeats: runs timed per way.
        texts: each request's greedy continuation (the batched way's) as text.
        device, dtype: where and how it ran.
    """

    requests: tuple[Request, ...]
    layouts: tuple[StepLayout, ...]
    packed_shapes: tuple[tuple[int, ...], ...]
    tables: tuple[PageTable, ...]
    block_size: int
    bytes_per_position: int
    batched_tokens: tuple[tuple[int, ...], ...]
    alone_tokens: tuple[tuple[int, ...], ...]
    max_abs_diff: float
    max_abs_logit: float
    batched_ms: float
    alone_ms: float
    repeats: int
    texts: tuple[str, ...]
    device: str
    dtype: str

    @property
    def same_tokens(self) -> bool:
        return self.batched_tokens == self.alone_tokens

    @property
    def generated(self) -> int:
        """Tokens generated by all the requests."""
        return sum(request.new_tokens for request in self.requests)

    def tokens_per_s(self, batched: bool) -> float:
        """Generated tokens per second of wall time (measured)."""
        return self.generated / ((self.batched_ms if batched else self.alone_ms) / 1e3)

    @property
    def memory(self) -> tuple[StepMemory, ...]:
        return tuple(step_memory(layout, table, self.block_size)
                     for layout, table in zip(self.layouts, self.tables, strict=True))

    @property
    def peak_step(self) -> int:
        """The step whose pages hold the most positions (the figure draws its page table)."""
        paged = [memory.paged_positions for memory in self.memory]
        return paged.index(max(paged))

    def lines(self) -> list[str]:
        """The CLI's table: the requests, each step's batch, the pages, the proof and the speed."""
        lines = [f"{len(self.requests)} requests, {len(self.layouts)} engine steps ({self.device}, {self.dtype})",
                 f"{'request':<8} {'prompt':>6} {'new':>4} {'admitted':>8} {'retired after':>13}  continuation"]
        lines += [f"{i:<8} {r.prompt_tokens:>6} {r.new_tokens:>4} {r.admitted_step:>8} {r.last_step:>13}  {text!r}"
                  for i, (r, text) in enumerate(zip(self.requests, self.texts, strict=True))]
        lines.append(f"{'step':<5} {'batch (request:tokens in)':<34} {'packed (measured)':<18} {'cu_seqlens':<20} "
                     f"{'padded':>6} {'wasted':>6} {'pages':>5}")
        for layout, shape, table in zip(self.layouts, self.packed_shapes, self.tables, strict=True):
            batch = " ".join(f"{r}:{n}" for r, n in zip(layout.requests, layout.lengths, strict=True))
            cu = ",".join(map(str, layout.cu_seqlens))
            lines.append(f"{layout.step:<5} {batch:<34} {str(list(shape)):<18} {cu:<20} "
                         f"{layout.padded_tokens:>6} {layout.wasted_tokens:>6} {table.pages_held:>5}")
        peak = self.memory[self.peak_step]
        lines += [
            f"tokens in (computed): packed {sum(x.num_tokens for x in self.layouts)}, padded "
            f"{sum(x.padded_tokens for x in self.layouts)} ({sum(x.wasted_tokens for x in self.layouts)} padding)",
            f"KV cache at step {self.peak_step} (computed, {si_text(self.bytes_per_position, 'B')} a position): "
            f"used {si_text(peak.used_positions * self.bytes_per_position, 'B')}, pages of {self.block_size} "
            f"{si_text(peak.paged_positions * self.bytes_per_position, 'B')}, padded "
            f"{si_text(peak.padded_positions * self.bytes_per_position, 'B')}; {self.tables[-1].pages_total} "
            "physical pages in all",
            f"greedy tokens {'identical to each request run alone' if self.same_tokens else 'DIFFER from alone'}; "
            f"logits max |Δ| {self.max_abs_diff:.2g} (largest |logit| {self.max_abs_logit:.3g})",
            f"tokens/s (measured, median of {self.repeats}): batched {self.tokens_per_s(True):.1f}, one after another "
            f"{self.tokens_per_s(False):.1f} ({self.alone_ms / self.batched_ms:.2f}x)",
        ]
        return lines


def lesson_text(result: BatchingResult) -> str:
    """The lesson page: how the steps were packed, what the pages saved and that nothing changed."""
    r = result
    packed, padded = sum(x.num_tokens for x in r.layouts), sum(x.padded_tokens for x in r.layouts)
    peak = r.memory[r.peak_step]
    held = max(len(blocks) for table in r.tables for blocks in table.block_tables.values())
    return (
        f"**Continuous batching.** {len(r.requests)} requests of {', '.join(str(q.prompt_tokens) for q in r.requests)} "
        f"prompt tokens, generating {', '.join(str(q.new_tokens) for q in r.requests)} tokens, arrive one per step; "
        f"the engine runs **{len(r.layouts)} steps**, each one forward pass over the requests that are in: a new "
        "request's whole prompt (prefill) beside the others' single tokens (decode), and a finished request leaves "
        f"at once so that its place goes to the next. Packed as [num_tokens, d] with per-request lengths, the steps "
        f"feed **{packed} tokens** (computed, and the embedding's measured shapes agree); padded to [B, T_max, d] they "
        f"would feed {padded}, {padded - packed} of them padding. "
        f"The KV cache lives in pages of {r.block_size} positions; each request's block table lists its pages, "
        f"taken as it grows (a request held at most {held}) and freed when it retires, for the next request. "
        f"At step {r.peak_step} the pages hold {si_text(peak.paged_positions * r.bytes_per_position, 'B')} for "
        f"{si_text(peak.used_positions * r.bytes_per_position, 'B')} of keys and values, where a padded cache "
        f"[B, h_kv, n_max, d_h] would hold {si_text(peak.padded_positions * r.bytes_per_position, 'B')} (computed). "
        f"Each request's greedy tokens are **{'the same as' if r.same_tokens else 'NOT the same as'}** when it runs "
        f"alone and its logits agree to **{r.max_abs_diff:.1g}** (largest |logit| {r.max_abs_logit:.3g}: rounding "
        f"of the same computation). Batched, the {r.generated} tokens came at **{r.tokens_per_s(True):.1f} tokens/s** "
        f"against {r.tokens_per_s(False):.1f} one request after another (measured): a decode step reads every "
        "weight once for all the requests in it."
    )
