"""Choosing the next token with transformers' own logits processors, every stage recorded.

The processors are the classes `generate` uses, built in the order `GenerationMixin._get_logits_processor`
applies them (transformers 5, generation/utils.py): temperature, top-k, top-p, min-p; then softmax
and a multinomial draw. Greedy decoding is the argmax of the raw logits. Every stage is computed over
the full vocabulary; nothing is truncated here.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.generation.logits_process import (
    LogitsProcessor,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from explorer.config import SamplingSettings
from explorer.trace import SamplingRecord, SamplingStage


def build_processors(settings: SamplingSettings) -> list[tuple[str, LogitsProcessor]]:
    """The active logits processors for `settings`, named, in `generate`'s order.

    A filter at its neutral value (temperature 1, top-k 0, top-p 1, min-p 0) is left out, as `generate`
    leaves it out. Greedy settings give no processors.
    """
    if not settings.do_sample:
        return []
    processors: list[tuple[str, LogitsProcessor]] = []
    if settings.temperature != 1.0:
        processors.append(("temperature", TemperatureLogitsWarper(settings.temperature)))
    if settings.top_k != 0:
        processors.append(("top_k", TopKLogitsWarper(top_k=settings.top_k, min_tokens_to_keep=1)))
    if settings.top_p < 1.0:
        processors.append(("top_p", TopPLogitsWarper(top_p=settings.top_p, min_tokens_to_keep=1)))
    if settings.min_p > 0.0:
        processors.append(("min_p", MinPLogitsWarper(min_p=settings.min_p, min_tokens_to_keep=1)))
    return processors


def sample_next_token(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    settings: SamplingSettings,
    generator: torch.Generator,
) -> SamplingRecord:
    """Run the sampling pipeline on one position's logits and choose a token.

    Args:
        logits: [vocab] float32 last-position logits.
        input_ids: [1, n] int64, the sequence so far (some processors look at it).
        settings: the sampling settings.
        generator: the session's own seeded CPU generator for the multinomial draw.

    Returns:
        The record: the raw logits and the logits after each active processor ([vocab] float32, -inf
        where filtered out), the chosen id and its probability in the final distribution.
    """
    scores = logits.detach().to(torch.float32).reshape(1, -1).cpu()
    stages = [SamplingStage("raw", scores[0].numpy().copy())]
    for name, processor in build_processors(settings):
        scores = processor(input_ids.cpu(), scores)
        stages.append(SamplingStage(name, scores[0].numpy().copy()))
    probs = torch.softmax(scores, dim=-1)
    if settings.do_sample:
        token_id = int(torch.multinomial(probs, num_samples=1, generator=generator)[0, 0])
    else:
        token_id = int(torch.argmax(scores, dim=-1)[0])
    return SamplingRecord(settings.to_dict(), stages, token_id, float(probs[0, token_id]))


def resample(logits: np.ndarray, input_ids: list[int], settings: SamplingSettings, seed: int) -> SamplingRecord:
    """Re-run sampling on stored logits with other settings (a slider moved); the model is not run.

    Args:
        logits: [vocab] float32 stored last-position logits of a step.
        input_ids: the sequence that produced them.
        settings: the new settings.
        seed: seed of a fresh generator, so the same settings always draw the same token.
    """
    generator = torch.Generator().manual_seed(seed)
    ids = torch.tensor([input_ids], dtype=torch.long)
    return sample_next_token(torch.from_numpy(np.asarray(logits, dtype=np.float32)), ids, settings, generator)
