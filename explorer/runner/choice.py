"""How a step's token is chosen (sampled, or a placeholder in shape-only mode) and whether it ends
generation."""

from __future__ import annotations

import torch

from explorer.config import SamplingSettings
from explorer.runner.batch import Batch
from explorer.runner.loaded import LoadedModel
from explorer.runner.sampling import sample_next_token
from explorer.trace import SamplingRecord


def draw_token(loaded: LoadedModel, batch: Batch | None, ids: list[int], settings: SamplingSettings,
               generator: torch.Generator, logits: torch.Tensor) -> tuple[SamplingRecord | None, int]:
    """Choose the next token from the last position's logits: (how it was chosen, its id).

    Args:
        batch: a batch of prompts, each sequence drawing with its own generator (it records the
            chosen ids); None for one sequence, drawn with `generator`.
        ids: the sequence's ids so far (the logits processors read them).
        logits: [B, V] at the last position, the model's dtype.

    Returns:
        (None, 0) in shape-only mode (no values to sample from); else sequence 0's sampling record
        (None in a batch once sequence 0 has ended) and id.
    """
    if loaded.shape_only:
        return None, 0
    if batch is not None:
        sampling = batch.choose(logits, settings, loaded.eos_token_ids)
        return sampling, batch.rows[0][-1]
    sampling = sample_next_token(logits[0], torch.tensor([ids], dtype=torch.long), settings, generator)
    return sampling, sampling.token_id


def finish_reason(loaded: LoadedModel, batch: Batch | None, token_id: int, n_generated: int, n_ids: int,
                  max_new_tokens: int) -> str:
    """Why generation ends after choosing `token_id`: "eos" (every sequence of a batch), "max_new_tokens"
    (`n_generated` reached it), "context_full" (`n_ids` fills the context window), or "" to go on."""
    ended = batch.ended if batch is not None else token_id in loaded.eos_token_ids
    if not loaded.shape_only and ended:
        return "eos"
    if n_generated >= max_new_tokens:
        return "max_new_tokens"
    if n_ids >= loaded.model.config.max_position_embeddings:
        return "context_full"
    return ""
