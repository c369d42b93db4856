"""The app's handlers on a tiny model: views from real steps, errors as toasts, nothing lost."""

from __future__ import annotations

import gradio as gr
import pytest

from explorer.runner.loading import load_shape_only
from explorer.ui.handlers import on_decode_click, on_prefill_click
from tiny_models import tiny_model

GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)  # do_sample, temperature, top-k, top-p, min-p, seed, max new tokens


@pytest.fixture(scope="module")
def loaded():
    return tiny_model("llama")


def test_prefill_then_decode_show_the_steps(loaded):
    session, status, text, rows, kv = on_prefill_click(loaded, "Hi!", 17, True, *GREEDY)
    T = len(session.traces[0].input_ids)
    assert status.startswith(f"**prefill**: {T} token(s) in, context n = {T}")
    assert rows[0][:3] == ["tokenize", "tokenize", f"text -> [1, {T}]"]
    assert rows[-1][0] == "detokenize" and rows[-1][4] == "-"
    assert kv.splitlines()[-1] == f"- after prefill: K [1, 2, {T}, 10], {T * 2 * 10 * 4:,} bytes"
    same, status, text, rows, kv = on_decode_click(session, *GREEDY)
    assert same is session and len(session.traces) == 2
    assert status.startswith(f"**step 1**: 1 token(s) in, context n = {T + 1}")
    q_proj = next(row for row in rows if row[0] == "layers.0.attn.q_proj")
    assert q_proj[2] == f"[1, {T}, 48] -> [1, {T}, 60]" and q_proj[4] == "[1, 1, 48] -> [1, 1, 60]"
    assert kv.splitlines()[-1] == f"- after step 1: K [1, 2, {T + 1}, 10], {(T + 1) * 80:,} bytes"
    assert text == session.text


def _unchanged(outputs) -> bool:
    return len(outputs) == 5 and all(output == gr.skip() for output in outputs)


def test_decode_before_prefill_is_a_toast():
    with pytest.warns(UserWarning, match="prefill first"):
        assert _unchanged(on_decode_click(None, *GREEDY))


def test_empty_prompt_is_a_toast(loaded):
    with pytest.warns(UserWarning, match="empty"):
        assert _unchanged(on_prefill_click(loaded, "  ", 17, True, *GREEDY))


def test_absurd_sampling_is_a_toast_and_the_session_survives(loaded):
    session, *_ = on_prefill_click(loaded, "Hi!", 17, True, *GREEDY)
    with pytest.warns(UserWarning, match="temperature must be"):
        assert _unchanged(on_decode_click(session, True, 0.0, 0, 1.0, 0.0, 0, 8))
    assert len(session.traces) == 1
    session, *_ = on_decode_click(session, *GREEDY)
    assert len(session.traces) == 2


@pytest.mark.parametrize("seed, max_new, message", [
    (None, 8, "Fill in every sampling field"),
    (0, None, "Fill in every sampling field"),
    (99999999999999999999, 8, "seed must be"),
])
def test_empty_or_huge_numbers_are_a_toast(loaded, seed, max_new, message):
    with pytest.warns(UserWarning, match=message):
        assert _unchanged(on_prefill_click(loaded, "Hi!", 17, True, False, 1.0, 0, 1.0, 0.0, seed, max_new))


def test_the_app_refuses_prompts_past_its_limit(loaded, monkeypatch):
    monkeypatch.setattr("explorer.ui.handlers.APP_MAX_PROMPT_TOKENS", 20)
    with pytest.warns(UserWarning, match="the limit is 20"):
        assert _unchanged(on_prefill_click(loaded, "x" * 40, 17, False, *GREEDY))


def test_shape_only_model_takes_a_token_count():
    session, status, *_ = on_prefill_click(load_shape_only("qwen3-0.6b"), "", 17, True, *GREEDY)
    assert session.traces[0].op("layers.0.attn.q_proj").output_shapes == [[1, 17, 2048]]
    assert "context n = 17" in status and "shape-only mode has shapes but no values" in status
    with pytest.warns(UserWarning, match="at least one token"):
        assert _unchanged(on_prefill_click(load_shape_only("qwen3-0.6b"), "", None, True, *GREEDY))
