"""The app's handlers on a tiny model: five views from real steps, errors as `gr.Error`, nothing lost."""

from __future__ import annotations

import gradio as gr
import numpy as np
import pytest

from explorer.analysis.measured import Scenario
from explorer.config import preset_names
from explorer.journey import step_label
from explorer.runner import loading
from explorer.ui import handlers
from explorer.ui.hosting import HOSTED, LOCAL, Limits, Served
from explorer.ui.models import SHAPE_ONLY_PREFIX, ModelRegistry

# do_sample, temperature, top-k, top-p, min-p, seed, max new tokens
GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)
SAMPLED = (True, 0.8, 20, 0.9, 0.0, 3, 8)
VIEWS = ("forward", "journey", "attention", "kv_cache", "sampling", "roofline", "lens")
VIEW = (1, False, "h100-sxm", "attention")  # layer, average over heads, roofline hardware, the view on screen
ATTENTION, JOURNEY = VIEWS.index("attention"), VIEWS.index("journey")


def prefill(served, prompt="Hi there!", sampling=GREEDY, choice=None, prompt_tokens=17, custom="", page=None):
    request = type("Request", (), {"session_hash": page})() if page else None
    return handlers.ServedHandlers(served).on_prefill_click(
        request, None, choice or served.registry.default_choice, custom, prompt, prompt_tokens, False, "", False, False, False, *sampling,
        *VIEW)


def meta(figure) -> dict:
    return figure.layout.meta


def drawn(visit, view, step=None, layer=1, average_heads=False):
    """Select a view's tab: the handler returns the view's name and its figure."""
    shown, figure = handlers.on_tab_select(view)(visit, step, layer, average_heads, "h100-sxm")
    assert shown == view
    return figure


def test_prefill_draws_the_view_on_screen_and_each_tab_draws_its_own(served):
    visit, status, strip, text, steps, layer, _offer, _confirm, *figures = prefill(served)
    T = len(visit.run.steps[0].input_ids)
    assert f"**prefill**: {T} token(s) in, context n = {T}" in status
    assert strip.count('class="tok prompt') == T and strip.count('class="tok next"') == 1
    assert steps["choices"] == [("prefill", 0)] and steps["value"] == 0
    assert layer["maximum"] == 2 and layer["value"] == 1
    assert meta(figures[ATTENTION]) == {"view": "attention", "step": 0}
    assert all(figure == gr.skip() for i, figure in enumerate(figures) if i != ATTENTION)  # off screen: not drawn
    assert [meta(drawn(visit, view)) for view in VIEWS] == [{"view": v, "step": 0} for v in VIEWS]


def test_decode_steps_grow_the_attention_and_the_cache(served):
    visit, *_ = prefill(served)
    T = len(visit.run.steps[0].input_ids)
    for _ in range(3):
        visit, status, strip, text, steps, layer, _offer, _confirm, *figures = handlers.on_decode_click(visit, *GREEDY, *VIEW)
    assert f"**step 3**: 1 token(s) in, context n = {T + 3}" in status
    assert [label for label, _ in steps["choices"]] == ["prefill", "step 1", "step 2", "step 3"]
    heatmaps = [trace for trace in figures[ATTENTION].data if trace.type == "heatmap"]
    assert len(heatmaps) == 6  # one panel per query head of the tiny model
    assert all(heatmap.z.shape == (T + 3, T + 3) for heatmap in heatmaps)
    assert meta(figures[ATTENTION])["step"] == 3 and all(meta(drawn(visit, view))["step"] == 3 for view in VIEWS)
    assert text == visit.run.text


def test_run_n_tokens_redraws_after_each_and_stops_at_max_new_tokens(served):
    visit, *_ = prefill(served)
    outputs = list(handlers.on_run_click(visit, 20, *GREEDY, *VIEW))
    assert len(outputs) == 7  # prefill chose token 1 of 8; seven decode steps choose the rest
    assert [meta(out[8 + ATTENTION])["step"] for out in outputs] == list(range(1, 8))
    assert visit.session.finished and "Generation ended (max new tokens)" in outputs[-1][1]


def test_going_back_to_a_step_redraws_it_without_running_the_model(served):
    visit, *_ = prefill(served)
    for _ in range(3):
        handlers.on_decode_click(visit, *GREEDY, *VIEW)
    ids = list(visit.run.ids)
    figures = handlers.on_view_change(visit, 1, 0, True, "h100-sxm", "attention")
    assert meta(figures[ATTENTION])["step"] == 1 and figures[JOURNEY] == gr.skip()
    assert [meta(drawn(visit, view, step=1))["step"] for view in VIEWS] == [1] * len(VIEWS)
    averaged = [trace for trace in figures[ATTENTION].data if trace.type == "heatmap"]
    assert len(averaged) == 1 and averaged[0].z.shape[0] == len(visit.run.steps[0].input_ids) + 1
    assert visit.run.ids == ids and len(visit.run.steps) == 4


def test_moving_a_sampling_slider_resamples_the_stored_logits(served):
    visit, *_ = prefill(served, sampling=SAMPLED)
    before = drawn(visit, "sampling")
    ids = list(visit.run.ids)
    after = handlers.on_sampling_change(visit, 0, True, 2.0, 5, 0.9, 0.0, 3, 8)
    assert before.to_json() != after.to_json() and meta(after) == {"view": "sampling", "step": 0}
    assert visit.run.ids == ids and len(visit.run.steps) == 1  # the model did not run


def test_decode_before_prefill_is_an_error_message():
    with pytest.raises(gr.Error, match="Run the prefill first"):
        handlers.on_decode_click(None, *GREEDY, *VIEW)
    with pytest.raises(gr.Error, match="Run the prefill first"):
        list(handlers.on_run_click(None, 3, *GREEDY, *VIEW))


@pytest.mark.parametrize("count", [0, None, 10_000])
def test_run_n_tokens_out_of_range_is_an_error_message(served, count):
    visit, *_ = prefill(served)
    with pytest.raises(gr.Error, match="between 1 and 256"):
        list(handlers.on_run_click(visit, count, *GREEDY, *VIEW))
    assert len(visit.run.steps) == 1


def test_empty_prompt_is_an_error_message(served):
    with pytest.raises(gr.Error, match="empty"):
        prefill(served, prompt="  ")


def test_absurd_sampling_is_an_error_and_the_session_survives(served):
    visit, *_ = prefill(served)
    with pytest.raises(gr.Error, match="temperature must be"):
        handlers.on_decode_click(visit, True, 0.0, 0, 1.0, 0.0, 0, 8, *VIEW)
    assert len(visit.run.steps) == 1
    visit, *_ = handlers.on_decode_click(visit, *GREEDY, *VIEW)
    assert len(visit.run.steps) == 2


@pytest.mark.parametrize("seed, max_new, message", [
    (None, 8, "Fill in every sampling field"),
    (0, None, "Fill in every sampling field"),
    (99999999999999999999, 8, "seed must be"),
])
def test_empty_or_huge_numbers_are_an_error_message(served, seed, max_new, message):
    with pytest.raises(gr.Error, match=message):
        prefill(served, sampling=(False, 1.0, 0, 1.0, 0.0, seed, max_new))


def test_the_app_refuses_prompts_past_its_limit_and_says_how_to_raise_it(model):
    served = Served.create(ModelRegistry(model), Limits(max_prompt_tokens=20))
    with pytest.raises(gr.Error, match="the limit is 20. Shorten the prompt, or start the app with "
                                       "--max-prompt-tokens N"):
        prefill(served, prompt="x" * 40)


def test_hosted_limits_refuse_other_models_long_runs_and_too_many_tokens(model):
    served = Served.create(ModelRegistry(model, allowed=HOSTED.allowed_models), HOSTED)
    for custom in ("/etc", "../../etc", "https://evil.example/x", "gpt2"):
        with pytest.raises(gr.Error, match="This hosted explorer loads only Qwen/Qwen3-0.6B"):
            prefill(served, custom=custom)
    with pytest.raises(gr.Error, match="at most 128 new tokens"):
        prefill(served, sampling=(False, 1.0, 0, 1.0, 0.0, 0, 129))
    visit, *_ = prefill(served)
    with pytest.raises(gr.Error, match="between 1 and 32"):
        list(handlers.on_run_click(visit, 33, *GREEDY, *VIEW))


def test_the_hosted_menu_offers_its_allowed_hub_model_and_loads_it_by_that_id(model, monkeypatch):
    registry = ModelRegistry(model, allowed=HOSTED.allowed_models)
    assert registry.choices()[:2] == [model.name, "Qwen/Qwen3-0.6B"]
    assert registry.choices()[2:] == [SHAPE_ONLY_PREFIX + name for name in preset_names()]
    assert ModelRegistry(model).choices()[1] == SHAPE_ONLY_PREFIX + preset_names()[0]  # locally: not listed
    asked = []
    monkeypatch.setattr(loading, "load_model", lambda name, device: asked.append((name, device)) or model)
    assert registry.get("Qwen/Qwen3-0.6B") is model and asked == [("Qwen/Qwen3-0.6B", "cpu")]


def test_a_model_not_in_the_menu_is_refused(served):
    with pytest.raises(gr.Error, match="'../../etc/passwd' is not in the model menu"):
        prefill(served, choice="../../etc/passwd")


def test_sessions_are_capped_and_a_closed_page_frees_its_session(model):
    served = Served.create(ModelRegistry(model), Limits(max_sessions=2))
    first, *_ = prefill(served, page="a")
    prefill(served, page="b")
    with pytest.raises(gr.Error, match="full: 2 sessions are in"):
        prefill(served, page="c")
    again, *_ = prefill(served, page="a")  # a page's new prefill replaces its old session
    assert first.run.steps == () and len(again.run.steps) == 1 and len(served.live) == 2
    handlers.ServedHandlers(served).on_page_close(type("Request", (), {"session_hash": "b"})())
    assert len(served.live) == 1
    third, *_ = prefill(served, page="c")
    assert len(served.live) == 2
    handlers.ServedHandlers(served).expiry_callback()(third)  # page c idle past the time to live
    assert len(served.live) == 1 and third.run.steps == ()


def test_a_shape_only_model_takes_a_token_count_and_has_no_values(served):
    choice = SHAPE_ONLY_PREFIX + "qwen3-0.6b"
    visit, status, *_ = prefill(served, prompt="", choice=choice)
    attention, sampling, roofline = (drawn(visit, view) for view in ("attention", "sampling", "roofline"))
    assert visit.run.steps[0].op("layers.0.attn.q_proj").output_shapes == [[1, 17, 2048]]
    assert "shape-only: shapes measured on the meta device, no values and no compute time" in status
    assert " ms measured" not in status
    assert "Shape-only mode" in attention.layout.annotations[0].text
    assert "Shape-only mode" in sampling.layout.annotations[0].text
    assert meta(roofline) == {"view": "roofline", "step": 0} and len(roofline.data) > 2
    with pytest.raises(gr.Error, match="at least one token"):
        prefill(served, prompt="", choice=choice, prompt_tokens=None)


def test_an_unknown_model_is_an_error_message(served):
    with pytest.raises(gr.Error, match="no-such-org/no-such-model"):
        prefill(served, custom="no-such-org/no-such-model")


@pytest.mark.parametrize("box, start", [(10, 10), (10.0, 10), (-3, 0), (None, None), (float("nan"), None),
                                        (float("inf"), None), (" 7 ", 7), ("", None)])
def test_the_zoom_box_is_a_number_and_an_older_link_s_text_still_reads(box, start):
    from explorer.ui.handlers.controls import zoom_start

    assert zoom_start(box) == start


def test_reset_forgets_the_session(served):
    visit, *_ = prefill(served)
    state, status, strip, text, steps, layer, offer, confirm, *figures = handlers.ServedHandlers(served).on_reset_click()
    assert offer == confirm == {"visible": False, "__type__": "update"}
    assert visit.run.steps == () and len(served.live) == 0  # its memory is freed
    assert state is None and status == strip == text == "" and steps["choices"] == []
    assert [meta(f) for f in figures] == [{"view": v, "step": None} for v in VIEWS]


def test_zoom_draws_a_full_resolution_window_of_the_attention(model):
    served = Served.create(ModelRegistry(model), LOCAL)
    visit, *_ = prefill(served, prompt="x" * 90)
    handlers.on_decode_click(visit, *GREEDY, *VIEW)
    n = len(visit.run.ids) - 1  # the tokens fed so far
    full = handlers.on_view_change(visit, 1, 1, False, "h100-sxm", "attention", False, "")[ATTENTION]
    zoomed = handlers.on_view_change(visit, 1, 1, False, "h100-sxm", "attention", False, " 10 ")[ATTENTION]
    last = handlers.on_view_change(visit, 1, 1, False, "h100-sxm", "attention", False, "10000")[ATTENTION]
    for text in ("ten", "1e3", "nan"):  # not a whole number: the whole matrix
        same = handlers.on_view_change(visit, 1, 1, False, "h100-sxm", "attention", False, text)[ATTENTION]
        assert same.to_json() == full.to_json()
    heatmap = next(t for t in zoomed.data if t.type == "heatmap")
    assert heatmap.z.shape == (48, 48) and next(t for t in full.data if t.type == "heatmap").z.shape[0] < n
    expected = visit.attention.probs(0, 1)[0, 10:58, 10:58]  # head 0, prefill rows and keys 10..57
    np.testing.assert_allclose(heatmap.z, np.where(np.tril(np.ones((48, 48))) > 0, expected, np.nan), atol=1e-6)
    assert zoomed.layout.shapes == () and len(last.layout.shapes) == 6  # the newest row is outlined at the end
    assert zoomed.layout.title.text.endswith(" · tokens 10-57 at full resolution")
    assert last.layout.title.text.endswith(f" · tokens {n - 48}-{n - 1} at full resolution")
    assert "a cell spans" in full.layout.title.text
    assert next(t for t in last.data if t.type == "heatmap").z.shape == (48, 48)


def test_a_prefill_shows_its_memory_estimate_then_moves_the_progress_bar_once_per_layer(served):
    calls = []
    visit, *_ = handlers.ServedHandlers(served).on_prefill_click(
        None, lambda fraction, desc: calls.append((fraction, desc)), served.registry.default_choice, "",
        "Hi there!", 17, False, "", False, False, False, *GREEDY, *VIEW)
    n_layers, n_tokens = len(visit.run.steps[0].attention), len(visit.run.steps[0].input_ids)
    estimate = visit.session.memory_estimate(n_tokens)
    about = f" ({estimate.total_bytes / 1e6:,.0f} MB estimated)"
    assert n_layers == 3 and calls == [(0.0, f"Prefill of {n_tokens} tokens: {estimate.summary()}"),
                                       (1 / 3, f"Prefill: layer 1 of 3{about}"),
                                       (2 / 3, f"Prefill: layer 2 of 3{about}"),
                                       (1.0, f"Prefill: layer 3 of 3{about}")]
    handlers.on_decode_click(visit, *GREEDY, *VIEW)
    assert len(calls) == n_layers + 1


def test_going_back_a_step_shows_the_strip_text_and_status_as_they_were_after_it(served):
    visit, *_ = prefill(served, sampling=SAMPLED)
    for _ in range(3):
        handlers.on_decode_click(visit, *SAMPLED, *VIEW)
    status, strip, text, offer, *figures = handlers.on_step_change(visit, 1, 0, False, "h100-sxm", "journey")
    first, second = visit.run.steps[1], visit.run.steps[2]
    assert status.endswith(f". An earlier step: the latest is {step_label(visit.run.steps[3])}.")
    assert f"**{step_label(first)}**: 1 token(s) in, context n = {first.context_length}," in status
    assert strip.count("tok generated shown") == 1 and f'tok generated shown" title="id {first.input_ids[0]} ' in strip
    # the tokens fed up to step 1, then the one it chose (fed at step 2) dashed: no later token
    assert strip.count('class="tok ') == first.context_length + 1
    assert f'class="tok next" title="id {second.input_ids[0]} · chosen by step 1' in strip
    assert text == visit.session.loaded.tokenizer.decode(visit.session.generated[:2], skip_special_tokens=True)
    assert offer == gr.skip()  # no question was open: the page's layout is left as it is
    assert meta(figures[JOURNEY]) == {"view": "journey", "step": 1}
    assert [f for i, f in enumerate(figures) if i != JOURNEY] == [gr.skip()] * (len(VIEWS) - 1)
    latest, strip, text, *_ = handlers.on_step_change(visit, 3, 0, False, "h100-sxm", "journey")
    assert "earlier step" not in latest and strip.count("tok generated shown") == 1 and text == visit.run.text


def test_next_token_at_an_earlier_step_asks_then_continues_from_it_or_from_the_latest(served):
    visit, *_ = prefill(served, sampling=SAMPLED)
    for _ in range(4):
        handlers.on_decode_click(visit, *SAMPLED, *VIEW)
    handlers.on_step_change(visit, 2, 0, False, "h100-sxm", "journey")
    asked = handlers.on_decode_click(visit, *SAMPLED, *VIEW)
    assert len(visit.run.steps) == 5  # nothing ran, nothing dropped
    assert "**Go on from which step?**" in asked[1] and "drops steps 3 to 4" in asked[1]
    assert asked[6] == {"visible": True, "__type__": "update"}
    assert [out for i, out in enumerate(asked) if i not in (1, 6)] == [gr.skip()] * (len(asked) - 2)
    outputs = list(handlers.on_latest_click(visit, *SAMPLED, *VIEW))
    assert len(visit.run.steps) == 6 and outputs[-1][6] == {"visible": False, "__type__": "update"}
    handlers.on_decode_click(visit, *SAMPLED, *VIEW)  # the latest shown again: Next token just runs
    assert len(visit.run.steps) == 7
    handlers.on_step_change(visit, 1, 0, False, "h100-sxm", "journey")
    handlers.on_step_change(visit, 6, 0, False, "h100-sxm", "journey")  # back to the latest: no question
    handlers.on_decode_click(visit, *SAMPLED, *VIEW)
    assert len(visit.run.steps) == 8
    handlers.on_step_change(visit, 2, 0, False, "h100-sxm", "journey")
    handlers.on_decode_click(visit, *SAMPLED, *VIEW)
    list(handlers.on_branch_click(visit, *SAMPLED, *VIEW))
    assert [t.step_index for t in visit.run.steps] == [0, 1, 2, 3]
    # the same tokens as a fresh run that stopped at step 2 and went on with the same seed
    fresh, *_ = prefill(served, sampling=SAMPLED, page="fresh")
    for _ in range(3):
        handlers.on_decode_click(fresh, *SAMPLED, *VIEW)
    assert visit.run.ids == fresh.run.ids and visit.run.text == fresh.run.text
    with pytest.raises(gr.Error, match="no step waiting"):
        list(handlers.on_branch_click(visit, *SAMPLED, *VIEW))


def test_the_end_of_generation_is_a_status_line_not_an_error(served):
    visit, *_ = prefill(served)
    list(handlers.on_run_click(visit, 20, *GREEDY, *VIEW))
    assert visit.session.finished
    outputs = handlers.on_decode_click(visit, *GREEDY, *VIEW)
    assert "Generation ended (max new tokens). Press Prefill for a new run" in outputs[1]
    assert [out for i, out in enumerate(outputs) if i != 1] == [gr.skip()] * (len(outputs) - 1)
    # from an earlier step the run goes on
    handlers.on_step_change(visit, 3, 0, False, "h100-sxm", "journey")
    handlers.on_decode_click(visit, *GREEDY, *VIEW)
    list(handlers.on_branch_click(visit, *GREEDY, *VIEW))
    assert len(visit.run.steps) == 5


def test_after_a_prefill_the_model_menu_says_which_model_the_session_runs(served):
    visit, *_ = prefill(served)
    assert handlers.model_info(visit) == gr.update(info=f"In use: {visit.run.description}")
    assert visit.run.description.startswith("tiny") and handlers.model_info(None) == gr.skip()


def test_a_shape_only_model_without_a_tokenizer_asks_for_a_prompt_length_and_hides_the_chat_controls(served):
    app = handlers.ServedHandlers(served)
    label, length, chat, system, thinking = app.on_model_select(SHAPE_ONLY_PREFIX + "qwen3-0.6b")
    assert label == gr.update(label="Prompt (not used: this shape-only model has no tokenizer; set its length below)")
    assert length == gr.update(visible=True) and chat == system == thinking == gr.update(visible=False)
    label, length, chat, system, thinking = app.on_model_select(served.registry.default_choice)
    assert label == gr.update(label="Prompt") and length == gr.update(visible=False)
    assert chat == system == thinking == gr.update(visible=True)


def test_a_what_if_redraws_the_roofline_without_running_the_model(served):
    visit, *_ = prefill(served)
    handlers.on_decode_click(visit, *GREEDY, *VIEW)
    steps = visit.run.steps
    scenario, figure = handlers.on_what_if_change(visit, 1, "h100-sxm", False, 64, 128, None, "as run", "as run",
                                                  "fp8", True, True, False)
    assert visit.run.steps == steps  # no step was run
    assert scenario == Scenario(batch=64, context=128, kv="fp8", merged=True, fused=True)
    assert figure.layout.title.text.startswith("What-if B = 64, n = 128, KV fp8, merged projections, fused attention, against")
    # a later redraw of the roofline (its tab, another step) keeps the what-if
    _, again = handlers.on_tab_select("roofline")(visit, 1, 1, False, "h100-sxm", False, "", scenario)
    assert again.layout.title.text == figure.layout.title.text
    cleared, plain = handlers.on_what_if_change(visit, 1, "h100-sxm", False, None, float("nan"), 0, "as run",
                                                "bogus", "as run", False, False, False)
    assert not cleared.active and plain.layout.title.text.startswith("Time lower bound: decode ≥ ")


@pytest.mark.parametrize("context, tokens", [(4096, None), (None, 161)])
def test_a_what_if_past_the_context_window_is_a_toast(served, context, tokens):
    """The tiny model's window is 160 positions: the CLI's refusal, as a toast; nothing is drawn."""
    visit, *_ = prefill(served)
    handlers.on_decode_click(visit, *GREEDY, *VIEW)
    step = 1 if context else 0
    with pytest.raises(gr.Error, match="positions exceed this model's context window of 160 tokens"):
        handlers.on_what_if_change(visit, step, "h100-sxm", False, None, context, tokens, "as run", "as run",
                                   "as run", False, False, False)


def test_a_tp_degree_that_does_not_divide_is_a_toast_naming_the_dimension(served):
    """The tiny model's d_ff is 37: R = 2 splits its 6 query and 2 KV heads but not d_ff, and the
    what-if's TP menu says so (as the CLI does); R = 1 on any link draws the run as it ran."""
    visit, *_ = prefill(served)
    keep = ("as run",) * 6 + (False,) * 3
    with pytest.raises(gr.Error, match=r"2 does not divide the MLP width d_ff \(37\)"):
        handlers.on_what_if_change(visit, 0, "h100-sxm", False, *keep, "2", "nvlink4")
    scenario, figure = handlers.on_what_if_change(visit, 0, "h100-sxm", False, *keep, "as run", "pcie5")
    assert not scenario.active and figure.layout.title.text.startswith("Time lower bound: prefill ≥ ")
    assert not [trace for trace in figure.data if "collectives" in trace.name]


def test_the_what_if_menus_read_as_run_and_take_typed_counts():
    """The count menus send their text: "as run" (and an empty box) is the step's own, a typed number
    its count, anything else a clear message (a toast), as is a batch past the app's cap."""
    from explorer.errors import ConfigError
    from explorer.ui.handlers.controls import AS_RUN, MAX_WHAT_IF_BATCH

    formats = (AS_RUN, AS_RUN, AS_RUN, False, False, False)
    assert handlers.scenario_from(AS_RUN, "", " as run ", *formats) == Scenario()
    assert handlers.scenario_from("64", "4,096", 512.0, *formats) == Scenario(batch=64, context=4096, tokens=512)
    for typed, message in (("sixty", "not “sixty”"), (str(MAX_WHAT_IF_BATCH + 1), f"at most {MAX_WHAT_IF_BATCH}")):
        with pytest.raises(ConfigError, match=message):
            handlers.scenario_from(typed, AS_RUN, AS_RUN, *formats)


def test_the_what_if_counts_and_the_hardware_menu_read_as_words(model):
    """Each what-if count is a menu that starts at "as run" (a number box showed 0) and takes typed
    counts; the roofline's machines by name, this machine as "This machine (measured)"."""
    from explorer.ui.layout import build_demo

    config = build_demo(model, limits=LOCAL).config
    by_id = {c["props"].get("elem_id"): c for c in config["components"]}
    for elem_id in ("what-if-batch", "what-if-context", "what-if-tokens"):
        props = by_id[elem_id]["props"]
        assert by_id[elem_id]["type"] == "dropdown" and props["value"] == "as run" and props["allow_custom_value"]
    choices = dict((value, label) for label, value in by_id["hardware-select"]["props"]["choices"])
    assert choices["this-machine"] == "This machine (measured)" and choices["h100-sxm"] == "NVIDIA H100 SXM5 80GB"


def test_the_legend_gives_each_symbol_this_models_value_at_the_step_shown(served):
    visit, status, strip, *_ = prefill(served)
    config = visit.session.loaded.model.config
    T = len(visit.run.steps[0].input_ids)
    expected = {"B": 1, "T": T, "n": T, "d": config.hidden_size, "h_q": config.num_attention_heads,
                "h_kv": config.num_key_value_heads, "d_h": config.head_dim, "d_ff": config.intermediate_size,
                "V": config.vocab_size}
    for name, value in expected.items():
        assert f">{name}</b> = {value:,}" in strip, name
    assert f"<b>L</b> = {config.num_hidden_layers} layers" in strip
    _, strip, *_ = handlers.on_decode_click(visit, *GREEDY, *VIEW)[1:]
    assert ">T</b> = 1 " in strip and f">n</b> = {T + 1} " in strip


def test_a_batch_of_prompts_one_per_line_runs_together_and_every_view_draws_sequence_0(served):
    """The first prompt is the shortest: the views show its left padding (the attention view its padded
    keys at probability 0), the KV view the cache of all three sequences."""
    prompts = ["Hi", "What is 2+2?", "A longer third prompt"]
    visit, status, strip, *_ = handlers.ServedHandlers(served).on_prefill_click(
        None, None, served.registry.default_choice, "", "\n".join(prompts), 17, False, "", False, True, True, *GREEDY,
        *VIEW)
    assert ">B</b> = 3" in strip  # the legend under the token strip
    rows = visit.session.batch_rows
    assert [row[:len(p)] for row, p in zip(rows, prompts, strict=True)] == [
        visit.session.loaded.tokenizer(p)["input_ids"] for p in prompts]
    prefill_trace = visit.run.steps[0]
    T = len(prompts[2])
    assert prefill_trace.op("tokenize").output_shapes == [[3, T]]
    assert prefill_trace.op("lm_head").output_shapes == [[3, T, 101]]  # the LM head over every position
    assert prefill_trace.kv[0].key_shape[0] == 3
    probs = visit.attention.probs(0, 1)
    assert not probs[:, -1, :T - len(prompts[0])].any()
    assert [meta(drawn(visit, view)) for view in VIEWS] == [{"view": v, "step": 0} for v in VIEWS]
    visit, status, _, text, *_ = handlers.on_decode_click(visit, *GREEDY, *VIEW)
    assert visit.run.steps[1].kv[0].key_shape[:3] == [3, 2, T + 1]
    assert "A batch of 3 prompts: the views show sequence 0" in status
    assert text == "\n".join(f"[{b}] {text}" for b, text in enumerate(visit.session.batch_texts))
    assert handlers.on_step_change(visit, 0, *VIEW)[2] == "\n".join(f"[{b}] {text}" for b, text in
                                                                      enumerate(visit.run.steps[0].batch_texts))
