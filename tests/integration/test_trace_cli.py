"""`python -m explorer trace`: the journey table, the K cache per step, tokens, JSON, clear errors, wall
times as medians over the layers with their spread, none in shape-only mode."""

from __future__ import annotations

import re

import numpy as np
import pytest

from explorer.cli import main
from explorer.saved import load_run


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


def test_a_batch_of_eight_decoding_one_step_prints_the_textbook_shapes(capsys):
    """Llama-3-8B, 8 requests of 1,000 tokens of context, one decode step: the shapes walk-throughs ask for."""
    assert main(["trace", "--config", "llama-3-8b", "--batch", "8", "--prompt-tokens", "1000", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    decode = {line.split()[0]: re.split(r" {2,}", line)[-1] for line in out.splitlines()
              if line.startswith(("layers.0.", "lm_head"))}
    assert decode["layers.0.attn.q_proj"] == "[8, 1, 4096] -> [8, 1, 4096]"
    assert decode["layers.0.attn.split_heads"].endswith("-> [8, 32, 1, 128] [8, 8, 1, 128] [8, 8, 1, 128]")
    assert decode["layers.0.attn.kv_cache_write"].endswith("-> [8, 8, 1001, 128] [8, 8, 1001, 128]")
    assert decode["layers.0.attn.scores"].endswith("-> [8, 32, 1, 1001]")
    assert decode["layers.0.mlp.gate_proj"] == "[8, 1, 4096] -> [8, 1, 14336]"
    assert decode["lm_head"] == "[8, 1, 4096] -> [8, 1, 128256]"
    assert "prefill: 1000 tokens x 8 sequences" in out and "after step 1    [8, 8, 1001, 128]" in out


def test_gpt2_prints_its_learned_positions_fused_qkv_and_tied_head(capsys):
    """GPT-2 small's published config: d 768, 12 heads of 64 (h_kv = h_q), d_ff 3072, V 50257, no RoPE."""
    assert main(["trace", "--config", "gpt2", "--prompt-tokens", "5", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    prefill = {line.split()[0]: re.split(r" {2,}", line)[2] for line in out.splitlines()
               if line.startswith(("embed", "pos_embed", "layers.0.", "lm_head"))}
    assert prefill["pos_embed"] == "[1, 5] -> [1, 5, 768]"
    assert prefill["embed_add"] == "[1, 5, 768] [1, 5, 768] -> [1, 5, 768]"
    assert prefill["layers.0.attn.qkv_proj"] == "[1, 5, 768] -> [1, 5, 2304]"
    assert prefill["layers.0.attn.split_heads"] == "[1, 5, 2304] -> [1, 12, 5, 64] [1, 12, 5, 64] [1, 12, 5, 64]"
    assert prefill["layers.0.mlp.up_proj"] == "[1, 5, 768] -> [1, 5, 3072]"
    assert prefill["layers.0.mlp.act"] == "[1, 5, 3072] -> [1, 5, 3072]"
    assert prefill["lm_head"] == "[1, 1, 768] -> [1, 1, 50257]"
    assert "layers.0.attn.rope" not in out and "after step 1    [1, 12, 6, 64]" in out


def test_the_lm_head_over_all_positions_prints_logits_for_every_token(capsys):
    assert main(["trace", "--config", "smollm2-135m", "--prompt-tokens", "7", "--steps", "1", "--lm-head-all"]) == 0
    lm_head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("lm_head"))
    assert re.split(r" {2,}", lm_head)[2:] == ["[1, 7, 576] -> [1, 7, 49152]", "[1, 1, 576] -> [1, 1, 49152]"]


def test_a_batch_of_real_prompts_prints_every_sequence(capsys, monkeypatch):
    from tiny_models import tiny_model

    loaded = tiny_model("llama")
    monkeypatch.setattr("explorer.runner.loading.load", lambda **kwargs: loaded)
    prompts = ["Hi", "What is 2+2?", "A longer prompt here."]
    assert main(["trace", "\n".join(prompts), "--batch", "3", "--steps", "2", "--no-chat-template"]) == 0
    out = capsys.readouterr().out
    longest = len(prompts[2])  # one id per character
    assert f"prefill: {longest} tokens x 3 sequences" in out
    assert f"after step 2    [3, 2, {longest + 2}, 10]" in out
    texts = [line.split("-> ", 1)[1] for line in out.splitlines() if line.startswith(("  0: ", "  1: ", "  2: "))]
    assert len(texts) == 3 and all(text.startswith("'") for text in texts)


def test_a_batch_without_as_many_prompt_lines_is_a_usage_error(capsys):
    assert main(["trace", "hello", "--batch", "2"]) == 2
    assert "--batch 2 with real weights takes 2 prompts, one per line" in capsys.readouterr().err


def ms(value: float) -> str:
    """A time as the table prints it: no decimal from 100 ms, two down to 0.01 ms, four below."""
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}" if value >= 0.01 else f"{value:.4f}"


@pytest.mark.real_model
def test_embedded_trace_prints_the_median_and_spread_over_the_layers(embedded_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("explorer.runner.loading.load", lambda **kwargs: embedded_model)
    path = tmp_path / "trace.json"
    assert main(["trace", "What is the capital of France?", "--steps", "1", "--layer", "4", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    prefill, decode = load_run(path)[0].steps
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
    run, attention = load_run(path)
    traces = run.steps
    for trace in traces:  # every attention matrix, at its shape, rows summing to 1
        for record in trace.attention:
            probs = attention.probs(trace.step_index, record.layer)
            assert list(probs.shape) == list(record.shape)
            np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert [t.stage for t in traces] == ["prefill", "decode", "decode", "decode"]
    assert [t.kv[0].key_shape[2] for t in traces] == [traces[0].context_length + k for k in range(4)]
    for trace in traces:
        assert f"p={trace.sampling.token_prob:.3f}" in out
    text = "".join(t.token_text for t in traces)  # 4 greedy tokens: no special token among them
    assert f"generated text: {text!r} [ended: max new tokens]" in out


@pytest.mark.parametrize("argv, message, code", [
    (["trace", "hi", "--config", "no-such-model"], "neither a preset nor a config.json", 1),
    (["trace", "  "], "prompt is empty", 2),
    (["trace", "--config", "qwen3-0.6b", "--prompt-tokens", "3", "--layer", "28"], "--layer must be in 0..27", 2),
    (["trace", "hi", "--json", "/no/such/folder/trace.json"], "Cannot write the trace", 2),
])
def test_bad_input_is_one_line_exit_code_1_at_run_time_and_2_for_options(argv, message, code, capsys):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--steps", "-1"], "argument --steps: must be >= 1, not -1"),
    (["--steps", "0"], "argument --steps: must be >= 1, not 0"),
    (["--steps", "two"], "argument --steps: must be a whole number >= 1, not 'two'"),
    (["--layer", "-1"], "argument --layer: must be >= 0, not -1"),
    (["--prompt-tokens", "0"], "argument --prompt-tokens: must be >= 1, not 0"),
    (["--batch", "0"], "argument --batch: must be 1 to 256, not 0"),
    (["--temperature", "0"], "argument --temperature: must be in [0.01, 100], not 0"),
    (["--top-k", "-2"], "argument --top-k: must be >= 0, not -2"),
    (["--top-p", "0"], "argument --top-p: must be in (0, 1], not 0"),
    (["--min-p", "nan"], "argument --min-p: must be in [0, 1], not nan"),
    (["--seed", "99999999999999999999"], "argument --seed: must be 0 to 9223372036854775807, not 99999999999999999999"),
])
def test_each_option_is_checked_by_the_parser_under_its_own_name(argv, message, capsys):
    with pytest.raises(SystemExit) as usage_error:
        main(["trace", "hi", "--config", "qwen3-0.6b", *argv])
    assert usage_error.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"llm-explorer trace: error: {message}"


@pytest.mark.parametrize("argv, layers", [(["hi"], 30), (["--config", "qwen3-0.6b", "--prompt-tokens", "3"], 28)])
def test_a_layer_the_model_lacks_is_refused_from_its_config_before_any_model_work(argv, layers, monkeypatch, capsys):
    import explorer.runner.loading as loading

    def no_load(**kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(loading, "load", no_load)
    assert main(["trace", *argv, "--layer", "99"]) == 2
    assert f"--layer must be in 0..{layers - 1} for this model ({layers} layers)" in capsys.readouterr().err


def test_mixtral_prints_its_router_experts_and_expected_load(capsys):
    """Mixtral-8x7B's published config: 8 experts, 2 per token, d 4096; shape-only, so the load is expected."""
    assert main(["trace", "--config", "mixtral-8x7b", "--prompt-tokens", "4", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    prefill = {line.split()[0]: re.split(r" {2,}", line)[2] for line in out.splitlines() if line.startswith("layers.0.")}
    assert prefill["layers.0.mlp.router"] == "[4, 4096] -> [4, 8] [4, 2] [4, 2]"
    assert prefill["layers.0.mlp.experts"] == "[4, 4096] [4, 2] [4, 2] -> [4, 4096]"
    assert "layers.0.mlp.gate_proj" not in prefill and "46.70 B parameters" in out
    assert "prefill   1 each expected (B*T*k/E; shape-only: no routing)" in out
