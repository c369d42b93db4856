"""A batch of real prompts run together, left-padded as transformers' `generate` pads them.

Each sequence keeps its own ids and its own random generator; the batch keeps the attention mask
[B, n] (0 at the padding on the left of the shorter prompts) and derives the position ids from it
as `generate` does (`_prepare_position_ids_for_generation`: cumsum of the mask - 1, 0 at padding;
each decode step the last position + 1), so each sequence computes what it computes alone, up to
the rounding of GEMMs of other shapes (tests/integration/test_batch_prompts.py measures it).
A sequence that has ended (EOS) is fed the pad id, as `generate` feeds its finished sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_PROMPTS = 8  # sequences of real prompts one run takes together


@dataclass
class Batch:
    """The sequences of a batch and what their forward passes need.

    Attributes:
        rows: each sequence's ids without padding: its prompt, then the tokens chosen for it.
        prompt_lengths: each prompt's token count.
        pad_id: the id fed at padding and after a sequence's end.
        mask: [B, n] int64 attention mask of the cache after the last step: 0 at padding, else 1.
        generators: one CPU generator per sequence, seeded seed + b.
        ended: whether each sequence has chosen an EOS token.
    """

    rows: list[list[int]]
    prompt_lengths: list[int]
    pad_id: int
    mask: torch.Tensor
    generators: list[torch.Generator]
    ended: list[bool]

    @classmethod
    def start(cls, prompts: list[list[int]], pad_id: int, seed: int) -> Batch:
        """A batch of tokenized prompts (each at least one id), sequence b seeded `seed + b`."""
        longest = max(len(ids) for ids in prompts)
        mask = torch.tensor([[0] * (longest - len(ids)) + [1] * len(ids) for ids in prompts], dtype=torch.long)
        generators = [torch.Generator().manual_seed(seed + b) for b in range(len(prompts))]
        return cls([list(ids) for ids in prompts], [len(ids) for ids in prompts], pad_id, mask, generators,
                   [False] * len(prompts))

    @property
    def size(self) -> int:
        """B."""
        return len(self.rows)

    def prefill_ids(self) -> list[list[int]]:
        """[B, T] ids: each prompt left-padded with `pad_id` to the longest."""
        longest = self.mask.shape[1]
        return [[self.pad_id] * (longest - len(row)) + row for row in self.rows]

    def positions(self) -> torch.Tensor:
        """[B, n] position ids of the whole context, as `generate` derives them from the mask."""
        return (self.mask.cumsum(-1) - 1).masked_fill(self.mask == 0, 0)

    def extend(self) -> None:
        """One more position for every sequence (a decode step's token), as `generate` extends the mask."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.size, 1)], dim=-1)

    def padded(self, b: int) -> list[int]:
        """Sequence b's ids as the batch feeds them: left padding, prompt, then chosen tokens (the pad id
        after its end)."""
        return [self.pad_id] * int((self.mask[b] == 0).sum()) + self.rows[b]
