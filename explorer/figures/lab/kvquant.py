"""KV-cache quantization's figure: the float cache, INT8 and FP8 side by side, fidelity against the
cache's bytes per token and the decode speed the roofline predicts at batch 64."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.lab.lossy import fig_variants
from explorer.lab.kvquant import BOUND_BATCH, KVQuantResult


def fig_kvquant(result: KVQuantResult) -> go.Figure:
    """The variants' KL, top-1 agreement, perplexity (measured), KV-cache bytes per token (computed) and
    predicted decode bound at batch 64 (estimated); the title says what the last format cost.

    Returns:
        A figure with `layout.meta == {"view": "lab-kvquant", "step": None}`.
    """
    base, last = result.variants[0], result.variants[-1]
    segments = [f"KV-cache quantization: {last.name} stores {last.bytes_per_element:.0f} bytes a token of cache "
                f"against {base.bytes_per_element:.0f} (computed) and",
                f"the roofline predicts {base.predicted_step_s / last.predicted_step_s:.2f}x the decode speed at "
                f"batch {BOUND_BATCH} on the {result.hardware};",
                f"it costs perplexity {base.fidelity.text_perplexity:.2f} → {last.fidelity.text_perplexity:.2f}",
                f"and {last.fidelity.text_top1:.0%} top-1 agreement (measured)"]
    return fig_variants(result.variants, "lab-kvquant", segments, "KV bytes / token<br>(computed)",
                        result.hardware)
