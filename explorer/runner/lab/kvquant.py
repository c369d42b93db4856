"""KV-cache quantization on the loaded model (`explorer.lab.kvquant`): the prompt, the shipped text and a
greedy continuation run with a float `DynamicCache` and with a `QuantizedKVCache` of each format. The
cache is the variant: the model is neither copied nor changed."""

from __future__ import annotations

from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError
from explorer.lab.fidelity import Variant, fidelity, first_divergence
from explorer.lab.kvquant import (
    BOUND_BATCH,
    CODE_BYTES,
    FORMAT_NAMES,
    FORMATS,
    SCALE_BYTES,
    KVQuantResult,
    cache_bytes_per_token,
)
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
from explorer.runner.lab.kvcache import QuantizedKVCache
from explorer.runner.loaded import LoadedModel

TIMED_STEPS = 1  # a decode step timed after the continuation where it has none (N = 1)


def run_kvquant(loaded: LoadedModel, prompt_ids: list[int], kv_format: int = 0, continue_tokens: int = 12,
                text_tokens: int = 256) -> KVQuantResult:
    """Run the model with a float KV cache and with INT8 and FP8 (e4m3) caches (one fp16 scale per token
    per KV head) on the prompt and the shipped text; the shared model is only read.

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids (T).
        kv_format: 1 (INT8) or 2 (FP8 e4m3) for that cache alone; 0 for both.
        continue_tokens: N, greedy tokens generated after the prompt with each cache.
        text_tokens: the shipped text's first tokens scored (at most the model's context).

    Raises:
        SessionStateError: shape-only mode.
        PromptError: a format not 0, 1 or 2; a prompt with its continuation longer than the context; a
            model with sliding-window layers.
    """
    check_runnable(loaded, prompt_ids)
    if kv_format not in (0, *FORMATS):
        raise PromptError(f"The KV format must be 1 (INT8), 2 (FP8 e4m3) or 0 (both), not {kv_format}.")
    if len(prompt_ids) + continue_tokens + TIMED_STEPS > context_length(loaded.model):
        raise PromptError(f"The prompt and {continue_tokens} + {TIMED_STEPS} generated tokens exceed the "
                          f"model's {context_length(loaded.model)} positions.")
    spec = ModelSpec.from_hf_config(loaded.model.config.to_dict())
    if any(window is not None for window in spec.layer_windows):
        raise PromptError("This model has sliding-window layers; the quantized KV cache keeps every position of "
                          "every layer, so it would not compare like for like with the float cache.")
    text = text_ids(loaded, text_tokens)
    layers, heads, head_dim = spec.n_layers, spec.n_kv_heads, spec.head_dim
    formats = list(FORMATS.values()) if kv_format == 0 else [FORMATS[kv_format]]
    with passes_on(loaded) as model:
        reference = _measure(model, prompt_ids, text, continue_tokens, lambda: new_cache(model), loaded.eos_token_ids)
        float_bytes = cache_bytes_per_token(layers, heads, head_dim, model.dtype.itemsize, 0)
        variants = [_variant(loaded.dtype, reference, reference, text, float_bytes, model, None)]
        stored = [reference["stored_bytes"] / reference["stored_tokens"]]
        for name in formats:
            run = _measure(model, prompt_ids, text, continue_tokens,
                           lambda name=name: QuantizedKVCache(model.config, name), loaded.eos_token_ids)
            bytes_per_token = cache_bytes_per_token(layers, heads, head_dim, CODE_BYTES, SCALE_BYTES)
            variants.append(_variant(FORMAT_NAMES[name], run, reference, text, bytes_per_token, model, name))
            stored.append(run["stored_bytes"] / run["stored_tokens"])
    _, hardware = predicted_decode_s(model, len(text), batch=BOUND_BATCH)
    return KVQuantResult(
        prompt_tokens=len(prompt_ids), text_tokens=len(text), layers=layers, kv_heads=heads, head_dim=head_dim,
        variants=tuple(variants), stored_bytes_per_token=tuple(stored), bound_context=len(text),
        pieces={token: loaded.tokenizer.decode([token]) for v in variants for token in v.tokens},
        hardware=hardware, device=str(loaded.device), dtype=loaded.dtype)


def _measure(model, prompt_ids: list[int], text: list[int], steps: int, make_cache, eos_ids) -> dict:
    """One cache kind's prompt logits ([T, V]), text logits ([T_text, V], on a cache of its own), greedy
    continuation (ending at end-of-sequence as `generate`'s does), the median ms of its decode steps, and
    the text cache's stored bytes and tokens."""
    cache = make_cache()
    prompt = forward(model, prompt_ids, cache)
    tokens, step_ms = greedy_timed(model, cache, prompt[-1], steps, eos_ids)
    text_cache = make_cache()
    text_logits = forward(model, text, text_cache)
    return {"prompt": prompt.numpy(), "text": text_logits.numpy(), "tokens": tuple(tokens), "step_ms": step_ms,
            "stored_bytes": _stored_nbytes(text_cache), "stored_tokens": text_cache.get_seq_length()}


def _stored_nbytes(cache) -> int:
    """The bytes a cache's tensors hold, summed over layers (float: K and V; quantized: codes and scales)."""
    if isinstance(cache, QuantizedKVCache):
        return cache.stored_nbytes()
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


def _variant(name: str, run: dict, reference: dict, text: list[int], bytes_per_token: float, model,
             kv_format: str | None) -> Variant:
    formats = {"kv": kv_format} if kv_format else {}
    return Variant(name=name, fidelity=fidelity(reference["prompt"], run["prompt"], reference["text"], run["text"],
                                                text),
                   tokens=run["tokens"], diverges_at=first_divergence(reference["tokens"], run["tokens"]),
                   bytes_per_element=bytes_per_token, step_ms=run["step_ms"],
                   predicted_step_s=predicted_decode_s(model, len(text), batch=BOUND_BATCH, **formats)[0])
