"""Chunked prefill's pure parts: the chunk plan and its refusals, the bands that tile the causal
triangle, each chunk's weight GEMMs at an intensity of about C, the ridge point, and the figure, CLI
lines and lesson drawn from a hand-built result."""

from __future__ import annotations

import pytest

from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config
from explorer.errors import PromptError
from explorer.figures.lab.chunked import band_outline, fig_chunked
from explorer.lab.chunked import (
    ChunkCost,
    ChunkedPrefillResult,
    ChunkRecord,
    band_cells,
    chunk_cost,
    lesson_text,
    plan_chunks,
    ridge,
)
from explorer.lab.table import LAB


def test_the_plan_cuts_the_prompt_into_chunks_of_c_the_last_shorter():
    assert plan_chunks(10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert plan_chunks(10, 1) == [(i, 1) for i in range(10)]
    assert plan_chunks(10, 0) == plan_chunks(10, 10) == plan_chunks(10, 64) == [(0, 10)]


def test_the_plan_refuses_a_negative_size_and_too_many_chunks():
    with pytest.raises(PromptError, match="0 \\(the whole prompt at once\\) or more tokens, not -3"):
        plan_chunks(10, -3)
    with pytest.raises(PromptError, match="into 600 chunks; the lab runs at most 512: take chunks of at least 2"):
        plan_chunks(600, 1)
    assert len(plan_chunks(600, 2)) == 300


@pytest.mark.parametrize("size", [1, 3, 7, 16, 0])
def test_the_bands_tile_the_causal_triangle(size):
    """Whatever C, the chunks' unmasked (query, key) pairs add up to T (T + 1) / 2, and each band's
    drawn outline encloses exactly its cells (shoelace formula)."""
    total = 23
    plan = plan_chunks(total, size)
    assert sum(band_cells(start, tokens) for start, tokens in plan) == total * (total + 1) // 2
    for start, tokens in plan:
        xs, ys = band_outline(start, tokens)
        area = abs(sum(xs[i] * ys[i + 1] - xs[i + 1] * ys[i] for i in range(len(xs) - 1))) / 2
        assert area == band_cells(start, tokens)


def test_a_chunk_of_c_tokens_sits_at_intensity_about_c_on_the_weight_gemms():
    """SmolLM2-135M's weight GEMMs in bf16: 2 C k m FLOPs over 2 k m weight bytes plus 2 C (k + m)
    activation bytes each, so C (1 - C (k + m) / (k m) ...) FLOP/byte: just under C while C << k m / (k + m)."""
    spec = ModelSpec.from_hf_config(load_hf_config("smollm2-135m"))
    one = chunk_cost(spec, 1, 100)
    assert one.gemm_intensity == pytest.approx(1.0, rel=0.01)
    for size in (4, 16, 64):
        cost = chunk_cost(spec, size, 200)
        assert 0.75 * size < cost.gemm_intensity < size
        assert cost.flops > cost.gemm_flops and cost.bytes > cost.gemm_bytes
    assert chunk_cost(spec, 16, 200).intensity < chunk_cost(spec, 16, 200).gemm_intensity  # attention pulls it down


def test_the_ridge_point_is_the_gpu_s_own_else_an_h100_s():
    name, point = ridge(None)
    assert "H100 SXM" in name and point == pytest.approx(989.4e12 / 3.35e12)
    assert "H200" in ridge("NVIDIA H200")[0] and "reference" not in ridge("NVIDIA H200")[0]
    assert "H100 SXM" in ridge("NVIDIA L40S")[0]
    assert "(a reference GPU)" in name and "(a reference GPU)" in ridge("NVIDIA L40S")[0]


def test_the_costs_and_the_ridge_are_in_the_runs_dtype():
    """A float32 run's weight GEMMs read 4 bytes a weight: half bf16's intensity; the H100's float32
    ridge is its float32 peak over its bandwidth."""
    spec = ModelSpec.from_hf_config(load_hf_config("smollm2-135m"))
    bf16, fp32 = chunk_cost(spec, 16, 200, "bf16"), chunk_cost(spec, 16, 200, "float32")
    assert fp32.gemm_flops == bf16.gemm_flops and fp32.gemm_intensity == pytest.approx(bf16.gemm_intensity / 2)
    assert ridge(None, "float32")[1] < ridge(None, "bf16")[1] / 10


def hand_built(size: int = 4, total: int = 10) -> ChunkedPrefillResult:
    chunks = tuple(ChunkRecord(start, (1, tokens, 48), (1, 2, start + tokens, 10), 2.0 + start,
                               ChunkCost(1e6 * tokens, 1e6, 3e5 * tokens, 3e5)) for start, tokens in plan_chunks(total, size))
    return ChunkedPrefillResult(
        requested_chunk=size, chunks=chunks, full_input_shape=(1, total, 48), full_ms=5.0,
        full_cost=ChunkCost(1e7, 1e6, 3e6, 3e5), repeats=3, max_abs_diff=2e-7, last_abs_diff=1e-7, max_abs_logit=0.5,
        full_tokens=(5, 6), chunked_tokens=(5, 6), pieces=tuple("abcdefghij") + ("X", "Y", "X", "Y"),
        ridge_hardware="NVIDIA H100 SXM5 80GB", ridge_flops_per_byte=295.3, device="cpu", dtype="float32")


def test_the_figure_draws_each_band_and_each_chunk_s_bars():
    fig = fig_chunked(hand_built())
    assert fig.layout.meta == {"view": "lab-chunked", "step": None}
    bands = [trace for trace in fig.data if trace.type == "scatter" and trace.fill == "toself"]
    assert len(bands) == 3 and sum(list(trace.x).count(None) for trace in bands) == 3  # one polygon per chunk
    bars = [trace for trace in fig.data if trace.type == "bar"]
    assert [list(bar.y) for bar in bars] == [[2.0, 6.0, 10.0], [4.0, 4.0, 2.0]]  # ms; FLOP/byte = C
    assert "10 tokens in 3 chunks of C = 4" in fig.layout.title.text and "identical" in fig.layout.title.text
    assert fig.layout.height <= 560


def test_the_lines_and_the_lesson_say_what_was_measured_and_estimated():
    result = hand_built()
    text = "\n".join(result.lines())
    assert "10 tokens in 3 chunks of C = 4" in text and "[1, 2, 10, 10]" in text and "[2, 10]" in text
    assert "identical: 'XY'" in text and "295 FLOP/byte (float32, computed)" in text
    assert "costs estimated in float32" in text and "(estimated, float32)" in lesson_text(result)
    lesson = lesson_text(result)
    assert "**3 chunks** of up to **4** tokens" in lesson and "**2e-07**" in lesson
    assert LAB["chunked"].lesson is lesson_text and LAB["chunked"].params[0].read(None) == 16
    with pytest.raises(PromptError, match="0 to 512 here"):
        LAB["chunked"].params[0].read(600, hosted=True)


def test_the_title_keeps_its_separators_and_the_time_bars_labels_have_room():
    fig = fig_chunked(hand_built())
    title = fig.layout.title.text.replace("<br>", " ")
    assert " FLOP/byte; logits max |Δ|" in title and "FLOP/byte logits" not in title
    times = next(trace for trace in fig.data if trace.type == "bar")
    assert fig.layout.yaxis2.range[1] >= 1.2 * max(times.y)
    # the long legend lies across the figure's foot: one that ran past the right edge squeezed every subplot
    legend = fig.layout.legend
    assert legend.x == 0 and legend.xanchor == "left" and legend.yref == "container"
