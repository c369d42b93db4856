"""`python -m explorer trace`: the journey table, the K cache per step, tokens, JSON, clear errors, wall
times as medians over the layers with their spread, none in shape-only mode."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from explorer.cli import main
from explorer.trace import StepTrace


def test_another_layer_can_be_printed(capsys):
    assert main(["trace", "--config", "qwen3-0.6b", "--prompt-tokens", "5", "--steps", "1", "--layer", "27"]) == 0
    out = capsys.readouterr().out
    assert "layers.27.attn.k_norm" in out and "layers.0." not in out
    assert "layer 27 K cache:" in out and "after step 1    [1, 8, 6, 128]" in out


def test_shape_only_trace_prints_the_journey_of_layer_0(capsys):
    assert main(["trace", "--config", "qwen3-0.6b", "--prompt-tokens", "17", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "shape-only qwen3, 28 layers" in out
    q_proj = next(line for line in out.splitlines() if line.startswith("layers.0.attn.q_proj"))
    assert "[1, 17, 1024] -> [1, 17, 2048]" in q_proj and "[1, 1, 1024] -> [1, 1, 2048]" in q_proj
    assert "layers.1." not in out
    assert "after prefill   [1, 8, 17, 128]" in out
    assert "after step 1    [1, 8, 18, 128]" in out


def test_a_shape_only_trace_prints_no_time_per_stop(capsys):
    """On the meta device nothing is computed: no ms column, no number that could pass for a time."""
    assert main(["trace", "--config", "qwen3-4b", "--prompt-tokens", "5", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "prefill: 5 tokens, shape-only: no compute, no times" in out
    assert "shape-only (meta device): no compute ran, so no wall times" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("stop "))
    assert header.split() == ["stop", "kind", "prefill:", "in", "->", "out", "decode:", "in", "->", "out"]
    rows = lines[lines.index(header) + 1: lines.index(header) + 29]
    assert rows[0].startswith("tokenize") and rows[-1].startswith("detokenize")
    assert not [row for row in rows if re.search(r"\d\.\d|\bms\b|noise|view", row)]  # shapes are whole numbers
    assert not re.search(r"\d ms\b", out)


def ms(value: float) -> str:
    """A time as the table prints it: no decimal from 100 ms, two down to 0.01 ms, four below."""
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}" if value >= 0.01 else f"{value:.4f}"


@pytest.mark.real_model
def test_embedded_trace_prints_the_median_and_spread_over_the_layers(embedded_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("explorer.runner.loading.load", lambda **kwargs: embedded_model)
    path = tmp_path / "trace.json"
    assert main(["trace", "What is the capital of France?", "--steps", "1", "--layer", "4", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    prefill, decode = (StepTrace.from_dict(step) for step in json.loads(path.read_text()))
    # a row's cells: stop, kind, prefill shapes, prefill ms, decode shapes, decode ms (2+ spaces apart)
    cells = {line.split()[0]: re.split(r" {2,}", line) for line in out.splitlines()
             if line.startswith(("layers.4.", "lm_head", "sample"))}
    for stop in ("attn.q_proj", "attn.softmax", "mlp.down_proj", "attn.gqa_expand"):
        expected = []
        for trace in (prefill, decode):
            walls = np.array([trace.op(f"layers.{i}.{stop}").wall_ms for i in range(30)])
            median, p10, p90 = np.median(walls), np.percentile(walls, 10), np.percentile(walls, 90)
            expected.append("<0.01 noise" if median < 0.01 else f"{ms(median)} [{ms(p10)}-{ms(p90)}]")
        assert cells[f"layers.4.{stop}"][3::2] == expected
    for stop in ("lm_head", "sample"):  # outside the layers: one measurement, no spread
        assert cells[stop][3::2] == [ms(trace.op(stop).wall_ms) for trace in (prefill, decode)]
    assert "median [p10-p90] over the 30 layers" in out and "Outside the layers: one measurement" in out
    assert f"prefill: {len(prefill.input_ids)} tokens in {prefill.wall_ms:.1f} ms (measured, one run)" in out


@pytest.mark.real_model
def test_embedded_trace_writes_every_step_as_json(embedded_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("explorer.runner.loading.load", lambda **kwargs: embedded_model)
    path = tmp_path / "trace.json"
    assert main(["trace", "What is the capital of France?", "--steps", "3", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Q4_1 GGUF build de-quantised to float32" in out
    steps = json.loads(path.read_text())
    traces = [StepTrace.from_dict(step) for step in steps]
    for step in steps:  # every attention matrix, at its shape, rows summing to 1
        for record in step["attention"]:
            probs = np.asarray(record["probs"], np.float32)
            assert list(probs.shape) == record["shape"]
            np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert [t.stage for t in traces] == ["prefill", "decode", "decode", "decode"]
    assert [t.kv[0].key_shape[2] for t in traces] == [traces[0].context_length + k for k in range(4)]
    for trace in traces:
        assert f"p={trace.sampling.token_prob:.3f}" in out
    text = "".join(t.token_text for t in traces)  # 4 greedy tokens: no special token among them
    assert f"generated text: {text!r} [ended: max new tokens]" in out


@pytest.mark.parametrize("argv, message", [
    (["trace", "hi", "--config", "no-such-model"], "neither a preset nor a config.json"),
    (["trace", "--config", "qwen3-0.6b", "--prompt-tokens", "0"], "at least one token"),
    (["trace", "hi", "--config", "qwen3-0.6b", "--top-p", "0"], "top-p must be in (0, 1]"),
    (["trace", "hi", "--sample", "--seed", "99999999999999999999"], "seed must be"),
    (["trace", "  "], "prompt is empty"),
    (["trace", "--config", "qwen3-0.6b", "--prompt-tokens", "3", "--layer", "28"], "--layer must be in 0..27"),
    (["trace", "hi", "--json", "/no/such/folder/trace.json"], "Cannot write the trace"),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, layers", [(["hi"], 30), (["--config", "qwen3-0.6b", "--prompt-tokens", "3"], 28)])
def test_a_layer_the_model_lacks_is_refused_from_its_config_before_any_model_work(argv, layers, monkeypatch, capsys):
    import explorer.runner.loading as loading

    def no_load(**kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(loading, "load", no_load)
    assert main(["trace", *argv, "--layer", "99"]) == 2
    assert f"--layer must be in 0..{layers - 1} for this model ({layers} layers)" in capsys.readouterr().err
