"""The "equivalent is not identical" heat map's colour scale: log, over the decades the values span,
so a rounding difference (3e-05) is pale where bf16's (0.5) is red, and its ticks say the values."""

from __future__ import annotations

import numpy as np

from explorer.analysis.equivalence import Comparison, EquivalenceResult
from explorer.figures.equivalence import equivalence_figure


def result(*rows: list[float]) -> EquivalenceResult:
    comparisons = [Comparison(f"variant {i}", list(row), list(row), [0] * len(row), None) for i, row in enumerate(rows)]
    return EquivalenceResult("alone", 5, [0] * len(rows[0]), comparisons, 1000.0)


def colour_position(figure, value: float) -> float:
    """Where `value` falls on the colour scale, 0 (white) to 1 (darkest red)."""
    heatmap = figure.data[0]
    return (np.log10(value) - heatmap.zmin) / (heatmap.zmax - heatmap.zmin)


def test_a_rounding_difference_is_pale_where_bf16s_is_red():
    figure = equivalence_figure(result([3e-5, 2e-5], [0.5, 0.4]), str)
    assert colour_position(figure, 3e-5) < 0.25 and colour_position(figure, 0.5) > 0.9
    heatmap = figure.data[0]
    assert list(heatmap.colorbar.ticktext) == ["0", "1e-5", "1e-4", "1e-3", "1e-2", "1e-1", "1e0"]
    assert list(heatmap.colorbar.tickvals) == list(range(-6, 1))


def test_an_exact_zero_is_drawn_at_the_scales_bottom_and_written_0():
    figure = equivalence_figure(result([0.0, 1e-6]), str)
    heatmap = figure.data[0]
    assert heatmap.z[0][0] == heatmap.zmin and heatmap.text[0][0] == "0"
    assert equivalence_figure(result([0.0, 0.0]), str).data[0].zmin == -1  # all equal: still a scale
