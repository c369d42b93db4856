"""KV eviction and attention sinks: a KV cache that holds at most W positions while the shipped text is
decoded one token at a time (teacher-forced), under three rules of which positions to keep, scored
against the full cache. The rules and the scores (pure numpy), the result of the run
(`explorer.runner.lab.evict`), its lines for the CLI and its lesson text.

The rules, each keeping W positions once more than W are cached:
- "window": the W most recent.
- "sinks": the first S (StreamingLLM's attention sinks, Xiao et al. 2023) and the W - S most recent.
- "h2o": the W - H most recent and, of the older ones, the H = W // 2 with the largest attention they
  have received so far, summed over layers, heads and queries (H2O's heavy hitters, Zhang et al. 2023;
  one set shared by every layer and head here, where H2O keeps one per head).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.figures.theme import si_text
from explorer.lab.fidelity import log_softmax
from explorer.ui.plain import markdown_text

POLICIES = ("window", "sinks", "h2o")
# Where the kept keys and a new token sit: "as-cached", each key at the position it was cached with and a new
# token at its place in the text; "renumbered", StreamingLLM's rule (Xiao et al. 2024, section 3.2): positions
# inside the cache, 0..n-1 for the kept keys and n for the new token.
POSITION_RULES = ("as-cached", "renumbered")
POSITION_TEXT = {
    "as-cached": "positions as cached: each kept key keeps the rotary position it was cached with, and each "
                 "new token its position in the original text (not StreamingLLM's rule, which renumbers inside "
                 "the cache: pick \"renumbered\")",
    "renumbered": "positions renumbered inside the cache, as StreamingLLM does: the kept keys are numbered 0 "
                  "to n-1 (each re-rotated by RoPE as its place in the cache changes) and each new token takes "
                  "the next number",
}
FULL = "full cache"
# The run's own prompt is decoded instead of the shipped text when it holds this many tokens past W
# (a long prompt, pasted in the app or given to the CLI), so eviction is measured on the user's text.
PROMPT_PAST_WINDOW = 16
OWN_PROMPT = "your prompt"


def decodes_prompt(prompt_tokens: int, window: int) -> bool:
    """Whether a prompt of `prompt_tokens` tokens is long enough to be decoded in place of the shipped text."""
    return prompt_tokens >= window + PROMPT_PAST_WINDOW


def kept_indices(policy: str, positions: np.ndarray, window: int, sinks: int,
                 scores: np.ndarray | None = None) -> np.ndarray:
    """Which of the cached positions a rule keeps (all of them while at most W are cached).

    Args:
        policy: one of `POLICIES`.
        positions: [n] int, the original text positions the cache holds, ascending.
        window: W >= 1, the positions kept.
        sinks: S, 0 <= S < W, the first positions "sinks" keeps.
        scores: [n] float, each position's accumulated attention ("h2o" only).

    Returns:
        [min(n, W)] int64, ascending indices into `positions` (and into the cache's n axis).

    Raises:
        ValueError: an unknown policy, W < 1, S outside 0..W - 1, or "h2o" without one score a position.
    """
    if policy not in POLICIES or window < 1 or not 0 <= sinks < window:
        raise ValueError(f"policy must be one of {POLICIES}, W >= 1 and 0 <= S < W: {policy}, {window}, {sinks}.")
    n = len(positions)
    if n <= window:
        return np.arange(n, dtype=np.int64)
    if policy == "window":
        return np.arange(n - window, n, dtype=np.int64)
    if policy == "sinks":
        return np.concatenate([np.arange(sinks), np.arange(n - (window - sinks), n)]).astype(np.int64)
    if scores is None or len(scores) != n:
        raise ValueError(f"h2o needs one accumulated score for each of the {n} cached positions.")
    heavy = window // 2
    older = n - (window - heavy)
    ranked = np.argsort(-np.asarray(scores[:older], dtype=np.float64), kind="stable")[:heavy]
    return np.concatenate([np.sort(ranked), np.arange(older, n)]).astype(np.int64)


def nll_per_position(logits: np.ndarray, tokens: list[int] | np.ndarray) -> np.ndarray:
    """-log p(token t + 1) from position t's logits, in nats, over the full vocabulary.

    Args:
        logits: [T, V] float32, one row per token of `tokens` (T of them).

    Returns:
        [T - 1] float64.
    """
    tokens = np.asarray(tokens)
    return -log_softmax(logits[:-1])[np.arange(len(tokens) - 1), tokens[1:]]


def running_perplexity(nll: np.ndarray) -> np.ndarray:
    """exp(mean NLL of the first k predictions) for k = 1..T - 1. Args: [T - 1] nats. Returns: [T - 1]."""
    nll = np.asarray(nll, dtype=np.float64)
    return np.exp(np.cumsum(nll) / np.arange(1, len(nll) + 1))


def bytes_per_position(layers: int, kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """A cached position's K and V over every layer: 2·L·h_kv·d_h·bytes (computed)."""
    return 2 * layers * kv_heads * head_dim * element_bytes


@dataclass(frozen=True)
class PolicyRun:
    """One cache rule run over the text (the full cache as a rule that keeps everything).

    Attributes:
        name: "full cache" or one of `POLICIES`.
        nll: -log p of each next token, [T - 1] nats (measured).
        agrees: whether position t's greedy token equals the full cache's, [T - 1] (measured).
        kept: the positions the cache holds after the last step, ascending (measured from the run).
        held_positions: the most positions the cache held at once (measured); its bytes below.
        cache_bytes: held_positions x 2·L·h_kv·d_h·bytes (computed).
        kept_steps: the positions the cache holds after each pass, the prefill's first (measured; empty
            for the full cache, which keeps every position).
    """

    name: str
    nll: tuple[float, ...]
    agrees: tuple[bool, ...]
    kept: tuple[int, ...]
    held_positions: int
    cache_bytes: int
    kept_steps: tuple[tuple[int, ...], ...] = ()

    def perplexity(self, start: int = 0) -> float:
        """exp(mean NLL) of the predictions made at positions >= `start` (measured)."""
        return float(np.exp(np.mean(self.nll[start:])))

    def top1(self, start: int = 0) -> float:
        """The share (0..1) of positions >= `start` whose greedy token is the full cache's (measured)."""
        return float(np.mean(self.agrees[start:]))


@dataclass(frozen=True)
class SinkMeasures:
    """How much the text's first tokens draw attention with the full cache (eager attention, measured),
    by the attention view's own measure (`explorer.analysis.sinks`).

    Attributes:
        tokens: the text's first tokens the attention was measured over.
        head_share: the share (0..1) of (layer, head) pairs whose first-token importance (mean weight on
            key 0 over the queries) exceeds `threshold`: the heads the attention view marks as sinks.
        threshold: the attention view's sink threshold (Gu et al. 2025's 0.3).
        first_share: the mean weight (0..1) the queries past the first S put on the first S keys,
            over layers and heads.
    """

    tokens: int
    head_share: float
    threshold: float
    first_share: float


@dataclass(frozen=True)
class EvictResult:
    """A text (the shipped one, or a long prompt) decoded with the full cache and with each eviction rule.

    Attributes:
        source: what was decoded: `OWN_PROMPT` or the shipped text's name (`explorer.lab.fidelity.TEXT_SOURCE`).
        text_tokens: T, the text's tokens decoded.
        window, sinks, heavy: W, S and H (the heavy hitters "h2o" keeps, W // 2).
        prefill_tokens: the text's first tokens prefilled in one pass before the one-at-a-time decode.
        bytes_per_position: 2·L·h_kv·d_h·bytes of a cached position (computed).
        runs: the full cache first, then each rule (`PolicyRun`).
        first_text: the text of the first S tokens (the sinks).
        sink_measures: the attention the first tokens draw with the full cache (`SinkMeasures`).
        device, dtype: where and how it ran.
        positions: the position rule, one of `POSITION_RULES`.
    """

    source: str
    text_tokens: int
    window: int
    sinks: int
    heavy: int
    prefill_tokens: int
    bytes_per_position: int
    runs: tuple[PolicyRun, ...]
    first_text: str
    sink_measures: SinkMeasures
    device: str
    dtype: str
    positions: str = "as-cached"

    def run(self, name: str) -> PolicyRun:
        return next(run for run in self.runs if run.name == name)

    def lines(self) -> list[str]:
        """The CLI's table: the whole text, and its predictions once past W (where the rules differ)."""
        w = self.window
        rows = [f"text: {self.text_tokens} tokens of {self.source}, {self.prefill_tokens} prefilled then one "
                f"a step; W = {w}, S = {self.sinks}, H = {self.heavy} ({self.device}, {self.dtype}); "
                f"{POSITION_TEXT[self.positions]}; positions counted from 0",
                f"{'cache':<11} {'ppl':>7} {'ppl >= W':>9} {'top-1':>6} {'top-1 >= W':>10} {'held':>5} {'bytes':>9}",
                f"{'':<11} {'meas.':>7} {'measured':>9} {'meas.':>6} {'measured':>10} {'meas.':>5} {'computed':>9}"]
        for run in self.runs:
            rows.append(f"{run.name:<11} {run.perplexity():>7.2f} {run.perplexity(w):>9.2f} {run.top1():>6.1%} "
                        f"{run.top1(w):>10.1%} {run.held_positions:>5} {si_text(run.cache_bytes, 'B'):>9}")
        rows += [f"{run.name:<11} keeps at the last step: {_spans(run.kept)}" for run in self.runs[1:]]
        return [*rows, self.sink_line()]

    def sink_line(self) -> str:
        """The first tokens' attention with the full cache, in the attention view's terms (measured)."""
        m = self.sink_measures
        return (f"attention sinks over the first {m.tokens} tokens (full cache, eager attention, measured): the first "
                f"token is a sink (importance > {m.threshold:g}) in {m.head_share:.0%} of the (layer, head) pairs; "
                f"the first {self.sinks} tokens draw {m.first_share:.0%} of the later queries' attention")


def _spans(positions: tuple[int, ...]) -> str:
    """0, 1, 2, 5, 6 -> "0-2, 5-6"."""
    spans, start = [], None
    for i, position in enumerate(positions):
        start = position if start is None else start
        if i + 1 == len(positions) or positions[i + 1] != position + 1:
            spans.append(f"{start}" if start == position else f"{start}-{position}")
            start = None
    return ", ".join(spans)


def lesson_text(result: EvictResult) -> str:
    """The lesson page: what each rule cost past W, and how much the first S tokens matter."""
    r, w = result, result.window
    full, window, sinks = r.run(FULL), r.run("window"), r.run("sinks")
    parts = [
        f"**KV eviction.** {_source_text(r)} was decoded one token at a time, its next "
        f"token forced, with a KV cache that holds at most W = {w} positions ({si_text(window.cache_bytes, 'B')} "
        f"against the full cache's {si_text(full.cache_bytes, 'B')}, computed as positions x 2·L·h_kv·d_h·bytes). "
        f"Rule for positions: {POSITION_TEXT[r.positions]}. Positions are counted from 0. Past W, the full "
        f"cache scores the text at perplexity **{full.perplexity(w):.2f}** "
        f"(measured).",
        f"Keeping only the {w} most recent positions: **{window.perplexity(w):.2f}**, the full cache's greedy "
        f"token at {window.top1(w):.1%} of those positions. Keeping also the first {r.sinks} tokens "
        f"(“{markdown_text(r.first_text)}”) in place of {r.sinks} recent ones: **{sinks.perplexity(w):.2f}** and "
        f"{sinks.top1(w):.1%} (measured). " + _sink_verdict(window.perplexity(w), sinks.perplexity(w), r.sinks),
        f"Why: with the full cache, {r.sink_line().split(': ', 1)[1]}, the heads the attention view marks as "
        "sinks."]
    if any(run.name == "h2o" for run in r.runs):
        h2o = r.run("h2o")
        first = sum(position < r.sinks for position in h2o.kept)
        parts.append(
            f"The heavy-hitter rule (H2O: the {w - r.heavy} most recent and the {r.heavy} older positions that "
            f"received the most attention) scores **{h2o.perplexity(w):.2f}** and {h2o.top1(w):.1%}; at the last "
            f"step it kept {first} of the first {r.sinks} positions without being told to (measured).")
    parts.append("Eviction bounds the cache's bytes whatever the length; what it costs is measured here, not "
                 "assumed, and it depends on which positions are kept, not only on how many.")
    return " ".join(parts)


def _source_text(result: EvictResult) -> str:
    if result.source == OWN_PROMPT:
        return f"Your prompt ({result.text_tokens} tokens)"
    return (f"The shipped text ({result.text_tokens} tokens of {result.source}; a prompt of at least W + "
            f"{PROMPT_PAST_WINDOW} tokens is decoded in its place)")


def _sink_verdict(without: float, with_sinks: float, sinks: int) -> str:
    if with_sinks < without:
        return (f"The first {sinks} tokens, however little they mean, cut the perplexity by "
                f"**{1 - with_sinks / without:.1%}**: the heads park attention on them, and losing them costs more "
                "than losing the recent tokens they replace.")
    return (f"Here the first {sinks} tokens did not help ({with_sinks / without - 1:+.1%} perplexity): this model "
            "and text lean less on sinks than StreamingLLM's long runs do.")
