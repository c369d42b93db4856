"""The machine probe: its rates are work over the best timed repeat (a fake timer, on the CUDA
plan's code path run on the CPU), the real CPU probe runs, and the result is cached per device."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from explorer.analysis.hardware import THIS_MACHINE, hardware_from_dict
from explorer.runner import probe

# The CUDA plan at sizes the CPU runs in microseconds, every dimension distinct; budget 0: three repeats each.
TINY_CUDA_PLAN = dataclasses.replace(probe.CUDA_PLAN, matmul_size=24, copy_bytes=4096, gemv_shape=(16, 40),
                                     budget_s=0.0)


def test_each_rate_is_its_work_over_the_best_of_its_timed_repeats():
    readings = itertools.cycle([3e-3, 1e-3, 2e-3])  # seconds; the best of each three repeats is 1 ms
    results = []

    def fake_timer(run):
        results.append(run())
        return next(readings)

    entry = probe.measure("cpu", timer=fake_timer, plan=TINY_CUDA_PLAN)
    flops = {fmt: pair[0] for fmt, pair in entry["dense_flops_per_s"].items()}
    assert flops == pytest.approx({"bf16": 2 * 24**3 / 1e-3, "fp32": 2 * 24**3 / 1e-3})
    copy_rate, gemv_rate = 2 * 4096 / 1e-3, 16 * 40 * 2 / 1e-3  # read + write; a bf16 [16, 40] weight read once
    assert entry["memory_bandwidth_bytes_per_s"][0] == pytest.approx(max(copy_rate, gemv_rate))
    assert "cache_bandwidth_bytes_per_s" not in entry  # the CUDA plan measures no cache roof
    # the 200 overhead calls read 3, 1, 2 ms in turn: 67 x 1, 66 x 2, 67 x 3 ms, median 2 ms
    assert entry["op_overhead_s"][0] == pytest.approx(2e-3)
    # what each timed call ran: the bf16 and fp32 matmuls, the copy, the matrix-vector product, nn.Linear(1, 1)
    ran = [(r.dtype, tuple(r.shape)) for r in results[0:15:3]]
    assert ran == [(torch.bfloat16, (24, 24)), (torch.float32, (24, 24)), (torch.float32, (1024,)),
                   (torch.bfloat16, (1, 16)), (torch.float32, (1, 1))]
    assert len(results) == 4 * 3 + 200


def test_the_real_probe_measures_positive_rates_on_the_cpu():
    entry = probe.measure()
    assert entry["dense_flops_per_s"]["fp32"][0] > 1e8
    assert entry["memory_bandwidth_bytes_per_s"][0] > 1e8 and entry["cache_bandwidth_bytes_per_s"][0] > 1e8
    assert 0 < entry["op_overhead_s"][0] < 1e-3  # microseconds: a near-empty call
    machine = hardware_from_dict(THIS_MACHINE, entry)
    assert machine.op_overhead_s == entry["op_overhead_s"][0] and "nn.Linear(1, 1)" in machine.sources["op_overhead_s"]
    assert "measured here by torch on the CPU" in machine.sources["memory_bandwidth_bytes_per_s"]


def fake_entry(bandwidth: float) -> dict:
    return {"name": f"probe {bandwidth:g}", "memory_bytes": [1e9, "os"],
            "memory_bandwidth_bytes_per_s": [bandwidth, "measured"], "dense_flops_per_s": {"fp32": [5e10, "measured"]}}


def test_this_machine_is_probed_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(probe, "measure", lambda device: calls.append(device) or fake_entry(1e10))
    first, second = probe.resolve_hardware(THIS_MACHINE), probe.resolve_hardware(THIS_MACHINE, "meta")
    assert calls == ["cpu"] and first == second  # shape-only (meta) gets the CPU's probe
    assert [p.name for p in tmp_path.iterdir()] == [f"probe_{probe.CACHE_VERSION}_cpu.json"]
    assert first.peak_flops_per_s("bf16") == (5e10, "fp32")


def test_each_device_has_its_own_measured_roofs(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(probe, "probed_device", lambda device: device)  # as if this machine had the GPU
    monkeypatch.setattr(probe, "device_label", lambda device: "NVIDIA H200" if device == "cuda:0" else "cpu")
    monkeypatch.setattr(probe, "measure", lambda device: fake_entry(4e12 if device == "cuda:0" else 1e10))
    gpu, cpu = probe.this_machine("cuda:0"), probe.this_machine("cpu")
    assert (gpu.memory_bandwidth_bytes_per_s, cpu.memory_bandwidth_bytes_per_s) == (4e12, 1e10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe_v3_cpu.json", "probe_v3_nvidia-h200.json"]
    monkeypatch.setattr(probe, "measure", lambda device: pytest.fail("read from the cache, not measured again"))
    assert probe.this_machine("cuda:0") == gpu and probe.this_machine("cpu") == cpu


def test_a_device_that_is_not_here_is_probed_as_the_cpu():
    assert probe.probed_device("mps") == probe.probed_device("meta") == "cpu"
    if not torch.cuda.is_available():
        assert probe.probed_device("cuda:0") == "cpu"  # a saved run's GPU
