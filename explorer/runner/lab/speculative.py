"""Speculative decoding, self-drafted, on the loaded model (`explorer.lab.speculative`): the draft is
the model exited after its first k decoder layers (a forward hook on layer k stops the pass and its
output goes through the final norm and LM head, as the logit lens reads it); the full model verifies
the draft's guesses in one plain forward pass on its `DynamicCache`, which is then cropped back to the
accepted tokens.

The draft keeps its own `DynamicCache`, holding only its k layers: seeded with the prefill's first k
layers (the same computation), it grows by one position per guess and is cropped like the full one.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch
from transformers import DynamicCache

from explorer.analysis.costs import step_costs
from explorer.analysis.precision import Precision, canonical_dtype
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError
from explorer.lab.speculative import Round, SpeculativeResult
from explorer.runner.architectures import _module, model_features
from explorer.runner.lab.common import (
    check_runnable,
    passes_on,
    forward,
    greedy,
    median_ms,
    new_cache,
    output_shapes,
    pieces,
    until_eos,
)
from explorer.runner.lens import read_out
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import model_pass
from explorer.runner.step_order import crop_cache


class _EarlyExit(Exception):
    """Raised by the draft's hook after its last layer, carrying that layer's output [1, T, d]."""

    def __init__(self, hidden: torch.Tensor):
        super().__init__()
        self.hidden = hidden


def run_speculative(loaded: LoadedModel, prompt_ids: list[int], depth: int = 12, guesses: int = 4,
                    tokens: int = 16, repeats: int = 1) -> SpeculativeResult:
    """Prefill the prompt, then decode `tokens` greedy tokens two ways from the same KV cache: plain
    (one full forward pass per token) and speculative (the first-`depth`-layers draft guesses up to
    `guesses` tokens, one full pass of T = g + 1 verifies them); time both (the prefill excluded).

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids.
        depth: k, the draft's decoder layers, 1..L-1.
        guesses: g, the draft's guesses per round, >= 1.
        tokens: tokens to decode each way, >= 1 (the first is the prefill's).
        repeats: runs timed per way (the median is kept); the first run of each way gives its tokens.

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt, a prompt too long, or a draft depth not below the model's L layers.
    """
    check_runnable(loaded, prompt_ids)
    layers = len(_module(loaded.model, model_features(loaded.model).layers))
    if not 1 <= depth < layers:
        raise PromptError(f"The draft depth k must be 1 to {layers - 1}: the draft is the first k of this "
                          f"model's L = {layers} layers, fewer than all of them; not {depth}.")
    if min(guesses, tokens) < 1:
        raise PromptError(f"Guesses and tokens must be at least 1, not {guesses} and {tokens}.")
    with passes_on(loaded) as model:
        cache = new_cache(model)
        last = forward(model, prompt_ids, cache)[-1]
        eos = loaded.eos_token_ids
        # fresh caches for each timed run, made outside the timed calls; the model is warm (the prefill
        # ran), so the first timed run of each way also gives its tokens
        plain_caches = [copy.deepcopy(cache) for _ in range(repeats)]
        spec_caches = [(copy.deepcopy(cache), _draft_cache(model, cache, depth)) for _ in range(repeats)]
        runs: dict[str, tuple] = {}
        plain_ms, speculative_ms = median_ms(
            [lambda: runs.setdefault("plain", greedy(model, plain_caches.pop(), last, tokens, eos)),
             lambda: runs.setdefault("speculative", _speculate(model, *spec_caches.pop(), int(last.argmax()), depth,
                                                               guesses, tokens, eos))], repeats)
        plain, (spoken, raw) = runs["plain"], runs["speculative"]
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    rounds = tuple(_round(loaded, spec, depth, *entry) for entry in raw)
    return SpeculativeResult(
        prompt_tokens=len(prompt_ids), layers=layers, depth=depth, guesses=guesses, rounds=rounds,
        tokens=tuple(spoken), plain_tokens=tuple(plain), speculative_ms=speculative_ms, plain_ms=plain_ms,
        repeats=repeats, pieces=pieces(loaded, prompt_ids + plain + spoken), device=str(loaded.device),
        dtype=loaded.dtype)


def _speculate(model, cache: DynamicCache, draft: DynamicCache, first: int, depth: int, guesses: int,
               tokens: int, eos_ids=()) -> tuple[list[int], list[tuple]]:
    """Greedy speculative decoding of `tokens` tokens, the first (`first`) chosen by the prefill; like
    plain greedy decoding, it ends at the first of `eos_ids` (kept).

    Before each round the full `cache` holds the prompt and every token but the last; `draft` holds
    a prefix of that. The draft catches up on the tokens it lacks and guesses g = min(`guesses`,
    tokens still wanted); the full model runs [last, guess_1..guess_g] at once, keeps the guesses that
    equal its own argmax up to the first that does not, and adds its own token there.

    Returns:
        (tokens, rounds): the `tokens` ids, and per round (guesses, accepted, full model's token,
        verify input shape [1, g + 1, d] (measured), cache positions n after the verify write).
    """
    out, rounds, embed = [first], [], model.get_input_embeddings()
    start = cache.get_seq_length()  # the position of `first`: the prompt's length
    while len(out) < tokens and out[-1] not in eos_ids:
        feed, guessed = out[draft.get_seq_length() - start:], []
        for _ in range(min(guesses, tokens - len(out))):
            guessed.append(int(draft_forward(model, feed, draft, depth)[-1].argmax()))
            feed = guessed[-1:]
        cached = cache.get_seq_length()
        with output_shapes(embed) as shapes:
            own = forward(model, [out[-1], *guessed], cache).argmax(-1).tolist()  # own[i]: after input i
        accepted = next((i for i, (guess, mine) in enumerate(zip(guessed, own, strict=False)) if guess != mine),
                        len(guessed))
        rounds.append((tuple(guessed), accepted, own[accepted], shapes[0], cache.get_seq_length()))
        out += [*guessed[:accepted], own[accepted]]
        crop_cache(cache, cached + 1 + accepted)
        crop_cache(draft, min(draft.get_seq_length(), cached + 1 + accepted))
        out = until_eos(out, eos_ids)
    return out[:tokens], rounds


def draft_forward(model, ids: list[int], cache: DynamicCache, depth: int) -> torch.Tensor:
    """The draft's forward pass: `ids` ([1, T]) through the first `depth` decoder layers on `cache`
    (which grows by T in those layers only), then the final norm and LM head; returns [T, V] float32
    logits on the CPU."""
    family = model_features(model)
    norm, head = _module(model, family.top_modules["final_norm"]), _module(model, family.top_modules["lm_head"])
    with model_pass(model), _exit_after(model, depth):  # the hook ends only this pass: no other page's runs meanwhile
        try:
            model(input_ids=torch.tensor([ids], device=model.device), cache=cache, use_cache=True)
        except _EarlyExit as stop:
            return read_out(model, norm, head, stop.hidden[0]).float().cpu()
    raise AssertionError("the draft's hook did not end the pass")  # unreachable: the hook always raises


@contextlib.contextmanager
def _exit_after(model, depth: int) -> Iterator[None]:
    """A forward hook on decoder layer `depth - 1` that ends the pass there (raises `_EarlyExit`);
    always removed."""
    def stop(_module, _args, output):
        raise _EarlyExit(output[0] if isinstance(output, tuple) else output)

    handle = _module(model, model_features(model).layers)[depth - 1].register_forward_hook(stop)
    try:
        yield
    finally:
        handle.remove()


def _draft_cache(model, cache: DynamicCache, depth: int) -> DynamicCache:
    """A cache for the draft: copies of the first `depth` layers' keys and values of `cache` (the
    deeper layers left empty; the draft never reaches them)."""
    draft = new_cache(model)
    for index in range(depth):
        layer = cache.layers[index]
        draft.update(layer.keys.clone(), layer.values.clone(), index)
    return draft


def _round(loaded: LoadedModel, spec: ModelSpec, depth: int, guessed: tuple[int, ...], accepted: int,
           full_token: int, shape: tuple[int, ...], context: int) -> Round:
    """One round's record, with the bytes of its passes from the cost model (estimated,
    `explorer.analysis.costs.step_costs`): the verify pass of T = g + 1 rows with the LM head over
    all of them, one plain decode step at the same n, and the g draft passes (the layers below
    `depth` and the layers-free operators: embedding, final norm, LM head), all in the run's dtype."""
    dtype = canonical_dtype(loaded.dtype)
    options = CostOptions(Precision(dtype, dtype, dtype))
    verify = step_costs(spec, Step("prefill", 1, len(guessed) + 1, context),
                        CostOptions(options.precision, lm_head_all_positions=True))
    first_guess_context = context - len(guessed)
    draft = sum(cost.bytes for i in range(len(guessed))
                for cost in step_costs(spec, Step.decode(first_guess_context + i), options)
                if cost.layer is None or cost.layer < depth)
    return Round(guesses=guessed, accepted=accepted, full_token=full_token,
                 guess_pieces=pieces(loaded, list(guessed)), full_piece=pieces(loaded, [full_token])[0],
                 verify_input_shape=tuple(shape), context=context,
                 verify_bytes=sum(cost.bytes for cost in verify),
                 decode_bytes=sum(cost.bytes for cost in step_costs(spec, Step.decode(context), options)),
                 draft_bytes=draft)
