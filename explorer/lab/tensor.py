"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): each decoder layer's Q, K and V projections
and the MLP's gate and up projections split by columns (attention heads and d_ff across the ranks),
the O and down projections by rows, so each layer needs two all-reduces of the [B, T, d] residual a
step; the embedding is split by vocabulary rows (one more all-reduce of its [B, T, d] lookups) and the
LM head by vocabulary (one all-gather of the [B, T, V / R] logits). The result of running it over R
processes (`explorer.runner.lab.tensor`), the check that R divides every split (made before any process
starts: `explorer.analysis.tensor_parallel.check_ranks_divide`), its lines for the CLI and its lesson text.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.analysis.tensor_parallel import ALL_REDUCES_PER_LAYER, EMBEDDING_ALL_REDUCES
from explorer.figures.theme import si_text
from explorer.lab.prefix import shape_text
from explorer.lab.ranks import slowest_decode_ms, slowest_step_ms

LOGITS_GATHER = "all_gather_into_tensor"  # the vocabulary-parallel LM head's logits, gathered
# The stops of a Llama-style layer each rank records: (module under the layer, its input or output,
# name, whether tensor parallelism splits it across the ranks)
STOPS = (
    ("self_attn.q_proj", "in", "attention input x", False),
    ("self_attn.q_proj", "out", "Q (q_proj out)", True),
    ("self_attn.k_proj", "out", "K (k_proj out)", True),
    ("self_attn.v_proj", "out", "V (v_proj out)", True),
    ("self_attn.o_proj", "in", "heads' output (o_proj in)", True),
    ("self_attn.o_proj", "out", "O out, all-reduced", False),
    ("mlp.gate_proj", "out", "gate (gate_proj out)", True),
    ("mlp.up_proj", "out", "up (up_proj out)", True),
    ("mlp.down_proj", "in", "down_proj in", True),
    ("mlp.down_proj", "out", "down out, all-reduced", False),
)


@dataclass(frozen=True)
class Collective:
    """One collective a rank ran (measured by a dispatch mode around torch.distributed's functional ops).

    Attributes:
        kind: the op, e.g. "all_reduce".
        shape: its input's shape on this rank, e.g. [B, T, d].
        payload_bytes: its input's bytes (what each rank contributes; a ring all-reduce moves
            2(R - 1)/R times this over each rank's link).
        ms: wall time from its issue to its completion (waited on at once), on this rank.
    """

    kind: str
    shape: tuple[int, ...]
    payload_bytes: int
    ms: float


@dataclass(frozen=True)
class RankRun:
    """What one rank measured.

    Attributes:
        rank: its index, 0..R - 1.
        pid: its process id.
        stops: (stop, its local shape) through layer 0 in the prefill, in order (measured by hooks).
        weights: (projection, its local weight shard's shape [out, in]) of layer 0, then the
            embedding's and the LM head's [V / R, d] (measured; a V that R does not divide leaves
            the last ranks a row fewer).
        kv_shape: [B, h_kv / R, T, d_h], layer 0's cached keys on this rank after the prefill (measured).
        steps: every collective of each step, step 0 the prefill, then one per decode step.
        step_ms: each step's wall time on this rank (measured).
        tokens: the greedy tokens this rank decoded.
    """

    rank: int
    pid: int
    stops: tuple[tuple[str, tuple[int, ...]], ...]
    weights: tuple[tuple[str, tuple[int, ...]], ...]
    kv_shape: tuple[int, ...]
    steps: tuple[tuple[Collective, ...], ...]
    step_ms: tuple[float, ...]
    tokens: tuple[int, ...]

    def comm_ms(self, step: int) -> float:
        """The time step `step` spent in collectives, ms (measured)."""
        return sum(collective.ms for collective in self.steps[step])


@dataclass(frozen=True)
class TensorParallelResult:
    """The model sharded over R processes, a prefill and greedy decode steps, against one process.

    Attributes:
        ranks: R.
        layers, hidden, head_dim, vocab: L, d, d_h and V of the model.
        splits: `split_dims` of the model (what R divides).
        prompt_tokens: T, the prefill's tokens (batch B = 1).
        element_bytes: bytes of one activation element (the model's dtype).
        parent_pid: the process that started the ranks.
        runs: each rank's measurements, by rank.
        reference_tokens: the unsharded model's greedy tokens in one process (`generate`).
        max_abs_diff: max |Δlogit| of rank 0 against one process over every step's positions and the
            vocabulary (measured).
        max_abs_logit: max |logit| there, for scale (measured).
        pieces: each token's text: the prompt's, then the ranks' tokens.
        dtype: the weights' dtype.
    """

    ranks: int
    layers: int
    hidden: int
    head_dim: int
    vocab: int
    splits: dict[str, int]
    prompt_tokens: int
    element_bytes: int
    parent_pid: int
    runs: tuple[RankRun, ...]
    reference_tokens: tuple[int, ...]
    max_abs_diff: float
    max_abs_logit: float
    pieces: tuple[str, ...]
    dtype: str

    @property
    def all_reduces(self) -> int:
        """2L + 1: the all-reduces of a step (two a layer, one after the embedding; computed)."""
        return ALL_REDUCES_PER_LAYER * self.layers + EMBEDDING_ALL_REDUCES

    def formula_bytes(self, step: int) -> int:
        """(2L + 1)·B·T·d·bytes: the all-reduces' payload a step (computed; T = 1 for a decode step); 0 at
        R = 1, where a rank's partial sum is already the whole and DTensor runs no all-reduce."""
        if self.ranks == 1:
            return 0
        tokens = self.prompt_tokens if step == 0 else 1
        return self.all_reduces * tokens * self.hidden * self.element_bytes

    def gather_formula_bytes(self, step: int) -> int:
        """B·T·⌈V / R⌉·bytes: the logits each rank gives the LM head's all-gather a step (computed; a V
        that R does not divide is padded to R equal shards); 0 at R = 1."""
        if self.ranks == 1:
            return 0
        tokens = self.prompt_tokens if step == 0 else 1
        return tokens * -(-self.vocab // self.ranks) * self.element_bytes

    def measured_bytes(self, step: int, kind: str = "all_reduce") -> int:
        """The payload of rank 0's collectives of `kind` in step `step`, bytes (measured)."""
        return sum(c.payload_bytes for c in self.runs[0].steps[step] if c.kind == kind)

    def sent_bytes(self, step: int) -> int:
        """The payload of all of rank 0's collectives in step `step`, every kind, bytes (measured)."""
        return sum(c.payload_bytes for c in self.runs[0].steps[step])

    def counts(self, step: int) -> dict[str, int]:
        """{kind: how many} of rank 0's collectives in step `step` (measured)."""
        kinds = [collective.kind for collective in self.runs[0].steps[step]]
        return {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}

    @property
    def same_tokens(self) -> bool:
        """Every rank's greedy tokens are the one process's."""
        return all(run.tokens == self.reference_tokens for run in self.runs)

    def decode_ms(self) -> tuple[float, float]:
        """(median decode step, median time in its collectives), ms, the slowest rank's (measured)."""
        return slowest_decode_ms(self.runs)

    def prefill_ms(self) -> tuple[float, float]:
        """(the prefill, its time in collectives), ms, the slowest rank's (measured)."""
        return slowest_step_ms(self.runs, 0)

    def lines(self) -> list[str]:
        """The CLI's table."""
        r, first = self, self.runs[0]
        out = [f"{r.ranks} ranks (processes {', '.join(str(run.pid) for run in r.runs)}; started by {r.parent_pid}), "
               f"one thread each, gloo on the CPU, {r.dtype}; prompt T = {r.prompt_tokens}",
               "layer 0's shapes on each rank, prefill (measured; local shards):"]
        out += [f"  {stop:<28} " + "  ".join(shape_text(dict(run.stops)[stop]) for run in r.runs)
                for stop, _ in first.stops]
        out += [f"  {'weight ' + name:<28} " + "  ".join(shape_text(dict(run.weights)[name]) for run in r.runs)
                for name, _ in first.weights]
        out.append(f"  {'KV cache keys':<28} " + "  ".join(shape_text(run.kv_shape) for run in r.runs))
        for step, label in ((0, f"prefill (T = {r.prompt_tokens})"), (1, "decode step (T = 1)")):
            if step < len(first.steps):
                counts = ", ".join(f"{n} x {kind}" for kind, n in r.counts(step).items()) or "none"
                out += [f"{label}: {counts}",
                        f"  all-reduces {si_text(r.measured_bytes(step), 'B')} measured; "
                        f"(2L + 1)·B·T·d·bytes = {si_text(r.formula_bytes(step), 'B')} computed",
                        f"  the logits' all-gather {si_text(r.measured_bytes(step, LOGITS_GATHER), 'B')} a rank "
                        f"measured; B·T·⌈V/R⌉·bytes = {si_text(r.gather_formula_bytes(step), 'B')} computed"]
        out.append(self._time_line())
        out.append(f"logits against one process: max |Δ| {r.max_abs_diff:.2g} (largest |logit| {r.max_abs_logit:.3g}); "
                   f"greedy tokens {'identical' if r.same_tokens else 'DIFFER'}: "
                   f"{''.join(r.pieces[r.prompt_tokens:])!r}")
        return out

    def _time_line(self) -> str:
        prefill, prefill_comm = self.prefill_ms()
        step, step_comm = self.decode_ms()
        return (f"time (measured, slowest rank): prefill {prefill:.1f} ms, {prefill_comm:.1f} ms in collectives "
                f"({prefill_comm / prefill:.0%}); decode step {step:.1f} ms (median), {step_comm:.1f} ms in "
                f"collectives ({step_comm / step:.0%})")


def lesson_text(result: TensorParallelResult) -> str:
    """The lesson page: what each rank holds, what it sends and what that cost, from the run's numbers."""
    r, first = result, result.runs[0]
    stops, weights = dict(first.stops), dict(first.weights)
    q, k = stops["Q (q_proj out)"], stops["K (k_proj out)"]
    gate = stops["gate (gate_proj out)"]
    heads_q, heads_kv = q[-1] // r.head_dim, k[-1] // r.head_dim
    step, step_comm = r.decode_ms()
    prefill, prefill_comm = r.prefill_ms()
    return (
        f"**Tensor parallelism over {r.ranks} processes.** Each rank holds a slice of every layer: Q's "
        f"projection by columns, so its **{heads_q} of {r.splits['query heads h_q']} query heads** "
        f"({shape_text(q)} measured on rank 0) and **{heads_kv} of {r.splits['KV heads h_kv']} KV heads** "
        f"({shape_text(k)}, its KV cache {shape_text(first.kv_shape)}); the MLP's gate and up by columns "
        f"({shape_text(gate)} of d_ff = {r.splits['MLP width d_ff']}). Attention and the MLP then run on the "
        "rank's own heads and columns with no communication. The O and down projections are split by rows: "
        "each rank's product is a partial sum of the full [B, T, d] output, and an **all-reduce** adds them. "
        f"The embedding is split by vocabulary rows (each rank holds {shape_text(weights['embed_tokens'])} of "
        f"V = {r.vocab}): a rank looks up only the ids in its rows and one more all-reduce adds the lookups. "
        f"That is **{r.counts(0).get('all_reduce', 0)} all-reduces a step** (2 a layer, L = {r.layers}, and 1 "
        f"after the embedding), {si_text(r.measured_bytes(0), 'B')} in the prefill of {r.prompt_tokens} tokens and "
        f"{si_text(r.measured_bytes(min(1, len(first.steps) - 1)), 'B')} a decode step (measured), "
        f"as (2L + 1)·B·T·d·bytes computes{' (0 at R = 1: one rank holds the whole sum)' if r.ranks == 1 else ''}. "
        f"The LM head is split by vocabulary too ({shape_text(weights['lm_head'])} on rank 0): each rank "
        "computes the logits of its V / R entries of the vocabulary and an **all-gather** joins them "
        f"({si_text(r.measured_bytes(0, LOGITS_GATHER), 'B')} from each rank in the prefill, measured). "
        "Here, on one CPU over loopback, the collectives took "
        f"{prefill_comm / prefill:.0%} of the prefill ({prefill_comm:.1f} of {prefill:.1f} ms) and "
        f"{step_comm / step:.0%} of a decode step ({step_comm:.1f} of {step:.1f} ms, measured, the slowest rank; "
        "a collective's time includes waiting for the slowest rank). A decode step's all-reduces are small "
        f"({si_text(r.formula_bytes(1) / (2 * r.layers), 'B')} each), so their latency, not the link's "
        "bandwidth, is what they cost. The logits agree with one process's to "
        f"**{r.max_abs_diff:.1g}** (largest |logit| {r.max_abs_logit:.3g}: the partial sums are added in "
        f"another order) and the greedy tokens are **{'the same' if r.same_tokens else 'different'}**."
    )
