"""Peak FLOP/s, memory bandwidth and memory size of common accelerators, each number with its source.

Every number is a (value, source) pair. FLOP/s: dense and 2:4 structured-sparse kept apart; vendors
often print only the sparse figure (marked "*" in NVIDIA datasheets), and the dense one is half of
it. Keys of the FLOP/s tables are the compute formats of `explorer.analysis.precision`; "fp32" is
the non-tensor-core FP32 rate, the one PyTorch's float32 matmul gets by default
(`torch.backends.cuda.matmul.allow_tf32` is False). A person adds an entry from a JSON file of the
same shape (`explorer.analysis.hardware.load_hardware_file`).
"""

from __future__ import annotations

_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5 column"
_H100_PCIE = "NVIDIA H100 Tensor Core GPU datasheet (2022 edition), PCIe column"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021), SXM column"
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (2023)"
_ADA = "NVIDIA Ada GPU Architecture whitepaper v2.1, Appendix A, GeForce RTX 4090 (FP32 accumulate)"
_MI300X = "AMD Instinct MI300X Accelerator data sheet (2023)"
_SPARSE_HALF = "; dense = half the datasheet's with-sparsity figure"
_M3 = "Apple newsroom, 'Apple unveils M3, M3 Pro, and M3 Max' (30 Oct 2023), 40-core GPU"
_M4 = "Apple newsroom, 'Apple introduces M4 Pro and M4 Max' (30 Oct 2024), 40-core GPU"
_APPLE_FLOPS = ("estimate, Apple publishes no FLOP/s: 40 cores x 128 FP32 ALUs x 2 FLOP per FMA x "
                "GPU clock (third-party measured); FP16/BF16 run at the FP32 rate")


def _tensor(dense_by_dtype: dict[str, float], source: str) -> tuple[dict, dict]:
    """Dense and sparse tables from dense values whose sparse figure is exactly twice (NVIDIA, AMD)."""
    dense = {k: (v, source + (_SPARSE_HALF if k != "fp32" else "")) for k, v in dense_by_dtype.items()}
    sparse = {k: (2 * v, source) for k, v in dense_by_dtype.items() if k != "fp32"}
    return dense, sparse


def _entry(name: str, memory_bytes: float, bandwidth: float, source: str,
           dense_by_dtype: dict[str, float], flops_source: str | None = None, sparse: bool = True) -> dict:
    dense, sparse_table = _tensor(dense_by_dtype, flops_source or source)
    return {
        "name": name,
        "memory_bytes": (memory_bytes, source),
        "memory_bandwidth_bytes_per_s": (bandwidth, source),
        "dense_flops_per_s": dense,
        "sparse_flops_per_s": sparse_table if sparse else {},
    }


_HOPPER = {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12,
           "int8": 1978.9e12}
_AMPERE = {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12, "int4": 1248e12}

CATALOGUE: dict[str, dict] = {
    "h100-sxm": _entry("NVIDIA H100 SXM5 80GB", 80e9, 3.35e12, _H100, _HOPPER),
    "h100-pcie": _entry("NVIDIA H100 PCIe 80GB", 80e9, 2.0e12, _H100_PCIE,
                        {"fp32": 51.2e12, "tf32": 378e12, "bf16": 756.5e12, "fp16": 756.5e12,
                         "fp8": 1513e12, "int8": 1513e12}),
    "h200": _entry("NVIDIA H200 SXM 141GB", 141e9, 4.8e12, _H200, _HOPPER),
    "a100-40gb": _entry("NVIDIA A100 SXM4 40GB", 40e9, 1.555e12, _A100, _AMPERE),
    "a100-80gb": _entry("NVIDIA A100 SXM4 80GB", 80e9, 2.039e12, _A100, _AMPERE),
    "l4": _entry("NVIDIA L4 24GB", 24e9, 300e9, _L4,
                 {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12,
                  "int8": 242.5e12}),
    "rtx-4090": _entry("NVIDIA GeForce RTX 4090 24GB", 24e9, 1008e9, _ADA,
                       {"fp32": 82.6e12, "tf32": 82.6e12, "bf16": 165.2e12, "fp16": 165.2e12,
                        "fp8": 330.3e12, "int8": 660.6e12, "int4": 1321.2e12}),
    "mi300x": _entry("AMD Instinct MI300X 192GB", 192e9, 5.3e12, _MI300X,
                     {"fp32": 163.4e12, "tf32": 653.7e12, "bf16": 1307.4e12, "fp16": 1307.4e12,
                      "fp8": 2614.9e12, "int8": 2614.9e12}),
    "m3-max": _entry("Apple M3 Max (40-core GPU, 128GB)", 128e9, 400e9, _M3,
                     {"fp32": 14.2e12, "bf16": 14.2e12, "fp16": 14.2e12},
                     flops_source=_APPLE_FLOPS + " (~1.40 GHz)", sparse=False),
    "m4-max": _entry("Apple M4 Max (40-core GPU, 128GB)", 128e9, 546e9, _M4,
                     {"fp32": 17.2e12, "bf16": 17.2e12, "fp16": 17.2e12},
                     flops_source=_APPLE_FLOPS + " (~1.68 GHz)", sparse=False),
}

# Links between accelerators for the collectives' alpha-beta model (`explorer.analysis.collectives`):
# bandwidth each way per rank, bytes/s, and the latency of one message step, seconds. The latencies
# are NCCL's own per-step model (NVIDIA/nccl src/graph/tuning.cc, hwLat[..][Ring][LL], the protocol
# its tuner picks for small messages); they leave out its fixed launch latency (baseLat, 6.6 µs for
# ring LL), so a real small all-reduce takes a few µs more than the model.
_NCCL_LAT = "estimate: NCCL src/graph/tuning.cc hwLat {} ring LL, the per-step latency of NCCL's own model"
_LOOPBACK = ("measured: `python benchmarks/bench_loopback.py` on the 2-core development machine, "
             "2026-12-06, ring all-reduce model fitted to gloo all-reduces of 8 B to 34 MB over 127.0.0.1")
LINKS: dict[str, dict] = {
    "nvlink4": {
        "name": "NVLink 4 (H100 SXM, 18 links)",
        "bandwidth_bytes_per_s": (450e9, "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5 column: NVLink "
                                         "900 GB/s bidirectional per GPU, so 450 GB/s each way"),
        "latency_s": (0.6e-6, _NCCL_LAT.format("NVLINK")),
    },
    "pcie5": {
        "name": "PCIe 5.0 x16",
        "bandwidth_bytes_per_s": (64e9, "PCI-SIG PCI Express Base Specification 5.0: 32 GT/s a lane x 16 "
                                        "lanes, 128b/130b encoding = 63 GB/s, 64 GB/s as quoted, each way"),
        "latency_s": (1.0e-6, _NCCL_LAT.format("PCI")),
    },
    "ib-ndr": {
        "name": "InfiniBand NDR (one 400 Gb/s port)",
        "bandwidth_bytes_per_s": (50e9, "NVIDIA ConnectX-7 / Quantum-2 NDR datasheets: 400 Gb/s a port = 50 GB/s "
                                        "each way"),
        "latency_s": (2.7e-6, _NCCL_LAT.format("NET")),
    },
    "loopback": {
        "name": "loopback (this machine, gloo between 2 processes)",
        "bandwidth_bytes_per_s": (1.69e9, _LOOPBACK),
        "latency_s": (89.0e-6, _LOOPBACK),
    },
}
