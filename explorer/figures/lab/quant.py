"""Weight quantization's figure: float32, INT8 and INT4 side by side, fidelity against bytes and speed."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.lab.lossy import fig_variants
from explorer.lab.quant import QuantResult


def fig_quant(result: QuantResult) -> go.Figure:
    """The variants' KL, top-1 agreement, perplexity (measured), bytes per weight (computed) and predicted
    decode bound (estimated); the title says what the smallest format cost.

    Returns:
        A figure with `layout.meta == {"view": "lab-quant", "step": None}`.
    """
    base, last = result.variants[0], result.variants[-1]
    segments = [f"Weight quantization (fake: dequantized to float for the matmuls): {last.name} stores "
                f"{last.bytes_per_element:.2f} bytes a weight against {base.bytes_per_element:.0f} and",
                f"the roofline predicts {base.predicted_step_s / last.predicted_step_s:.1f}x the decode speed "
                f"on the {result.hardware};",
                f"it costs perplexity {base.fidelity.text_perplexity:.2f} → {last.fidelity.text_perplexity:.2f}",
                f"and {last.fidelity.text_top1:.0%} top-1 agreement (measured)"]
    return fig_variants(result.variants, "lab-quant", segments, "bytes / weight<br>(computed)", result.hardware)
