"""The lines above the figure for the step shown: the status line (the model, the step's tokens,
context and totals, its chosen token) and the token strip with the legend under it."""

from __future__ import annotations

from explorer.analysis.measured import StepCosts
from explorer.figures.theme import si_text
from explorer.journey import step_label
from explorer.trace import StepTrace
from explorer.ui.legend import legend_html
from explorer.ui.plain import markdown_text
from explorer.ui.tokens import token_strip_html
from explorer.ui.views import Visit


def strip_html(visit: Visit, step: int) -> str:
    """The token strip as it was after `step`: the tokens fed up to it, its own outlined, and the token
    it chose dashed (the later steps' tokens are not shown); then the legend of the symbols and chips."""
    run = visit.run
    traces = list(run.steps[: step + 1])
    chosen = traces[-1].sampling
    return token_strip_html(traces, step, run.piece(chosen.token_id) if chosen else None) + legend_html(run, step)


def status_text(visit: Visit, step: int) -> str:
    """The model's name and device, then one line on the step shown: tokens in, context, its totals (wall time measured,
    FLOPs and bytes estimated by the cost model), the chosen token (and, for an earlier step, which
    step is the latest)."""
    trace = visit.run.steps[step]
    source = "a saved run, shown without the model: " if visit.saved else ""
    # the model's name and device (its whole description is in the model menu): one line at 1280 px
    model = f"{visit.run.description.split(': ')[0]} on {trace.device}"
    line = f"{source}{markdown_text(model)}\n\n**{step_label(trace)}**: {_step_summary(trace, visit.run.costs(step))}"
    if len(trace.batch_texts) > 1:
        line += (f". A batch of {len(trace.batch_texts)} prompts: the views show sequence 0, Generated text "
                 "holds every sequence's")
    if trace.finished:
        line += f". Generation ended ({trace.finish_reason.replace('_', ' ')})."
    if step != len(visit.run.steps) - 1:
        line += f". An earlier step: the latest is {step_label(visit.run.latest)}."
    return line


def generated_text(visit: Visit, step: int) -> str:
    """The text generated up to `step`; for a batch of prompts, each sequence's on its own line, "[b] text"."""
    texts = visit.run.steps[step].batch_texts
    if len(texts) < 2:
        return visit.run.text_at(step)
    return "\n".join(f"[{b}] {text}" for b, text in enumerate(texts))


def _step_summary(trace: StepTrace, costs: StepCosts | None) -> str:
    """Tokens in and context; the step's measured wall time and what it gives in tokens/s (none on the
    meta device: nothing is computed there); the cost model's FLOPs and bytes; the chosen token."""
    tokens = f"{len(trace.input_ids)} token(s) in, context n = {trace.context_length}"
    estimate = "" if costs is None else (f", {si_text(costs.total.flops, 'FLOP')} and "
                                         f"{si_text(costs.total.bytes, 'B')} (estimated)")
    if trace.shape_only:
        return f"{tokens}{estimate}; shape-only: shapes measured on the meta device, no values and no compute time"
    rate = f", {1e3 / trace.wall_ms:.1f} tokens/s" if trace.stage == "decode" and trace.wall_ms > 0 else ""
    chosen = f"{markdown_text(repr(trace.token_text))} (p = {trace.sampling.token_prob:.3f})"
    return f"{tokens}, {trace.wall_ms:.0f} ms measured{rate}{estimate}; next token {chosen}"
