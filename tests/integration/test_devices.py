"""Device, dtype and memory plan with the accelerators faked; CUDA-event timing with fake events."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import tiny_config, tiny_model
from transformers import AutoModelForCausalLM

from explorer.config import SamplingSettings, load_hf_config
from explorer.errors import ConfigError, ModelLoadError
from explorer.runner import devices
from explorer.runner import session as session_module
from explorer.runner.configs import transformers_config
from explorer.runner.devices import memory_need, pick_device, pick_dtype, plan_placement
from explorer.runner.loading import load_model
from explorer.runner.session import InferenceSession
from explorer.runner.timing import CudaEventClock, step_clock

GIB = 2**30
# Host-measured stops (no event bounds them).
HOST_STOPS = ("tokenize", "sample", "detokenize")


def fake_machine(monkeypatch, cuda_free_bytes: list[int] = (), mps: bool = False, bf16: bool = True) -> None:
    """A machine with one CUDA device per entry of `cuda_free_bytes` (its free memory), and MPS or not."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(cuda_free_bytes))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(cuda_free_bytes))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: bf16)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (cuda_free_bytes[device.index], 80 * GIB))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize("cuda, mps, expected", [([GIB, GIB], True, "cuda:0"), ([], True, "mps"), ([], False, "cpu")])
def test_auto_takes_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    fake_machine(monkeypatch, cuda, mps)
    assert pick_device("auto") == expected


def test_named_devices_are_checked_against_the_machine(monkeypatch):
    fake_machine(monkeypatch, [GIB, GIB])
    assert (pick_device("cuda"), pick_device("cuda:1"), pick_device("cpu")) == ("cuda:0", "cuda:1", "cpu")
    with pytest.raises(ModelLoadError, match="2 CUDA device.*cuda:0 to cuda:1"):
        pick_device("cuda:2")
    with pytest.raises(ModelLoadError, match="Apple MPS is not available"):
        pick_device("mps")
    fake_machine(monkeypatch, [], mps=True)
    assert pick_device("mps") == "mps"
    with pytest.raises(ModelLoadError, match="CUDA is not available here"):
        pick_device("cuda:0")


@pytest.mark.parametrize("name, message", [("tpu", "Unknown device 'tpu'"), ("xpu", "'xpu' is not supported")])
def test_unknown_or_unsupported_device_kinds_are_config_errors(name, message):
    with pytest.raises(ConfigError, match=f"{message}: use 'cpu' or 'cuda'"):
        pick_device(name)


def test_auto_dtype_is_bfloat16_on_cuda_where_supported_else_float16_and_float32_elsewhere(monkeypatch):
    fake_machine(monkeypatch, [GIB], bf16=True)
    assert (pick_dtype("cuda:0"), pick_dtype("cpu"), pick_dtype("mps")) == (torch.bfloat16, torch.float32,
                                                                            torch.float32)
    fake_machine(monkeypatch, [GIB], bf16=False)
    assert pick_dtype("cuda:0") == torch.float16
    with pytest.raises(ConfigError, match="cuda:0 has no bfloat16 support"):
        pick_dtype("cuda:0", "bfloat16")


def test_explicit_dtypes_are_honoured_and_checked():
    assert pick_dtype("cpu", "bfloat16") == torch.bfloat16
    assert pick_dtype("cpu", "float32") == torch.float32
    with pytest.raises(ConfigError, match="Unknown dtype 'int8': use auto, float32, bfloat16, float16"):
        pick_dtype("cpu", "int8")


def test_float16_is_refused_on_a_cpu_whose_torch_has_no_float16_matmul(monkeypatch):
    real_mm = torch.mm

    def mm(a, b):
        if a.dtype == torch.float16:
            raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'')
        return real_mm(a, b)

    monkeypatch.setattr(torch, "mm", mm)
    with pytest.raises(ConfigError, match="cannot run float16 matmuls on the CPU"):
        pick_dtype("cpu", "float16")
    assert pick_dtype("cpu", "bfloat16") == torch.bfloat16


def qwen3_0_6b_config():
    return transformers_config(load_hf_config("qwen3-0.6b"), "qwen3-0.6b")


def test_memory_need_of_qwen3_0_6b_in_bfloat16_at_2048_tokens():
    need = memory_need(qwen3_0_6b_config(), torch.bfloat16, 2048)
    # Per layer: q 1024x2048, k and v 1024x1024, o 2048x1024, gate/up/down 1024x3072, four norms
    # (q_norm and k_norm of 128, two of 1024); plus the tied embedding 151936 x 1024 and the final norm.
    params = 28 * (2 * 1024 * 2048 + 2 * 1024 * 1024 + 3 * 1024 * 3072 + 2 * 128 + 2 * 1024) + 151936 * 1024 + 1024
    assert need.weight_bytes == params * 2 == 1_192_099_840
    assert need.kv_cache_bytes == 2 * 28 * 8 * 128 * 2048 * 2  # K and V, L, h_kv, d_h, n, bf16
    assert need.attention_bytes == 16 * 2048 * 2048 * 16  # h_q x n x n, at most 16 bytes an element
    total = (need.weight_bytes + need.kv_cache_bytes + need.attention_bytes) * 1.25
    assert need.total_bytes == math.ceil(total) == devices.memory_need_bytes(qwen3_0_6b_config(), torch.bfloat16)


def test_the_planned_context_is_capped_by_the_models_own():
    need = memory_need(tiny_config("llama"), torch.float32, 2048)  # max_position_embeddings 160
    assert need.context_tokens == 160
    assert need.kv_cache_bytes == 2 * 3 * 2 * 10 * 160 * 4


def test_a_model_that_fits_stays_on_its_device(monkeypatch):
    need = memory_need(qwen3_0_6b_config(), torch.bfloat16)
    fake_machine(monkeypatch, [need.total_bytes, 0])
    assert plan_placement(need, "cuda:0", "qwen") == devices.Placement("cuda:0", None, need.total_bytes,
                                                                       need.total_bytes)


def test_a_model_too_large_for_one_gpu_is_spread_over_all_in_proportion_to_their_free_memory(monkeypatch):
    need = memory_need(qwen3_0_6b_config(), torch.bfloat16)
    free = [need.total_bytes * 3 // 4, need.total_bytes // 2]
    fake_machine(monkeypatch, free)
    plan = plan_placement(need, "cuda:0", "qwen")
    share = need.weight_bytes / need.total_bytes
    assert (plan.device_map, plan.free_bytes) == ("auto", sum(free))
    assert plan.max_memory == {0: int(free[0] * share), 1: int(free[1] * share)}
    assert sum(plan.max_memory.values()) >= need.weight_bytes


def test_a_model_that_fits_nowhere_is_refused_with_the_need_the_free_memory_and_what_to_do(monkeypatch):
    need = memory_need(qwen3_0_6b_config(), torch.bfloat16)
    fake_machine(monkeypatch, [GIB, GIB // 2])
    message = (rf"'qwen' needs about {need.total_bytes / GIB:.1f} GiB in bfloat16: 1.1 GiB of weights, 0.2 GiB "
               r"of KV cache and 1.0 GiB of attention scratch for 2,048 tokens .*cuda:0 has 1.0 GiB free "
               r"\(the 2 CUDA devices together 1.5 GiB\)\. Run it shape-only with --config")
    with pytest.raises(ModelLoadError, match=message):
        plan_placement(need, "cuda:0", "qwen")


def test_the_roofline_entry_is_the_catalogue_entry_of_the_gpu_else_this_machine(monkeypatch):
    names = {0: "NVIDIA H200", 1: "NVIDIA L40S"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: names[device.index])
    assert [devices.roofline_hardware_key(d) for d in ("cuda:0", "cuda:1", "cpu", "mps")] == [
        "h200", "this-machine", "this-machine", "this-machine"]


def test_mps_free_memory_is_metals_working_set_less_what_is_allocated(monkeypatch):
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 48 * GIB)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 6 * GIB)
    assert devices.free_memory_bytes(torch.device("mps")) == 42 * GIB


@pytest.mark.skipif(not Path("/proc/meminfo").is_file(), reason="the kernel's own count is read on Linux")
def test_cpu_free_memory_is_the_kernels_available_memory_not_its_free_pages():
    """Against the kernel's MemAvailable (page cache that can be dropped counts as available, unlike
    MemFree); both read within a moment, so equal within 256 MiB of other processes' churn."""
    fields = dict(line.split(":") for line in Path("/proc/meminfo").read_text().splitlines())
    available_bytes = int(fields["MemAvailable"].split()[0]) * 1024  # the file gives kB
    assert abs(devices.free_memory_bytes(torch.device("cpu")) - available_bytes) < 256 * 2**20


def save_tiny_llama(folder) -> None:
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(tiny_config("llama")).save_pretrained(folder)


def test_auto_on_a_cpu_short_of_memory_for_float32_loads_bfloat16(tmp_path, monkeypatch):
    save_tiny_llama(tmp_path)
    config = tiny_config("llama")
    fp32, bf16 = (memory_need(config, dtype).total_bytes for dtype in (torch.float32, torch.bfloat16))
    monkeypatch.setattr(devices, "free_memory_bytes", lambda device: (fp32 + bf16) // 2)
    loaded = load_model(str(tmp_path), device="cpu")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
    assert loaded.dtype == "bfloat16" and loaded.description.endswith("on cpu in bfloat16")
    with pytest.raises(ModelLoadError, match="in float32.*or --dtype bfloat16"):
        load_model(str(tmp_path), device="cpu", dtype="float32")


def test_a_model_too_large_for_one_of_two_gpus_is_loaded_with_device_map_auto(tmp_path, monkeypatch):
    save_tiny_llama(tmp_path)
    need = memory_need(tiny_config("llama"), torch.bfloat16)
    fake_machine(monkeypatch, [need.total_bytes * 2 // 3, need.total_bytes * 2 // 3])
    calls = []

    def from_pretrained(*args, **kwargs):
        calls.append(kwargs)
        raise OSError("stopped by the test")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    with pytest.raises(ModelLoadError, match="weights cannot be read"):
        load_model(str(tmp_path))
    (kwargs,) = calls
    assert (kwargs["device_map"], kwargs["dtype"]) == ("auto", torch.bfloat16)
    assert set(kwargs["max_memory"]) == {0, 1}


class FakeCuda:
    """Stands in for torch.cuda's events: the k-th recorded event is at k seconds on the GPU."""

    def __init__(self) -> None:
        self.recorded = 0
        self.synchronizes = 0

    def event_class(self):
        timeline = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.ms = None

            def record(self, stream) -> None:
                self.ms, timeline.recorded = 1000.0 * timeline.recorded, timeline.recorded + 1

            def elapsed_time(self, end) -> float:
                assert timeline.synchronizes, "an event was read before the device was synchronised"
                return end.ms - self.ms

        return Event

    def synchronize(self, device=None) -> None:
        self.synchronizes += 1


@pytest.fixture
def fake_cuda(monkeypatch) -> FakeCuda:
    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "Event", fake.event_class())
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    return fake


def test_cuda_stop_times_come_from_events_and_a_step_synchronises_once(fake_cuda, monkeypatch):
    monkeypatch.setattr(session_module, "step_clock", lambda model, device: CudaEventClock(torch.device("cuda:0")))
    session = InferenceSession(tiny_model("qwen3"), SamplingSettings(max_new_tokens=5))
    traces = [session.prefill("What is 2+2?")]
    assert fake_cuda.synchronizes == 1
    traces.append(session.decode_step())
    assert fake_cuda.synchronizes == 2
    for trace in traces:
        ops = {op.name: op.wall_ms for op in trace.ops}
        # Consecutive readings: a projection's pre-hook and post-hook, softmax after scores.
        assert ops["layers.0.attn.q_proj"] == ops["layers.2.attn.softmax"] == ops["lm_head"] == 1000.0
        timed = [ms for name, ms in ops.items() if ms is not None and name not in HOST_STOPS]
        assert all(ms % 1000.0 == 0 for ms in timed) and sum(timed) >= 1000.0 * len(trace.kv)
    prompt_tokens = len(traces[0].input_ids)
    assert session.attention.store.kept(0, 0)
    probs = session.attention.probs(0, 0)  # kept on the device during the step, copied to the host after it
    assert isinstance(probs, np.ndarray) and probs.shape == (6, prompt_tokens, prompt_tokens)


def test_the_step_clock_suits_the_device(monkeypatch, fake_cuda):
    model = torch.nn.Linear(2, 2)
    assert step_clock(model, "cpu") is time.perf_counter
    assert isinstance(step_clock(model, "cuda:0"), CudaEventClock)
    model.hf_device_map = {"model.embed_tokens": 0, "model.layers.1": 1}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    spread_clock = step_clock(model, "cuda:0")
    assert not isinstance(spread_clock, CudaEventClock)
    spread_clock()
    assert fake_cuda.synchronizes == 2  # every device, before each reading
