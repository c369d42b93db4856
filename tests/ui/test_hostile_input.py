"""Hostile and odd input through the app's handlers: each gives a valid result or a `gr.Error` whose message
says what to do, never another exception or a hang, and an error leaves the person's session as it was."""

from __future__ import annotations

import re
import threading

import gradio as gr
import pytest
from tiny_models import VOCAB

from explorer.config import SamplingSettings
from explorer.errors import SessionStateError
from explorer.figures.views import VIEWS
from explorer.runner.session import InferenceSession
from explorer.ui import handlers
from explorer.ui.hosting import HOSTED, LOCAL, Served
from explorer.ui.models import SHAPE_ONLY_PREFIX, ModelRegistry

NAN, INF = float("nan"), float("inf")
FIELDS = ("do_sample", "temperature", "top_k", "top_p", "min_p", "seed", "max_new_tokens")  # the handlers' order
GREEDY = dict(do_sample=False, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, max_new_tokens=8)
CONTEXT = 160  # the tiny model's context window, tokens (one per character without the chat template)


def sampling(**changes) -> tuple:
    """The seven sampling controls' values: sampling on, every filter neutral, then `changes`."""
    values = GREEDY | {"do_sample": True} | changes
    return tuple(values[name] for name in FIELDS)


def view(shown: str = "sampling") -> tuple:
    return (1, False, "h100-sxm", shown)  # layer, average heads, roofline hardware, the view on screen


def prefill(served, prompt="Hi there!", controls=None, custom="", template=False, system="", shown="sampling",
            choice=None, prompt_tokens=17):
    return handlers.ServedHandlers(served).on_prefill_click(
        None, None, choice or served.registry.default_choice, custom, prompt, prompt_tokens, template, system, False, False, False,
        *(controls or sampling()), *view(shown))


def snapshot(visit) -> tuple:
    """What an error must not change: steps, ids, generated ids, text, context length, settings."""
    session = visit.session
    return (len(session.traces), list(session.ids), list(session.generated), session.text,
            session.traces[-1].context_length, session.settings)


@pytest.mark.parametrize("prompt, template, message", [
    ("", False, "The prompt is empty: type some text"),
    ("   \n\t ", True, "The prompt is empty: type some text"),
    ("x" * 10_000, False, "The prompt is 10000 tokens; this model's context window is 160 tokens .* Shorten"),
    ("x" * 100_000, False, r"The prompt is 100,000 characters; here the limit is 32,768 characters \(for 2048 "
                           r"tokens\)\. Shorten the prompt"),  # refused before the tokenizer runs
    ("x" * CONTEXT, False, "The prompt is 160 tokens; this model's context window is 160 .* Shorten the prompt"),
    ("x" * 150, True, "The prompt is 168 tokens; .* Shorten the prompt"),  # the chat template adds 18
    ("\ud800", False, r"not valid Unicode \(a lone surrogate, '\\ud800', at position 0\).*Delete it"),
    ("ok \udfff ok", True, r"lone surrogate, '\\udfff', at position 3\).*Delete it and try again"),
])
def test_a_prompt_the_model_cannot_run_is_an_error_message(served, prompt, template, message):
    visit, *_ = prefill(served, "Earlier prompt")
    before = snapshot(visit)
    with pytest.raises(gr.Error) as caught:
        prefill(served, prompt, template=template)
    assert re.search(message, caught.value.message)  # str(gr.Error) is a repr: backslashes doubled
    assert snapshot(visit) == before
    handlers.on_decode_click(visit, *sampling(), *view())  # the page's earlier session still steps
    assert len(visit.run.steps) == 2


def test_a_lone_surrogate_in_the_system_prompt_is_an_error_message(served):
    with pytest.raises(gr.Error, match=r"The system prompt holds a character that is not valid Unicode"):
        prefill(served, "Hi", template=True, system="be \ud83d brief")


@pytest.mark.parametrize("prompt", [
    "\x00\x01\x07\x1b[31m\x7f bell and escape",
    "😀👍🏽 שלום עולם مرحبا",
    "<img src=x onerror=alert(1)>",
    "x" * (CONTEXT - 1),  # the longest prompt that leaves room for the first new token
])
def test_odd_but_valid_text_runs_and_shows_escaped(served, prompt):
    visit, status, strip, text, steps, layer, _offer, _confirm, *figures = prefill(served, prompt, shown="attention")
    T = len(prompt)  # one token per character; an unknown character is <unk>
    assert visit.run.steps[0].input_ids[:T] != [] and len(visit.run.steps[0].input_ids) == T
    assert f"**prefill**: {T} token(s) in, context n = {T}" in status
    assert "<img" not in strip and strip.count('class="tok prompt') == T
    assert figures[VIEWS.index("attention")].layout.meta == {"view": "attention", "step": 0}
    if T < CONTEXT - 1:
        visit, *_ = handlers.on_decode_click(visit, *sampling(), *view("attention"))
        assert len(visit.run.steps) == 2
    else:
        assert visit.session.finished and "Generation ended (context full)" in status


@pytest.mark.parametrize("change, message", [
    (dict(temperature=0), r"temperature must be in \[0.01, 100\]; for greedy decoding \(temperature 0\) turn sampling off"),
    (dict(temperature=-1.0), r"temperature must be in \[0.01, 100\]"),
    (dict(temperature=NAN), r"temperature must be in \[0.01, 100\]"),
    (dict(temperature=INF), r"temperature must be in \[0.01, 100\]"),
    (dict(temperature=1e6), r"temperature must be in \[0.01, 100\]"),
    (dict(temperature=1e-40), r"temperature must be in \[0.01, 100\]"),  # would overflow float32 logits
    (dict(top_k=-1), r"top-k must be a whole number >= 0 \(0 disables it\)"),
    (dict(top_p=0.0), r"top-p must be in \(0, 1\] \(1 disables it\)"),
    (dict(top_p=NAN), r"top-p must be in \(0, 1\]"),
    (dict(min_p=1.5), r"min-p must be in \[0, 1\] \(0 disables it\)"),
    (dict(seed=-1), r"the seed must be a whole number in \[0, 2\^63\)"),
    (dict(seed=2**64), r"the seed must be a whole number in \[0, 2\^63\)"),
    (dict(seed=1e30), r"the seed must be a whole number in \[0, 2\^63\)"),
    (dict(max_new_tokens=0), "max new tokens must be a whole number >= 1"),
    (dict(max_new_tokens=10**9), "This explorer allows at most 1024 new tokens per session"),
    (dict(seed=None), "Fill in every sampling field"),
])
def test_out_of_range_sampling_is_an_error_message_and_the_session_survives(served, change, message):
    visit, *_ = prefill(served)
    before = snapshot(visit)
    with pytest.raises(gr.Error, match=message):
        prefill(served, controls=sampling(**change))
    with pytest.raises(gr.Error, match=message):
        handlers.on_decode_click(visit, *sampling(**change), *view())
    with pytest.raises(gr.Error, match=message):
        list(handlers.on_run_click(visit, 3, *sampling(**change), *view()))
    assert snapshot(visit) == before
    handlers.on_decode_click(visit, *sampling(), *view())
    assert len(visit.run.steps) == 2


@pytest.mark.parametrize("change, message", [
    (dict(top_k=NAN), r"top-k must be a whole number >= 0"),
    (dict(top_k=INF), r"top-k must be a whole number >= 0"),
    (dict(top_k=2.5), r"top-k must be a whole number >= 0"),
    (dict(seed=NAN), r"the seed must be a whole number in \[0, 2\^63\)"),
    (dict(seed=-INF), r"the seed must be a whole number in \[0, 2\^63\)"),
    (dict(max_new_tokens=NAN), "max new tokens must be a whole number >= 1"),
    (dict(max_new_tokens=INF), "max new tokens must be a whole number >= 1"),
    (dict(temperature="hot"), "temperature must be a number; type digits only"),
])
def test_a_whole_number_field_given_nan_inf_text_or_a_fraction_is_an_error_message(served, change, message):
    visit, *_ = prefill(served)
    before = snapshot(visit)
    with pytest.raises(gr.Error, match=message):
        handlers.on_decode_click(visit, *sampling(**change), *view())
    assert snapshot(visit) == before


@pytest.mark.parametrize("change, stages, kept", [
    (dict(top_k=0), ["raw"], VOCAB),
    (dict(top_k=1), ["raw", "top_k"], 1),
    (dict(top_k=VOCAB * 10), ["raw", "top_k"], VOCAB),
    (dict(top_p=1.0), ["raw"], VOCAB),
    (dict(min_p=1.0), ["raw", "min_p"], 1),
    (dict(temperature=100.0, seed=2**63 - 1), ["raw", "temperature"], VOCAB),
])
def test_extreme_but_valid_sampling_gives_a_drawn_step(served, change, stages, kept):
    visit, status, strip, text, steps, layer, _offer, _confirm, *figures = prefill(served, controls=sampling(**change))
    record = visit.run.steps[0].sampling
    assert [stage.name for stage in record.stages] == stages
    assert int(record.final.kept.sum()) == kept
    assert figures[VIEWS.index("sampling")].layout.meta == {"view": "sampling", "step": 0}
    if kept == 1:  # only the most probable token survives, drawn with certainty
        assert record.token_id == int(record.stages[0].logits.argmax()) and record.token_prob == pytest.approx(1.0)


@pytest.mark.parametrize("count", [0, -1, 10_000, NAN, INF, None])
def test_run_n_tokens_out_of_range_is_an_error_message(served, count):
    visit, *_ = prefill(served)
    before = snapshot(visit)
    with pytest.raises(gr.Error, match="Run between 1 and 256 tokens at a time"):
        list(handlers.on_run_click(visit, count, *sampling(), *view()))
    assert snapshot(visit) == before


@pytest.mark.parametrize("custom, limits, message", [
    ("../../etc", LOCAL, r"The folder ../../etc has no config.json.*pass a hub id"),
    ("../../no-such-folder", LOCAL, r"No folder ../../no-such-folder. Check the path, or pass a hub id"),
    ("../" * 40 + "etc", LOCAL, r"has no config.json.*pass a hub id"),
    ("https://evil.example/x", LOCAL, r"is a web address;.*never from a URL. Pass a hub id such as Qwen/Qwen3-0.6B"),
    ("no-such-org/no-such-model", LOCAL, r"Cannot find 'no-such-org/no-such-model'.*Download it where there is network"),
    ("x" * 5000, LOCAL, r"is neither a folder here nor a hub id.*Pass a hub id such as Qwen/Qwen3-0.6B"),
    ("~no-such-user-here/model", LOCAL, r"is neither a folder here nor a hub id.*Pass a hub id"),
    ("../../etc", HOSTED, r"This hosted explorer loads only Qwen/Qwen3-0.6B .*run it on your own machine"),
    ("https://evil.example/x", HOSTED, r"This hosted explorer loads only"),
    ("no-such-org/no-such-model", HOSTED, r"This hosted explorer loads only"),
])
def test_a_model_id_that_is_a_path_a_url_or_unknown_is_an_error_message(model, custom, limits, message,
                                                                         tmp_path, monkeypatch):
    (tmp_path / "etc").mkdir()
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")  # "../../etc" is a folder without config.json wherever the clone lies
    served = Served.create(ModelRegistry(model, allowed=limits.allowed_models), limits)
    visit, *_ = prefill(served)
    before = snapshot(visit)
    with pytest.raises(gr.Error, match=message):
        prefill(served, custom=custom)
    assert snapshot(visit) == before and len(served.registry._extra) == 0  # nothing half-loaded is kept


def test_a_huge_token_count_on_a_shape_only_model_is_refused_before_anything_is_allocated(served):
    choice = SHAPE_ONLY_PREFIX + "qwen3-0.6b"
    with pytest.raises(gr.Error, match="The prompt is 1000000000000 tokens; this model's context window is 40960"):
        prefill(served, "", choice=choice, prompt_tokens=10**12)


@pytest.mark.parametrize("count", [NAN, INF, -INF])
def test_a_non_finite_token_count_on_a_shape_only_model_is_an_error_message(served, count):
    with pytest.raises(gr.Error, match="A prompt needs at least one token"):
        prefill(served, "", choice=SHAPE_ONLY_PREFIX + "qwen3-0.6b", prompt_tokens=count)


def test_next_before_prefill_is_an_error_message():
    for _ in range(3):
        with pytest.raises(gr.Error, match="Run the prefill first: a decode step continues a prompt"):
            handlers.on_decode_click(None, *sampling(), *view())
    with pytest.raises(gr.Error, match="Run the prefill first"):
        list(handlers.on_run_click(None, 5, *sampling(), *view()))


def test_many_next_clicks_after_generation_ended_each_say_so_and_change_nothing(served):
    visit, *_ = prefill(served, controls=sampling(max_new_tokens=3))
    for _ in range(2):
        visit, status, *_ = handlers.on_decode_click(visit, *sampling(max_new_tokens=3), *view())
    assert "Generation ended (max new tokens)" in status
    before = snapshot(visit)
    for _ in range(25):  # a status line, not an error: generation ending is normal
        outputs = handlers.on_decode_click(visit, *sampling(max_new_tokens=3), *view())
        assert "Generation ended (max new tokens). Press Prefill for a new run" in outputs[1]
        assert [out for i, out in enumerate(outputs) if i != 1] == [gr.skip()] * (len(outputs) - 1)
    assert snapshot(visit) == before


def test_next_clicked_fast_from_many_threads_runs_one_step_after_another(served):
    visit, *_ = prefill(served, "Hello world", controls=sampling(do_sample=False, max_new_tokens=200))
    errors = []

    def click():
        for _ in range(4):
            try:
                handlers.on_decode_click(visit, *sampling(do_sample=False, max_new_tokens=200), *view("none"))
            except gr.Error as exc:
                errors.append(exc.message)

    threads = [threading.Thread(target=click) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    session, T = visit.session, len(visit.run.steps[0].input_ids)
    assert all("Generation has ended" in message for message in errors)
    assert [trace.step_index for trace in session.traces] == list(range(len(session.traces)))
    assert [trace.input_ids for trace in session.traces[1:]] == [[i] for i in session.ids[T:-1]]
    assert [trace.context_length for trace in session.traces] == list(range(T, T + len(session.traces)))
    assert len(session.traces) == 1 + 16 - len(errors)


def test_a_step_that_fails_after_the_forward_pass_blocks_further_steps(model, monkeypatch):
    session = InferenceSession(model, SamplingSettings(max_new_tokens=20))
    session.prefill("Hello", use_chat_template=False)

    def broken(*args, **kwargs):
        raise RuntimeError("probability tensor contains inf")

    monkeypatch.setattr("explorer.runner.choice.sample_next_token", broken)
    with pytest.raises(RuntimeError, match="probability tensor"):
        session.decode_step()
    monkeypatch.undo()
    with pytest.raises(SessionStateError, match=r"previous step failed \(RuntimeError.*Run a new prefill"):
        session.decode_step()
    assert len(session.traces) == 1
    session.prefill("Hello", use_chat_template=False)
    assert len(session.decode_step().input_ids) == 1


@pytest.mark.parametrize("step, layer", [(NAN, 1), (1, NAN), (None, INF)])
def test_non_finite_step_or_layer_redraws_the_latest_step(served, step, layer):
    visit, *_ = prefill(served)
    figures = handlers.on_view_change(visit, step, layer, False, "h100-sxm", "journey")
    assert figures[VIEWS.index("journey")].layout.meta == {"view": "journey", "step": 0}


def test_a_refused_next_click_leaves_the_settings_as_they_were(served):
    visit, *_ = prefill(served, controls=sampling(max_new_tokens=1))
    before = snapshot(visit)
    outputs = handlers.on_decode_click(visit, *sampling(max_new_tokens=5, temperature=0.5), *view())
    assert "Generation ended" in outputs[1]
    assert snapshot(visit) == before


def test_decode_step_applies_new_settings_only_when_the_step_runs(model):
    session = InferenceSession(model, SamplingSettings(max_new_tokens=1))
    session.prefill("Hello", use_chat_template=False)
    with pytest.raises(SessionStateError, match="Generation has ended"):
        session.decode_step(SamplingSettings(max_new_tokens=5))
    assert session.settings == SamplingSettings(max_new_tokens=1)
    fresh = InferenceSession(model, SamplingSettings(max_new_tokens=5))
    fresh.prefill("Hello", use_chat_template=False)
    trace = fresh.decode_step(SamplingSettings(do_sample=True, top_k=1, max_new_tokens=5))
    assert fresh.settings.top_k == 1 and [stage.name for stage in trace.sampling.stages] == ["raw", "top_k"]


@pytest.mark.real_model
def test_odd_text_through_the_real_byte_level_tokenizer_runs_and_shows_escaped(embedded_model):
    served = Served.create(ModelRegistry(embedded_model), LOCAL)
    prompt = "👩‍👩‍👧 שלום עולם مرحبا \x00\x07\x1b[31m <script>alert(1)</script> \u202eevil\u202c"
    visit, status, strip, text, *_ = prefill(served, prompt, controls=sampling(max_new_tokens=4), template=True,
                                             shown="attention")
    for _ in range(3):
        visit, status, strip, text, *_ = handlers.on_decode_click(visit, *sampling(max_new_tokens=4),
                                                                  *view("attention"))
    pieces = "".join(piece for trace in visit.run.steps for piece in trace.input_pieces)
    assert "<script>" in pieces and "<script" not in strip and "</script" not in strip and "&lt;/" in strip
    assert "Generation ended (max new tokens)" in status and text == visit.run.text
    assert not text.endswith("\ufffd") and text.encode("utf-8")
    with pytest.raises(gr.Error, match="not valid Unicode"):
        prefill(served, "caf\udce9", template=True)
