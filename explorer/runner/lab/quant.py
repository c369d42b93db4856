"""Weight quantization on a copy of the loaded model (`explorer.lab.quant`): every linear weight of the
decoder layers rounded to INT8 or INT4 and dequantized back into a deepcopy (fake quantization), then
the prompt, the shipped text and a greedy continuation run on each variant and on the float model."""

from __future__ import annotations

import numpy as np
import torch
from transformers.pytorch_utils import Conv1D

from explorer.errors import PromptError
from explorer.lab.fidelity import Fidelity, Variant, fidelity, first_divergence
from explorer.lab.quant import OFFERED_BITS, QuantResult, dequantize, quantize, stored_bytes, variant_name
from explorer.runner.lab.common import (
    check_runnable,
    context_length,
    passes_on,
    forward,
    greedy_timed,
    new_cache,
    predicted_decode_s,
    text_ids,
)
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import own_copy

TIMED_STEPS = 1  # a decode step timed after the continuation where it has none (N = 1)


def run_quant(loaded: LoadedModel, prompt_ids: list[int], bits: int = 0, group_size: int = 32,
              continue_tokens: int = 16, text_tokens: int = 256) -> QuantResult:
    """Run the float model and its INT8 (per output channel) and INT4 (groups of `group_size`) variants
    on the prompt and the shipped text; the shared model is only read.

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids (T).
        bits: 8 or 4 for that variant alone; 0 for both.
        group_size: G, input weights per INT4 scale.
        continue_tokens: N, greedy tokens generated after the prompt by each variant.
        text_tokens: the shipped text's first tokens scored (at most the model's context).

    Raises:
        SessionStateError: shape-only mode.
        PromptError: bits not 0, 4 or 8; a prompt with its continuation longer than the context.
    """
    check_runnable(loaded, prompt_ids)
    if bits not in (0, *OFFERED_BITS):
        raise PromptError(f"Bits must be 8 (INT8), 4 (INT4) or 0 (both), not {bits}.")
    if len(prompt_ids) + continue_tokens + TIMED_STEPS > context_length(loaded.model):
        raise PromptError(f"The prompt and {continue_tokens} + {TIMED_STEPS} generated tokens exceed the "
                          f"model's {context_length(loaded.model)} positions.")
    text = text_ids(loaded, text_tokens)
    with passes_on(loaded) as model:
        modules = quantizable(model)
        reference = _measure(model, prompt_ids, text, continue_tokens, loaded.eos_token_ids)
        variants = [_variant(loaded.dtype, reference, reference, text, float(model.dtype.itemsize), model,
                             len(prompt_ids), None)]
        worst = 0.0
        copied = own_copy(model)
        copied_modules = quantizable(copied)
        for width in (OFFERED_BITS if bits == 0 else (bits,)):
            group = group_size if width == 4 else max(m.weight.shape[0 if _transposed(m) else 1] for m in modules)
            error, stored = _load_quantized(modules, copied_modules, width, group)
            worst = max(worst, error)
            run = _measure(copied, prompt_ids, text, continue_tokens, loaded.eos_token_ids)
            count = sum(m.weight.numel() for m in modules)
            inputs = tuple(sorted({m.weight.shape[0 if _transposed(m) else 1] for m in modules}))
            variants.append(_variant(variant_name(width, group_size, inputs), run, reference, text, stored / count,
                                     model, len(prompt_ids), {"weights": f"int{width}"}))
        del copied
    _, hardware = predicted_decode_s(model, len(prompt_ids) + 1)
    return QuantResult(
        prompt_tokens=len(prompt_ids), text_tokens=len(text), group_size=group_size,
        quantized_linears=len(modules), quantized_weights=sum(m.weight.numel() for m in modules),
        kept_float="embedding, LM head, norms and biases", max_error_over_bound=worst, variants=tuple(variants),
        pieces=_pieces(loaded, variants), hardware=hardware, device=str(loaded.device), dtype=loaded.dtype)


def quantizable(model) -> list[torch.nn.Module]:
    """The decoder's linear layers (nn.Linear, GPT-2's Conv1D), the LM head left out."""
    head = model.get_output_embeddings()
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear | Conv1D) and m is not head]


def _transposed(module) -> bool:
    """GPT-2's Conv1D stores its weight [in, out]; nn.Linear [out, in]."""
    return isinstance(module, Conv1D)


def _load_quantized(originals, copies, bits: int, group: int) -> tuple[float, float]:
    """Write q(w) of each original weight into its copy; returns (max |w - q(w)| / (s / 2), bytes stored)."""
    worst, stored = 0.0, 0.0
    for original, target in zip(originals, copies, strict=True):
        weight = original.weight.detach().float().cpu().numpy()
        weight = weight.T if _transposed(original) else weight  # [out, in]
        codes, scales = quantize(weight, bits, group)
        restored = dequantize(codes, scales, group)
        half_steps = np.repeat(scales, min(group, weight.shape[1]), axis=1)[:, :weight.shape[1]] / 2
        error = np.abs(weight - restored)
        worst = max(worst, float(np.divide(error, half_steps, out=error).max()))
        stored += stored_bytes(weight.shape, bits, group)
        restored = restored.T if _transposed(original) else restored
        target.weight.copy_(torch.from_numpy(np.ascontiguousarray(restored)).to(target.weight.dtype))
    return worst, stored


def _measure(model, prompt_ids: list[int], text: list[int], steps: int, eos_ids) -> dict:
    """One model's prompt logits ([T, V]), text logits ([T_text, V]), greedy continuation (ending at
    end-of-sequence as `generate`'s does) and the median ms of its decode steps."""
    cache = new_cache(model)
    prompt = forward(model, prompt_ids, cache)
    tokens, step_ms = greedy_timed(model, cache, prompt[-1], steps, eos_ids)
    return {"prompt": prompt.numpy(), "text": forward(model, text, None).numpy(), "tokens": tuple(tokens),
            "step_ms": step_ms}


def _variant(name: str, run: dict, reference: dict, text: list[int], bytes_per_weight: float, model,
             prompt_tokens: int, formats: dict | None) -> Variant:
    measured: Fidelity = fidelity(reference["prompt"], run["prompt"], reference["text"], run["text"], text)
    return Variant(name=name, fidelity=measured, tokens=run["tokens"],
                   diverges_at=first_divergence(reference["tokens"], run["tokens"]),
                   bytes_per_element=bytes_per_weight, step_ms=run["step_ms"],
                   predicted_step_s=predicted_decode_s(model, prompt_tokens + 1, **(formats or {}))[0])


def _pieces(loaded: LoadedModel, variants: list[Variant]) -> dict[int, str]:
    ids = {token for variant in variants for token in variant.tokens}
    return {token: loaded.tokenizer.decode([token]) for token in ids}
