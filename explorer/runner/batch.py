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

from explorer.config import SamplingSettings
from explorer.runner.loaded import LoadedModel
from explorer.runner.sampling import sample_next_token
from explorer.trace import SamplingRecord

MAX_PROMPTS = 8  # sequences of real prompts one run takes together


def pad_id(loaded: LoadedModel) -> int:
    """The generation config's pad id, else the tokenizer's, else the first EOS id (as `generate`)."""
    for pad in (loaded.model.generation_config.pad_token_id, loaded.tokenizer.pad_token_id):
        if pad is not None:
            return int(pad)
    return loaded.eos_token_ids[0]


@dataclass
class Batch:
    """The sequences of a batch and what their forward passes need.

    Attributes:
        rows: each sequence's ids without left padding: its prompt, the tokens chosen for it, then the pad
            id fed after its end (`sequences` leaves those out).
        prompt_lengths: each prompt's token count.
        pad_id: the id fed at padding and after a sequence's end.
        mask: [B, n] int64 attention mask of the cache after the last step: 0 at padding, else 1.
        generators: one CPU generator per sequence, seeded seed + b.
        ends: where each sequence ended: the length of its row up to its EOS token; None while it runs.
    """

    rows: list[list[int]]
    prompt_lengths: list[int]
    pad_id: int
    mask: torch.Tensor
    generators: list[torch.Generator]
    ends: list[int | None]

    @classmethod
    def start(cls, prompts: list[list[int]], pad_id: int, seed: int) -> Batch:
        """A batch of tokenized prompts (each at least one id), sequence b seeded `seed + b`."""
        longest = max(len(ids) for ids in prompts)
        mask = torch.tensor([[0] * (longest - len(ids)) + [1] * len(ids) for ids in prompts], dtype=torch.long)
        generators = [torch.Generator().manual_seed(seed + b) for b in range(len(prompts))]
        return cls([list(ids) for ids in prompts], [len(ids) for ids in prompts], pad_id, mask, generators,
                   [None] * len(prompts))

    @property
    def ended(self) -> bool:
        """Every sequence has chosen an EOS token."""
        return all(end is not None for end in self.ends)

    def sequences(self) -> list[list[int]]:
        """Each sequence's ids: its prompt, then its chosen tokens up to its EOS."""
        return [row[:end] for row, end in zip(self.rows, self.ends, strict=True)]

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

    def inputs(self, stage: str, device) -> dict[str, torch.Tensor]:
        """The model's inputs: [B, T] ids (the padded prompts, or each sequence's last token), the [B, n]
        attention mask and the position ids of the new positions."""
        ids = self.prefill_ids() if stage == "prefill" else [[row[-1]] for row in self.rows]
        return {"input_ids": torch.tensor(ids, device=device), "attention_mask": self.mask.to(device),
                "position_ids": self.positions()[:, -len(ids[0]):].to(device)}

    def choose(self, logits: torch.Tensor, settings: SamplingSettings, eos_ids: list[int]) -> SamplingRecord | None:
        """Append each running sequence's next token, chosen from its row of `logits` [B, V] with its own
        generator and from its own ids (no padding: what it sees alone); an ended sequence gets the pad
        id. Returns sequence 0's record (None once it has ended)."""
        first = None
        for b, row in enumerate(self.rows):
            if self.ends[b] is not None:
                row.append(self.pad_id)
                continue
            record = sample_next_token(logits[b], torch.tensor([row]), settings, self.generators[b])
            row.append(record.token_id)
            if record.token_id in eos_ids:
                self.ends[b] = len(row)
            first = record if b == 0 else first
        return first

    def texts(self, tokenizer) -> list[str]:
        """Each sequence's generated text, special tokens left out."""
        return [tokenizer.decode(row[length:], skip_special_tokens=True)
                for row, length in zip(self.sequences(), self.prompt_lengths, strict=True)]
