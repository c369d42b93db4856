"""Attention in query blocks equals unblocked eager attention: the probabilities and the logits of the
instrumented attention (`explorer.runner.hooks.explorer_attention`) run in blocks of 1, 7 and T query
rows against transformers' own eager attention (`output_attentions=True`), on the tiny model of every
traced family, for a prompt and for a chunk fed after it on the cache (queries at an offset of n - T).

Tolerance: 1e-6 absolute on the probabilities and on the logits, float32 on the CPU. Not bit for bit:
a GEMM over a group's g query heads, or over fewer rows and keys (a causal block reads only the keys
its rows see), may reduce a dot product in another order than eager's GEMM per query head over every
row and key; measured here up to 4.5e-7 on the probabilities and 2.8e-7 on the logits (of magnitude
about 1), with or without the keys cut. With one block of T rows the values are eager's bit for
bit on every family but Gemma 3 (1.8e-7), whose scaling is not a power of two. Each block's additive
mask is eager's, bit for bit, made from SDPA's boolean mask (or none, where transformers skips a
plain causal one) a block of rows at a time.
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


@pytest.mark.parametrize(("q_len", "n", "window", "padding"), [(7, 7, None, 0), (1, 9, None, 0), (5, 12, None, 0),
                                                              (7, 7, 3, 0), (6, 6, None, 2), (1, 8, 4, 1)])
def test_each_blocks_mask_is_eagers_mask_of_those_rows(q_len, n, window, padding):
    """`block_mask` from SDPA's boolean mask (or from none, where transformers skips a plain causal one)
    equals the rows of transformers' own `eager_mask`, for a prefill, a decode step, a chunk after a
    cache, a sliding window and left padding, in blocks of 1, 2 and all rows, made afresh or written
    into a buffer."""
    from transformers.masking_utils import (
        causal_mask_function,
        eager_mask,
        sdpa_mask,
        sliding_window_causal_mask_function,
    )

    from explorer.runner.gqa import block_mask

    pads = torch.tensor([[False] * padding + [True] * (n - padding)]) if padding else None
    function = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    common = {"batch_size": 1, "q_length": q_len, "kv_length": n, "q_offset": n - q_len, "kv_offset": 0,
              "mask_function": function, "attention_mask": pads, "local_size": window}
    eager = eager_mask(**common, dtype=torch.float32)
    boolean = sdpa_mask(**common, allow_is_causal_skip=True)
    assert (boolean is None) == (window is None and not padding and (q_len == 1 or q_len == n))
    for rows in (1, 2, q_len):
        for first in range(0, q_len, rows):
            last = min(first + rows, q_len)
            want = eager[:, :, first:last]
            buffer = torch.full((rows * n,), 7.0)  # a layer's buffer (`BlockBuffers.mask`), holding an earlier block
            for out in (None, buffer):
                got = block_mask(boolean, first, last, q_len, n, torch.float32, torch.device("cpu"), out)
                if got is None:
                    assert not want.any()
                else:
                    torch.testing.assert_close(got.expand_as(want), want, rtol=0, atol=0)


@pytest.mark.parametrize("family", sorted(FAMILY_EXTRAS))
def test_each_layers_first_key_sums_are_the_column_sums_of_its_probabilities(family):
    """The sums the attention sinks read, taken block by block in the step, equal the kept matrices'
    column 0 summed over the queries (float64)."""
    model = tiny_model(family).model
    ids = torch.randint(2, VOCAB, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(6))
    recorder = StepRecorder(block_rows=7)
    with torch.inference_mode(), tracing(model, DynamicCache(config=model.config), recorder):
        model(input_ids=ids, use_cache=True)
    recorder.finish()
    assert sorted(recorder.first_key_sums) == sorted(recorder.attention) == list(range(model.config.num_hidden_layers))
    for layer, probs in recorder.attention.items():
        np.testing.assert_allclose(recorder.first_key_sums[layer], probs[..., 0].sum(axis=1, dtype=np.float64),
                                   rtol=1e-12, err_msg=f"{family} layer {layer}")


@pytest.mark.parametrize("family", sorted(FAMILY_EXTRAS))
def test_a_decode_steps_first_key_sums_are_its_one_rows_column(family):
    """A decode step's sums (its one query row: the row's own values) equal its kept matrix's column 0."""
    model = tiny_model(family).model
    ids = torch.randint(2, VOCAB, (1, PROMPT_TOKENS + 1), generator=torch.Generator().manual_seed(7))
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=ids[:, :-1], cache=cache, use_cache=True)
    recorder = StepRecorder()
    with torch.inference_mode(), tracing(model, cache, recorder):
        model(input_ids=ids[:, -1:], cache=cache, use_cache=True)
    recorder.finish()
    for layer, probs in recorder.attention.items():
        assert probs.shape[1] == 1
        np.testing.assert_array_equal(recorder.first_key_sums[layer], probs[:, 0, 0].astype(np.float64))


def test_a_batchs_kept_matrix_is_row_0_copied_out_of_the_batch():
    """Batch row 0's probabilities are kept as a copy, so they do not hold the whole batch's tensor;
    a lone sequence's are kept as computed."""
    from explorer.runner.gqa import AttentionInputs

    recorder = StepRecorder()
    batch, lone = torch.rand(2, 3, 4, 5), torch.rand(3, 4, 5)  # [B, h_q, T, n], [h_q, T, n]
    for layer, probs in enumerate((batch[0], lone)):
        recorder.attention_inputs_of(layer, [3, 4, 5], AttentionInputs(torch.zeros(3, 4, 2), 0.5, None), False)
        recorder.attention_block(layer, 0, probs, keep=True)
    recorder.finish()
    np.testing.assert_array_equal(recorder.attention[0], batch[0].numpy())
    assert not np.shares_memory(recorder.attention[0], batch.numpy())
    assert np.shares_memory(recorder.attention[1], lone.numpy())


@pytest.mark.parametrize("family", sorted(FAMILY_EXTRAS))
def test_a_causal_block_reads_the_keys_up_to_its_last_row_and_eager_gives_the_rest_exactly_0(family, monkeypatch):
    """Under a plain causal mask each block of 7 rows first..last - 1 reads keys 0..last - 1 only (`keys_read`), and
    eager attention gives every later key a probability of exactly 0 and the last row's own key more:
    the bound is tight. A sliding-window layer shorter than the prompt (transformers builds its mask)
    reads every key."""
    from explorer.runner import hooks

    model = tiny_model(family).model
    ids = torch.randint(2, VOCAB, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(8))
    read: list[tuple[int, int]] = []  # (query rows, keys read) of each block, layer after layer
    original = hooks.grouped_scores

    def spy(query, key, *args):
        read.append((query.shape[2], key.shape[2]))
        return original(query, key, *args)

    monkeypatch.setattr(hooks, "grouped_scores", spy)
    _, probs = _blocked(model, ids, DynamicCache(config=model.config), 7)
    _, eager = _eager(model, ids, DynamicCache(config=model.config))
    blocks = [(first, min(first + 7, PROMPT_TOKENS)) for first in range(0, PROMPT_TOKENS, 7)]
    layer_types = getattr(model.config, "layer_types", None) or ["full_attention"] * model.config.num_hidden_layers
    assert len(read) == len(blocks) * len(layer_types)
    for layer, kind in enumerate(layer_types):
        for (first, last), (rows, keys) in zip(blocks, read[layer * len(blocks):(layer + 1) * len(blocks)], strict=True):
            assert rows == last - first
            assert keys == (PROMPT_TOKENS if kind == "sliding_attention" else last), f"{family} layer {layer}"
            assert not eager[layer][:, first:last, last:].any()
            assert (eager[layer][:, last - 1, last - 1] > 0).all()
            np.testing.assert_array_equal(probs[layer][:, first:last, keys:], 0)


@pytest.mark.parametrize("family", sorted(FAMILY_EXTRAS))
def test_a_prefill_in_blocks_is_recomputed_bit_for_bit(family, monkeypatch):
    """A prefill run in blocks of 5 rows, each reading only the keys its rows see, is recomputed from its
    queries and the cached keys in the same blocks over the same keys: equal to the kept matrix bit for
    bit, on every layer whose cache holds every key."""
    from explorer.config import SamplingSettings
    from explorer.runner import gqa, hooks
    from explorer.runner.session import InferenceSession

    for module in (hooks, gqa):
        monkeypatch.setattr(module, "block_rows", lambda h_q, q_len, n, itemsize: min(q_len, 5))
    loaded = tiny_model(family)
    prompt = " ".join(["alpha beta gamma delta"] * 6)
    kept = InferenceSession(loaded, SamplingSettings(max_new_tokens=2))
    lean = InferenceSession(loaded, SamplingSettings(max_new_tokens=2), attention_budget_bytes=0)
    trace = kept.prefill(prompt, use_chat_template=False)
    lean.prefill(prompt, use_chat_template=False)
    assert trace.context_length > 10  # three blocks or more
    full = [layer for layer, held in enumerate(lean._cache.layers) if held.keys.shape[-2] == trace.context_length]
    if not full:
        pytest.skip("every layer of this tiny model is a sliding window shorter than the prompt: it reruns")
    for layer in full:
        assert kept.attention.store.kept(0, layer) and not lean.attention.store.kept(0, layer)
        np.testing.assert_array_equal(lean.attention.probs(0, layer), kept.attention.probs(0, layer))
