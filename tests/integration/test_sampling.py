"""Sampling with transformers' logits processors, stage by stage, over the full vocabulary."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from explorer.config import SamplingSettings
from explorer.errors import SamplingSettingsError
from explorer.runner.detokenize import IncrementalDetokenizer, token_piece
from explorer.runner.sampling import resample, sample_next_token

# softmax([2, 1, 0, -1, -3]) = [0.6411, 0.2359, 0.0868, 0.0319, 0.0043]
LOGITS = np.array([2.0, 1.0, 0.0, -1.0, -3.0], dtype=np.float32)


def _record(**kwargs):
    return resample(LOGITS, [0], SamplingSettings(do_sample=True, **kwargs), seed=0)


def test_greedy_is_argmax_of_raw_logits_with_no_filter():
    record = resample(LOGITS, [0], SamplingSettings(), seed=0)
    assert [s.name for s in record.stages] == ["raw"]
    assert record.token_id == 0
    assert record.token_prob == pytest.approx(0.6411, abs=1e-4)


def test_temperature_divides_the_logits():
    record = _record(temperature=0.5)
    np.testing.assert_allclose(record.stages[1].logits, LOGITS / 0.5)


def test_top_k_keeps_the_k_largest():
    assert _record(top_k=2).final.kept.tolist() == [True, True, False, False, False]


def test_top_p_keeps_the_smallest_set_reaching_p():
    # 0.6411 < 0.8 <= 0.6411 + 0.2359: the nucleus is the first two tokens
    assert _record(top_p=0.8).final.kept.tolist() == [True, True, False, False, False]
    assert _record(top_p=0.5).final.kept.tolist() == [True, False, False, False, False]


def test_min_p_drops_tokens_below_a_fraction_of_the_top_probability():
    # 0.1 x 0.6411 = 0.0641: tokens 0, 1 and 2 (0.0868) stay
    assert _record(min_p=0.1).final.kept.tolist() == [True, True, True, False, False]


def test_stages_follow_generate_order_and_renormalise_over_kept_tokens():
    record = _record(temperature=2.0, top_k=3, top_p=0.9, min_p=0.2)
    assert [s.name for s in record.stages] == ["raw", "temperature", "top_k", "top_p", "min_p"]
    probs = record.final.probs
    assert probs.sum() == pytest.approx(1.0, abs=1e-6)
    assert np.all(probs[~record.final.kept] == 0.0)


@hyp_settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20, width=32), min_size=2, max_size=64),
    temperature=st.floats(0.05, 5.0),
    top_k=st.integers(0, 70),
    top_p=st.floats(0.01, 1.0),
    min_p=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
)
def test_every_filter_only_removes_tokens_and_the_draw_is_kept(logits, temperature, top_k, top_p, min_p, seed):
    settings = SamplingSettings(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    record = resample(np.array(logits, dtype=np.float32), [0], settings, seed)
    for before, after in zip(record.stages[:-1], record.stages[1:], strict=True):
        assert np.all(before.kept | ~after.kept)  # kept(after) is a subset of kept(before)
    assert record.final.kept.sum() >= 1
    assert record.final.kept[record.token_id]
    assert resample(np.array(logits, dtype=np.float32), [0], settings, seed).token_id == record.token_id


def test_a_session_generator_makes_draws_repeatable():
    settings = SamplingSettings(do_sample=True, temperature=3.0)
    logits = torch.zeros(50)
    draws = [sample_next_token(logits, torch.tensor([[0]]), settings, torch.Generator().manual_seed(7)).token_id
             for _ in range(2)]
    assert draws[0] == draws[1]


@pytest.mark.parametrize("bad", [
    dict(temperature=0.0), dict(temperature=-1.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5),
    dict(min_p=-0.1), dict(min_p=2.0), dict(max_new_tokens=0), dict(seed=-1), dict(seed=2**64),
])
def test_absurd_settings_are_refused_with_a_message(bad):
    with pytest.raises(SamplingSettingsError, match="must be"):
        SamplingSettings(**bad)


@pytest.mark.real_model
def test_incremental_detokenisation_holds_back_partial_utf8(embedded_model):
    tokenizer = embedded_model.tokenizer
    text = "Café 🙂 naïve — 東京"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.push(i) for i in ids]
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)
    assert "" in deltas  # the emoji and the CJK characters span several byte-level tokens


@pytest.mark.real_model
def test_a_token_holding_part_of_a_character_shows_its_bytes_not_a_replacement_mark(embedded_model):
    tokenizer = embedded_model.tokenizer
    ids = tokenizer("I love 🦙 naïve", add_special_tokens=False)["input_ids"]
    pieces = [token_piece(tokenizer, i) for i in ids]
    assert pieces == ["I", " love", " \\xf0\\x9f", "\\xa6", "\\x99", " na", "ïve"]  # 🦙 is f0 9f a6 99
