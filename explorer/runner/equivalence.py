"""The "equivalent is not identical" experiment on the loaded model (plain transformers, no hooks).

The reference decodes greedily for a few steps as the model is loaded (its attention implementation
and dtype, batch 1, a `DynamicCache`). Each variant is mathematically the same computation and is
fed the reference's tokens, so its logits can be compared step by step: the prompt in a batch of 4
(left-padded, with an attention mask and position ids from it), the other attention implementation
(eager <-> SDPA), the other precision (float32 <-> bfloat16, on a copy of the model), and no KV
cache (every step recomputes the whole sequence). Each forward pass takes a turn of its own on the
model's lock (`explorer.runner.passes.model_pass`), and the shared model is only read: the other
attention implementation runs on a view sharing its weights (`explorer.runner.attention_view`), the
other precision on a copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from transformers import DynamicCache

from explorer.analysis.equivalence import DEFAULT_STEPS, MAX_STEPS, Comparison, EquivalenceResult
from explorer.errors import PromptError, SessionStateError
from explorer.runner.loaded import LoadedModel
from explorer.runner.attention_view import attention_view
from explorer.runner.passes import model_pass, own_copy

MAX_PROMPT_TOKENS = 512
MAX_COPY_BYTES = 4 * 2**30  # the precision variant copies the model: only where the copy is small
# The other rows of the batch: a short one and one longer than most prompts, so the prompt's row is padded.
OTHER_PROMPTS = ("Hi", "1 2 3 4 5 6 7", "Tell me a story about a dragon who lived under a mountain and guarded "
                 "its gold for a thousand years, until one winter a child came to the cave with a lantern.")

Logits = torch.Tensor  # [steps, V] float32 on the CPU


def run_equivalence(loaded: LoadedModel, prompt_ids: list[int], steps: int = DEFAULT_STEPS) -> EquivalenceResult:
    """Measure how far equivalent ways of decoding `prompt_ids` differ (see the module's docstring).

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids (T of them, at most `MAX_PROMPT_TOKENS`).
        steps: greedy steps compared (the prefill's choice is step 0), 1..`MAX_STEPS`.

    Raises:
        SessionStateError: shape-only mode (no values to compare).
        PromptError: no prompt ids, too many, or `steps` out of range.
    """
    if loaded.shape_only:
        raise SessionStateError("Shape-only mode computes no logits, so there is nothing to compare.")
    if not 1 <= len(prompt_ids) <= MAX_PROMPT_TOKENS:
        raise PromptError(f"The experiment takes a prompt of 1 to {MAX_PROMPT_TOKENS} tokens, not {len(prompt_ids)}.")
    if not 1 <= steps <= MAX_STEPS:
        raise PromptError(f"The experiment compares 1 to {MAX_STEPS} steps, not {steps}.")
    model = loaded.model
    start = time.perf_counter()
    with torch.inference_mode():
        reference, tokens = _cached(model, prompt_ids, steps)
        forced = tokens[:-1]
        comparisons = [
            _compare("in a batch of 4 (left-padded)", reference, tokens, lambda: _batched(loaded, prompt_ids, forced)),
            _compare(f"{_other_attention(model)} attention", reference, tokens,
                     lambda: _cached(attention_view(model, _other_attention(model)), prompt_ids, steps, forced)[0]),
            _compare(f"{_other_dtype(model)} weights", reference, tokens, lambda: _other_precision(model, prompt_ids, forced)),
            _compare("no KV cache (full recompute)", reference, tokens, lambda: _recomputed(model, prompt_ids, forced)),
        ]
    described = (f"alone, {model.config._attn_implementation} attention, {str(model.dtype).removeprefix('torch.')}, "
                 f"KV cache, {loaded.device}")
    return EquivalenceResult(described, len(prompt_ids), tokens, comparisons, (time.perf_counter() - start) * 1e3)


def _compare(name: str, reference: Logits, tokens: list[int], variant: Callable[[], Logits | str]) -> Comparison:
    """Run `variant` (its [steps, V] logits, or a reason it cannot run) and compare it with the reference."""
    logits = variant()
    if isinstance(logits, str):
        return Comparison(name, [], [], [], None, skipped=logits)
    delta = (logits - reference).abs()
    argmax = logits.argmax(-1).tolist()
    differs = [step for step, (mine, theirs) in enumerate(zip(argmax, tokens, strict=True)) if mine != theirs]
    return Comparison(name, delta.amax(-1).tolist(), delta.mean(-1).tolist(), argmax, differs[0] if differs else None)


def _cached(model, prompt_ids: list[int], steps: int, forced: list[int] | None = None) -> tuple[Logits, list[int]]:
    """Prefill then decode with a cache, batch 1; each step feeds `forced[k]` or, without, its own argmax."""
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([prompt_ids], device=model.device)
    rows, tokens = [], []
    for step in range(steps):
        with model_pass(model):
            logits = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1].float().cpu()
        rows.append(logits)
        tokens.append(int(logits.argmax()))
        fed = forced[step] if forced is not None and step < len(forced) else tokens[-1]
        ids = torch.tensor([[fed]], device=model.device)
    return torch.stack(rows), tokens


def _batched(loaded: LoadedModel, prompt_ids: list[int], forced: list[int]) -> Logits | str:
    """The prompt as row 0 of a batch of 4, left-padded, with the attention mask and position ids."""
    tokenizer, model = loaded.tokenizer, loaded.model
    if tokenizer is None:
        return "the model has no tokenizer here for the other prompts"
    rows = [prompt_ids, *(tokenizer(text)["input_ids"] for text in OTHER_PROMPTS)]
    width = max(map(len, rows))
    pad = next((i for i in (tokenizer.pad_token_id, *loaded.eos_token_ids) if i is not None), 0)
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows], device=model.device)
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows], device=model.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    logits = []
    for step in range(len(forced) + 1):
        with model_pass(model):
            output = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                           logits_to_keep=1)
        logits.append(output.logits[0, -1].float().cpu())
        if step < len(forced):
            ids = torch.full((len(rows), 1), forced[step], device=model.device)
            mask = torch.cat([mask, torch.ones_like(ids)], dim=-1)
            positions = positions[:, -1:] + 1
    return torch.stack(logits)


def _other_precision(model, prompt_ids: list[int], forced: list[int]) -> Logits | str:
    """The same decode on a copy of the model in the other precision (the shared model is not touched)."""
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    if size > MAX_COPY_BYTES or getattr(model, "hf_device_map", None):
        return f"the model ({size / 2**30:.1f} GiB) is too large to copy here"
    other = own_copy(model).to(getattr(torch, _other_dtype(model)))
    try:
        return _cached(other, prompt_ids, len(forced) + 1, forced)[0]
    finally:
        del other


def _recomputed(model, prompt_ids: list[int], forced: list[int]) -> Logits:
    """Every step runs the whole sequence again, no cache."""
    rows = []
    for step in range(len(forced) + 1):
        ids = torch.tensor([prompt_ids + forced[:step]], device=model.device)
        with model_pass(model):
            rows.append(model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].float().cpu())
    return torch.stack(rows)


def _other_attention(model) -> str:
    return "sdpa" if model.config._attn_implementation == "eager" else "eager"


def _other_dtype(model) -> str:
    return "float32" if model.dtype in (torch.bfloat16, torch.float16) else "bfloat16"
