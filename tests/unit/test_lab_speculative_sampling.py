"""Speculative decoding's pure parts: the sampling rule's output is distributed as the full model's p
(a chi-square test over seeded draws), its acceptance rate is sum(min(p, q)), and the result's lines,
lesson and figure say what a hand-built run holds."""

from __future__ import annotations

import math

import numpy as np
from chi_square import chi_square, chi_square_critical, spec_draws

from explorer.lab.speculative import Round, SpeculativeResult, lesson_text, residual_distribution

P = np.array([0.30, 0.05, 0.25, 0.10, 0.20, 0.10])  # the full model's, V = 6
Q = np.array([0.10, 0.30, 0.25, 0.05, 0.05, 0.25])  # the draft's: far from p on purpose
DRAWS = 20_000


def test_the_residual_is_the_normalised_excess_of_p_over_q():
    assert np.allclose(residual_distribution(P, Q), np.array([0.2, 0, 0, 0.05, 0.15, 0]) / 0.4)
    assert np.array_equal(residual_distribution(P, P), P)


def test_the_rule_samples_the_full_models_distribution():
    """Over 20,000 seeded draws the rule's tokens fit p (chi-square below its 0.999 quantile), while the
    draft's own guesses do not (the test can tell the two apart)."""
    counts, acceptance = spec_draws(P, Q, DRAWS, seed=0)
    statistic, df = chi_square(counts, P)
    assert df == 5 and statistic < chi_square_critical(df)
    guesses = np.bincount(np.random.default_rng(0).choice(6, size=DRAWS, p=Q), minlength=6)
    assert chi_square(guesses, P)[0] > 10 * chi_square_critical(df)
    expected = np.minimum(P, Q).sum()  # the acceptance rate, 1 - total variation distance (Leviathan et al. 2023)
    assert abs(acceptance - expected) < 4 * math.sqrt(expected * (1 - expected) / DRAWS)


def test_the_rule_keeps_every_guess_when_the_draft_is_the_full_model():
    counts, acceptance = spec_draws(P, P, 2_000, seed=1)
    assert acceptance == 1.0 and counts.sum() == 2_000


def test_the_critical_value_matches_the_table():
    assert abs(chi_square_critical(5) - 20.515) < 0.3 and abs(chi_square_critical(30) - 59.703) < 0.15


def hand_result() -> SpeculativeResult:
    rounds = (Round((5, 6, 7), 2, 9, ("a", "b", "c"), "d", (1, 4, 8), 13, 3e6, 2e6, 4e6),
              Round((1, 2, 3), 3, 4, ("e", "f", "g"), "h", (1, 4, 8), 17, 3.1e6, 2.1e6, 4.1e6))
    tokens = (8, 5, 6, 9, 1, 2, 3, 4)
    return SpeculativeResult(prompt_tokens=9, layers=6, depth=2, guesses=3, rounds=rounds, tokens=tokens,
                             plain_tokens=tokens, speculative_ms=40.0, plain_ms=80.0, repeats=3,
                             pieces=tuple("prompt..." + "xabdefgh" * 2), device="cpu", dtype="float32")


def test_lines_and_lesson_say_the_runs_numbers():
    result = hand_result()
    assert result.acceptance_rate == 5 / 6 and result.speed_up == 2.0 and result.same_tokens
    assert result.bytes_per_token(True) == (7e6 + 7.2e6) / 7 and result.bytes_per_token(False) == (6e6 + 8.4e6) / 7
    text = "\n".join(result.lines())
    assert "['a'] ['b'] 'c'" in text and "[1, 4, 8]" in text and "83%" in text and "identical" in text
    assert "5.0 ms against 10.0 ms" in text and "2.00x" in text
    lesson = lesson_text(result)
    assert "first **2** of 6 layers" in lesson and "acceptance 83% per guess" in lesson and "1.50x" in lesson


def test_the_figure_draws_each_guess_by_its_verdict():
    from explorer.figures.lab.speculative import fig_speculative

    fig = fig_speculative(hand_result())
    assert fig.layout.meta == {"view": "lab-speculative", "step": None}
    cells = {trace.name: list(trace.text) for trace in fig.data if trace.type == "bar" and trace.name}
    assert cells == {"accepted guess": ["a", "b", "e", "f", "g"], "rejected guess": ["c"],
                     "full model's token": ["d", "h"]}
    assert "acceptance 83%" in fig.layout.title.text and "identical" in fig.layout.title.text
    assert fig.layout.height <= 560
