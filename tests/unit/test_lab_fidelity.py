"""The fidelity measures equal the same quantities computed another way (explicit probabilities in
Python floats, one position at a time) on random logits; the shipped text reads back."""

from __future__ import annotations

import math

import numpy as np
import pytest

from explorer.lab.fidelity import (
    fidelity,
    first_divergence,
    kl_per_position,
    max_abs_diff,
    perplexity,
    shipped_text,
    top1_agreement,
)

T, V = 7, 53


def probabilities(row) -> list[float]:
    """softmax of one row, in Python floats (exp of each logit over their sum; small logits, no shift)."""
    exps = [math.exp(float(x)) for x in row]
    return [e / sum(exps) for e in exps]


@pytest.fixture
def logits():
    rng = np.random.default_rng(3)
    reference = rng.normal(0, 2, (T, V)).astype(np.float32)
    return reference, (reference + rng.normal(0, 0.5, (T, V))).astype(np.float32)


def test_kl_is_the_sum_over_the_vocabulary_of_p_log_p_over_q(logits):
    reference, variant = logits
    expected = [sum(p * math.log(p / q) for p, q in zip(probabilities(r), probabilities(v), strict=True))
                for r, v in zip(reference, variant, strict=True)]
    np.testing.assert_allclose(kl_per_position(reference, variant), expected, rtol=1e-9, atol=1e-12)
    assert np.all(kl_per_position(reference, reference) < 1e-12)


def test_kl_is_stable_where_the_logits_are_huge(logits):
    reference, variant = logits
    shifted = kl_per_position(reference + 1e4, variant + 1e4)  # a constant per row leaves softmax unchanged
    np.testing.assert_allclose(shifted, kl_per_position(reference, variant), rtol=1e-3)


def test_perplexity_is_exp_of_the_mean_next_token_surprise(logits):
    reference, _ = logits
    tokens = [5, 9, 0, 52, 17, 3, 8]
    nll = [-math.log(probabilities(reference[t])[tokens[t + 1]]) for t in range(T - 1)]
    assert perplexity(reference, tokens) == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-9)
    with pytest.raises(ValueError, match="needs >= 2 tokens"):
        perplexity(reference[:1], [5])


def test_agreement_max_delta_and_divergence(logits):
    reference, variant = logits
    same = sum(int(np.argmax(r) == np.argmax(v)) for r, v in zip(reference, variant, strict=True))
    assert top1_agreement(reference, variant) == same / T
    assert max_abs_diff(reference, variant) == pytest.approx(float(np.abs(variant - reference).max()), rel=1e-6)
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 4, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_the_shipped_text_is_the_gettysburg_address():
    text = shipped_text()
    assert text.startswith("Four score and seven years ago") and text.rstrip().endswith("perish from the earth.")
    assert len([word for word in text.split() if word != "--"]) == 271  # the Bliss copy, "battle-field" one word


def test_the_lossy_figure_writes_bytes_in_units_not_scientific_notation():
    from explorer.figures.lab.lossy import fig_variants
    from explorer.lab.fidelity import Fidelity, Variant

    same = Fidelity((0.0,), 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 9.0)
    variants = [Variant("float32", same, (1,), None, 46080.0, 50.0, 2.5e-3),
                Variant("int8", same, (1,), None, 11760.0, 60.0, 1.2e-3)]
    fig = fig_variants(variants, "lab-kvquant", ["KV"], "KV bytes / token", "GPU")
    texts = [text for trace in fig.data for text in trace.text]
    assert "46.1 kB" in texts and "11.8 kB" in texts and "2,500" in texts
    assert not any("e+" in text for text in texts)


def test_the_reference_against_its_own_logits_is_at_distance_zero_as_computed(logits):
    reference, _ = logits
    prompt, text = reference[:3], reference[3:]
    text_ids = [5, 17, 2, 40]
    given = fidelity(prompt, prompt, text, text, text_ids)  # the same arrays: not computed
    computed = fidelity(prompt, prompt.copy(), text, text.copy(), text_ids)  # equal copies: computed
    assert given == computed and given.prompt_kl == (0.0,) * 3 and given.text_top1 == 1.0
    assert given.text_perplexity == perplexity(text, text_ids) > 1
