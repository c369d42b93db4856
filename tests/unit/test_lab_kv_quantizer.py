"""The KV quantizer on random tensors: every round-trip error within its bound (INT8: half a scale;
FP8 e4m3: half a unit in the last place, 2^-4 of the value, or 2^-10 scales among subnormals), the codes
in range, the fp16 scales one per row, and the bytes per token counted by hand."""

from __future__ import annotations

import pytest
import torch

from explorer.lab.kvquant import cache_bytes_per_token
from explorer.runner.lab.kvcache import dequantize_rows, quantize_rows


def random_states(seed: int) -> torch.Tensor:
    """[B=2, h_kv=3, n=17, d_h=11], rows of very different magnitudes, one all zero."""
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(2, 3, 17, 11, generator=generator) * torch.rand(2, 3, 17, 1, generator=generator) * 40
    states[1, 2, 5] = 0.0
    return states


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int8_round_trip_is_within_half_a_scale(seed):
    states = random_states(seed)
    codes, scales = quantize_rows(states, "int8")
    assert codes.dtype == torch.int8 and codes.abs().max() <= 127
    assert scales.dtype == torch.float16 and scales.shape == (2, 3, 17, 1)
    error = (dequantize_rows(codes, scales, torch.float32) - states).abs()
    assert torch.all(error <= scales.float() / 2 * (1 + 1e-6))
    assert torch.all(dequantize_rows(codes, scales, torch.float32)[1, 2, 5] == 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fp8_round_trip_is_within_half_an_e4m3_step(seed):
    states = random_states(seed)
    codes, scales = quantize_rows(states, "fp8")
    assert codes.dtype == torch.float8_e4m3fn and codes.float().abs().max() <= 448
    scaled = states / scales.float()
    error = (codes.float() - scaled).abs()
    assert torch.all(error <= torch.maximum(scaled.abs() * 2 ** -4, torch.tensor(2 ** -10)) * (1 + 1e-6))


def test_the_largest_value_of_a_row_maps_to_the_top_code():
    states = torch.tensor([[[[0.5, -1.27, 0.1], [2.54, 0.0, -1.0]]]])
    codes, _ = quantize_rows(states, "int8")
    assert codes.abs().amax(-1).tolist() == [[[127, 127]]]


def test_bytes_per_token_counted_by_hand():
    # SmolLM2-135M: L=30, h_kv=3, d_h=64: float32 2·30·3·64·4; INT8 with fp16 scales 2·30·3·(64 + 2)
    assert cache_bytes_per_token(30, 3, 64, 4, 0) == 46_080
    assert cache_bytes_per_token(30, 3, 64, 1, 2) == 11_880
