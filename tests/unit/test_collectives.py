"""The alpha-beta times of the collectives against hand-computed values, the latency/bandwidth
crossover n* = p·alpha·beta, the fit of the model to samples, and the catalogue's links with sources."""

from __future__ import annotations

import pytest

from explorer.analysis.collectives import all_gather, all_reduce, all_to_all, crossover_bytes, fit_all_reduce, send
from explorer.analysis.hardware import get_link, link_names
from explorer.analysis.hardware_catalogue import LINKS
from explorer.errors import ConfigError

ALPHA, BETA = 1e-6, 100e9  # 1 µs a step, 100 GB/s


def test_ring_all_reduce_by_hand():
    """p = 4, n = 1 MB: 2·3/4 · 1e6 / 1e11 = 15 µs of bandwidth, 2·3 · 1 µs = 6 µs of latency."""
    t = all_reduce(1e6, 4, ALPHA, BETA)
    assert t.bandwidth_s == pytest.approx(15e-6) and t.latency_s == pytest.approx(6e-6)
    assert t.seconds == pytest.approx(21e-6) and t.bound == "bandwidth"
    assert all_reduce(1e6, 1, ALPHA, BETA).seconds == 0  # one rank holds the whole sum


def test_all_gather_all_to_all_and_send_by_hand():
    """p = 8, n = 8 MB: (p-1)/p · n / beta = 7/8 · 80 µs = 70 µs, (p-1) · alpha = 7 µs; a send 80 + 1 µs."""
    gather = all_gather(8e6, 8, ALPHA, BETA)
    assert (gather.bandwidth_s, gather.latency_s) == (pytest.approx(70e-6), pytest.approx(7e-6))
    assert all_to_all(8e6, 8, ALPHA, BETA).seconds == pytest.approx(77e-6)
    assert send(8e6, ALPHA, BETA).seconds == pytest.approx(81e-6)


def test_the_crossover_splits_latency_bound_from_bandwidth_bound():
    """2(p-1)·alpha = 2(p-1)/p · n / beta at n* = p·alpha·beta: p = 8, 1 µs, 100 GB/s -> 800 kB."""
    n_star = crossover_bytes(8, ALPHA, BETA)
    assert n_star == pytest.approx(800e3)
    at = all_reduce(n_star, 8, ALPHA, BETA)
    assert at.latency_s == pytest.approx(at.bandwidth_s)
    small, large = all_reduce(n_star / 100, 8, ALPHA, BETA), all_reduce(n_star * 100, 8, ALPHA, BETA)
    assert small.bound == "latency" and small.latency_s > 50 * small.bandwidth_s
    assert large.bound == "bandwidth" and large.bandwidth_s > 50 * large.latency_s
    for collective in (all_gather, all_to_all):  # the same n* for the one-pass rings
        at = collective(n_star, 8, ALPHA, BETA)
        assert at.latency_s == pytest.approx(at.bandwidth_s)


def test_the_fit_recovers_the_model_it_samples():
    samples = [(n, all_reduce(n, 2, 90e-6, 1.7e9).seconds) for n in (8, 1e3, 1e5, 1e7, 3e7)]
    alpha, beta = fit_all_reduce(samples, 2)
    assert alpha == pytest.approx(90e-6) and beta == pytest.approx(1.7e9)
    with pytest.raises(ValueError, match="two sizes"):
        fit_all_reduce([(8, 1e-4), (8, 2e-4)], 2)


def test_every_link_has_a_sourced_bandwidth_and_latency():
    assert link_names() == ["ib-ndr", "loopback", "nvlink4", "pcie5"]
    for name in link_names():
        link = get_link(name)
        assert link.bandwidth_bytes_per_s > 0 and link.latency_s > 0
        assert set(link.sources) == {"bandwidth_bytes_per_s", "latency_s"} and all(link.sources.values())
    nvlink = get_link("nvlink4")
    assert nvlink.bandwidth_bytes_per_s == 450e9 and "H100" in nvlink.sources["bandwidth_bytes_per_s"]
    assert "900 GB/s bidirectional" in nvlink.sources["bandwidth_bytes_per_s"]
    assert "estimate" in nvlink.sources["latency_s"] and "NCCL" in nvlink.sources["latency_s"]
    assert get_link("pcie5").bandwidth_bytes_per_s == 64e9 and "PCI-SIG" in LINKS["pcie5"]["bandwidth_bytes_per_s"][1]
    assert get_link("ib-ndr").bandwidth_bytes_per_s == 50e9
    assert "400 Gb/s" in LINKS["ib-ndr"]["bandwidth_bytes_per_s"][1]
    loopback = get_link("loopback").sources
    assert all(s.startswith("measured") and "bench_loopback.py" in s for s in loopback.values())
    with pytest.raises(ConfigError, match="Known: ib-ndr, loopback, nvlink4, pcie5"):
        get_link("nvlink9")
