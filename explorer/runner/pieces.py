"""The text a session gives its tokens: each id's piece, the generated text, and the ids a step names."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from explorer.runner.detokenize import token_piece
from explorer.runner.loaded import LoadedModel
from explorer.trace import LensRecord, StepTrace

# Top tokens per step whose text pieces the run names (the sampling view draws 20 of them).
PIECES_PER_STEP = 64


def text_tokenizer(loaded: LoadedModel):
    """The tokenizer that gives a session's tokens their text; None in shape-only mode (its ids are
    placeholders) or where the model has no tokenizer."""
    return loaded.tokenizer if loaded.tokenizer is not None and not loaded.shape_only else None


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """Each token id's text alone (`token_piece`: what a token chip shows); "" for each where
    `tokenizer` is None."""
    if tokenizer is None:
        return [""] * len(ids)
    return [token_piece(tokenizer, i) for i in ids]


def generated_text(tokenizer, generated: list[int]) -> str:
    """The text of the `generated` ids, special tokens left out ("" where `tokenizer` is None); a
    character still incomplete after the last token (part of an emoji's UTF-8 bytes) is held back."""
    if tokenizer is None:
        return ""
    return tokenizer.decode(generated, skip_special_tokens=True).rstrip("\ufffd")


def step_pieces(tokenizer, trace: StepTrace, named: Mapping[int, str]) -> dict[int, str]:
    """The pieces (`token_pieces`) of the ids a step names that `named` does not yet hold: the ids it
    fed, the token it chose and its `PIECES_PER_STEP` top tokens (its lens names its own once computed)."""
    ids = set(trace.input_ids)
    if trace.logits is not None:
        ids.add(trace.sampling.token_id)
        top = min(PIECES_PER_STEP, trace.logits.size)
        # torch's top-k: 0.1 ms over SmolLM2's 49,152 logits, numpy's argpartition 0.5 ms
        ids.update(torch.from_numpy(trace.logits).topk(top, sorted=False).indices.tolist())
    new = sorted(ids.difference(named))
    return dict(zip(new, token_pieces(tokenizer, new), strict=True))


def lens_pieces(tokenizer, record: LensRecord, named: Mapping[int, str]) -> dict[int, str]:
    """The pieces of a logit lens's top tokens that `named` does not yet hold."""
    new = sorted(set(np.unique(record.top_ids).tolist()).difference(named))
    return dict(zip(new, token_pieces(tokenizer, new), strict=True))
