"""The layer split pipeline parallelism makes and its checks: contiguous ranges that cover the L layers
once, as even as they go (the first L mod S stages a layer more), and an S above L or an M out of range
refused with the numbers that work."""

from __future__ import annotations

import pytest

from explorer.errors import ConfigError
from explorer.lab.pipeline import check_pipeline, layer_ranges


def test_the_embedded_models_30_layers_over_3_and_4_stages():
    assert layer_ranges(30, 3) == [(0, 10), (10, 20), (20, 30)]
    assert layer_ranges(30, 4) == [(0, 8), (8, 16), (16, 23), (23, 30)]  # 30 = 8 + 8 + 7 + 7


@pytest.mark.parametrize("layers", [1, 3, 7, 30])
def test_every_split_is_contiguous_covers_each_layer_once_and_differs_by_at_most_one(layers):
    for stages in range(1, layers + 1):
        ranges = layer_ranges(layers, stages)
        assert len(ranges) == stages and ranges[0][0] == 0 and ranges[-1][1] == layers
        assert all(end == start for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False))
        sizes = [end - start for start, end in ranges]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_s_above_l_and_m_out_of_range_are_refused():
    check_pipeline(30, 30, 16)
    check_pipeline(3, 1, 1)
    with pytest.raises(ConfigError, match=r"at least one of the model's layers: S must be 1 to L = 3, not 4\.$"):
        check_pipeline(3, 4, 2)
    with pytest.raises(ConfigError, match=r"S must be 1 to L = 30, not 0"):
        check_pipeline(30, 0, 2)
    for microbatches in (0, 17):
        with pytest.raises(ConfigError, match=rf"M must be 1 to 16, not {microbatches}\.$"):
            check_pipeline(30, 3, microbatches)
