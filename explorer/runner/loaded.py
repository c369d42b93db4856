"""`LoadedModel`: a model ready to trace, as `explorer.runner.loading` returns it and a session runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class LoadedModel:
    """A model ready to trace.

    Attributes:
        model: the transformers causal LM, in eval mode with gradients off.
        tokenizer: its tokenizer; None in shape-only mode (a prompt is then a token count).
        name: what was asked for: "smollm2-135m-instruct", a hub id, a folder, or a preset.
        description: one line for the UI and CLI saying what the weights are, where and in what dtype.
        shape_only: True when the model lives on `meta` and has no weights.
        device: where inputs go: "cpu", "mps", "cuda:0", ... or "meta" (for a model spread over
            several GPUs, the device of its embedding).
        eos_token_ids: the ids that end generation, from the generation config and the tokenizer.
        dtype: the weights' dtype: "float32", "bfloat16" or "float16".
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase | None
    name: str
    description: str
    shape_only: bool
    device: str
    eos_token_ids: list[int]
    dtype: str = "float32"
