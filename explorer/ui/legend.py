"""The legend under the token strip: each dimension symbol with this model's value at the step shown
(in its colour, as every figure writes it), and what the token chips' colours and borders mean."""

from __future__ import annotations

import html

from explorer.figures.dims import DIM_COLOURS
from explorer.run import Run

CHIPS = ('<span class="key prompt">prompt token</span> <span class="key generated">generated</span> '
         '<span class="key shown">fed at the step shown</span> <span class="key next">chosen, not yet fed</span>')


def legend_html(run: Run, step: int) -> str:
    """One line: B, T, n, d, h_q, h_kv, d_h, d_ff, V and L at `step` (T the tokens it fed, n the
    context after it), then the chips' key. Values are the config's, as transformers resolved it (the
    spec), and the step's measured B, T and n; a family the cost model does not know shows T and n only."""
    trace = run.steps[step]
    batch = trace.op("embed").input_shapes[0][0]  # measured: the embedding is fed [B, T]
    values = {"B": batch, "T": len(trace.input_ids), "n": trace.context_length}
    spec = run.spec
    if spec is not None:
        values |= {"d": spec.hidden_size, "h_q": spec.n_heads, "h_kv": spec.n_kv_heads, "d_h": spec.head_dim,
                   "d_ff": spec.intermediate_size, "V": spec.vocab_size}
    symbols = " · ".join(f'<b style="color:{DIM_COLOURS[name]}">{html.escape(name)}</b> = {value:,}'
                         for name, value in values.items())
    layers = f" · <b>L</b> = {spec.n_layers} layers" if spec is not None else ""
    return f'<div class="legend">{symbols}{layers} <span class="chips">{CHIPS}</span></div>'
