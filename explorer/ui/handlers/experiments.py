"""The experiments' events: "equivalent is not identical" (the same logits computed equivalent
ways), run on the prefill's prompt and kept in the run (an export saves it)."""

from __future__ import annotations

from explorer.errors import SessionStateError
from explorer.figures.equivalence import equivalence_figure
from explorer.figures.theme import empty_figure
from explorer.ui.handlers.controls import index
from explorer.ui.handlers.redraw import is_open
from explorer.ui.toasts import shows_errors
from explorer.ui.views import Visit

EQUIVALENCE_EMPTY = "Prefill a prompt, then press \"Run the experiment\": the same logits computed equivalent ways."
APP_EQUIVALENCE_STEPS = 8  # the experiment holds the shared model: few steps in the app (the CLI takes 32)


def on_equivalence_tab(visit: Visit | None):
    """The run's experiment where it ran one (live or saved); else the figure says how to run it."""
    if not is_open(visit) or visit.run.equivalence is None:
        return empty_figure("equivalence", EQUIVALENCE_EMPTY)
    return equivalence_figure(visit.run.equivalence, visit.run.piece)


@shows_errors
def on_equivalence_click(visit: Visit | None, steps: float | None):
    """Run the "equivalent is not identical" experiment on the prefill's prompt (the model's lock held
    meanwhile), keep its result in the run (an export saves it), and draw it."""
    if not is_open(visit) or visit.saved:
        raise SessionStateError("Run a prefill first: the experiment runs the model on its prompt "
                                "(a saved run has no model).")
    count = index(steps, 4, APP_EQUIVALENCE_STEPS)
    from explorer.runner.equivalence import run_equivalence  # a session ran: the runner is imported

    visit.run.equivalence = run_equivalence(visit.session.loaded, visit.run.steps[0].input_ids, max(1, count))
    return equivalence_figure(visit.run.equivalence, visit.run.piece)
