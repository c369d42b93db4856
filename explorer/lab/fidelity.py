"""How far a lossy variant's predictions are from the float model's, from two logits arrays of the same
token sequence (pure numpy, over the full vocabulary): KL divergence per position, top-1 agreement,
max |Δlogits|, perplexity of a text, and where two greedy continuations first part.

The fixed text every lossy experiment scores (`shipped_text`): Abraham Lincoln's Gettysburg Address
(19 November 1863), the Bliss copy, in the public domain.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    shifted = np.array(logits, dtype=np.float64)  # a copy, then worked on in place (a [T, V] float64 is large)
    shifted -= shifted.max(axis=-1, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return shifted


def kl_per_position(reference: np.ndarray, variant: np.ndarray) -> np.ndarray:
    """KL(p_reference || p_variant) = sum_v p_ref(v) (log p_ref(v) - log p_var(v)) at each position, in nats.

    Args:
        reference, variant: [T, V] float32 logits of the same positions (float model, lossy variant).

    Returns:
        [T] float64, >= 0 (0 where the distributions are equal).
    """
    return _kl(log_softmax(reference), log_softmax(variant))


def _kl(log_ref: np.ndarray, log_var: np.ndarray) -> np.ndarray:
    """`kl_per_position` from the two [T, V] float64 log-probabilities, which it overwrites."""
    np.subtract(log_ref, log_var, out=log_var)  # log p_ref - log p_var, in place of log p_var
    log_var *= np.exp(log_ref, out=log_ref)
    return np.maximum(log_var.sum(axis=-1), 0.0)


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
    _check_rows(logits, tokens)
    return _perplexity(log_softmax(logits[:-1]), tokens)


def _check_rows(logits: np.ndarray, tokens: list[int] | np.ndarray) -> None:
    if len(tokens) < 2 or logits.shape[0] != len(tokens):
        raise ValueError(f"perplexity needs >= 2 tokens and one logits row each: {logits.shape} for {len(tokens)}.")


def _perplexity(log_probs: np.ndarray, tokens: list[int] | np.ndarray) -> float:
    """`perplexity` from the log-probabilities of positions 0..T-2 ([T - 1, V] or more rows)."""
    tokens = np.asarray(tokens)
    nll = -log_probs[np.arange(len(tokens) - 1), tokens[1:]]
    return float(np.exp(nll.mean()))


def first_divergence(first: list[int] | tuple[int, ...], second: list[int] | tuple[int, ...]) -> int | None:
    """The first position where two token sequences differ (a length mismatch counts at the shorter's
    end); None where they are identical."""
    for position, (a, b) in enumerate(zip(first, second, strict=False)):
        if a != b:
            return position
    return None if len(first) == len(second) else min(len(first), len(second))


@dataclass(frozen=True)
class Fidelity:
    """How close a variant's next-token distributions are to the float model's (all measured from the
    two runs' logits; KL in nats).

    Attributes:
        prompt_kl: KL(p_float || p_variant) at each prompt position, [T_prompt].
        prompt_top1: share of prompt positions whose greedy token is the same (0..1).
        prompt_max_abs_diff: max |Δlogit| over the prompt's positions and the vocabulary.
        text_kl_mean, text_kl_max: KL's mean and max over the shipped text's positions.
        text_top1: top-1 agreement over the shipped text.
        text_max_abs_diff: max |Δlogit| over the shipped text.
        text_perplexity: the variant's perplexity of the shipped text.
    """

    prompt_kl: tuple[float, ...]
    prompt_top1: float
    prompt_max_abs_diff: float
    text_kl_mean: float
    text_kl_max: float
    text_top1: float
    text_max_abs_diff: float
    text_perplexity: float


def fidelity(reference_prompt: np.ndarray, variant_prompt: np.ndarray, reference_text: np.ndarray,
             variant_text: np.ndarray, text_ids: list[int]) -> Fidelity:
    """The variant's distance from the reference on the prompt ([T_p, V] logits each) and on the shipped
    text ([T_t, V] logits each, of the tokens `text_ids`). The reference against its own logits (the same
    arrays) is at distance 0 by definition: only its perplexity is computed."""
    if variant_prompt is reference_prompt and variant_text is reference_text:
        return Fidelity(prompt_kl=(0.0,) * len(reference_prompt), prompt_top1=1.0, prompt_max_abs_diff=0.0,
                        text_kl_mean=0.0, text_kl_max=0.0, text_top1=1.0, text_max_abs_diff=0.0,
                        text_perplexity=perplexity(reference_text, text_ids))
    _check_rows(variant_text, text_ids)
    log_variant_text = log_softmax(variant_text)  # one log-softmax for the perplexity and the KL
    text_perplexity = _perplexity(log_variant_text, text_ids)  # before the KL overwrites it
    text_kl = _kl(log_softmax(reference_text), log_variant_text)
    return Fidelity(
        prompt_kl=tuple(float(kl) for kl in kl_per_position(reference_prompt, variant_prompt)),
        prompt_top1=top1_agreement(reference_prompt, variant_prompt),
        prompt_max_abs_diff=max_abs_diff(reference_prompt, variant_prompt),
        text_kl_mean=float(text_kl.mean()), text_kl_max=float(text_kl.max()),
        text_top1=top1_agreement(reference_text, variant_text),
        text_max_abs_diff=max_abs_diff(reference_text, variant_text),
        text_perplexity=text_perplexity)


@dataclass(frozen=True)
class Variant:
    """One lossy variant of the model (or the float reference itself), run for real.

    Attributes:
        name: e.g. "float32", "int8 per channel", "int4 g32", "fp8 e4m3".
        fidelity: its distance from the float model (measured; zeros for the reference).
        tokens: its greedy continuation of the prompt (measured).
        diverges_at: the first position where `tokens` leave the float model's; None: never (measured).
        bytes_per_element: bytes per weight, or per token of KV cache, scales included (computed).
        step_ms: wall time of one decode step here, median (measured).
        predicted_step_s: the roofline's decode-step lower bound on the named GPU (estimated).
    """

    name: str
    fidelity: Fidelity
    tokens: tuple[int, ...]
    diverges_at: int | None
    bytes_per_element: float
    step_ms: float
    predicted_step_s: float

    def divergence(self, reference: str) -> str:
        """Where its greedy continuation leaves `reference`'s (e.g. "float32's", "the float cache's"), in words."""
        if self.diverges_at is None:
            return f"matches {reference} for all {len(self.tokens)} tokens"
        return (f"leaves {reference} at position {self.diverges_at} of its {len(self.tokens)} generated tokens "
                f"(counted from 0)")
