"""Expert parallelism (GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021): the E experts of each
mixture-of-experts layer spread over R processes, rank r holding experts [r·E/R, (r + 1)·E/R); every
rank runs attention and the router on all the tokens, owns ⌈N / R⌉ of the N = B·T token rows at each
MoE layer, sends each of its (token, expert) pairs to the rank holding the expert (an all-to-all),
gets the experts' outputs back (a second all-to-all), adds them with the router's weights, and an
all-gather gives every rank every row again. The result of running it over R processes
(`explorer.runner.lab.experts`), the check that R divides E (made before any process starts), its
lines for the CLI and its lesson text.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.errors import ConfigError
from explorer.figures.theme import si_text
from explorer.lab.prefix import shape_text
from explorer.lab.ranks import slowest_decode_ms, slowest_step_ms

EXCHANGES = ("dispatch", "combine", "gather")  # the collectives of a MoE layer, in order


def moe_dims(config: dict) -> dict[str, int]:
    """A mixture-of-experts config's experts E, experts per token k and expert MLP width f (Mixtral's
    `num_local_experts` and `intermediate_size`, Qwen3-MoE's `num_experts` and `moe_intermediate_size`)."""
    return {"experts E": int(config.get("num_local_experts") or config["num_experts"]),
            "per token k": int(config["num_experts_per_tok"]),
            "expert width f": int(config.get("moe_intermediate_size") or config["intermediate_size"])}


def check_ranks_divide(experts: int, ranks: int, most: int = 8) -> None:
    """Refuse an R that does not divide E, naming the R that work.

    Raises:
        ConfigError: R below 1, or one that does not divide the E experts.
    """
    if ranks < 1:
        raise ConfigError(f"Expert parallelism needs at least one rank, not R = {ranks}.")
    if experts % ranks:
        working = ", ".join(str(r) for r in range(1, most + 1) if experts % r == 0)
        raise ConfigError(f"Expert parallelism over R = {ranks} ranks gives each rank E / R of the E = {experts} "
                          f"experts of every MoE layer, so R must divide E: {ranks} does not divide {experts}. "
                          f"On this model R can be {working}.")


@dataclass(frozen=True)
class Exchange:
    """One collective of a MoE layer on one rank (measured by a dispatch mode around torch.distributed's
    functional ops).

    Attributes:
        label: "dispatch" (all-to-all of the pairs' hidden states to the experts' ranks), "combine"
            (all-to-all of the experts' outputs back) or "gather" (all-gather of the combined rows).
        layer: its decoder layer.
        shape: its input's shape on this rank: [rows, d].
        payload_bytes: its input's bytes, this rank's own rows included.
        send_rows: an all-to-all's rows sent to each rank, by rank (() for the gather).
        row_bytes: d·bytes, one row's.
        ms: wall time from its issue to its completion, on this rank.
    """

    label: str
    layer: int
    shape: tuple[int, ...]
    payload_bytes: int
    send_rows: tuple[int, ...]
    row_bytes: int
    ms: float

    def off_rank_bytes(self, rank: int) -> int:
        """The bytes this all-to-all sent to the other ranks (measured: its split sizes and its rows)."""
        return (sum(self.send_rows) - self.send_rows[rank]) * self.row_bytes


@dataclass(frozen=True)
class ExpertRankRun:
    """What one rank measured.

    Attributes:
        rank, pid: its index 0..R - 1 and process id.
        experts: (first, end): the experts it holds, [first, end).
        weights: (name, local shape) of its first MoE layer: gate_up_proj [E/R, 2f, d], down_proj
            [E/R, d, f] and the router [E, d] (replicated).
        steps: every collective of each step, step 0 the prefill.
        received: [step][MoE layer][source rank][local expert]: the rows it computed (measured).
        layer_ms: [step][layer]: each decoder layer's wall time, ms (measured).
        step_ms: each step's wall time, ms (measured).
        tokens: the greedy tokens it decoded.
    """

    rank: int
    pid: int
    experts: tuple[int, int]
    weights: tuple[tuple[str, tuple[int, ...]], ...]
    steps: tuple[tuple[Exchange, ...], ...]
    received: tuple
    layer_ms: tuple[tuple[float, ...], ...]
    step_ms: tuple[float, ...]
    tokens: tuple[int, ...]

    def comm_ms(self, step: int, layer: int | None = None, labels=EXCHANGES) -> float:
        """The time step `step` (or its `layer`) spent in the collectives of `labels`, ms (measured)."""
        return sum(c.ms for c in self.steps[step] if c.label in labels and layer in (None, c.layer))


@dataclass(frozen=True)
class ExpertParallelResult:
    """A mixture-of-experts model's experts spread over R processes, a prefill and greedy decode steps,
    against one process.

    Attributes:
        ranks: R.
        dims: `moe_dims` of the model (E, k, f).
        layers, hidden: L and d.
        moe_layers: the decoder layers whose MLP is a mixture of experts.
        prompt_tokens: T, the prefill's tokens (batch B = 1).
        element_bytes: bytes of one activation element (the model's dtype).
        model: the model's name; `random_weights`: a tiny MoE built from its config (the loaded model
            is dense), seeded.
        parent_pid: the process that started the ranks.
        runs: each rank's measurements, by rank.
        routing: [step][MoE layer]: each token's k experts, [N, k], from the router of the unsharded
            model in one process (computed there: the oracle of the counts and bytes).
        reference_tokens: the unsharded model's greedy tokens in one process (`generate`).
        max_abs_diff, max_abs_logit: max |Δlogit| of rank 0 against one process over every step's
            positions, and max |logit| there (measured).
        pieces: each token's text: the prompt's, then the ranks' tokens.
        dtype: the weights' dtype.
    """

    ranks: int
    dims: dict[str, int]
    layers: int
    hidden: int
    moe_layers: tuple[int, ...]
    prompt_tokens: int
    element_bytes: int
    model: str
    random_weights: bool
    parent_pid: int
    runs: tuple[ExpertRankRun, ...]
    routing: tuple
    reference_tokens: tuple[int, ...]
    max_abs_diff: float
    max_abs_logit: float
    pieces: tuple[str, ...]
    dtype: str

    @property
    def per_rank(self) -> int:
        """E / R, the experts a rank holds."""
        return self.dims["experts E"] // self.ranks

    def step_tokens(self, step: int) -> int:
        """N = B·T, the token rows of step `step` (T in the prefill, 1 a decode step)."""
        return self.prompt_tokens if step == 0 else 1

    def routed(self, step: int, moe: int) -> list[list[int]]:
        """[source rank][expert]: the (token, expert) pairs of each rank's ⌈N / R⌉ rows, counted from
        the one-process router's top-k (computed) for the `moe`-th MoE layer."""
        ids, rows = self.routing[step][moe], -(-self.step_tokens(step) // self.ranks)
        grid = [[0] * self.dims["experts E"] for _ in range(self.ranks)]
        for token, experts in enumerate(ids):
            for expert in experts:
                grid[token // rows][expert] += 1
        return grid

    def measured(self, step: int, moe: int) -> list[list[int]]:
        """[source rank][expert]: the rows each expert's rank received from each rank and computed (measured)."""
        grid = [[0] * self.dims["experts E"] for _ in range(self.ranks)]
        for run in self.runs:
            for source, counts in enumerate(run.received[step][moe]):
                for local, rows in enumerate(counts):
                    grid[source][run.experts[0] + local] += rows
        return grid

    def per_expert(self, step: int, moe: int) -> list[int]:
        """[E]: the rows each expert computed (measured)."""
        return [sum(column) for column in zip(*self.measured(step, moe), strict=True)]

    def formula_bytes(self, step: int, moe: int) -> int:
        """(pairs routed off their rank)·d·bytes: a dispatch all-to-all's bytes over all ranks (computed
        from the one-process router: Σ_ranks (its tokens' pairs whose expert another rank holds))."""
        grid, per = self.routed(step, moe), self.per_rank
        off = sum(n for source, row in enumerate(grid) for expert, n in enumerate(row) if expert // per != source)
        return off * self.hidden * self.element_bytes

    def measured_bytes(self, step: int, moe: int, label: str = "dispatch") -> int:
        """The bytes the ranks' `label` all-to-alls of the `moe`-th MoE layer sent off-rank, in all (measured)."""
        layer = self.moe_layers[moe]
        return sum(c.off_rank_bytes(run.rank) for run in self.runs for c in run.steps[step]
                   if c.label == label and c.layer == layer)

    def counts_match(self) -> bool:
        """Every step's and MoE layer's measured rows equal the one-process router's (computed)."""
        return all(self.measured(step, moe) == self.routed(step, moe)
                   for step in range(len(self.routing)) for moe in range(len(self.moe_layers)))

    @property
    def same_tokens(self) -> bool:
        """Every rank's greedy tokens are the one process's."""
        return all(run.tokens == self.reference_tokens for run in self.runs)

    def layer_times(self, step: int = 0) -> list[tuple[float, float, float]]:
        """[layer]: (compute, all-to-alls, all-gather) ms on the rank slowest in it (measured)."""
        out = []
        for layer in range(self.layers):
            run = max(self.runs, key=lambda run: run.layer_ms[step][layer])
            a2a = run.comm_ms(step, layer, ("dispatch", "combine"))
            gather = run.comm_ms(step, layer, ("gather",))
            out.append((run.layer_ms[step][layer] - a2a - gather, a2a, gather))
        return out

    def step_time(self, step: int) -> tuple[float, float]:
        """(step `step`, its time in collectives), ms, the slowest rank's (measured)."""
        return slowest_step_ms(self.runs, step)

    def decode_ms(self) -> tuple[float, float]:
        """(median decode step, median time in its collectives), ms, the slowest rank's (measured)."""
        return slowest_decode_ms(self.runs)

    def model_text(self) -> str:
        """The model's name, with "random weights" where it is the tiny MoE built from a config."""
        return f"{self.model} (random weights, seeded)" if self.random_weights else self.model

    def lines(self) -> list[str]:
        """The CLI's table."""
        r, dims = self, self.dims
        out = [f"{r.ranks} ranks (processes {', '.join(str(run.pid) for run in r.runs)}; started by {r.parent_pid}), "
               f"one thread each, gloo on the CPU, {r.dtype}; prompt T = {r.prompt_tokens}",
               f"MoE model: {r.model_text()}: E = {dims['experts E']} experts, k = {dims['per token k']} a token, "
               f"f = {dims['expert width f']}, d = {r.hidden}; MoE layers {', '.join(map(str, r.moe_layers))} of "
               f"{r.layers}",
               "each rank's experts (measured; first MoE layer's local weights):"]
        out += [f"  rank {run.rank}: experts {run.experts[0]}-{run.experts[1] - 1}, "
                + ", ".join(f"{name} {shape_text(shape)}" for name, shape in run.weights) for run in r.runs]
        out.append(f"rows each expert computed, prefill (measured) - same as the one-process router's top-k "
                   f"(computed): {'yes' if r.counts_match() else 'NO'}")
        out += [f"  layer {layer}: " + " | ".join(
                    " ".join(str(n) for n in r.per_expert(0, moe)[q * r.per_rank:(q + 1) * r.per_rank])
                    for q in range(r.ranks)) + "  (by rank)" for moe, layer in enumerate(r.moe_layers)]
        for step, label in ((0, f"prefill (N = {r.prompt_tokens})"), (1, "decode step (N = 1)")):
            if step < len(r.runs[0].steps):
                out.append(f"{label}: all-to-all bytes sent off-rank a MoE layer, all ranks (measured; "
                           "pairs off-rank·d·bytes computed):")
                out += [f"  layer {layer}: dispatch {si_text(r.measured_bytes(step, moe), 'B')}, combine "
                        f"{si_text(r.measured_bytes(step, moe, 'combine'), 'B')}; formula "
                        f"{si_text(r.formula_bytes(step, moe), 'B')}" for moe, layer in enumerate(r.moe_layers)]
        prefill, prefill_comm = r.step_time(0)
        step, step_comm = r.decode_ms()
        out.append(f"time (measured, slowest rank): prefill {prefill:.1f} ms, {prefill_comm:.1f} ms in collectives "
                   f"({prefill_comm / prefill:.0%}); decode step {step:.1f} ms (median), {step_comm:.1f} ms in "
                   f"collectives ({step_comm / step:.0%})")
        out.append(f"logits against one process: max |Δ| {r.max_abs_diff:.2g} (largest |logit| "
                   f"{r.max_abs_logit:.3g}); greedy tokens {'identical' if r.same_tokens else 'DIFFER'}: "
                   f"{''.join(r.pieces[r.prompt_tokens:])!r}")
        return out


def lesson_text(result: ExpertParallelResult) -> str:
    """The lesson page: which experts each rank holds, where the tokens went and what moving them cost,
    from the run's numbers."""
    r, first = result, result.runs[0]
    e, k = r.dims["experts E"], r.dims["per token k"]
    grid, per_expert = r.measured(0, 0), r.per_expert(0, 0)
    loads = [sum(per_expert[q * r.per_rank:(q + 1) * r.per_rank]) for q in range(r.ranks)]  # rows per rank
    pairs = r.prompt_tokens * k
    off = sum(n for source, row in enumerate(grid) for expert, n in enumerate(row) if expert // r.per_rank != source)
    prefill, prefill_comm = r.step_time(0)
    step, step_comm = r.decode_ms()
    layer = r.moe_layers[0]
    weights = dict(first.weights)
    return (
        f"**Expert parallelism over {r.ranks} processes** on {r.model_text()}. Each MoE layer's E = {e} experts "
        f"are spread over the ranks: rank 0 holds **experts {first.experts[0]}-{first.experts[1] - 1}** "
        f"(gate and up {shape_text(weights['gate_up_proj'])}, down {shape_text(weights['down_proj'])}, measured), "
        f"rank r experts r·E/R to (r + 1)·E/R - 1. Attention and the router run on every rank on all the tokens "
        f"(replicated), so each rank knows where every token goes; at each MoE layer rank r owns ⌈N/R⌉ of the N "
        f"token rows, and sends each of its (token, expert) pairs, k = {k} a token, to the rank holding the "
        f"expert with an **all-to-all**. In layer {layer}'s prefill the {pairs} pairs of {r.prompt_tokens} tokens "
        f"went {', '.join(str(n) for n in per_expert)} to experts 0-{e - 1} (measured on the ranks, equal to the "
        f"one-process router's top-k: {'yes' if r.counts_match() else 'no'}); **{off} of {pairs} pairs left "
        f"their rank**, {si_text(r.measured_bytes(0, 0), 'B')} (measured), as pairs off-rank·d·bytes computes "
        f"({si_text(r.formula_bytes(0, 0), 'B')}). The experts' outputs go back by a second all-to-all of the "
        f"same bytes, are added with the router's weights, and an all-gather gives every rank all N rows for "
        f"the next layer's attention. Here, on one CPU over loopback, the collectives took "
        f"{prefill_comm / prefill:.0%} of the prefill ({prefill_comm:.1f} of {prefill:.1f} ms) and "
        f"{step_comm / step:.0%} of a decode step ({step_comm:.1f} of {step:.1f} ms, measured, the slowest rank; "
        "a collective's time includes waiting for the slowest rank). A rank's experts compute only the rows "
        f"routed to them: in layer {layer}'s prefill {', '.join(f'rank {q} {n}' for q, n in enumerate(loads))} "
        f"of {pairs} rows (measured), so the busiest rank, **{max(loads) / (pairs / r.ranks):.2f}× an even share**, "
        "sets the pace the others wait for (what an engine's load-balancing loss and capacity factor are for). "
        f"The logits agree with one process's to **{r.max_abs_diff:.1g}** (largest |logit| {r.max_abs_logit:.3g}: "
        f"the k experts' outputs are added in another order) and the greedy tokens are "
        f"**{'the same' if r.same_tokens else 'different'}**."
    )
