"""The time of a collective over p ranks on a link: the alpha-beta model (latency alpha per message
step, bandwidth beta each way per rank), as NCCL's own tuner models it (NVIDIA/nccl
src/graph/tuning.cc: a latency per step plus bytes over a bus bandwidth).

Ring all-reduce (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 69(2)): a reduce-scatter then an all-gather, 2(p - 1) steps each sending n / p
bytes, so t = 2(p - 1)/p · n / beta + 2(p - 1) · alpha. All-gather of n_total bytes gathered (each rank
contributes n_total / p): (p - 1) steps, t = (p - 1)/p · n_total / beta + (p - 1) · alpha (NCCL docs,
"Performance": algorithm bandwidth vs bus bandwidth, factor (p - 1)/p). Point-to-point send: t = n /
beta + alpha. Pairwise all-to-all of n bytes per rank (n / p to each other rank): (p - 1) steps, t =
(p - 1)/p · n / beta + (p - 1) · alpha.

The crossover: a ring all-reduce's latency term equals its bandwidth term where 2(p - 1) · alpha =
2(p - 1)/p · n / beta, i.e. n* = p · alpha · beta bytes; below n* it is latency-bound, above it
bandwidth-bound (the same n* holds for the all-gather and the all-to-all). Pure Python; seconds, bytes,
bytes/s throughout.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CollectiveTime:
    """A collective's predicted time, split into its two terms.

    Attributes:
        kind: "all-reduce", "all-gather", "send" or "all-to-all".
        ranks: p.
        payload_bytes: n, the bytes each rank contributes (all-reduce, all-to-all, send) or the
            gathered total (all-gather).
        latency_s: the steps times the link's latency, seconds.
        bandwidth_s: the bytes each rank sends over the link's bandwidth, seconds.
    """

    kind: str
    ranks: int
    payload_bytes: float
    latency_s: float
    bandwidth_s: float

    @property
    def seconds(self) -> float:
        """latency_s + bandwidth_s (the terms do not overlap in the alpha-beta model), seconds."""
        return self.latency_s + self.bandwidth_s

    @property
    def bound(self) -> str:
        """"latency" where the latency term is the larger, else "bandwidth"."""
        return "latency" if self.latency_s > self.bandwidth_s else "bandwidth"


def _checked(ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> None:
    if ranks < 1 or latency_s < 0 or bandwidth_bytes_per_s <= 0:
        raise ValueError(f"Need p >= 1, latency >= 0 and bandwidth > 0, not {ranks}, {latency_s}, "
                         f"{bandwidth_bytes_per_s}.")


def all_reduce(n_bytes: float, ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> CollectiveTime:
    """Ring all-reduce of n bytes on each of p ranks: 2(p-1)/p · n / beta + 2(p-1) · alpha seconds
    (Patarasuk & Yuan 2009); 0 at p = 1.

    Args:
        n_bytes: the bytes each rank holds and gets back reduced.
        ranks: p.
        latency_s: alpha, the link's latency per step, seconds.
        bandwidth_bytes_per_s: beta, bytes/s each way per rank.
    """
    _checked(ranks, latency_s, bandwidth_bytes_per_s)
    steps = 2 * (ranks - 1)
    return CollectiveTime("all-reduce", ranks, n_bytes, steps * latency_s,
                          steps / ranks * n_bytes / bandwidth_bytes_per_s)


def all_gather(total_bytes: float, ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> CollectiveTime:
    """Ring all-gather of n_total bytes (n_total / p from each rank): (p-1)/p · n_total / beta +
    (p-1) · alpha seconds (NCCL docs, "Performance"); units as `all_reduce`."""
    _checked(ranks, latency_s, bandwidth_bytes_per_s)
    return CollectiveTime("all-gather", ranks, total_bytes, (ranks - 1) * latency_s,
                          (ranks - 1) / ranks * total_bytes / bandwidth_bytes_per_s)


def all_to_all(n_bytes: float, ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> CollectiveTime:
    """Pairwise all-to-all, each rank sending n / p bytes to each other rank: (p-1)/p · n / beta +
    (p-1) · alpha seconds; units as `all_reduce`."""
    _checked(ranks, latency_s, bandwidth_bytes_per_s)
    return CollectiveTime("all-to-all", ranks, n_bytes, (ranks - 1) * latency_s,
                          (ranks - 1) / ranks * n_bytes / bandwidth_bytes_per_s)


def send(n_bytes: float, latency_s: float, bandwidth_bytes_per_s: float) -> CollectiveTime:
    """Point-to-point send of n bytes: n / beta + alpha seconds; units as `all_reduce`."""
    _checked(2, latency_s, bandwidth_bytes_per_s)
    return CollectiveTime("send", 2, n_bytes, latency_s, n_bytes / bandwidth_bytes_per_s)


def crossover_bytes(ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> float:
    """n* = p · alpha · beta, bytes: where a ring all-reduce's (or all-gather's, all-to-all's) latency
    and bandwidth terms are equal; smaller messages are latency-bound, larger bandwidth-bound."""
    return ranks * latency_s * bandwidth_bytes_per_s


def fit_all_reduce(samples: list[tuple[float, float]], ranks: int) -> tuple[float, float]:
    """(alpha seconds, beta bytes/s) of the ring all-reduce model that fits measured (n bytes, seconds)
    samples: t = a + b · n with a = 2(p-1) · alpha and b = 2(p-1)/p / beta, by least squares of the
    relative error ((a + b·n - t) / t)², so the small messages (latency) weigh as much as the large
    (bandwidth) ones though their times are a thousand times shorter.

    Raises:
        ValueError: fewer than two distinct sizes, or a fit with a slope <= 0 (no bandwidth).
    """
    if len({n for n, _ in samples}) < 2:
        raise ValueError("A fit needs samples of at least two sizes.")
    w = [1 / t**2 for _, t in samples]
    s, sn, st = sum(w), sum(wi * n for wi, (n, _) in zip(w, samples)), sum(wi * t for wi, (_, t) in zip(w, samples))
    snn = sum(wi * n * n for wi, (n, _) in zip(w, samples))
    snt = sum(wi * n * t for wi, (n, t) in zip(w, samples))
    slope = (s * snt - sn * st) / (s * snn - sn**2)
    if slope <= 0:
        raise ValueError(f"The times do not grow with the size (slope {slope:.3g} s/byte): no bandwidth to fit.")
    intercept = (st - slope * sn) / s
    steps = 2 * (ranks - 1)
    return max(intercept, 0.0) / steps, steps / ranks / slope
