"""A machine for the roofline: peak FLOP/s per format, memory bandwidth, memory size, and sources;
and the links between machines (`Link`, `get_link`) for the collectives of tensor parallelism.

`get_hardware(name_or_path)` returns a catalogue entry (`hardware_catalogue.CATALOGUE`) or an entry a
person wrote in a JSON file. "This machine" is measured, so it is not here: `explorer.runner.probe`
measures it (once, then cached) as an explicit step, never as a side effect of a lookup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from explorer.analysis.hardware_catalogue import CATALOGUE, LINKS
from explorer.analysis.precision import canonical_dtype
from explorer.config import read_json_object
from explorer.errors import ConfigError

THIS_MACHINE = "this-machine"

# A format the hardware has no units for runs at the rate of the next wider format it has
# (weights are de-quantised on the fly, as W4A16 kernels do).
_FALLBACK = {
    "int4": ("int8", "fp8", "bf16", "fp16", "fp32"),
    "int8": ("fp8", "bf16", "fp16", "fp32"),
    "fp8": ("bf16", "fp16", "fp32"),
    "bf16": ("fp16", "fp32"),
    "fp16": ("bf16", "fp32"),
    "fp32": (),
}


@dataclass(frozen=True)
class Hardware:
    """Peak rates of one machine.

    Attributes:
        key: catalogue key, "this-machine", or the file it came from.
        name: human-readable name.
        memory_bytes: memory capacity in bytes.
        memory_bandwidth_bytes_per_s: peak memory bandwidth, bytes/s.
        dense_flops_per_s: format -> peak dense FLOP/s.
        sparse_flops_per_s: format -> peak FLOP/s with 2:4 structured sparsity (empty if none).
        sources: field (e.g. "dense_flops_per_s.bf16") -> where the number comes from.
        cache_bandwidth_bytes_per_s: bandwidth from the caches (a weight that fits in them), bytes/s;
            0 where not measured (the catalogue's datasheets give none).
        op_overhead_s: what every operator costs whatever its size (Python dispatch, kernel launch),
            seconds; 0 where not measured.
    """

    key: str
    name: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    dense_flops_per_s: dict[str, float]
    sparse_flops_per_s: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    cache_bandwidth_bytes_per_s: float = 0.0
    op_overhead_s: float = 0.0

    def peak_flops_per_s(self, dtype: str, sparse: bool = False) -> tuple[float, str]:
        """(peak FLOP/s, the format whose rate it is) for matmuls computed in `dtype`.

        Raises:
            ConfigError: the machine lists no rate for `dtype` nor any wider format.
        """
        table = self.sparse_flops_per_s if sparse else self.dense_flops_per_s
        short = canonical_dtype(dtype)
        for candidate in (short, *_FALLBACK[short]):
            if candidate in table:
                return table[candidate], candidate
        kind = "sparse" if sparse else "dense"
        raise ConfigError(f"{self.name} lists no {kind} FLOP/s for {short} or a wider format.")

    def ridge_point(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s over bandwidth: the arithmetic intensity (FLOP/byte) where the roofline bends."""
        return self.peak_flops_per_s(dtype)[0] / self.memory_bandwidth_bytes_per_s


def hardware_from_dict(key: str, data: dict) -> Hardware:
    """Build a `Hardware` from the catalogue's shape: every number a [value, source] pair.

    Raises:
        ConfigError: a field is missing, or a number lacks its source.
    """
    try:
        sources = {}
        scalars = {}
        for name in ("memory_bytes", "memory_bandwidth_bytes_per_s"):
            scalars[name], sources[name] = _sourced(data[name], name)
        for name in ("cache_bandwidth_bytes_per_s", "op_overhead_s"):  # measured by the probe only
            if name in data:
                scalars[name], sources[name] = _sourced(data[name], name)
        tables = {}
        for table in ("dense_flops_per_s", "sparse_flops_per_s"):
            tables[table] = {}
            for dtype, pair in data.get(table, {}).items():
                key_dtype = dtype if dtype == "tf32" else canonical_dtype(dtype)  # tf32: compute-only format
                tables[table][key_dtype], sources[f"{table}.{dtype}"] = _sourced(pair, dtype)
        return Hardware(key=key, name=data["name"], sources=sources, **scalars, **tables)
    except KeyError as exc:
        raise ConfigError(f"Hardware entry '{key}' lacks the field {exc}.") from None


def _sourced(pair, name: str) -> tuple[float, str]:
    if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[1], str) and pair[1]):
        raise ConfigError(f"'{name}' must be a [value, source] pair with a non-empty source, not {pair!r}.")
    return float(pair[0]), pair[1]


def load_hardware_file(path: str | Path) -> Hardware:
    """A hardware entry from a JSON file shaped like a `CATALOGUE` entry, e.g.::

        {"name": "My GPU", "memory_bytes": [24e9, "vendor page"],
         "memory_bandwidth_bytes_per_s": [1.0e12, "vendor page"],
         "dense_flops_per_s": {"bf16": [150e12, "vendor page"]}}

    Raises:
        ConfigError: unreadable file, not JSON, or an entry without sources.
    """
    path = Path(path)
    return hardware_from_dict(str(path), read_json_object(path, "a hardware entry"))


def hardware_names() -> list[str]:
    """Catalogue keys, then "this-machine"."""
    return sorted(CATALOGUE) + [THIS_MACHINE]


def catalogue_key_for(device_name: str) -> str | None:
    """The catalogue entry of a device as its driver names it, or None when none matches.

    The entry's chip (the first word of its key with a digit: "h100", "a100", "4090") must be a word
    of `device_name`; among those, the entry whose name shares the most words wins, the first in the
    catalogue on a tie. E.g. "NVIDIA A100-SXM4-80GB" -> "a100-80gb", "NVIDIA H100 PCIe" -> "h100-pcie",
    "NVIDIA H100 80GB HBM3" -> "h100-sxm", "NVIDIA L40S" -> None.

    Args:
        device_name: e.g. `torch.cuda.get_device_name()`.
    """
    words = set(_words(device_name))
    best, best_shared = None, 0
    for key, entry in CATALOGUE.items():
        chip = next(word for word in _words(key) if any(c.isdigit() for c in word))
        shared = len(words & set(_words(entry["name"])))
        if chip in words and shared > best_shared:
            best, best_shared = key, shared
    return best


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def get_hardware(name_or_path: str) -> Hardware:
    """A catalogue entry or the entry in a JSON file (this machine is measured:
    `explorer.runner.probe.resolve_hardware`).

    Raises:
        ConfigError: neither a known name nor a readable hardware file, or "this-machine".
    """
    if name_or_path in CATALOGUE:
        return hardware_from_dict(name_or_path, CATALOGUE[name_or_path])
    if name_or_path == THIS_MACHINE:
        raise ConfigError(f"'{THIS_MACHINE}' is measured, not listed: probe it (explorer.runner.probe.resolve_hardware).")
    if Path(name_or_path).is_file():
        return load_hardware_file(name_or_path)
    raise ConfigError(
        f"Unknown hardware '{name_or_path}'. Known: {', '.join(hardware_names())}, or a path to a JSON entry."
    )


@dataclass(frozen=True)
class Link:
    """A link between ranks for the collectives' alpha-beta model (`explorer.analysis.collectives`).

    Attributes:
        key: catalogue key (`hardware_catalogue.LINKS`).
        name: human-readable name.
        bandwidth_bytes_per_s: beta, bytes/s each way per rank.
        latency_s: alpha, the latency of one message step, seconds.
        sources: "bandwidth_bytes_per_s" and "latency_s" -> where each number comes from.
    """

    key: str
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    sources: dict[str, str]


def link_names() -> list[str]:
    """The catalogue's link keys, sorted."""
    return sorted(LINKS)


def get_link(name: str) -> Link:
    """The catalogue's link `name`.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    if name not in LINKS:
        raise ConfigError(f"Unknown link '{name}'. Known: {', '.join(link_names())}.")
    entry = LINKS[name]
    (bandwidth, bandwidth_source), (latency, latency_source) = entry["bandwidth_bytes_per_s"], entry["latency_s"]
    return Link(name, entry["name"], bandwidth, latency,
                {"bandwidth_bytes_per_s": bandwidth_source, "latency_s": latency_source})
