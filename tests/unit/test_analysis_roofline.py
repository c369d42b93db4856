"""Roofline placement, step totals, what-ifs, and the hardware catalogue."""

from __future__ import annotations

import json

import pytest

from explorer.analysis.hardware import get_hardware, hardware_names, load_hardware_file
from explorer.analysis.hardware_catalogue import CATALOGUE
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.roofline import standard_what_ifs, step_roofline, what_if
from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config
from explorer.errors import ConfigError, UsageError

LLAMA = ModelSpec.from_hf_config(load_hf_config("llama-3-8b"))
H100 = get_hardware("h100-sxm")

REQUIRED = {"h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "l4", "rtx-4090", "mi300x", "m3-max", "m4-max"}


def test_h100_ridge_point_is_about_295_flop_per_byte():
    assert H100.ridge_point("bf16") == pytest.approx(989.4e12 / 3.35e12)
    assert round(H100.ridge_point("bf16")) == 295


def test_catalogue_has_the_required_machines_and_a_source_for_every_number():
    assert REQUIRED <= set(hardware_names())
    for key in CATALOGUE:
        hw = get_hardware(key)
        numbered = ["memory_bytes", "memory_bandwidth_bytes_per_s"]
        numbered += [f"dense_flops_per_s.{d}" for d in hw.dense_flops_per_s]
        numbered += [f"sparse_flops_per_s.{d}" for d in hw.sparse_flops_per_s]
        assert all(hw.sources.get(name) for name in numbered), key


def test_dense_and_sparse_rates_are_kept_apart():
    assert H100.peak_flops_per_s("bf16") == (989.4e12, "bf16")
    assert H100.peak_flops_per_s("bf16", sparse=True) == (2 * 989.4e12, "bf16")
    with pytest.raises(ConfigError, match="sparse"):
        get_hardware("m3-max").peak_flops_per_s("bf16", sparse=True)


def test_missing_formats_fall_back_to_the_next_wider_one():
    assert get_hardware("a100-80gb").peak_flops_per_s("fp8") == (312e12, "bf16")
    assert H100.peak_flops_per_s("int4") == (1978.9e12, "int8")


def test_batch_one_decode_is_memory_bound_everywhere():
    result = step_roofline(LLAMA, Step.decode(1024, batch=1), H100)
    assert {p.bound for p in result.points} == {"memory"}
    assert result.memory_bound_fraction == 1.0
    weights_read = (8_030_261_248 - 128256 * 4096) * 2  # every matrix but the embedding, of which one row
    kv_read = 1024 * 131_072
    assert result.time_lower_bound_s == pytest.approx((weights_read + kv_read) / 3.35e12, rel=0.01)


def test_long_prefill_projections_are_compute_bound():
    result = step_roofline(LLAMA, Step.prefill(4096), H100)
    points = {p.cost.name: p for p in result.points}
    assert points["mlp.gate_proj"].bound == "compute"
    assert points["mlp.gate_proj"].attainable_flops_per_s == 989.4e12
    assert points["attn.softmax"].bound == "memory"


def test_time_lower_bound_is_the_larger_of_compute_and_memory_time():
    point = step_roofline(LLAMA, Step.decode(4096, batch=64), H100).points[2]
    assert point.time_lower_bound_s == max(point.cost.flops / 989.4e12, point.cost.bytes / 3.35e12)
    assert point.attainable_flops_per_s == pytest.approx(point.arithmetic_intensity * 3.35e12)


def test_per_stop_and_per_operator_totals_agree():
    step = Step.decode(4096, 8)
    by_op = step_roofline(LLAMA, step, H100)
    per_stop = step_roofline(LLAMA, step, H100, by_op=False)
    assert len(per_stop.points) == 2 + 32 * 17 + 1
    assert by_op.total.cost.flops == per_stop.total.cost.flops
    assert by_op.time_lower_bound_s == pytest.approx(per_stop.time_lower_bound_s)


def test_what_ifs_at_large_batch_and_long_context():
    step = Step.decode(4096, batch=64)
    results = {w.label.split(" (")[0]: w for w in standard_what_ifs(LLAMA, step, H100)}
    kv_share = 17.734 * 2 / 52.3  # KV reads dominate this step's bytes
    assert 1.3 < results["KV cache in fp8"].speedup < 1 / (1 - kv_share / 2) + 0.01
    assert results["weights in int4"].speedup > 1
    assert results["batch 256"].roofline.tokens_per_s > step_roofline(LLAMA, step, H100).tokens_per_s
    longer = what_if(LLAMA, step, H100, CostOptions(), context=8192)  # x4 would pass Llama-3-8B's window
    assert longer.step.context == 8192 and results["context 8192"].speedup < 1
    with pytest.raises(UsageError, match="16,384 positions exceed this model's context window of 8,192"):
        what_if(LLAMA, step, H100, CostOptions(), context=16384)


def test_hardware_from_a_file(tmp_path):
    entry = {"name": "Lab GPU", "memory_bytes": [48e9, "vendor page"],
             "memory_bandwidth_bytes_per_s": [1e12, "vendor page"],
             "dense_flops_per_s": {"bf16": [200e12, "vendor page"]}}
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(entry))
    hw = get_hardware(str(path))
    assert (hw.name, hw.ridge_point("bf16")) == ("Lab GPU", 200.0)
    path.write_text(json.dumps({**entry, "memory_bytes": 48e9}))
    with pytest.raises(ConfigError, match="source"):
        load_hardware_file(path)
    with pytest.raises(ConfigError, match="Unknown hardware"):
        get_hardware("tpu-v9")


def test_a_catalogue_entry_has_no_cache_roof_or_overhead():
    h100 = get_hardware("h100-sxm")
    assert h100.cache_bandwidth_bytes_per_s == 0 and h100.op_overhead_s == 0
