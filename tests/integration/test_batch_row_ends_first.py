"""A batch of prompts whose sequence 0 chooses end-of-sequence before the others: the run goes on for
them, and everything built on sequence 0's steps (its logit lens, a saved run, the CLI's journey, the
lens view) gives a result for the steps after its end, where it is fed the pad id and nothing is drawn."""

from __future__ import annotations

import dataclasses

import pytest
from tiny_models import tiny_model

from explorer.cli.trace_cmd import print_journey
from explorer.config import SamplingSettings
from explorer.figures.view_types import ViewOptions, ViewSources
from explorer.figures.views import render
from explorer.notebook import Explorer
from explorer.runner.session import InferenceSession
from explorer.runner.view_services import RUNNER_SERVICES
from explorer.saved import load_run, save_run

PROMPTS = ["Hi", "What is 2+2?", "A longer prompt, padded least."]
STEPS = 5


@pytest.fixture(scope="module")
def session():
    """Greedy: sequence 0's second chosen token, made the end-of-sequence id, ends it at step 1; the
    other sequences never choose it and run to the last step."""
    plain = InferenceSession(tiny_model("llama"), SamplingSettings(max_new_tokens=STEPS))
    plain.prefill(use_chat_template=False, prompts=PROMPTS)
    plain.decode_step()
    eos = plain.batch_rows[0][len(PROMPTS[0]) + 1]
    loaded = dataclasses.replace(tiny_model("llama"), eos_token_ids=[eos])
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=STEPS))
    session.prefill(use_chat_template=False, prompts=PROMPTS)
    while not session.finished:
        session.decode_step()
    assert all(eos not in row[len(prompt):] for row, prompt in zip(session.batch_rows[1:], PROMPTS[1:], strict=True))
    assert len(session.run.steps) == STEPS and session.batch_rows[0][-1] == eos  # it ended first
    return session


def test_the_lens_of_a_step_after_sequence_0_ended_is_none(session):
    assert session.run.lens(1) is not None
    assert [session.run.lens(step) for step in range(2, STEPS)] == [None] * (STEPS - 2)


def test_the_run_saves_and_loads_back(session, tmp_path):
    run, _ = load_run(save_run(session.run, session.attention, tmp_path / "run.json"))
    assert [s.sampling is None for s in run.steps] == [False, False, True, True, True]
    assert run.lens(1).positions == session.run.lens(1).positions and run.lens(3) is None


def test_the_cli_says_sequence_0_ended_at_end_of_sequence(session, capsys):
    print_journey(list(session.run.steps), session.text, 0, session.loaded.eos_token_ids)
    out = capsys.readouterr().out
    assert "[ended: end-of-sequence at step 1]" in out and "max new tokens" not in out
    assert "shape-only" not in out
    assert out.count("(sequence 0 had ended: fed the pad id, nothing drawn)") == STEPS - 2


def test_the_lens_view_draws_sequence_0s_steps_until_its_end(session, tmp_path):
    """Live and saved alike (`Explorer.open` draws the saved file as the app does)."""
    live = render(session.run, ViewSources(session.attention, RUNNER_SERVICES), ViewOptions(STEPS - 1, 0, False, "h100-sxm"),
                  "lens")
    saved = Explorer.open(save_run(session.run, session.attention, tmp_path / "run.json")).figure("lens", STEPS - 1)
    for figure in (live, saved):
        assert figure.layout.meta["step"] == STEPS - 1
        assert "sequence 0 ended at step 1" in figure.layout.title.text
        assert len(figure.data[0].x) == session.run.steps[1].context_length  # every position until its end


def test_the_sampling_view_says_sequence_0_ended(session):
    figure = render(session.run, ViewSources(session.attention, RUNNER_SERVICES),
                    ViewOptions(STEPS - 1, 0, False, "h100-sxm"), "sampling")
    text = " ".join(note.text for note in figure.layout.annotations) + (figure.layout.title.text or "")
    assert "Sequence 0 has ended" in text and "Shape-only" not in text
