"""LLM Inference Explorer: one real inference, prefill then decode, traced stop by stop.

`from explorer import Explorer` gives the notebook front end (`explorer.notebook`); it is imported on
first use, so `import explorer` alone stays cheap (no torch, no gradio).
"""

__version__ = "0.1.0"
__all__ = ["Explorer"]


def __getattr__(name: str):
    if name == "Explorer":
        from explorer.notebook import Explorer

        return Explorer
    raise AttributeError(f"module 'explorer' has no attribute {name!r}")
