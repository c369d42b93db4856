"""A prompt's memory against the device's free memory, checked before a session allocates anything
for it (the estimate itself is `explorer.analysis.memory`'s arithmetic)."""

from __future__ import annotations

import torch

from explorer.analysis.memory import PromptMemory, longest_prompt, prompt_memory, query_bytes
from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError
from explorer.runner.devices import free_memory_bytes
from explorer.runner.loaded import LoadedModel


def memory_estimate(loaded: LoadedModel, spec: ModelSpec | None, attention_budget_bytes: int,
                    n_tokens: int) -> PromptMemory | None:
    """The estimated memory of a prefill of `n_tokens` (`explorer.analysis.memory.prompt_memory`), in
    the model's dtype and under `attention_budget_bytes`; None in shape-only mode or where `spec` is
    None (a family the cost model does not know)."""
    if spec is None or loaded.shape_only:
        return None
    return prompt_memory(spec, n_tokens, loaded.model.dtype.itemsize, attention_budget_bytes)


def step_query_bytes(loaded: LoadedModel, spec: ModelSpec | None, q_len: int) -> int:
    """Bytes of the post-RoPE queries a step of `q_len` tokens keeps, all layers (as `memory_estimate`
    counts them); 0 where the estimate is not made."""
    if spec is None or loaded.shape_only:
        return 0
    return query_bytes(spec, q_len, loaded.model.dtype.itemsize)


def check_memory(loaded: LoadedModel, spec: ModelSpec | None, attention_budget_bytes: int, n_tokens: int) -> None:
    """Refuse a prompt whose estimated memory beyond the loaded weights exceeds the device's free memory.

    Raises:
        PromptError: it does not fit; the message gives the estimate, the free memory and the longest
            prompt that fits.
    """
    need = memory_estimate(loaded, spec, attention_budget_bytes, n_tokens)
    if need is None:
        return
    device = torch.device(loaded.device)
    free = free_memory_bytes(device)
    if need.run_bytes <= free:
        return
    fits = longest_prompt(spec, loaded.model.dtype.itemsize, attention_budget_bytes, free, n_tokens)
    raise PromptError(
        f"The prompt is {n_tokens:,} tokens; running it needs {need.summary()}. Beyond the loaded weights "
        f"that is {need.run_bytes / 1e6:,.0f} MB, but {device} has {free / 1e6:,.0f} MB free. Shorten the "
        f"prompt to at most {fits:,} tokens, or free memory (close other programs or sessions) and run it again."
    )
