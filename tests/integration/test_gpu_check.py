"""`benchmarks/gpu_check.py` runs end to end (here on the CPU) and prints real figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[2]
DECODE_GEMMS = ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                "mlp.down_proj", "lm_head"]


def test_gpu_check_prints_ratios_rates_bandwidth_fractions_and_peak_memory(embedded_model, embedded_cache_dir):
    env = os.environ | {"EXPLORER_CACHE_DIR": str(embedded_cache_dir), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--prompt-tokens", "32", "--steps", "3"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
    out = result.stdout
    assert "in float32" in out or "in bfloat16" in out
    tokens = int(re.search(r"prefill of (\d+) tokens", out).group(1))
    assert 30 <= tokens <= 34
    assert f"median of 3 steps at context {tokens + 1}..{tokens + 3}:" in out  # no early end, no skipped step
    ratios = [float(r) for r in re.findall(r"ratio (\d+\.\d+)x", out)]
    rates = [float(r) for r in re.findall(r"(\d+\.\d+) tokens/s", out)]
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
    assert len(rates) == 4 and all(r > 0 for r in rates)
    peak_gbps = float(re.search(r"'s (\d+\.\d+) GB/s:", out).group(1))
    for name in DECODE_GEMMS:
        line = re.search(rf"^  {re.escape(name)} +(\d+\.\d+) GB/s +(\d+\.\d+)", out, re.MULTILINE)
        assert line, f"no bandwidth line for {name}"
        gbps, fraction = float(line.group(1)), float(line.group(2))
        assert gbps > 0 and fraction > 0
        assert gbps / peak_gbps == pytest.approx(fraction, rel=0.01, abs=0.001)  # a fraction of the first printed roof
    peak_gib = float(re.search(r"peak memory: (\d+\.\d+) GiB", out).group(1))
    assert peak_gib > 0.25  # at least the weights: 0.25 GiB in bfloat16, 0.5 GiB in float32
