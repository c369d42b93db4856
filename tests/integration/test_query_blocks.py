"""Attention in query blocks equals unblocked eager attention: the probabilities and the logits of the
instrumented attention (`explorer.runner.hooks.explorer_attention`) run in blocks of 1, 7 and T query
rows against transformers' own eager attention (`output_attentions=True`), on the tiny model of every
traced family, for a prompt and for a chunk fed after it on the cache (queries at an offset of n - T).

Tolerance: 1e-6 absolute on the probabilities and on the logits, float32 on the CPU. Not bit for bit:
a GEMM over a group's g query heads, or over fewer rows, may reduce a dot product in another order
than eager's GEMM per query head over every row; measured here up to 4.5e-7 on the probabilities and
2.8e-7 on the logits (of magnitude about 1). With one block of T rows the values are eager's bit for
bit on every family but Gemma 3 (1.8e-7), whose scaling is not a power of two.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from explorer.runner.hooks import StepRecorder, tracing
from tests.tiny_models import FAMILY_EXTRAS, VOCAB, tiny_model

PROMPT_TOKENS, CHUNK_TOKENS = 23, 5
ATOL = 1e-6


def _eager(model, ids: torch.Tensor, cache: DynamicCache):
    """Logits [T, V] and per-layer probabilities [h_q, T, n] of transformers' eager attention."""
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        out = model(input_ids=ids, cache=cache, use_cache=True, output_attentions=True)
    return out.logits[0].numpy(), [a[0].numpy() for a in out.attentions]


def _blocked(model, ids: torch.Tensor, cache: DynamicCache, rows: int):
    """Logits [T, V] and per-layer probabilities [h_q, T, n] of the instrumented attention in `rows`-row blocks."""
    recorder = StepRecorder(block_rows=rows)
    with torch.inference_mode(), tracing(model, cache, recorder):
        logits = model(input_ids=ids, cache=cache, use_cache=True).logits[0].numpy()
    recorder.finish()
    return logits, [recorder.attention[layer] for layer in sorted(recorder.attention)]


@pytest.mark.parametrize("family", sorted(FAMILY_EXTRAS))
@pytest.mark.parametrize("rows", [1, 7, None], ids=["rows=1", "rows=7", "rows=T"])
def test_blocked_attention_equals_eager_within_1e_6(family, rows):
    model = tiny_model(family).model
    ids = torch.randint(2, VOCAB, (1, PROMPT_TOKENS + CHUNK_TOKENS), generator=torch.Generator().manual_seed(5))
    eager_cache, blocked_cache = DynamicCache(config=model.config), DynamicCache(config=model.config)
    for part in (ids[:, :PROMPT_TOKENS], ids[:, PROMPT_TOKENS:]):  # the prompt, then a chunk on its cache
        want_logits, want_probs = _eager(model, part, eager_cache)
        got_logits, got_probs = _blocked(model, part, blocked_cache, rows or part.shape[1])
        assert len(got_probs) == len(want_probs) == model.config.num_hidden_layers
        for layer, (got, want) in enumerate(zip(got_probs, want_probs, strict=True)):
            assert got.shape == want.shape, f"layer {layer}"
            np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"{family} layer {layer}, {rows} rows")
        np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=ATOL, err_msg=f"{family}, {rows} rows")
