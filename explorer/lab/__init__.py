"""The lab: an inference engine's tricks run for real on the loaded model (prefix caching, chunked
prefill, ...), each with the equality or the cost it claims proven on the run.

Pure: each experiment's result (plain numbers, each named measured, computed or estimated), its
lines for the CLI and its lesson text (`explorer.lab.<experiment>`), its parameters
(`explorer.lab.params`) and the table of experiments (`explorer.lab.table`). The runner runs them
(`explorer.runner.lab`); the figures draw them (`explorer.figures.lab`).
"""
