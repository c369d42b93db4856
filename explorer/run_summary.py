"""A run at a glance, as `Explorer` shows itself: one line (`repr`) and, in a notebook, a small HTML
table (`_repr_html_`): the model, the prompt, the steps and tokens so far and the text, then one row
per step (the latest `MAX_ROWS`). Every piece of the run's text is escaped.
"""

from __future__ import annotations

import html

from explorer.journey import step_label
from explorer.run import Run
from explorer.trace import StepTrace

MAX_ROWS = 12  # the latest steps in the table; the earlier ones counted in one row
TEXT_CHARS = 60  # the generated text in the one-line repr, cut to its last characters


def summary_line(model: str, run: Run | None, saved: bool = False) -> str:
    """`Explorer(...)`'s one line: the model and, once there is a run, its steps, tokens and text."""
    where = "saved run of " if saved else ""
    if run is None or not run.steps:
        return f"Explorer({where}model={model!r}, no run yet: call prefill(...))"
    text = run.text if len(run.text) <= TEXT_CHARS else "…" + run.text[-TEXT_CHARS:]
    return f"Explorer({where}model={model!r}, {_steps_said(run)}, {_tokens_said(run)}, text={text!r})"


def summary_html(model: str, description: str, run: Run | None, saved: bool = False) -> str:
    """The notebook's view of `Explorer`: the model, the prompt, the steps and tokens so far and the
    generated text, then a table of the steps (stage, tokens in, context n, the token chosen, its
    probability, the wall time measured). HTML, every text escaped."""
    title = f"{'Saved run' if saved else 'Explorer'}: <b>{html.escape(model)}</b>"
    lines = [f"<div class=\"explorer-run\"><p>{title}<br><small>{html.escape(description)}</small></p>"]
    if run is None or not run.steps:
        return "".join([*lines, "<p>No run yet: call <code>prefill(...)</code>.</p></div>"])
    facts = [("prompt", html.escape(_prompt_said(run))), ("steps", html.escape(_steps_said(run))),
             ("tokens", html.escape(_tokens_said(run))), ("generated text", f"<code>{html.escape(repr(run.text))}</code>")]
    lines.append("<table>" + "".join(f"<tr><th style=\"text-align:left\">{name}</th><td style=\"text-align:left\">"
                                     f"{value}</td></tr>" for name, value in facts) + "</table>")
    lines.append(_steps_table(run.steps))
    return "".join([*lines, "</div>"])


def _steps_table(steps: list[StepTrace]) -> str:
    header = ("step", "tokens in", "context n", "token chosen", "p (computed)", "wall ms (measured)")
    rows = ["<tr>" + "".join(f"<th>{name}</th>" for name in header) + "</tr>"]
    if len(steps) > MAX_ROWS:
        rows.append(f"<tr><td colspan=\"{len(header)}\">… {len(steps) - MAX_ROWS} earlier steps</td></tr>")
    for trace in steps[-MAX_ROWS:]:
        label = step_label(trace)
        prob = f"{trace.sampling.token_prob:.3f}" if trace.sampling else "–"
        wall = "–" if trace.shape_only else f"{trace.wall_ms:.1f}"
        cells = (label, str(len(trace.input_ids)), str(trace.context_length),
                 f"<code>{html.escape(repr(trace.token_text))}</code>", prob, wall)
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _prompt_said(run: Run) -> str:
    prompt = run.prompt
    if prompt is None:
        return f"{len(run.steps[0].input_ids)} tokens"
    if prompt.text is None:
        return f"{prompt.prompt_tokens} tokens (shape-only)"
    template = ", in the chat template" if prompt.use_chat_template else ""
    return f"{prompt.text!r}{template}"


def _steps_said(run: Run) -> str:
    decodes = len(run.steps) - 1
    return f"prefill + {decodes} decode step{'s' if decodes != 1 else ''}"


def _tokens_said(run: Run) -> str:
    latest = run.steps[-1]
    ended = f"; ended: {latest.finish_reason.replace('_', ' ')}" if latest.finished else ""
    return (f"{len(run.steps[0].input_ids)} in the prompt, {len(run.steps)} chosen, "
            f"context n = {latest.context_length}{ended}")
