"""`python -m explorer roofline` and `info`: the printed tables."""

from __future__ import annotations

import json

import pytest

from explorer.cli import main


def run(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_roofline_decode_table(capsys):
    text = run(capsys, "roofline", "--config", "llama-3-8b", "--stage", "decode", "--batch", "64",
               "--context", "4096", "--hardware", "h100-sxm")
    assert "ridge point 295 FLOP/byte" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith(("attn.", "step"))}
    assert rows["attn.scores"][1:5] == ["68.719", "17.734", "3.9", "memory"]
    assert rows["step"][-1] == "15.614"


def test_roofline_quantized_and_prefill_variants(capsys):
    base = run(capsys, "roofline", "--config", "llama-3-8b", "--batch", "64", "--context", "4096")
    fp8 = run(capsys, "roofline", "--config", "llama-3-8b", "--batch", "64", "--context", "4096", "--kv-dtype", "fp8")
    int4 = run(capsys, "roofline", "--config", "llama-3-8b", "--weight-dtype", "int4", "--what-ifs")
    prefill = run(capsys, "roofline", "--config", "qwen3-0.6b", "--stage", "prefill", "--tokens", "17")

    def total_ms(text):
        return float(next(line for line in text.splitlines() if line.startswith("step total")).split()[-1])

    assert total_ms(fp8) < total_ms(base)
    assert "weights int4" in int4 and "KV cache in fp8" in int4
    assert "prefill, batch 1, T=17" in prefill and "attn.q_norm" in prefill


def test_roofline_hardware_from_a_file(capsys, tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"name": "Lab GPU", "memory_bytes": [1e9, "x"],
                                "memory_bandwidth_bytes_per_s": [1e11, "x"],
                                "dense_flops_per_s": {"bf16": [1e13, "x"]}}))
    assert "Lab GPU: 10.0 TFLOP/s" in run(capsys, "roofline", "--config", "smollm2-135m", "--hardware", str(path))


def test_info_prints_dimensions_counts_and_kv_bytes(capsys):
    text = run(capsys, "info", "--config", "qwen3-0.6b")
    assert "head dim d_h                    128" in text
    assert "596,049,920" in text and "440,467,456" in text
    assert "114,688 B" in text


def test_unknown_config_is_a_one_line_error_at_run_time(capsys):
    assert main(["info", "--config", "no-such-model"]) == 1
    assert "neither a preset" in capsys.readouterr().err


@pytest.mark.parametrize("value, message", [
    ("abc", "argument --prompt-tokens: must be a whole number >= 1, not 'abc'"),
    ("0", "argument --prompt-tokens: must be >= 1, not 0"),
    ("8193", "8,193 positions exceed this model's context window of 8,192 tokens"),
])
def test_info_refuses_a_prompt_length_it_cannot_estimate(capsys, value, message):
    try:
        code = main(["info", "--config", "smollm2-135m", "--prompt-tokens", value])
    except SystemExit as usage_error:  # argparse's: a value that is no length at all
        code = usage_error.code
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--context", "100000000"], "100,000,000 positions exceed this model's context window of 8,192"),
    (["--stage", "prefill", "--tokens", "9000"], "9,000 positions exceed"),
    (["--stage", "prefill", "--context", "5"], "--context is for --stage decode"),
    (["--tokens", "5"], "--tokens is for --stage prefill"),
])
def test_roofline_refuses_sizes_the_model_cannot_run(capsys, argv, message):
    assert main(["roofline", "--config", "llama-3-8b", *argv]) == 2
    assert message in capsys.readouterr().err


def test_roofline_columns_stay_apart_at_huge_batch(capsys):
    text = run(capsys, "roofline", "--config", "llama-3-8b", "--batch", "1000000000")
    total = next(line for line in text.splitlines() if line.startswith("step total")).split()
    assert total[2:] == ["17181884416.000", "582781463.010", "29.5", "memory", "187490676.556"]


def test_a_fused_softmax_moves_no_bytes_and_shows_no_intensity(capsys):
    text = run(capsys, "roofline", "--config", "llama-3-8b", "--stage", "decode", "--batch", "64", "--context",
               "4096", "--hardware", "h100-sxm", "--merged", "--fused-attention")
    softmax = next(line for line in text.splitlines() if line.startswith("attn.softmax"))
    assert softmax.split()[3:5] == ["-", "on"] and "0.0" not in softmax.split()[3]
    assert "attention 69% of it, weight GEMMs 31%." in text  # of 14.96 ms: the published batch-64 lesson


def test_info_estimates_the_memory_of_a_prompt(capsys):
    text = run(capsys, "info", "--config", "smollm2-135m", "--prompt-tokens", "2048")
    # by hand from the dimensions, float32: 134,515,008 parameters x 4 B; 2 x 3 x 64 x 2,049 positions x 4 B
    # x 30 layers; 9 x 64 x 2,048 x 4 B x 30 layers; no 151 MB matrix fits beside the queries in 144 MiB
    for label, value in [("weights", "538 MB"), ("KV cache", "94 MB"), ("kept queries", "142 MB"),
                         ("kept attention matrices", "0 MB")]:
        assert f"    {label:<30}{value}" in text
    assert "memory for 2,048 tokens (fp32)" in text
