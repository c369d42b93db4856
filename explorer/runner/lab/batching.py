"""Continuous batching on the loaded model (plain transformers, no hooks but one shape probe): the
requests of `explorer.lab.batching.plan_requests` run step by step in one packed forward pass per
engine step, and each alone, for the same greedy tokens and logits within float error.

How a step is computed: the tokens of the requests in the batch are concatenated into one row,
input [1, num_tokens] (the packed layout [num_tokens, d] after the embedding), each token with its own
request's position id. Every step appends its tokens' keys and values to one shared `DynamicCache`,
the engine's KV pool ([1, h_kv, slots, d_h] a layer, slots in arrival order), and a 4-D additive mask
[1, 1, num_tokens, slots] lets each token see only its own request's slots at positions up to its own:
varlen attention written as a mask. The slots of a retired request stay in the pool, masked out (a
`DynamicCache` cannot free the middle of its tensors); the page table that an engine would keep for
the same positions is computed (`explorer.lab.batching.page_tables`). Only each request's last row
goes through the LM head (`logits_to_keep` given the indices cu_seqlens[1:] - 1).
"""

from __future__ import annotations

import torch

from explorer.analysis.spec import ModelSpec
from explorer.lab.batching import (
    BatchingResult,
    Request,
    kv_bytes_per_position,
    page_tables,
    plan_requests,
    step_layouts,
)
from explorer.runner.lab.common import (
    check_runnable,
    passes_on,
    forward,
    median_ms,
    new_cache,
    output_shapes,
)
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import model_pass

Logits = list[torch.Tensor]  # per request: [new_tokens, V] float32 on the CPU


def run_batching(loaded: LoadedModel, prompt_ids: list[int], requests: int = 4, block_size: int = 16,
                 new_tokens: int = 8, repeats: int = 1) -> BatchingResult:
    """Run the batch built from `prompt_ids` continuously batched and each request alone; compare.

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids; request i is their first T(i+1)/R.
        requests: R, 3..8.
        block_size: positions a KV page holds (the page table is computed, not run).
        new_tokens: the most tokens a request generates (request i: min(new_tokens, 2 + 3i)).
        repeats: timed runs per way (the median is kept); the first of each gives the results (after one
            untimed one-token pass, so that neither way pays the first call's start-up cost).

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt, a prompt too long or shorter than R tokens, R outside 3..8, a block size
            or new_tokens below 1.
    """
    check_runnable(loaded, prompt_ids)
    batch = plan_requests(len(prompt_ids), requests, new_tokens)
    layouts = step_layouts(batch)
    tables = page_tables(layouts, block_size)
    with passes_on(loaded) as model:
        forward(model, prompt_ids[:1], None)  # untimed start-up
        runs: dict[str, tuple] = {}
        with output_shapes(model.get_input_embeddings()) as shapes:  # the first batched run's come first
            batched_ms, alone_ms = median_ms(
                [lambda: runs.setdefault("batched", _batched(model, prompt_ids, batch)),
                 lambda: runs.setdefault("alone", _one_after_another(model, prompt_ids, batch))], repeats)
        shapes = shapes[:len(layouts)]  # one packed pass an engine step
        batched_tokens, batched_logits = runs["batched"]
        alone_tokens, alone_logits = zip(*runs["alone"], strict=True)
    delta = max(float((mine - theirs).abs().max()) for mine, theirs in zip(batched_logits, alone_logits, strict=True))
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    element_bytes = next(model.parameters()).element_size()
    return BatchingResult(
        requests=batch, layouts=layouts, packed_shapes=tuple(shapes), tables=tables, block_size=block_size,
        bytes_per_position=kv_bytes_per_position(spec.n_layers, spec.n_kv_heads, spec.head_dim, element_bytes),
        batched_tokens=tuple(map(tuple, batched_tokens)), alone_tokens=tuple(map(tuple, alone_tokens)),
        max_abs_diff=delta, max_abs_logit=max(float(logits.abs().max()) for logits in alone_logits),
        batched_ms=batched_ms, alone_ms=alone_ms, repeats=repeats,
        texts=tuple(_text(loaded, tokens) for tokens in batched_tokens), device=str(loaded.device),
        dtype=loaded.dtype)


def _batched(model, prompt_ids: list[int], batch: tuple[Request, ...]) -> tuple[list[list[int]], Logits]:
    """Every engine step as one packed forward pass on the shared pool (see the module's docstring);
    returns each request's greedy tokens and their logits."""
    pool = new_cache(model)
    owners: list[int] = []  # per pool slot: its request
    positions: list[int] = []  # per pool slot: its position in that request
    tokens: list[list[int]] = [[] for _ in batch]
    logits: list[list[torch.Tensor]] = [[] for _ in batch]
    for layout in step_layouts(batch):
        ids, step_positions, step_owners = [], [], []
        for r in layout.requests:
            request = batch[r]
            fed = prompt_ids[:request.prompt_tokens] if request.phase(layout.step) == "prefill" else tokens[r][-1:]
            start = request.prompt_tokens + len(tokens[r]) - len(fed)
            ids += fed
            step_positions += range(start, start + len(fed))
            step_owners += [r] * len(fed)
        owners += step_owners
        positions += step_positions
        mask = _varlen_mask(model, step_owners, step_positions, owners, positions)
        last_rows = torch.tensor(layout.cu_seqlens[1:], device=model.device) - 1
        with model_pass(model):  # each engine step in a turn of its own
            out = model(input_ids=torch.tensor([ids], device=model.device), attention_mask=mask,
                        position_ids=torch.tensor([step_positions], device=model.device), cache=pool,
                        use_cache=True, logits_to_keep=last_rows).logits[0].float().cpu()  # [B, V]
        for r, row in zip(layout.requests, out, strict=True):
            tokens[r].append(int(row.argmax()))
            logits[r].append(row)
    return tokens, [torch.stack(rows) for rows in logits]


def _varlen_mask(model, query_owners: list[int], query_positions: list[int], slot_owners: list[int],
                 slot_positions: list[int]) -> torch.Tensor:
    """[1, 1, num_tokens, slots] in the model's dtype: 0 where a query may see a slot (same request,
    position not after its own), the dtype's lowest value elsewhere (added to the scores)."""
    query_owner = torch.tensor(query_owners)[:, None]
    query_position = torch.tensor(query_positions)[:, None]
    visible = (torch.tensor(slot_owners)[None, :] == query_owner) & (torch.tensor(slot_positions)[None, :] <= query_position)
    mask = torch.full(visible.shape, torch.finfo(model.dtype).min, dtype=model.dtype)
    return mask.masked_fill(visible, 0.0)[None, None].to(model.device)


def _one_after_another(model, prompt_ids: list[int], batch: tuple[Request, ...]) -> list[tuple[list[int], torch.Tensor]]:
    """Each request alone (`_alone`), in order."""
    return [_alone(model, prompt_ids[:request.prompt_tokens], request.new_tokens) for request in batch]


def _alone(model, prompt: list[int], steps: int) -> tuple[list[int], torch.Tensor]:
    """One request alone on its own cache: prefill, then greedy decode; its tokens and [steps, V] logits."""
    cache = new_cache(model)
    rows = [forward(model, prompt, cache, keep=1)[-1]]
    tokens = [int(rows[-1].argmax())]
    while len(tokens) < steps:
        rows.append(forward(model, tokens[-1:], cache, keep=1)[-1])
        tokens.append(int(rows[-1].argmax()))
    return tokens, torch.stack(rows)


def _text(loaded: LoadedModel, tokens: list[int]) -> str:
    if loaded.tokenizer is None:
        return " ".join(f"[{token}]" for token in tokens)
    return loaded.tokenizer.decode(tokens)
