"""Where a model runs and in what dtype, and whether it fits there, decided from the config alone.

`pick_device` takes CUDA, then Apple MPS, then the CPU; `pick_dtype` the dtype that device runs
well (bfloat16 on CUDA, float32 elsewhere); `memory_need` and `plan_placement` compare the weights, the KV cache and the
attention scratch of a context with the free memory of the device (or of all CUDA devices together,
where accelerate's `device_map="auto"` can spread the layers), before any weight is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import psutil
import torch
from transformers import AutoModelForCausalLM

from explorer.analysis.hardware import THIS_MACHINE, catalogue_key_for
from explorer.analysis.precision import RUN_DTYPES
from explorer.errors import ConfigError, ModelLoadError

# Judgement, not measured: room beyond the weights, KV cache and attention scratch for the MLP's
# activations, the logits, kept attention copies, allocator fragmentation and the copies made while loading.
MEMORY_HEADROOM = 1.25
# The context the memory plan is made for when the model's own is longer: the explorer's long-prompt
# target (issue 5: 2,048-token prompts).
PLANNED_CONTEXT_TOKENS = 2048
# Upper bound, counted from `explorer.runner.hooks.explorer_attention`: for one layer at a time it holds
# at most four float32-sized [h_q, T, n] tensors (scores, masked scores, the float32 softmax, and the
# float32 copy kept for the attention view).
ATTENTION_SCRATCH_BYTES_PER_ELEMENT = 16
DTYPES = {name: getattr(torch, name) for name in RUN_DTYPES}  # torch.float32, ...
_DEVICE_HELP = "use 'cpu' or 'cuda' (or 'cuda:1', 'mps', or 'auto' for the best one present)"


def pick_device(requested: str = "auto") -> str:
    """The device to run on: "auto" takes CUDA, then Apple MPS, then the CPU; a named one is checked.

    Args:
        requested: "auto", "cpu", "cuda", "cuda:N" or "mps".

    Returns:
        "cpu", "mps" or "cuda:N" (a bare "cuda" becomes the current CUDA device).

    Raises:
        ConfigError: not a device name, or a kind the explorer does not run on.
        ModelLoadError: a CUDA index or MPS asked for that this machine does not have.
    """
    if requested == "auto":
        if torch.cuda.is_available():
            return f"cuda:{torch.cuda.current_device()}"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except RuntimeError as exc:
        raise ConfigError(f"Unknown device '{requested}': {_DEVICE_HELP}.") from exc
    if device.type == "cpu":
        return "cpu"
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ModelLoadError("Device 'mps' was asked for but Apple MPS is not available here: "
                                 "use --device auto or --device cpu.")
        return "mps"
    if device.type != "cuda":
        raise ConfigError(f"Device '{requested}' is not supported: {_DEVICE_HELP}.")
    if not torch.cuda.is_available():
        raise ModelLoadError(f"Device '{requested}' was asked for but CUDA is not available here: "
                             "use --device auto or --device cpu.")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= count:
        raise ModelLoadError(f"Device '{requested}' was asked for but this machine has {count} CUDA "
                             f"device(s), cuda:0 to cuda:{count - 1}: use --device auto or one of those.")
    return f"cuda:{index}"


def pick_dtype(device: str, requested: str = "auto") -> torch.dtype:
    """The dtype the weights and activations run in on `device`.

    "auto": bfloat16 on CUDA where the GPU supports it (Ampere and later), else float16; float32 on
    the CPU (exact, and fast with the CPU's BLAS); float32 on MPS, because bfloat16 there needs macOS 14
    and is emulated in float32 on M1/M2 (pytorch/pytorch#119641, huggingface/transformers#40458) and
    float16 overflows in the activations of some bf16-trained models (Gemma).

    Args:
        device: a `pick_device` result.
        requested: "auto", "float32", "bfloat16" or "float16".

    Raises:
        ConfigError: an unknown dtype name, bfloat16 on a GPU without it, or a dtype whose matmul
            this torch cannot run on the CPU.
    """
    kind = torch.device(device).type
    if requested == "auto":
        if kind == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if requested not in DTYPES:
        raise ConfigError(f"Unknown dtype '{requested}': use auto, {', '.join(DTYPES)}.")
    dtype = DTYPES[requested]
    if kind == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"{device} has no bfloat16 support: use --dtype float16 or float32.")
    if kind == "cpu" and not _cpu_runs_matmul(dtype):
        raise ConfigError(f"This torch cannot run {requested} matmuls on the CPU: use --dtype float32 or bfloat16.")
    return dtype


def _cpu_runs_matmul(dtype: torch.dtype) -> bool:
    """Whether a 2x2 matmul in `dtype` runs on the CPU (older torch lacks float16 CPU kernels)."""
    try:
        torch.mm(torch.ones(2, 2, dtype=dtype), torch.ones(2, 2, dtype=dtype))
    except RuntimeError:
        return False
    return True


def roofline_hardware_key(device: str) -> str:
    """The hardware catalogue key whose roofline the measured points of `device` belong on.

    CUDA: the entry matching `torch.cuda.get_device_name` (`explorer.analysis.hardware.catalogue_key_for`),
    else "this-machine"; the CPU and MPS: "this-machine" (the CPU probe, `explorer.runner.probe`).
    """
    if torch.device(device).type == "cuda":
        return catalogue_key_for(torch.cuda.get_device_name(torch.device(device))) or THIS_MACHINE
    return THIS_MACHINE


def dtype_name(dtype: torch.dtype) -> str:
    """"float32", "bfloat16", ... as `--dtype` spells it."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class MemoryNeed:
    """What a model needs to run a context of `context_tokens`, in bytes.

    Attributes:
        dtype: the weights', activations' and KV cache's dtype.
        weight_bytes: parameters (tied embeddings once), counted on `meta`.
        kv_cache_bytes: 2 * L * h_kv * d_h * n * itemsize (docs/concepts.md, "kv_cache_write"); every
            layer counted at the full n, so sliding-window layers are over-counted.
        attention_bytes: h_q * n * n * ATTENTION_SCRATCH_BYTES_PER_ELEMENT, the hooked prefill's
            attention of one layer over the whole context.
        context_tokens: n, the context planned for.
    """

    dtype: torch.dtype
    weight_bytes: int
    kv_cache_bytes: int
    attention_bytes: int
    context_tokens: int

    @property
    def total_bytes(self) -> int:
        """Weights, KV cache and attention scratch, times `MEMORY_HEADROOM`."""
        return math.ceil((self.weight_bytes + self.kv_cache_bytes + self.attention_bytes) * MEMORY_HEADROOM)


def memory_need(config, dtype: torch.dtype, max_context_tokens: int = PLANNED_CONTEXT_TOKENS) -> MemoryNeed:
    """The memory `config` needs in `dtype` for a context of min(max_context_tokens, its own window).

    Args:
        config: a transformers config of a decoder-only model.
    """
    n = min(max_context_tokens, getattr(config, "max_position_embeddings", None) or max_context_tokens)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_cache_bytes = 2 * config.num_hidden_layers * kv_heads * head_dim * n * dtype.itemsize
    attention_bytes = heads * n * n * ATTENTION_SCRATCH_BYTES_PER_ELEMENT
    return MemoryNeed(dtype, estimate_weight_bytes(config, dtype), kv_cache_bytes, attention_bytes, n)


def memory_need_bytes(config, dtype: torch.dtype, max_context_tokens: int = PLANNED_CONTEXT_TOKENS) -> int:
    """`memory_need(...).total_bytes`: weights + KV cache + attention scratch for the context, with headroom."""
    return memory_need(config, dtype, max_context_tokens).total_bytes


def estimate_weight_bytes(config, dtype: torch.dtype) -> int:
    """Bytes of the model's parameters in `dtype`, counted on `meta` (tied weights counted once)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters()) * dtype.itemsize


def free_memory_bytes(device: torch.device) -> int:
    """Memory available for new allocations on `device`, in bytes.

    CPU: `psutil.virtual_memory().available` (on Linux the kernel's MemAvailable, its estimate of
    memory usable without swapping; on macOS and Windows the system's own equivalent).
    CUDA: the free bytes reported by `torch.cuda.mem_get_info`.
    MPS: Metal's recommended working-set size less what the driver has allocated
    (`torch.mps.recommended_max_memory`, `torch.mps.driver_allocated_memory`).
    """
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "mps":
        return torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()
    return psutil.virtual_memory().available


@dataclass(frozen=True)
class Placement:
    """Where the weights go, as `from_pretrained` takes it.

    Attributes:
        device_map: the device ("cpu", "mps", "cuda:0") or "auto" to spread over the CUDA devices.
        max_memory: for "auto", CUDA index -> bytes of weights accelerate may put there; else None.
        need_bytes: `MemoryNeed.total_bytes`.
        free_bytes: free bytes of the device, or of all CUDA devices together for "auto".
    """

    device_map: str
    max_memory: dict[int, int] | None
    need_bytes: int
    free_bytes: int


def plan_placement(need: MemoryNeed, device: str, name: str) -> Placement:
    """Put the model on `device` if it fits, else spread it over every CUDA device if they fit together.

    A spread gives each CUDA device weights in proportion to its free memory, leaving each the same
    share of room for its layers' KV cache and scratch.

    Raises:
        ModelLoadError: it fits neither; the message gives the need, what is free, and what to do.
    """
    need_bytes, free = need.total_bytes, free_memory_bytes(torch.device(device))
    if need_bytes <= free:
        return Placement(device, None, need_bytes, free)
    frees = _cuda_free_bytes() if device.startswith("cuda") else {}
    if len(frees) > 1 and need_bytes <= sum(frees.values()):
        weight_share = need.weight_bytes / need_bytes
        max_memory = {index: int(free_i * weight_share) for index, free_i in frees.items()}
        return Placement("auto", max_memory, need_bytes, sum(frees.values()))
    raise ModelLoadError(_refusal(need, device, free, frees, name))


def _cuda_free_bytes() -> dict[int, int]:
    return {i: free_memory_bytes(torch.device("cuda", i)) for i in range(torch.cuda.device_count())}


def _refusal(need: MemoryNeed, device: str, free: int, frees: dict[int, int], name: str) -> str:
    gib = 2**30
    together = f" (the {len(frees)} CUDA devices together {sum(frees.values()) / gib:.1f} GiB)" if len(frees) > 1 else ""
    smaller = ", or --dtype bfloat16 (half the bytes of float32)" if need.dtype == torch.float32 else ""
    return (
        f"'{name}' needs about {need.total_bytes / gib:.1f} GiB in {dtype_name(need.dtype)}: "
        f"{need.weight_bytes / gib:.1f} GiB of weights, {need.kv_cache_bytes / gib:.1f} GiB of KV cache and "
        f"{need.attention_bytes / gib:.1f} GiB of attention scratch for {need.context_tokens:,} tokens of "
        f"context, plus {MEMORY_HEADROOM - 1:.0%} room to run; but {device} has {free / gib:.1f} GiB free"
        f"{together}. Run it shape-only with --config (no weights), pick a smaller model{smaller}."
    )
