"""Pure analysis of a model config: dimensions, parameter counts, KV-cache size, per-operator FLOPs
and bytes, the roofline of a chosen machine, and predicted shapes. Never imports torch or gradio."""
