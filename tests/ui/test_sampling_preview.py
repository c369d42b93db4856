"""The sampling preview on a tiny model's real steps: a moved control previews other settings on the
step's stored logits, clearly marked, and a control moved back to the step's own settings shows the
step's own draw (its record), never a fresh re-sample."""

from __future__ import annotations

import html
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from explorer.config import SamplingSettings
from explorer.figures.views import ViewOptions
from explorer.runner.session import InferenceSession
from explorer.ui import handlers
from explorer.ui.hosting import LOCAL
from explorer.ui.views import Visit, render, view_data

SAMPLED = SamplingSettings(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, seed=3, max_new_tokens=8)
HOT = SamplingSettings(do_sample=True, temperature=1.5, top_p=0.9, seed=3, max_new_tokens=8)
STEPS = 4  # the prefill and three decode steps


def session(model, settings: list[SamplingSettings]) -> Visit:
    """A visit over a live session whose step k (0 = the prefill) chose its token with `settings[k]`."""
    live = InferenceSession(model, settings[0])
    live.prefill("Hi there!", use_chat_template=False)
    for later in settings[1:]:
        live.decode_step(later)
    visit = Visit.start(live, LOCAL)
    assert [step.sampling.settings for step in visit.run.steps] == [s.to_dict() for s in settings]
    return visit


@pytest.fixture(scope="module")
def sampled(model):
    """Sampled steps, the settings changed between them (each step's own are its record's)."""
    return session(model, [SAMPLED, SAMPLED, HOT, SAMPLED])


@pytest.fixture(scope="module")
def greedy(model):
    return session(model, [SamplingSettings(max_new_tokens=8)] * STEPS)


def own_controls(visit, step: int) -> tuple:
    """The step's own settings, as the seven sampling controls give them."""
    s = SamplingSettings(**visit.run.steps[step].sampling.settings)
    return s.do_sample, s.temperature, s.top_k, s.top_p, s.min_p, s.seed, s.max_new_tokens


def quoted(piece: str) -> str:
    """A piece as the preview's title quotes it (its repr, escaped for Plotly)."""
    return html.escape(repr(piece), quote=False)


def marked(figure, name: str = "drawn") -> int:
    """The token id panel (b) marks as `name` ("drawn": the step's own token)."""
    (mark,) = [trace for trace in figure.data if trace.name == name]
    return int(mark.customdata[0])


def shown_without_preview(visit, step: int):
    """The step's sampling view as its tab draws it (layer 0: the one `on_sampling_change` names)."""
    return render(visit, ViewOptions(step, 0, False, "h100-sxm"), "sampling")


controls = st.tuples(st.booleans(), st.sampled_from([0.3, 0.8, 1.0, 1.5, 4.0]), st.sampled_from([0, 1, 5, 20, 500]),
                     st.sampled_from([0.05, 0.5, 0.9, 1.0]), st.sampled_from([0.0, 0.05, 0.5]),
                     st.sampled_from([0, 3, 77]), st.sampled_from([8, 30]))


@hyp_settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
              phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each example draws twice
@given(moved=controls, step=st.integers(0, STEPS - 1), which=st.sampled_from(["sampled", "greedy"]))
def test_moving_a_control_back_to_the_steps_settings_shows_the_steps_own_draw(sampled, greedy, moved, step, which):
    visit = sampled if which == "sampled" else greedy
    record = visit.run.steps[step].sampling
    preview = handlers.on_sampling_change(visit, step, *moved)
    assert marked(preview) == record.token_id  # the step's token, from its record, in a preview too
    if preview.layout.title.text.startswith("PREVIEW"):
        assert f"the step drew {quoted(visit.run.piece(record.token_id))} (id {record.token_id}, orange)" \
            in preview.layout.title.text
    back = handlers.on_sampling_change(visit, step, *own_controls(visit, step))
    assert marked(back) == record.token_id
    assert "PREVIEW" not in back.layout.title.text and "preview" not in back.layout.title.text
    assert f"(id {record.token_id}), p = " in back.layout.title.text
    assert back.to_json() == shown_without_preview(visit, step).to_json()  # the step as drawn, not a re-sample


def test_the_issue_temperature_1_5_then_back_draws_the_steps_token(sampled):
    step = 1
    record = sampled.run.steps[step].sampling
    own = own_controls(sampled, step)
    moved = handlers.on_sampling_change(sampled, step, own[0], 1.5, *own[2:])
    title = moved.layout.title.text
    assert title.startswith(f"PREVIEW (not what the step did): temperature 1.5, top-k 20, top-p 0.9 on step {step}'s "
                            "measured logits")
    assert "(temperature 0.8, top-k 20, top-p 0.9);" in title  # the step's own settings
    assert f"a draw with seed {own[5]} gives " in title
    assert f"the step drew {quoted(sampled.run.piece(record.token_id))} (id {record.token_id}, orange), " \
           f"p = {record.token_prob:.2f}" in title
    back = handlers.on_sampling_change(sampled, step, *own)
    assert marked(back) == record.token_id
    assert f"(id {record.token_id}), p = {record.token_prob:.2f}" in back.layout.title.text
    assert not [trace for trace in back.data if trace.name == "preview draw"]


def test_only_settings_that_choose_otherwise_are_a_preview(sampled, greedy):
    own = SamplingSettings(**sampled.run.steps[1].sampling.settings)
    options = ViewOptions(1, 1, False, "h100-sxm")
    longer = replace(own, max_new_tokens=99)  # the step count is not part of the draw
    assert view_data(sampled, options, "sampling", longer).preview is None
    reseeded = replace(own, seed=own.seed + 1)
    assert view_data(sampled, options, "sampling", reseeded).preview is not None  # another seed: another draw
    warmer = SamplingSettings(do_sample=False, temperature=2.0, top_k=5, seed=9)  # greedy ignores the rest
    assert view_data(greedy, options, "sampling", warmer).preview is None


def test_a_preview_draw_is_marked_beside_the_steps_own(sampled):
    step = 3
    record = sampled.run.steps[step].sampling
    figure = handlers.on_sampling_change(sampled, step, True, 4.0, 0, 1.0, 0.0, 5, 8, True)  # hot, presenter mode
    preview = view_data(sampled, ViewOptions(step, 1, False, "h100-sxm"), "sampling",
                        SamplingSettings(do_sample=True, temperature=4.0, seed=5)).preview
    assert figure.layout.title.text.startswith("PREVIEW") and figure.layout.height > 640  # presenter: 1.5 times
    assert marked(figure) == record.token_id
    if preview.token_id != record.token_id:
        assert marked(figure, "preview draw") == preview.token_id
    final = [trace for trace in figure.data if trace.name == "final"][0]
    assert record.token_id in list(final.customdata)  # no filter: the step's token survives, marked
    assert f"a draw with seed 5 gives {quoted(sampled.run.piece(preview.token_id))}" in figure.layout.title.text
