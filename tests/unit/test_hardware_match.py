"""Matching a driver's device name to the hardware catalogue (the GPU check's roofline entry)."""

from __future__ import annotations

import pytest

from explorer.analysis.hardware import catalogue_key_for


@pytest.mark.parametrize("device_name, key", [
    ("NVIDIA H200", "h200"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # the SXM part's CUDA name; a tie with PCIe goes to the first entry
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("AMD Instinct MI300X", "mi300x"),
])
def test_known_devices_find_their_entry(device_name, key):
    assert catalogue_key_for(device_name) == key


@pytest.mark.parametrize("device_name", ["NVIDIA L40S", "Tesla T4", "NVIDIA GeForce RTX 3090", ""])
def test_a_device_without_an_entry_matches_none(device_name):
    assert catalogue_key_for(device_name) is None
