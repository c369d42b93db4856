"""The lab's figures: one module per experiment, `fig_<experiment>(result) -> go.Figure`."""
