"""The experiments' events: "equivalent is not identical" (the same logits computed equivalent
ways), run on the prefill's prompt and kept in the run (an export saves it); and the lab's (an
inference engine's trick run on the prompt: `explorer.lab.table.LAB`), drawn with its lesson text.

An experiment does not hold the shared model for its run: each of its forward passes takes a turn
on the model's lock (`explorer.runner.passes`), so another page's step waits for a pass, and the
experiment's page says meanwhile how many turns are ahead of its next pass."""

from __future__ import annotations

import time

import gradio as gr

from explorer.errors import ConfigError, SessionStateError
from explorer.figures.equivalence import equivalence_figure
from explorer.figures.lab.frame import presenter_frame
from explorer.figures.theme import empty_figure, presenter_style
from explorer.lab.params import read_params
from explorer.lab.table import LAB, Experiment
from explorer.ui.bounds import NUMBER_TEXT_MAX, number_text
from explorer.ui.handlers.controls import index
from explorer.ui.handlers.redraw import is_open
from explorer.ui.handlers.turns import shown_waits
from explorer.ui.toasts import shows_errors
from explorer.ui.views import Visit

EQUIVALENCE_EMPTY = "Prefill a prompt, then press \"Run the experiment\": the same logits computed equivalent ways."
APP_EQUIVALENCE_STEPS = 8  # few steps in the app (the CLI takes 32): each is five passes on the shared model
LAB_EMPTY = "Prefill a prompt, pick an experiment and press \"Run the experiment\": an engine's trick, run for real."
LAB_PARAM_SLOTS = 4  # the lab's number boxes: an experiment shows as many as it has number parameters


def on_equivalence_tab(visit: Visit | None):
    """The run's experiment where it ran one (live or saved); else the figure says how to run it."""
    if not is_open(visit) or visit.run.equivalence is None:
        return empty_figure("equivalence", EQUIVALENCE_EMPTY)
    return equivalence_figure(visit.run.equivalence, visit.run.piece)


@shows_errors
def on_equivalence_click(visit: Visit | None, steps: float | None, progress: gr.Progress | None = gr.Progress()):
    """Run the "equivalent is not identical" experiment on the prefill's prompt (each pass in its turn
    on the model, the turns ahead shown on `progress` while one waits), keep its result in the run (an
    export saves it), and draw it."""
    if not is_open(visit) or visit.saved:
        raise SessionStateError("Run a prefill first: the experiment runs the model on its prompt "
                                "(a saved run has no model).")
    count = index(steps, 4, APP_EQUIVALENCE_STEPS)
    from explorer.runner.equivalence import run_equivalence  # a session ran: the runner is imported
    from explorer.runner.passes import waits_shown

    run = visit.run  # the page's other events run meanwhile: the result goes to the run it was asked for
    with waits_shown(shown_waits(progress, "passes")):
        run.equivalence = run_equivalence(visit.session.loaded, run.steps[0].input_ids, max(1, count))
    return equivalence_figure(run.equivalence, run.piece)


def number_params(experiment: Experiment) -> list:
    """The experiment's number parameters, in the boxes' order."""
    return [param for param in experiment.params if not param.choices]


def menu_param(experiment: Experiment):
    """The experiment's menu parameter, or None."""
    return next((param for param in experiment.params if param.choices), None)


def lab_param_box(experiment: Experiment, slot: int) -> dict:
    """The properties of number box `slot` for `experiment`: its parameter's label, default and
    range, or hidden where the experiment has fewer number parameters."""
    numbers = number_params(experiment)
    if slot >= len(numbers):
        return {"visible": False, "value": None, "label": "unused"}
    param = numbers[slot]
    return {"visible": True, "value": param.default, "label": param.label, "minimum": param.minimum,
            "maximum": param.maximum}


def lab_menu(experiment: Experiment) -> dict:
    """The properties of the lab's menu for `experiment`: its menu parameter's names, label and
    default, or hidden where it has none."""
    param = menu_param(experiment)
    if param is None:
        return {"visible": False, "choices": [], "value": None, "label": "unused"}
    return {"visible": True, "choices": list(param.names), "value": param.name_of(param.default),
            "label": param.label, "info": param.help}


def on_lab_select(name: str) -> tuple:
    """Another experiment picked: its number boxes, its menu, and what it runs (until it has run)."""
    experiment = LAB[name]
    return (*(gr.update(**lab_param_box(experiment, slot)) for slot in range(LAB_PARAM_SLOTS)),
            gr.update(**lab_menu(experiment)), experiment.what)


@shows_errors
def on_lab_click(visit: Visit | None, name: str, first: float | None = None, second: float | None = None,
                 third: float | None = None, fourth: float | None = None, choice: str | None = None,
                 presenter: bool = False, progress: gr.Progress | None = gr.Progress()):
    """Run experiment `name` on the prefill's prompt with its number parameters (`first` to `fourth`, in
    its row's order; None: the default) and its menu's `choice` (a name of its menu parameter; None: the
    default), each pass in its turn on the model (the turns ahead shown on `progress` while one waits);
    an experiment over the shipped text answers at once with the result kept for the same model and
    parameters (`explorer.runner.lab.cache`). Returns its figure and its lesson text (with when a kept
    result was computed).

    Raises:
        ExplorerError: no live run, an unknown experiment, a parameter out of its range (hosted mode:
            its hosted cap), or what the experiment refuses (shape-only mode, a prefix too long).
    """
    if not is_open(visit) or visit.saved:
        raise SessionStateError("Run a prefill first: the lab runs the model on its prompt (a saved run has no model).")
    if name not in LAB:
        raise ConfigError(f"Unknown experiment {name!r}: pick one of {', '.join(LAB)}.")
    experiment = LAB[name]
    if experiment.local_only and visit.limits.lab_caps:
        raise ConfigError(f"{experiment.title} starts processes of its own, so it runs locally only, not on this "
                          f"shared app: `llm-explorer lab {name} PROMPT` on your machine.")
    values = dict(zip((param.name for param in number_params(experiment)), (first, second, third, fourth),
                      strict=False))
    for param in number_params(experiment):  # the lab's own check would echo a 300-digit number in full
        if values.get(param.name) is not None and len(str(values[param.name])) > NUMBER_TEXT_MAX:
            raise ConfigError(f"{param.label} must be {param.minimum} to {param.maximum}, "
                              f"not {number_text(values[param.name])}.")
    if menu_param(experiment) is not None:
        values[menu_param(experiment).name] = choice
    params = read_params(experiment.params, values, hosted=visit.limits.lab_caps)
    from explorer.runner.lab.cache import run_experiment  # a session ran: the runner is imported
    from explorer.runner.passes import waits_shown

    with waits_shown(shown_waits(progress, "passes")):
        computed = run_experiment(name, visit.session.loaded, visit.run.steps[0].input_ids, params)
    visit.lab = (name, computed.result)
    return lab_figure(visit, presenter), experiment.lesson(computed.result) + cached_note(computed)


def cached_note(computed) -> str:
    """The line under a kept result's lesson: "cached: computed at 14:05 for this model and these
    parameters" (the server's clock); nothing for a result computed for this click."""
    if not computed.cached:
        return ""
    prompt = " and this prompt" if computed.reads_prompt else ""
    return (f"\n\n*cached: computed at {time.strftime('%H:%M', time.localtime(computed.computed_at))} for this model, "
            f"these parameters{prompt}*")


def lab_figure(visit: Visit | None, presenter: bool = False):
    """The figure of the lab's latest experiment on this run, in presenter style where asked; the
    empty figure before one ran."""
    if not is_open(visit) or visit.lab is None:
        return empty_figure("lab", LAB_EMPTY)
    name, result = visit.lab
    figure = LAB[name].figure(result)
    return presenter_style(presenter_frame(figure)) if presenter else figure
