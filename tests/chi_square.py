"""Pearson's chi-square test without scipy, and seeded draws of the speculative sampling rule, for the
tests that the rule samples the full model's distribution."""

from __future__ import annotations

import math

import numpy as np

from explorer.lab.speculative import speculative_sample


def chi_square_critical(df: int, z: float = 3.090) -> float:
    """The chi-square distribution's upper quantile for `df` degrees of freedom, by the Wilson-Hilferty
    approximation (Wilson and Hilferty 1931: chi2 / df is about normal after a cube root); z = 3.090
    is the standard normal's 0.999 quantile, so the test falsely fails one run in a thousand. For
    df = 5 it gives 20.75 (tables: 20.52), for df = 30 59.80 (tables: 59.70)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi_square(counts: np.ndarray, p: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of `counts` against the expected counts of p, bins expecting fewer than 5
    merged into one (the usual validity rule); returns (statistic, degrees of freedom)."""
    expected = counts.sum() * p
    small = expected < 5
    observed = np.append(counts[~small], counts[small].sum())
    expected = np.append(expected[~small], expected[small].sum())
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    return float(((observed - expected) ** 2 / expected).sum()), len(expected) - 1


def spec_draws(p: np.ndarray, q: np.ndarray, draws: int, seed: int) -> tuple[np.ndarray, float]:
    """`draws` tokens from the rule with guesses drawn from q; returns (counts per token [V], acceptance)."""
    rng = np.random.default_rng(seed)
    counts, kept = np.zeros(len(p), dtype=np.int64), 0
    for guess in rng.choice(len(q), size=draws, p=q):
        accepted, token = speculative_sample(p, q, int(guess), rng)
        counts[token] += 1
        kept += accepted
    return counts, kept / draws
