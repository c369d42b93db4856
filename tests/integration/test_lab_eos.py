"""The lab's greedy continuations end at end-of-sequence as transformers' `generate` does: on a tiny
model whose EOS id is made the token its greedy continuation picks third, every experiment that
continues the prompt stops there, with the same tokens as `generate`; the lossy experiments' estimates
name their machine and the run's dtype."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model

from explorer.runner.lab.chunked import run_chunked
from explorer.runner.lab.kvquant import run_kvquant
from explorer.runner.lab.quant import run_quant
from explorer.runner.lab.speculative import run_speculative

PROMPT = "Hello there, how are you today?"


def generated(loaded, ids: list[int], tokens: int) -> list[int]:
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False)
    return out[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def ending_early():
    """A tiny Llama whose EOS is the third token of its greedy continuation (and not among the first two)."""
    loaded = tiny_model("llama")
    ids = loaded.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    free = generated(loaded, ids, 12)
    eos = free[2]
    assert eos not in free[:2], "pick a prompt whose third greedy token is new"
    loaded.model.generation_config.eos_token_id = eos
    loaded.eos_token_ids = [eos]
    oracle = generated(loaded, ids, 12)
    assert oracle == free[:3]
    return loaded, ids, tuple(oracle)


def test_speculative_stops_at_eos_both_ways(ending_early):
    loaded, ids, oracle = ending_early
    result = run_speculative(loaded, ids, depth=1, guesses=4, tokens=12, repeats=1)
    assert result.tokens == result.plain_tokens == oracle


def test_quant_and_kvquant_continuations_stop_at_eos(ending_early):
    loaded, ids, oracle = ending_early
    quant = run_quant(loaded, ids, bits=8, continue_tokens=12, text_tokens=16)
    kv = run_kvquant(loaded, ids, kv_format=1, continue_tokens=12, text_tokens=16)
    assert quant.variants[0].tokens == kv.variants[0].tokens == oracle
    # their estimates name the machine and the dtype they are for: the run's own
    from explorer.lab.kvquant import lesson_text as kv_lesson
    from explorer.lab.quant import lesson_text as quant_lesson
    named = "NVIDIA H100 SXM5 80GB (a reference GPU; float32 as run)"
    assert quant.hardware == kv.hardware == named
    assert named in quant_lesson(quant) and named in kv_lesson(kv) and named in "\n".join(quant.lines())


def test_chunked_continuations_stop_at_eos(ending_early):
    loaded, ids, oracle = ending_early
    chunked = run_chunked(loaded, ids, chunk=8, repeats=1)
    assert chunked.full_tokens == chunked.chunked_tokens == oracle
