"""Fuzzing the public functions with hostile values: each call returns a valid result or raises the project's
own error (an `ExplorerError`, or `gr.Error` from a handler); never another exception.

Derandomised, so CI replays the same cases; about 700 in all on the tiny model.
"""

from __future__ import annotations

import json
import math
import numbers

import gradio as gr
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tiny_models import tiny_model

from explorer.config import MAX_TEMPERATURE, MIN_TEMPERATURE, SamplingSettings
from explorer.errors import SamplingSettingsError
from explorer.ui import handlers
from explorer.ui.hosting import LOCAL, Served
from explorer.ui.models import ModelRegistry

FUZZ = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
FIELDS = ("temperature", "top_k", "top_p", "min_p", "seed", "max_new_tokens")
VIEWS = ("forward", "journey", "attention", "kv_cache", "sampling", "roofline", "lens")

# Anything a form, an API call or a script might send for a number.
hostile_float = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e-40, 5e-324, 1e6, 100.0, 0.01, float("nan"), float("inf")]),
    st.floats(0.0, 2.0),
)
hostile_int = st.one_of(st.integers(-(2**70), 2**70), st.integers(-3, 300), st.sampled_from([0, 1, 2**63 - 1, 2**63]))
hostile_value = st.one_of(hostile_float, hostile_int, st.none(), st.booleans(), st.text(max_size=3))


def weighted(*pairs):
    """Draw from each (weight, strategy) pair in proportion to its weight."""
    return st.sampled_from([strategy for weight, strategy in pairs for _ in range(weight)]).flatmap(lambda s: s)


def mostly(valid, hostile):
    """`valid` eight times in nine, else `hostile`: six such fields are all valid together about half the time."""
    return weighted((8, valid), (1, hostile))


# Text with every Unicode category; ASCII; ASCII with lone surrogates (category Cs) mixed in; now and
# then one character repeated past the tiny model's context of 160.
ascii_text = st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=24)
prompts = weighted(
    (1, st.text(alphabet=st.characters(exclude_categories=()), max_size=24)),
    (3, ascii_text),
    (1, st.text(alphabet=st.one_of(st.characters(categories=["Cs"]), st.characters(codec="ascii")), max_size=12)),
    (1, st.builds(lambda ch, n: ch * n, st.characters(codec="utf-8"), st.integers(150, 5000))),
)
# The seven sampling controls in the handlers' order, as a form sends them: mostly in range.
form_controls = st.tuples(
    st.booleans(), mostly(st.floats(0.01, 100.0), hostile_float), mostly(st.integers(0, 200), hostile_value),
    mostly(st.floats(0.01, 1.0), hostile_float), mostly(st.floats(0.0, 1.0), hostile_float),
    mostly(st.integers(0, 2**63 - 1), hostile_value), mostly(st.integers(1, 64), hostile_value),
)
# ... and as a script might send them: anything in any field.
raw_controls = st.tuples(st.booleans(), hostile_value, hostile_value, hostile_float, hostile_float, hostile_value,
                         hostile_value)


def in_spec(values: dict) -> bool:
    """Whether `SamplingSettings` must accept these field values (the documented ranges)."""
    def real(x):
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and (isinstance(x, int) or math.isfinite(x))

    def whole(x):
        return isinstance(x, int) and not isinstance(x, bool)

    t, k, p, m, s, n = (values[name] for name in FIELDS)
    return (real(t) and MIN_TEMPERATURE <= t <= MAX_TEMPERATURE and whole(k) and k >= 0 and real(p) and 0 < p <= 1
            and real(m) and 0 <= m <= 1 and whole(s) and 0 <= s < 2**63 and whole(n) and n >= 1)


def check_settings(result: SamplingSettings) -> None:
    """A valid settings object: the documented ranges, the documented types, strict JSON."""
    assert MIN_TEMPERATURE <= result.temperature <= MAX_TEMPERATURE and 0 < result.top_p <= 1
    assert 0 <= result.min_p <= 1 and result.top_k >= 0 and 0 <= result.seed < 2**63 and result.max_new_tokens >= 1
    assert {type(getattr(result, name)) for name in ("temperature", "top_p", "min_p")} == {float}
    assert {type(getattr(result, name)) for name in ("top_k", "seed", "max_new_tokens")} == {int}
    assert json.loads(json.dumps(result.to_dict(), allow_nan=False)) == result.to_dict()


@settings(max_examples=200, **FUZZ)
@given(st.fixed_dictionaries({name: hostile_value for name in FIELDS}), st.booleans())
def test_sampling_settings_accept_exactly_the_documented_ranges(values, do_sample):
    try:
        result = SamplingSettings(do_sample=do_sample, **values)
    except SamplingSettingsError as exc:
        assert not in_spec(values) and "must be" in str(exc)
    else:
        assert in_spec(values)
        check_settings(result)


@settings(max_examples=200, **FUZZ)
@given(raw_controls)
def test_settings_from_form_values_are_valid_or_a_settings_error(values):
    try:
        result = SamplingSettings.from_controls(*values)
    except SamplingSettingsError as exc:
        assert str(exc).startswith(("Fill in every", "temperature", "top-k", "top-p", "min-p", "the seed", "max new"))
    else:
        check_settings(result)
        assert (result.top_k, result.seed, result.max_new_tokens) == tuple(values[i] for i in (2, 5, 6))


@settings(max_examples=200, **FUZZ)
@given(raw_controls)
def test_the_sampling_controls_settings_are_valid_or_a_settings_error(values):
    try:
        check_settings(handlers.SamplingControls(*values).settings())
    except SamplingSettingsError:
        pass


@pytest.fixture(scope="module")
def served():
    return Served.create(ModelRegistry(tiny_model("llama")), LOCAL)


def prefill(served, prompt, template, system, sampling, shown):
    return handlers.ServedHandlers(served).on_prefill_click(None, None, served.registry.default_choice, "", prompt, 17, template, system, False, False, False,
                                     *sampling, 1, False, "h100-sxm", shown)


# How each refusal a handler may give begins (any other message, or another exception, fails a test).
SETTINGS_MESSAGES = ("temperature must", "top-k must", "top-p must", "min-p must", "the seed must",
                     "max new tokens must", "Fill in every sampling field", "This explorer allows at most")
PROMPT_MESSAGES = ("The prompt is empty", "The prompt is ", "The prompt holds", "The system prompt holds")


def check_step(outputs, shown: str) -> None:
    """The step outputs of a handler: a visit whose latest step is drawn in the view on screen."""
    visit, status, strip, text, steps, layer, _offer, _confirm, *figures = outputs
    latest = len(visit.run.steps) - 1
    assert steps["value"] == latest and f"context n = {visit.run.steps[-1].context_length}" in status
    assert visit.run.steps[-1].context_length < 160 and text == visit.run.text
    for view, figure in zip(VIEWS, figures, strict=True):
        assert figure == gr.skip() if view != shown else figure.layout.meta == {"view": view, "step": latest}


@settings(max_examples=150, **FUZZ)
@given(prompts, st.booleans(), st.one_of(st.just(""), prompts), form_controls, st.sampled_from([*VIEWS, "none"]))
def test_prefill_of_any_text_and_settings_is_a_step_or_an_error_message(served, prompt, template, system, sampling,
                                                                        shown):
    try:
        outputs = prefill(served, prompt, template, system, sampling, shown)
    except gr.Error as exc:
        assert exc.message.startswith(SETTINGS_MESSAGES + PROMPT_MESSAGES)
        event(f"refused: {exc.message[:18]}")
        return
    event("a step")
    check_step(outputs, shown)
    assert len(outputs[0].run.steps) == 1 and outputs[0].run.steps[0].input_ids


@settings(max_examples=150, **FUZZ)
@given(form_controls, st.sampled_from([*VIEWS, "none"]), st.integers(1, 4))
def test_decode_with_any_settings_is_a_step_or_an_error_message_that_changes_nothing(served, sampling, shown,
                                                                                     clicks):
    visit = prefill(served, "Hi there", False, "", (False, 1.0, 0, 1.0, 0.0, 0, 3), "none")[0]
    for _ in range(clicks):
        before = (len(visit.run.steps), list(visit.run.ids), visit.session.settings)
        try:
            outputs = handlers.on_decode_click(visit, *sampling, 1, False, "h100-sxm", shown)
        except gr.Error as exc:
            assert exc.message.startswith(SETTINGS_MESSAGES)
            assert (len(visit.run.steps), list(visit.run.ids), visit.session.settings) == before
            event(f"refused: {exc.message[:18]}")
            continue
        if outputs[0] == gr.skip():  # generation had ended: the status line says so, nothing changes
            assert "Generation ended" in outputs[1]
            assert (len(visit.run.steps), list(visit.run.ids), visit.session.settings) == before
            event("ended")
            continue
        event("a step")
        check_step(outputs, shown)
        assert len(visit.run.steps) == before[0] + 1 and len(visit.run.ids) == len(before[1]) + 1
