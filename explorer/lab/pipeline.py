"""Pipeline parallelism (GPipe, Huang et al. 2019), forward only as inference runs it: the decoder's
L layers split into S contiguous ranges, one a process (a stage; stage 0 also holds the embedding,
the last stage the final norm and the LM head), the [B, T, d] activations sent from stage to stage,
and a batch of M requests cut into M micro-batches that follow each other through the stages, so
that stage s works on micro-batch m while stage s + 1 works on m - 1. The result of running it over
S processes (`explorer.runner.lab.pipeline`), the layer split and its checks (made before any
process starts), its lines for the CLI and its lesson text.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from explorer.errors import ConfigError
from explorer.figures.theme import si_text
from explorer.lab.prefix import shape_text

if TYPE_CHECKING:  # the app's modules import no torch (the page does not wait for it)
    import torch

MICRO_BATCH_ROWS = 1  # B_micro: each micro-batch is one request (the prompt), [1, T] ids
MAX_MICROBATCHES = 16


def layer_ranges(layers: int, stages: int) -> list[tuple[int, int]]:
    """The contiguous [first, end) layer range of each stage: L split as evenly as it goes, the first
    L mod S stages one layer more (e.g. L = 3, S = 2: [(0, 2), (2, 3)])."""
    sizes = [layers // stages + (stage < layers % stages) for stage in range(stages)]
    ends = [sum(sizes[:stage + 1]) for stage in range(stages)]
    return [(end - size, end) for size, end in zip(sizes, ends, strict=True)]


def check_pipeline(layers: int, stages: int, microbatches: int) -> None:
    """Refuse an S that leaves a stage without a layer, or an M out of its range.

    Raises:
        ConfigError: S below 1 or above L (naming L), or M outside 1..`MAX_MICROBATCHES`.
    """
    if not 1 <= stages <= layers:
        raise ConfigError(f"Pipeline parallelism gives each of its S stages at least one of the model's layers: "
                          f"S must be 1 to L = {layers}, not {stages}.")
    if not 1 <= microbatches <= MAX_MICROBATCHES:
        raise ConfigError(f"The micro-batches M must be 1 to {MAX_MICROBATCHES}, not {microbatches}.")


@dataclass(frozen=True)
class Transfer:
    """One point-to-point send or receive of a micro-batch's activations (torch.distributed, gloo).

    Attributes:
        micro: the micro-batch, 0..M - 1.
        peer: the stage it went to (a send) or came from (a receive).
        shape: the tensor handed to `isend` or filled by `recv`, [B_micro, T, d] (measured).
        payload_bytes: its bytes, numel × element size (measured).
        at_ms: a send: when the stage issued it (`isend`: the stage computes on while gloo sends); a
            receive: when `recv` returned; ms since the pass began (measured).
    """

    micro: int
    peer: int
    shape: tuple[int, ...]
    payload_bytes: int
    at_ms: float


@dataclass(frozen=True)
class Slot:
    """A stage's compute of one micro-batch: from its activations' arrival (or, on stage 0, the
    previous slot's end) to its output ready to send, ms since the pass began (the earliest slot's
    start on any stage; one system-wide monotonic clock, measured)."""

    micro: int
    start_ms: float
    end_ms: float

    @property
    def ms(self) -> float:
        """Its compute, ms (measured)."""
        return self.end_ms - self.start_ms


@dataclass(frozen=True)
class StageRun:
    """What one stage measured.

    Attributes:
        stage: its index, 0..S - 1.
        pid: its process id.
        layers: its [first, end) decoder layers.
        holds: what it holds besides its layers: "embedding" (stage 0), "final norm", "LM head" (the
            last stage).
        parameters: the parameters it holds after dropping the rest (measured, numel).
        slots: its compute of each micro-batch, in the order it ran them.
        sends: what it sent to the next stage (none on the last).
        recvs: what it received from the previous stage (none on stage 0).
    """

    stage: int
    pid: int
    layers: tuple[int, int]
    holds: tuple[str, ...]
    parameters: int
    slots: tuple[Slot, ...]
    sends: tuple[Transfer, ...]
    recvs: tuple[Transfer, ...]

    @property
    def busy_ms(self) -> float:
        """Its compute over the pass, ms (measured)."""
        return sum(slot.ms for slot in self.slots)


@dataclass(frozen=True)
class PipelineResult:
    """The model's layers over S processes, M micro-batches of the prompt through them, against one
    process.

    Attributes:
        stages, microbatches: S and M.
        layers, hidden, vocab: L, d and V of the model.
        prompt_tokens: T; each micro-batch is `MICRO_BATCH_ROWS` request(s) of the prompt.
        element_bytes: bytes of one activation element (the model's dtype).
        parent_pid: the process that started the stages.
        runs: each stage's measurements, by stage.
        last_logits: each micro-batch's logits at the last position, from the last stage, [M, V]
            float32 (measured).
        tokens: each micro-batch's greedy next token, from the last stage's logits.
        reference_token: the unsharded model's greedy next token in one process.
        max_abs_diff: max |Δlogit| of the last stage against one process, over micro-batch 0's every
            position and every micro-batch's last position, and the vocabulary (measured).
        max_abs_logit: max |logit| of one process, for scale (measured).
        pieces: the prompt's tokens' text, then the next token's.
        dtype: the weights' dtype.
    """

    stages: int
    microbatches: int
    layers: int
    hidden: int
    vocab: int
    prompt_tokens: int
    element_bytes: int
    parent_pid: int
    runs: tuple[StageRun, ...]
    last_logits: torch.Tensor
    tokens: tuple[int, ...]
    reference_token: int
    max_abs_diff: float
    max_abs_logit: float
    pieces: tuple[str, ...]
    dtype: str

    @property
    def send_formula_bytes(self) -> int:
        """B_micro·T·d·bytes: one micro-batch's activations between two stages (computed)."""
        return MICRO_BATCH_ROWS * self.prompt_tokens * self.hidden * self.element_bytes

    @property
    def sends(self) -> tuple[Transfer, ...]:
        """Every send of the pass, stage by stage (measured); (S - 1)·M of them."""
        return tuple(send for run in self.runs for send in run.sends)

    @property
    def makespan_ms(self) -> float:
        """From the pass's start to the last stage's last slot's end, ms (measured)."""
        return max(slot.end_ms for run in self.runs for slot in run.slots)

    @property
    def bubble(self) -> float:
        """The idle fraction of the S × makespan grid: 1 - Σ busy / (S · makespan) (measured)."""
        return 1 - sum(run.busy_ms for run in self.runs) / (self.stages * self.makespan_ms)

    @property
    def formula_bubble(self) -> Fraction:
        """GPipe's bubble, (S - 1) / (M + S - 1), exact (computed: equal stages, sends free)."""
        return Fraction(self.stages - 1, self.microbatches + self.stages - 1)

    @property
    def same_token(self) -> bool:
        """Every micro-batch's next token is the one process's."""
        return all(token == self.reference_token for token in self.tokens)

    def lines(self) -> list[str]:
        """The CLI's table."""
        r = self
        out = [f"{r.stages} stage{'s' if r.stages > 1 else ''} (process{'es' if r.stages > 1 else ''} "
               f"{', '.join(str(run.pid) for run in r.runs)}; started by "
               f"{r.parent_pid}), one thread each, gloo on the CPU, {r.dtype}; {r.microbatches} micro-batches: a "
               f"batch of {r.microbatches} requests, each the prompt (T = {r.prompt_tokens}), one a micro-batch",
               "stage  holds         and                             parameters  receives (measured)  sends (measured)"]
        for run in r.runs:
            out.append(f"{run.stage:>5}  {layers_text(run.layers):<12}  {', '.join(run.holds) or '-':<30}  "
                       f"{si_text(run.parameters, ''):>10}  {_transfers_text(run.recvs):<19}  "
                       f"{_transfers_text(run.sends)}")
        sizes = sorted({send.payload_bytes for send in r.sends})
        out.append(f"sends: {len(r.sends)} measured, (S - 1)·M = {(r.stages - 1) * r.microbatches} computed; each "
                   f"{' / '.join(si_text(size, 'B') for size in sizes) or '-'} measured, B_micro·T·d·bytes = "
                   f"{MICRO_BATCH_ROWS}·{r.prompt_tokens}·{r.hidden}·{r.element_bytes} = "
                   f"{si_text(r.send_formula_bytes, 'B')} computed")
        out.append("schedule: each stage's compute of each micro-batch, ms from the pass's start (measured)")
        out.append("micro  " + "".join(f"{'stage ' + str(run.stage):>16}" for run in r.runs))
        for micro in range(r.microbatches):
            out.append(f"{micro:>5}  " + "".join(f"{_slot_text(run.slots, micro):>16}" for run in r.runs))
        out.append(f"bubble: {r.bubble:.1%} of the S = {r.stages} stages × {r.makespan_ms:.1f} ms idle (measured); "
                   f"GPipe's (S - 1)/(M + S - 1) = {fraction_text(r.formula_bubble)} = {float(r.formula_bubble):.1%} "
                   "(computed: equal stages, free sends)")
        out.append(f"logits against one process: max |Δ| {r.max_abs_diff:.2g} (largest |logit| {r.max_abs_logit:.3g}); "
                   f"next token {'identical' if r.same_token else 'DIFFERS'} in every micro-batch: "
                   f"{r.pieces[-1]!r}")
        return out


def _transfers_text(transfers: tuple[Transfer, ...]) -> str:
    shapes = sorted({shape_text(transfer.shape) for transfer in transfers})
    return f"{len(transfers)} x {' / '.join(shapes)}" if transfers else "-"


def _slot_text(slots: tuple[Slot, ...], micro: int) -> str:
    slot = next(slot for slot in slots if slot.micro == micro)
    return f"{slot.start_ms:.1f}-{slot.end_ms:.1f}"


def fraction_text(value: Fraction) -> str:
    """"1/3"; a whole number as itself ("0")."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def lesson_text(result: PipelineResult) -> str:
    """The lesson page: what each stage holds, what crosses between stages, and the bubble, from the
    run's numbers."""
    r = result
    if r.stages == 1:
        return _one_stage_text(r)
    first, last = r.runs[0], r.runs[-1]
    send = r.sends[0]
    slowest = max(r.runs, key=lambda run: run.busy_ms)
    head = (f"; it also runs the final norm and the LM head, d = {r.hidden} to V = {r.vocab}"
            if slowest is last else "")
    return (
        f"**Pipeline parallelism over {r.stages} processes.** The model's {r.layers} layers are cut into "
        f"contiguous ranges: stage 0 holds {layers_text(first.layers)} and the embedding, the last stage "
        f"{layers_text(last.layers)}, the final norm and the LM head ({si_text(first.parameters, '')} and "
        f"{si_text(last.parameters, '')} parameters, measured). Between two stages only the residual stream "
        f"crosses: micro-batch m's **{shape_text(send.shape)}** activations ({si_text(send.payload_bytes, 'B')} a "
        f"send, measured; B_micro·T·d·bytes = {si_text(r.send_formula_bytes, 'B')} computed), "
        f"**{len(r.sends)} sends** in the pass, (S - 1)·M. "
        f"The batch of {r.microbatches} requests (each the prompt, T = {r.prompt_tokens}) goes through as "
        f"**{r.microbatches} micro-batches** in GPipe's order: stage s computes micro-batch m as soon as it "
        "has it, while the next stage works on m - 1. At the start the later stages wait for their first "
        f"micro-batch (the last stage's arrived at {last.slots[0].start_ms:.0f} ms) and at the end the earlier "
        f"ones have nothing left (stage 0 finished at {first.slots[-1].end_ms:.0f} of {r.makespan_ms:.0f} ms): "
        f"the **bubble**, here **{r.bubble:.0%}** of the {r.stages} stages × {r.makespan_ms:.0f} ms (measured), "
        f"against GPipe's (S - 1)/(M + S - 1) = {fraction_text(r.formula_bubble)} = "
        f"**{float(r.formula_bubble):.0%}** (computed), which assumes equal stages and free sends; more "
        f"micro-batches shrink it. Stage {slowest.stage} was the busiest ({slowest.busy_ms:.0f} ms of compute, "
        f"measured{head}): the slowest stage sets the pace. A stage holds 1/S of the layers and sends activations "
        "only, no weights or partial sums; the price is the bubble and, for each request, the latency of all "
        f"S stages one after another. {_agreement_text(r)}"
    )


def _one_stage_text(r: PipelineResult) -> str:
    return (
        f"**Pipeline parallelism over one process.** With S = 1 there is no pipeline: the one stage holds all "
        f"{r.layers} layers, the embedding, the final norm and the LM head ({si_text(r.runs[0].parameters, '')} "
        f"parameters, measured) and sends nothing. Its {r.microbatches} micro-batches (each the prompt, "
        f"T = {r.prompt_tokens}) run one after another, so the stage is idle **{r.bubble:.0%}** of the "
        f"{r.makespan_ms:.0f} ms (measured; GPipe's (S - 1)/(M + S - 1) = 0, computed). Ask for S = 2 or more to "
        f"see the activations sent between stages and the bubble. {_agreement_text(r)}"
    )


def _agreement_text(r: PipelineResult) -> str:
    agree = (f"agree with one process's to **{r.max_abs_diff:.1g}** (largest |logit| {r.max_abs_logit:.3g})"
             if r.max_abs_diff else "are **bit for bit** one process's (the same operations in the same "
             "order)")
    return (f"The last stage's logits {agree} and every micro-batch's next token is "
            f"**{'the same' if r.same_token else 'different'}**.")


def layers_text(layers: tuple[int, int]) -> str:
    """A [first, end) layer range as "layers first-last", or "layer first" for one layer."""
    return f"layers {layers[0]}-{layers[1] - 1}" if layers[1] - layers[0] > 1 else f"layer {layers[0]}"
