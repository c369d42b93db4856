"""The weight quantizer on random tensors: every round-trip error within half its scale, the codes in
range, per-channel and group-wise scales where they belong, and the bytes stored counted by hand."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.lab.quant import dequantize, quantize, stored_bytes


@pytest.mark.parametrize(("bits", "group_size"), [(8, 10_000), (8, 16), (4, 32), (4, 7), (4, 1)])
def test_round_trip_error_is_at_most_half_a_step(bits, group_size):
    rng = np.random.default_rng(bits * 100 + group_size % 97)
    weight = (rng.standard_normal((13, 70)) * rng.uniform(0.01, 3, (13, 1))).astype(np.float32)
    weight[2] = 0.0  # an all-zero row: scale 1, codes 0
    codes, scales = quantize(weight, bits, group_size)
    size = min(group_size, 70)
    assert codes.shape == weight.shape and codes.dtype == np.int8
    assert scales.shape == (13, -(-70 // size))
    assert np.abs(codes).max() <= 2 ** (bits - 1) - 1
    assert np.all(scales == scales.astype(np.float16).astype(np.float32))  # fp16 values, as stored
    per_weight = np.repeat(scales, size, axis=1)[:, :70]
    error = np.abs(weight - dequantize(codes, scales, group_size))
    assert np.all(error <= per_weight / 2 * (1 + 1e-6))
    assert np.all(dequantize(codes, scales, group_size)[2] == 0)


def test_one_scale_per_output_channel_is_its_largest_weight_over_127():
    weight = np.array([[0.5, -1.27, 0.1], [2.54, 0.0, -1.0]], dtype=np.float32)
    codes, scales = quantize(weight, 8, 3)
    np.testing.assert_allclose(scales[:, 0], [0.01, 0.02], rtol=1e-3)
    assert codes[0].tolist() == [50, -127, 10] and codes[1].tolist() == [127, 0, -50]


def test_bytes_stored_are_the_codes_and_an_fp16_scale_per_group():
    assert stored_bytes((576, 1536), 4, 32) == 576 * 1536 / 2 + 576 * 48 * 2
    assert stored_bytes((576, 1536), 8, 1536) == 576 * 1536 + 576 * 2
    assert stored_bytes((5, 37), 4, 32) == 5 * 37 / 2 + 5 * 2 * 2  # a short last group still has a scale


def test_bits_not_offered_are_refused():
    with pytest.raises(ValueError, match="bits must be one of"):
        quantize(np.ones((2, 2), np.float32), 3, 2)
