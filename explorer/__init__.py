"""LLM Inference Explorer: one real inference, prefill then decode, traced stop by stop."""

__version__ = "0.1.0"
