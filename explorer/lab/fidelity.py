"""How far a lossy variant's predictions are from the float model's, from two logits arrays of the same
token sequence (pure numpy, over the full vocabulary): KL divergence per position, top-1 agreement,
max |Δlogits|, perplexity of a text, and where two greedy continuations first part.

The fixed text every lossy experiment scores (`shipped_text`): Abraham Lincoln's Gettysburg Address
(19 November 1863), the Bliss copy, in the public domain.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

TEXT_NAME = "gettysburg"
TEXT_SOURCE = "Abraham Lincoln, the Gettysburg Address (1863, the Bliss copy; public domain)"


def shipped_text(name: str = TEXT_NAME) -> str:
    """The text `explorer/lab/texts/<name>.txt` shipped with the package (read with importlib.resources)."""
    return resources.files("explorer.lab").joinpath("texts", f"{name}.txt").read_text(encoding="utf-8")


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p over the last axis, stably (the row's max subtracted before exp).

    Args:
        logits: [T, V] float32.

    Returns:
        [T, V] float64, each row's exp summing to 1.
    """
    shifted = np.asarray(logits, dtype=np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def kl_per_position(reference: np.ndarray, variant: np.ndarray) -> np.ndarray:
    """KL(p_reference || p_variant) = sum_v p_ref(v) (log p_ref(v) - log p_var(v)) at each position, in nats.

    Args:
        reference, variant: [T, V] float32 logits of the same positions (float model, lossy variant).

    Returns:
        [T] float64, >= 0 (0 where the distributions are equal).
    """
    log_ref, log_var = log_softmax(reference), log_softmax(variant)
    return np.maximum((np.exp(log_ref) * (log_ref - log_var)).sum(axis=-1), 0.0)


def top1_agreement(reference: np.ndarray, variant: np.ndarray) -> float:
    """The share of positions (0..1) where both logits' argmax (the greedy token) is the same.

    Args:
        reference, variant: [T, V] logits.
    """
    return float(np.mean(np.argmax(reference, axis=-1) == np.argmax(variant, axis=-1)))


def max_abs_diff(reference: np.ndarray, variant: np.ndarray) -> float:
    """max |Δlogit| over every position and the vocabulary. Args: [T, V] logits each."""
    return float(np.max(np.abs(np.asarray(variant, np.float64) - np.asarray(reference, np.float64))))


def perplexity(logits: np.ndarray, tokens: list[int] | np.ndarray) -> float:
    """exp(mean negative log-likelihood of each next token): position t's logits predict token t + 1.

    Args:
        logits: [T, V] logits of the sequence `tokens` (T of them, T >= 2).

    Raises:
        ValueError: fewer than 2 tokens, or logits not one row per token.
    """
    tokens = np.asarray(tokens)
    if len(tokens) < 2 or logits.shape[0] != len(tokens):
        raise ValueError(f"perplexity needs >= 2 tokens and one logits row each: {logits.shape} for {len(tokens)}.")
    log_probs = log_softmax(logits[:-1])
    nll = -log_probs[np.arange(len(tokens) - 1), tokens[1:]]
    return float(np.exp(nll.mean()))


def first_divergence(first: list[int] | tuple[int, ...], second: list[int] | tuple[int, ...]) -> int | None:
    """The first position where two token sequences differ (a length mismatch counts at the shorter's
    end); None where they are identical."""
    for position, (a, b) in enumerate(zip(first, second, strict=False)):
        if a != b:
            return position
    return None if len(first) == len(second) else min(len(first), len(second))
