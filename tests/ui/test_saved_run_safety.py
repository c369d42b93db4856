"""Saved runs are shared files, so a run file is untrusted input. Each hostile file here is a real run of
the tiny Llama (written by `save_run`) changed only where it attacks: it is refused with one clear message
naming the field before anything is drawn or becomes the page's session, and the text of a run that does
load shows as plain text in the token strip (HTML), the status line (Markdown) and the figures (Plotly)."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser

import gradio as gr
import pytest

from explorer import run_schema
from explorer.analysis.records import OpCost
from explorer.config import SamplingSettings
from explorer.errors import ConfigError
from explorer.figures.roofline_traces import measured_trace
from explorer.figures.views import VIEWS, ViewOptions
from explorer.runner.session import InferenceSession
from explorer.saved import load_run, save_run
from explorer.ui import handlers
from explorer.ui.handlers import outputs as outputs_module
from explorer.ui.hosting import LOCAL
from explorer.ui.status import status_text
from explorer.ui.tokens import token_strip_html
from explorer.ui.views import Visit, render

SETTINGS = SamplingSettings(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, seed=3)
SAMPLED = (True, 0.8, 20, 0.9, 0.05, 3, 16)  # the same, as the seven sampling controls
PROMPT = "Hello there"  # 11 tokens: the tiny model's tokenizer has one per character
ADVICE = " Load the file as the explorer exported it (Export run), or export the run again."
SCRIPT_ID = '"><img src=x onerror=alert(1)>'  # closes the chip's title attribute, then runs a script
# Text that renders as an outside image, a link, bold or a tag wherever it is not escaped.
HTML_TEXT = ('<img src="http://example.com/pixel.png" onerror=alert(1)> ![pixel](http://example.com/p.png) '
             '[a link](http://example.com) **bold** <a href="http://example.com">x</a> $$x$$')
PLOTLY_LINK = '<a href="http://example.com">q</a><span style="fill:url(http://example.com/x)">s</span>'


def damaged(problem: str) -> str:
    return f"The saved run is incomplete or damaged: {problem}.{ADVICE}"


@pytest.fixture(scope="module")
def run_file(model, tmp_path_factory) -> dict:
    """A real run, parsed: the prefill of `PROMPT` and two sampled decode steps, as `save_run` wrote it."""
    session = InferenceSession(model, SETTINGS)
    session.prefill(PROMPT, use_chat_template=False)
    for _ in range(2):
        session.decode_step()
    path = save_run(session.run, session.attention, tmp_path_factory.mktemp("runs") / "run.json")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def run(run_file) -> dict:
    """A copy of the real run to tamper with."""
    return copy.deepcopy(run_file)


def write(tmp_path, data) -> str:
    """`data` (a run dict, or the file's text) written to a file; returns its path."""
    path = tmp_path / "run.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def load_error(tmp_path, data) -> str:
    with pytest.raises(ConfigError) as caught:
        load_run(write(tmp_path, data))
    return str(caught.value)


def put(data, path: list, value) -> None:
    """Set the field at `path` (keys and indices) of `data` to `value`."""
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


class Tags(HTMLParser):
    """The tags and attributes of an HTML text, as a browser's parser finds them."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def strings(value) -> list[str]:
    """Every string in a figure's JSON-ready dict."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in strings(item)]
    return []


def test_the_real_run_loads_and_every_view_draws(run, tmp_path):
    visit = Visit.replay(*load_run(write(tmp_path, run)), LOCAL)
    for step in range(3):
        for view in VIEWS:
            assert render(visit, ViewOptions(step, 0, False, "h100-sxm"), view).layout.meta == {"view": view,
                                                                                               "step": step}


@pytest.mark.parametrize("path, value, problem", [
    # finding 1: the token id written into the strip's HTML unescaped
    (["traces", 0, "input_ids", 0], SCRIPT_ID, "traces[0].input_ids[0] must be a token id, not text"),
    (["traces", 0, "input_ids", 0], 3.5, "traces[0].input_ids[0] must be a token id, not 3.5"),
    (["traces", 0, "input_ids", 0], True, "traces[0].input_ids[0] must be a token id, not true"),
    (["traces", 1, "input_ids", 0], 101, "traces[1].input_ids[0] must be a token id in [0, 100], not 101"),
    (["ids", 0], -1, "ids[0] must be a token id in [0, 100], not -1"),
    (["traces", 0, "input_pieces", 0], 7, "traces[0].input_pieces[0] must be text, not 7"),
    (["pieces", "999"], "x", "pieces must be keyed by token ids below 101"),
    # numbers that crashed a view: too large, a zero divisor, a string in arithmetic
    (["traces", 0, "context_length"], 10**30,
     "traces[0].context_length must be a whole number of fewer than 19 digits"),
    (["traces", 0, "kv", 0, "key_shape", 1], 0,
     "traces[0].kv[0].key_shape[1] must be the layer's KV heads, at least 1 and the same at every step, not 0"),
    (["config", "num_attention_heads"], 0,
     "config.num_attention_heads must be a whole number in [1, 2147483647], not 0"),
    (["config", "num_hidden_layers"], 2**40,
     "config must be the config of the model that ran (6 query heads, 3 layers)"),
    (["config", "hidden_size"], 49,
     "config must be the config of the model that ran (its hidden size: 49, the steps' 48)"),
    (["config", "num_key_value_heads"], "2",
     "config cannot be read as a model's config (TypeError: unsupported operand type(s) for %: 'int' and 'str')"),
    (["traces", 1, "sampling", "token_prob"], 1.5, "traces[1].sampling.token_prob must be a number in [0, 1], not 1.5"),
    (["traces", 1, "wall_ms"], "12", "traces[1].wall_ms must be a number in [0, inf], not text"),
    # shapes inconsistent with the step, the config or the step before
    (["traces", 0, "attention", 1, "shape"], [6, 11, 10], "traces[0].attention[1].shape must be [h_q, q_len, kv_len]: "
     "h_q 6, a multiple of the layer's 2 KV heads, then [11, 11], not a list of 3"),
    (["traces", 1, "attention", 0, "shape"], [4, 1, 12], "traces[1].attention[0].shape must be [h_q, q_len, kv_len]: "
     "h_q 6, a multiple of the layer's 2 KV heads, then [1, at most 12], not a list of 3"),
    (["traces", 2, "kv", 0, "key_shape", 2], 11,
     "traces[2].kv[0].key_shape[2] must be a KV length of at most 13 that never shrinks, not 11"),
    (["traces", 1, "kv", 2, "key_shape"], [1, 2, 12], "traces[1].kv[2].key_shape must be a shape of 4 dimensions, "
     "not a list of 3"),
    (["traces", 1, "context_length"], 20, "traces[1].context_length must be 12 (the tokens fed so far), not 20"),
    (["traces", 1, "input_ids"], [5, 6], "traces[1].input_ids must be one id (a decode step feeds one token), "
     "not a list of 2"),
    (["traces", 0, "input_pieces"], ["H"],
     "traces[0].input_pieces must be one piece per input id (11), not a list of 1"),
    (["traces", 1, "logits"], [0.5] * 100, "traces[1].logits must be a list of shape [101], not a list of 100"),
    (["traces", 0, "attention", 0, "probs", 0, 3], [0.5], "traces[0].attention[0].probs[0][3] must be a list of "
     "shape [11], not a list of 1"),
    (["traces", 0, "attention", 0, "probs", 0, 3, 0], "0.5", "traces[0].attention[0].probs[0][3] must be numbers"),
    # fields a view reads by name or looks up
    (["traces", 1, "stage"], "<b>decode</b>", 'traces[1].stage must be "decode" (step 1 of the run), not text'),
    (["traces", 1, "step_index"], 5, "traces[1].step_index must be 1 (its place in the list), not 5"),
    (["traces", 0, "ops", 1, "kind"], "<script>", "traces[0].ops[1].kind must be an operator kind (batched_gemm, "
     "broadcast, cache_write, detokenize, elementwise, experts, gather, gemm, norm, reshape, rope, sample, softmax, "
     "tokenize), not text"),
    (["traces", 0, "ops", 3, "dtype"], "float99", "traces[0].ops[3].dtype must be a dtype the cost model knows "
     "(float32, bfloat16, float16, ...), not text"),
    (["traces", 0, "ops"], {}, "traces[0].ops must be a list, not an object"),
    (["traces", 1, "sampling", "stages", 1, "name"], "top_q", 'traces[1].sampling.stages must be the stage "raw", then '
     "those of temperature, top_k, top_p, min_p that were used, in that order"),
    (["traces", 1, "sampling", "settings", "temperature"], 0, "traces[1].sampling.settings: temperature must be in "
     "[0.01, 100]; for greedy decoding (temperature 0) turn sampling off"),
    (["traces", 1, "sampling", "settings", "do_sample"], 1, "traces[1].sampling.settings.do_sample must be true or "
     "false, not 1"),
    (["traces", 0, "device"], "weird", "traces[0].device must be a device such as cpu, cuda:0, mps or meta, not text"),
    (["traces", 2, "finish_reason"], "<img>", "traces[2].finish_reason must be one of '', 'context_full', 'eos', "
     "'max_new_tokens', not text"),
    (["traces"], [], "traces must be a list of the run's steps, the prefill first, not a list of 0"),
    # the logit lens: its columns against the step, its statistics against the vocabulary and the layers
    (["traces", 0, "lens", "positions"], [1, 2], "traces[0].lens.positions must be the step's last positions, "
     "in order, up to 10"),
    (["traces", 1, "lens", "next_ids", 0], 7, "traces[1].lens.next_ids must be the id that follows each position "
     "(the last: the token chosen)"),
    (["traces", 1, "lens", "top_ids", 0, 0, 0], 101, "traces[1].lens.top_ids must be token ids in [0, 100], not 101"),
    (["traces", 1, "lens", "top_probs", 2, 0, 0], 1.5, "traces[1].lens.top_probs must be numbers in [0, 1]"),
    (["traces", 1, "lens", "entropy_bits"], [[0.5]] * 3, "traces[1].lens.entropy_bits must be a list of shape "
     "[4, 1], not a list of 3"),
    (["traces", 1, "lens", "compute_ms"], -1, "traces[1].lens.compute_ms must be a number in [0, inf], not -1"),
    # text that cannot be sent to the page (it then waited for ever, the session already replaced)
    (["description"], "\ud800", "description must be valid Unicode text (it holds a lone surrogate, \\ud800-\\udfff)"),
    (["description"], "x" * 1001, "description must be text of at most 1,000 characters"),
    (["prompt", "enable_thinking"], "yes", "prompt.enable_thinking must be true or false, not text"),
    (["prompt", "evil"], 1, "prompt must be an object of text, use_chat_template, system_prompt, prompt_tokens, "
     "enable_thinking (the last optional)"),
])
def test_a_hostile_field_is_refused_with_a_message_naming_it(run, tmp_path, path, value, problem):
    put(run, path, value)
    assert load_error(tmp_path, run) == damaged(problem)


def test_a_run_saved_before_the_thinking_switch_loads_with_it_off(run, tmp_path):
    assert run["prompt"]["enable_thinking"] is False  # written by this version
    del run["prompt"]["enable_thinking"]
    loaded, _ = load_run(write(tmp_path, run))
    assert loaded.prompt.enable_thinking is False and loaded.prompt.text == PROMPT


def test_missing_and_extra_fields_are_named(run, tmp_path):
    del run["traces"][1]["sampling"]
    assert load_error(tmp_path, run) == damaged("traces[1] lacks sampling").replace(" must be", "")
    run = json.loads(json.dumps(run))
    run["traces"][1]["sampling"] = None
    run["traces"][0]["ops"][0]["evil"] = 1
    assert load_error(tmp_path, run) == damaged("traces[0].ops[0] must be an object of exactly name, kind, layer, "
                                                "input_shapes, output_shapes, dtype, wall_ms")


def test_a_run_saved_before_the_lens_loads_without_it(run, tmp_path):
    for trace in run["traces"]:
        del trace["lens"]
    loaded, _ = load_run(write(tmp_path, run))
    assert all(loaded.lens(index) is None for index in range(len(loaded.steps)))


def test_a_drawn_token_the_last_stage_filtered_out_is_refused(run, tmp_path):
    sampling = run["traces"][1]["sampling"]
    sampling["token_id"] = sampling["stages"][-1]["logits"].index(None)
    assert load_error(tmp_path, run) == damaged("traces[1].sampling.token_id must be a token the last stage kept")


@pytest.mark.parametrize("make_text, message", [
    (lambda text: text.replace('"context_length": 11', '"context_length": NaN'),
     damaged("it holds NaN, which strict JSON (what the explorer writes) has not")),
    (lambda text: text.replace('"wall_ms": ', '"wall_ms": -Infinity, "x": ', 1),
     damaged("it holds -Infinity, which strict JSON (what the explorer writes) has not")),
    (lambda text: text.replace('"logits": [', '"logits": [1e999, ', 1),
     damaged("traces[0].logits must be finite numbers")),
    (lambda text: text.replace('"context_length": 11', '"context_length": ' + "9" * 100_000),
     damaged("it holds a whole number of over 4,300 digits")),
    (lambda text: text.replace('"config": {', '"config": {"deep": ' + "[" * 100_000 + "]" * 100_000 + ", ", 1),
     damaged("its lists and objects are nested far deeper than a run's")),
    (lambda text: text.replace('"config": {', '"config": {"deep": ' + "[" * 20 + "]" * 20 + ", ", 1),
     damaged("config.deep" + "[0]" * 15 + " must be nested at most 16 lists or objects deep")),
    (lambda text: "not json " + text, "Cannot read the saved run: it is not JSON (Expecting value: line 1 column 1 "
                                      f"(char 0)).{ADVICE}"),
])
def test_a_file_that_cannot_be_parsed_as_a_run_is_one_clear_message(run, tmp_path, make_text, message):
    assert load_error(tmp_path, make_text(json.dumps(run))) == message


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(run_schema, "MAX_RUN_BYTES", 2**20)
    message = load_error(tmp_path, "x" * (2 * 2**20))  # not JSON: parsed, it would say so
    assert message == ("The file is 2 MiB; a saved run may be at most 1 MiB. Export a shorter run, or load "
                       "another file.")


def test_the_import_toast_names_the_field_and_forms_no_tag(served, run, tmp_path):
    run["config"]["<img src=x onerror=alert(1)>"] = float("inf")  # a key from the file in the message
    path = write(tmp_path, json.dumps(run).replace("Infinity", "1e999"))
    with pytest.raises(gr.Error) as caught:
        handlers.ServedHandlers(served).on_import_upload(None, path, 0, False, "h100-sxm", "journey")
    assert caught.value.message == damaged("config.&lt;img src=x onerror=alert(1)> must be a finite number, not inf")
    assert not Tags(caught.value.message).tags


def live_session(served, page="page"):
    visit, *_ = handlers.ServedHandlers(served).on_prefill_click(
        FakeRequest(page), None, served.registry.default_choice, "", "Live prompt", 17, False, "", False, False, False, *SAMPLED,
        0, False, "h100-sxm", "journey")
    return visit


class FakeRequest:
    def __init__(self, session_hash: str) -> None:
        self.session_hash = session_hash


def assert_still_live(served, visit) -> None:
    """The page's session is still `visit`, open: its prefill kept and a decode step runs."""
    assert len(served.live) == 1 and len(visit.run.steps) == 1
    handlers.on_decode_click(visit, *SAMPLED, 0, False, "h100-sxm", "journey")
    assert len(visit.run.steps) == 2


def test_a_run_refused_by_the_schema_leaves_the_pages_session(served, run, tmp_path):
    live = live_session(served)
    put(run, ["traces", 0, "input_ids", 0], SCRIPT_ID)
    with pytest.raises(gr.Error, match=r"traces\[0\]\.input_ids\[0\] must be a token id"):
        handlers.ServedHandlers(served).on_import_upload(FakeRequest("page"), write(tmp_path, run), 0, False,
                                                         "h100-sxm", "journey")
    assert_still_live(served, live)


def test_a_run_that_fails_to_draw_leaves_the_pages_session(served, run, tmp_path, monkeypatch):
    # finding 7: the saved run was admitted (the live session closed) before its figure was drawn
    live = live_session(served)
    real_render = outputs_module.render

    def render_failing_on_kv(visit, options, view, preview=None):
        if view == "kv_cache":
            raise ValueError("a view the schema did not foresee")
        return real_render(visit, options, view, preview)

    monkeypatch.setattr(outputs_module, "render", render_failing_on_kv)
    with pytest.raises(gr.Error) as caught:
        handlers.ServedHandlers(served).on_import_upload(FakeRequest("page"), write(tmp_path, run), 0, False,
                                                         "h100-sxm", "kv_cache")
    assert_still_live(served, live)
    assert caught.value.message == damaged("its kv_cache view cannot be drawn (ValueError: a view the schema did not "
                                           "foresee)").replace(ADVICE, " Load the file as the explorer exported it, "
                                                                       "or export the run again.")


def test_an_imported_run_draws_every_view_then_replaces_the_pages_session(served, run, tmp_path):
    live = live_session(served)
    outputs = handlers.ServedHandlers(served).on_import_upload(FakeRequest("page"), write(tmp_path, run), 0, False,
                                                               "h100-sxm", "journey")
    assert [figure.layout.meta for figure in outputs[handlers.STEP_OUTPUTS - len(VIEWS):handlers.STEP_OUTPUTS]] == [{"view": v, "step": 2} for v in VIEWS]
    assert len(served.live) == 1 and live.run.steps == ()  # the live session was replaced, and freed


def test_attention_the_run_gave_up_is_said_in_the_view_not_refused(served, run, tmp_path):
    for record in run["traces"][0]["attention"]:
        record["probs"] = None  # what a long session saves for attention beyond its budget
    outputs = handlers.ServedHandlers(served).on_import_upload(None, write(tmp_path, run), 0, False, "h100-sxm",
                                                               "attention")
    attention = outputs[handlers.STEP_OUTPUTS - len(VIEWS) + VIEWS.index("attention")]
    assert "holds no attention for layer 0 at step 0" in attention.layout.annotations[0].text


def test_a_run_saved_on_a_gpu_draws_its_roofline_here(served, run, tmp_path):
    for trace in run["traces"]:
        trace["device"] = "cuda:0"  # asking this machine for that GPU's name failed without CUDA
    outputs = handlers.ServedHandlers(served).on_import_upload(None, write(tmp_path, run), 0, False, "this-machine",
                                                               "roofline")
    roofline = outputs[handlers.STEP_OUTPUTS - len(VIEWS) + VIEWS.index("roofline")]
    assert roofline.layout.meta == {"view": "roofline", "step": 2}
    assert not [t for t in roofline.data if t.name.endswith("measured")]  # measured on another machine


def test_the_token_strip_escapes_ids_and_pieces(run, tmp_path):
    # finding 1: the id was written into the chip's title attribute and text unescaped
    visit = Visit.replay(*load_run(write(tmp_path, run)), LOCAL)
    trace = visit.run.steps[0]
    trace.input_ids[0], trace.input_pieces[1] = SCRIPT_ID, HTML_TEXT  # past the schema: the HTML alone is safe
    strip = token_strip_html(visit.run.steps, 0, "<b>next</b>")
    tags = Tags(strip).tags
    assert {tag for tag, _ in tags} == {"div", "span", "sub"}
    assert all(set(attrs) <= {"class", "title"} for _, attrs in tags)
    assert f"id {SCRIPT_ID} · prompt token" in [attrs.get("title", "").split(", fed")[0] for _, attrs in tags]


def rendered_markdown(text: str) -> tuple[list[str], str]:
    """The tags and the text of `text` rendered as CommonMark with tables and strikethrough (markdown-it,
    the parser family of Gradio's renderer)."""
    markdown_it = pytest.importorskip("markdown_it")
    page = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)

    class Text(Tags):
        def __init__(self, html: str) -> None:
            self.text = ""
            super().__init__(html)

        def handle_data(self, data):
            self.text += data

    parsed = Text(page)
    return [tag for tag, _ in parsed.tags], parsed.text


def test_the_status_line_shows_imported_text_as_plain_text(run, tmp_path):
    # finding 8: the description rendered as Markdown (an outside image fetched, links) and HTML
    run["description"] = HTML_TEXT
    run["traces"][2]["token_text"] = "<img src=x onerror=alert(1)> *x*"
    visit = Visit.replay(*load_run(write(tmp_path, run)), LOCAL)
    tags, text = rendered_markdown(status_text(visit, 2))
    assert tags == ["p", "p", "strong"]  # the two lines, and the step's label in bold
    name = HTML_TEXT.split(": ")[0]
    assert f"a saved run, shown without the model: {name} on {visit.run.steps[2].device}\n" in text
    assert "next token '<img src=x onerror=alert(1)> *x*' (p = " in text


def gradio_info_html(text: str) -> str:
    """`text` as Gradio 6 renders a component's `info` line (its front end's own rules, copied: HTML
    escaped, then `code`, [text](address) links, **bold**, __bold__, *em*, _em_; no backslash escapes)."""
    html = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
    html = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', html)
    html = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html)
    html = re.sub(r"__(.+?)__", r"<strong>\1</strong>", html)
    html = re.sub(r"\*(.+?)\*", r"<em>\1</em>", html)
    return re.sub(r"(?<!\w)_(.+?)_(?!\w)", r"<em>\1</em>", html)


@pytest.mark.parametrize("description", [HTML_TEXT, "a `b` _c_ x__y__z *d* [e](f)"])
def test_the_model_menus_line_shows_the_description_as_plain_text(run, tmp_path, description):
    """No mark of the `info` Markdown forms a tag (link, bold, code, emphasis); HTML stays text."""
    run["description"] = description
    visit = Visit.replay(*load_run(write(tmp_path, run)), LOCAL)
    assert "<" not in gradio_info_html(handlers.model_info(visit)["info"])


def test_the_model_menus_line_shows_a_hub_id_without_backslashes(run, tmp_path):
    """Markdown's backslash escapes showed as written: "Qwen\\/Qwen3\\-0\\.6B"."""
    run["description"] = "Qwen/Qwen3-0.6B: qwen3, 28 layers"
    visit = Visit.replay(*load_run(write(tmp_path, run)), LOCAL)
    assert gradio_info_html(handlers.model_info(visit)["info"]) == "In use: Qwen/Qwen3-0.6B: qwen3, 28 layers"


def hostile_labels(run: dict) -> dict:
    """`run` with a link and a styled span in a stop's name and in the pieces the views draw."""
    for trace in run["traces"]:
        for op in trace["ops"]:
            if op["name"] == "layers.0.attn.q_proj":
                op["name"] = f"layers.0.{PLOTLY_LINK}"
    run["traces"][0]["input_pieces"][0] = PLOTLY_LINK
    run["pieces"] = {key: PLOTLY_LINK for key in run["pieces"]}
    return run


@pytest.mark.parametrize("view", VIEWS)
def test_figure_labels_show_imported_text_as_plain_text(run, tmp_path, view):
    # finding 8: Plotly turned imported op names and pieces into links (and a style that fetches)
    visit = Visit.replay(*load_run(write(tmp_path, hostile_labels(run))), LOCAL)
    labels = strings(render(visit, ViewOptions(2, 0, False, "h100-sxm"), view).to_plotly_json())
    # the views' own markup colours text (a dimension symbol, a step's shapes): only that span is allowed
    own = re.compile(r'<span style="color:#[0-9a-f]{6}">')
    assert not [label for label in labels if "<a" in label or "<span" in own.sub("", label)]
    if view in ("forward", "journey", "attention", "sampling"):  # the views that name stops or pieces: escaped, not dropped
        assert any("&lt;a" in label for label in labels)


def test_the_sampling_preview_title_escapes_the_drawn_piece(run, tmp_path):
    visit = Visit.replay(*load_run(write(tmp_path, hostile_labels(run))), LOCAL)
    figure = render(visit, ViewOptions(2, 0, False, "h100-sxm"), "sampling", preview=SamplingSettings())
    assert "preview: the step drew '&lt;a href=" in figure.layout.title.text and "<a" not in figure.layout.title.text


def test_the_measured_points_hover_escapes_the_device():
    cost = OpCost(name="attn.q_proj", kind="gemm", layer=None, flops=2.0e6, weight_bytes=1.0e6)
    hover = measured_trace("decode", [(cost, 1e-3)], 1e12, "TFLOP/s", PLOTLY_LINK)["hovertext"][0]
    assert "measured on &lt;a href=" in hover and "<a" not in hover
