"""KV eviction on the loaded model (`explorer.lab.evict`): the shipped text (or a long prompt) prefilled
for its first few tokens, then fed one token at a time (teacher-forced) on a `DynamicCache` cut back to W positions after
every step by index selection along its position axis.

Positions, two rules (`explorer.lab.evict.POSITION_RULES`): "as-cached", each kept key stays rotated by
RoPE at the position it was cached with and each new token gets its position in the original text
(`position_ids` passed explicitly); "renumbered", as StreamingLLM does (Xiao et al. 2024, section 3.2),
the kept keys are numbered 0..n-1 inside the cache (each re-rotated by RoPE by the difference, as its
cache index changes) and each new token takes the next number. No attention mask is passed: the new
token sees every kept key.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from transformers import DynamicCache

from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD, SinkSummary, first_token_importance
from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError
from explorer.lab.evict import (
    FULL,
    OWN_PROMPT,
    POLICIES,
    POSITION_RULES,
    EvictResult,
    PolicyRun,
    SinkMeasures,
    bytes_per_position,
    decodes_prompt,
    kept_indices,
    nll_per_position,
)
from explorer.lab.fidelity import TEXT_SOURCE
from explorer.runner.attention_view import attention_view
from explorer.runner.lab.common import check_runnable, forward, new_cache, passes_on, pieces, text_ids
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import model_pass

PREFILL_TOKENS = 8  # the text's first tokens prefilled at once (at most W of them)
SINK_TOKENS = 256  # the text's first tokens whose full attention is measured for the sinks ([L, h, n, n] held)


def run_evict(loaded: LoadedModel, prompt_ids: list[int], window: int = 32, sinks: int = 4,
              text_tokens: int = 96, positions: int = 0) -> EvictResult:
    """Decode a text with the full cache (one plain forward) and with each rule of `POLICIES` holding W
    positions, and measure the attention its first tokens draw; the shared model is only read ("h2o" and
    the sinks' measure run eager attention on a view sharing its weights, `attention_view`).

    The text is the prompt where it is long (at least W + `PROMPT_PAST_WINDOW` tokens:
    `explorer.lab.evict.decodes_prompt`), else the shipped text; its first `text_tokens` tokens.

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids.
        window: W, the positions the cache keeps.
        sinks: S, the first positions "sinks" keeps, 0 <= S < W.
        text_tokens: the text's first tokens decoded (at most the model's context); at least W + 2.
        positions: the position rule, an index into `POSITION_RULES` (0: as cached, 1: renumbered).

    Raises:
        SessionStateError: shape-only mode.
        PromptError: W < 1, S outside 0..W - 1, a text shorter than W + 2 tokens (no prediction made past
            W), or renumbering on a model without rotary positions.
    """
    check_runnable(loaded, prompt_ids)
    if window < 1:
        raise PromptError(f"The window W must hold at least 1 position, not {window}.")
    if not 0 <= sinks < window:
        raise PromptError(f"The sinks S must be 0 to W - 1 = {window - 1} (S = W leaves no recent position), "
                          f"not {sinks}.")
    own = decodes_prompt(len(prompt_ids), window)
    text = prompt_ids[:text_tokens] if own else text_ids(loaded, text_tokens)
    if len(text) < window + 2:  # position t's logits predict token t + 1: the last prediction is at T - 2
        raise PromptError(f"The text's {len(text)} tokens leave no prediction past the window W = {window} "
                          f"(the rules differ only there): lower W to at most {max(1, len(text) - 2)} or decode "
                          f"at least {window + 2} text tokens.")
    rule = POSITION_RULES[positions]
    if rule == "renumbered":
        _rotary(loaded.model)  # refuses a model without rotary positions before it runs
    with passes_on(loaded) as model:
        reference = forward(model, text, None).numpy()
        per_position = kv_bytes_per_position(model)
        runs = [_scored(FULL, reference, reference, text, [], len(text), per_position)]
        decodes = evicted_decodes(model, text, POLICIES, window, sinks, rule == "renumbered")
        for policy, (logits, kept, lengths) in decodes.items():
            runs.append(_scored(policy, logits, reference, text, kept, max(lengths), per_position))
        measures = sink_measures(attention_view(model, "eager"), text[:SINK_TOKENS], sinks)
    return EvictResult(
        source=OWN_PROMPT if own else TEXT_SOURCE, text_tokens=len(text), window=window, sinks=sinks,
        heavy=window // 2, prefill_tokens=min(PREFILL_TOKENS, window), bytes_per_position=per_position,
        runs=tuple(runs), first_text="".join(pieces(loaded, text[:sinks])), sink_measures=measures,
        device=str(loaded.device), dtype=loaded.dtype, positions=rule)


@torch.inference_mode()
def sink_measures(model, ids: list[int], sinks: int) -> SinkMeasures:
    """The attention `ids`' first tokens draw in one forward with the full cache (the model's attention
    must be eager, which returns its weights): the first-token importance of every (layer, head)
    (`explorer.analysis.sinks.first_token_importance`, thresholded as the attention view marks sinks),
    and the mean weight the queries past the first `sinks` put on those keys."""
    with model_pass(model):
        out = model(input_ids=torch.tensor([ids], device=model.device), output_attentions=True)
    probs = [layer[0].float().cpu().numpy() for layer in out.attentions]  # L x [h, n, n]
    summary = SinkSummary(np.stack([first_token_importance(p) for p in probs]), DEFAULT_SINK_THRESHOLD)
    later = [p[:, sinks:, :sinks].sum(axis=-1, dtype=np.float64).mean() for p in probs if p.shape[1] > sinks]
    return SinkMeasures(tokens=len(ids), head_share=summary.share, threshold=summary.threshold,
                        first_share=float(np.mean(later)) if later and sinks else 0.0)


def evicted_decode(model, ids: list[int], policy: str, window: int, sinks: int,
                   renumber: bool = False) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """One rule's `evicted_decodes`: (logits, kept, lengths)."""
    return evicted_decodes(model, ids, (policy,), window, sinks, renumber)[policy]


def evicted_decodes(model, ids: list[int], policies: tuple[str, ...], window: int, sinks: int,
                    renumber: bool = False) -> dict[str, tuple[np.ndarray, list[np.ndarray], list[int]]]:
    """Prefill `ids`' first min(PREFILL_TOKENS, W) tokens, then feed the rest one at a time, cutting the
    cache back to the positions `kept_indices` names after every pass (without autograd; each pass in a
    turn of its own on the model's lock). The rules run side by side, one batch row each, so one
    forward a pass serves them all (each row's cache keeps its own positions; every rule keeps the same
    count, min(n, W)).

    Args:
        ids: T token ids; position t's logits predict ids[t + 1].
        policies: rules of `POLICIES` (with "h2o" the passes run eager attention, to read its weights, on
            `attention_view(model, "eager")`: the shared model is left as it is).
        renumber: StreamingLLM's position rule (the kept keys renumbered inside the cache); False: as cached.

    Returns:
        By rule: logits, [T, V] float32, one row per position (measured); kept, after each pass, the
        original positions the cache holds, ascending; lengths, after each pass, the cache's length
        (`DynamicCache.get_seq_length`).
    """
    return _decode(attention_view(model, "eager") if "h2o" in policies else model, ids, policies, window, sinks,
                   renumber)


@torch.inference_mode()
def _decode(model, ids: list[int], policies: tuple[str, ...], window: int, sinks: int, renumber: bool) -> dict:
    cache, rows = new_cache(model), len(policies)
    prefill = min(PREFILL_TOKENS, window, len(ids))
    chunks = [(0, ids[:prefill])] + [(t, [ids[t]]) for t in range(prefill, len(ids))]
    positions, scores = [np.zeros(0, dtype=np.int64)] * rows, [np.zeros(0)] * rows
    logits, kept, lengths = ([[] for _ in policies] for _ in range(3))
    for start, chunk in chunks:
        first = cache.get_seq_length() if renumber else start  # the chunk's first position
        where = torch.arange(first, first + len(chunk), device=model.device)[None].expand(rows, -1)
        with model_pass(model):
            out = model(input_ids=torch.tensor([chunk] * rows, device=model.device), position_ids=where,
                        cache=cache, use_cache=True, output_attentions="h2o" in policies)
        keeps = []
        for row, policy in enumerate(policies):
            logits[row].append(out.logits[row].float().cpu().numpy())
            positions[row] = np.concatenate([positions[row], np.arange(start, start + len(chunk))])
            scores[row] = np.concatenate([scores[row], np.zeros(len(chunk))])
            if policy == "h2o":
                scores[row] = scores[row] + received_attention(out.attentions, row)
            keeps.append(kept_indices(policy, positions[row], window, sinks, scores[row]))
            positions[row], scores[row] = positions[row][keeps[row]], scores[row][keeps[row]]
            kept[row].append(positions[row].copy())
        if len(keeps[0]) < cache.get_seq_length():
            select(cache, np.stack(keeps))
            if renumber:  # a kept key's cache index (its position) went from keeps[row][j] to j
                rerotate(model, cache, np.arange(len(keeps[0]))[None] - np.stack(keeps))
        for row in range(rows):
            lengths[row].append(cache.get_seq_length())
    return {policy: (np.concatenate(logits[row]), kept[row], lengths[row]) for row, policy in enumerate(policies)}


def received_attention(attentions: tuple[torch.Tensor, ...], row: int = 0) -> np.ndarray:
    """The attention each key of batch row `row` received in one pass, summed over layers, heads and queries.

    Args:
        attentions: one [B, h_q, q, n] float tensor a layer (the softmaxed weights).

    Returns:
        [n] float64.
    """
    return sum(layer[row].double().sum(dim=(0, 1)).cpu() for layer in attentions).numpy()


def select(cache: DynamicCache, keep: np.ndarray) -> None:
    """Keep only the positions `keep` ([B, n'] indices along the position axis, one row per batch row) in
    every layer's keys and values ([B, h_kv, n, d_h] -> [B, h_kv, n', d_h]), in place."""
    for layer in cache.layers:
        index = torch.as_tensor(keep, device=layer.keys.device)[:, None, :, None]
        index = index.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        layer.keys = layer.keys.gather(-2, index)
        layer.values = layer.values.gather(-2, index)


def rerotate(model, cache: DynamicCache, shift: np.ndarray) -> None:
    """Move every layer's keys by `shift` positions under RoPE, in place: rotating a key cached at
    position p by angle (p + s)·θ equals rotating it by p·θ, then by s·θ (the model's own
    `apply_rotary_pos_emb`, with its `inv_freq`; values carry no position).

    Args:
        shift: [B, n] int, per batch row and cached key, the positions to add (negative: earlier).
    """
    rotary, apply = _rotary(model)
    delta = torch.as_tensor(shift, device=rotary.inv_freq.device)[..., None].float() * rotary.inv_freq.float()
    angles = torch.cat((delta, delta), dim=-1)  # [B, n, rotary dims], as the model's rotary embedding lays them out
    for layer in cache.layers:
        cos, sin = angles.cos().to(layer.keys), angles.sin().to(layer.keys)
        layer.keys = apply(layer.keys, layer.keys, cos, sin, unsqueeze_dim=1)[1]


def _rotary(model):
    """(the model's rotary embedding module, its modeling file's `apply_rotary_pos_emb`).

    Raises:
        PromptError: a model without one rotary embedding (GPT-2's learned positions, per-layer kinds).
    """
    rotary = getattr(model.base_model, "rotary_emb", None)
    apply = getattr(sys.modules[type(model.base_model).__module__], "apply_rotary_pos_emb", None)
    if rotary is None or apply is None or not hasattr(rotary, "inv_freq"):
        raise PromptError("Renumbered positions re-rotate the kept keys, which needs one rotary position "
                          "embedding (RoPE); this model has none, so pick \"as-cached\".")
    return rotary, apply


def kv_bytes_per_position(model) -> int:
    """2·L·h_kv·d_h·bytes of one cached position, in the model's dtype (computed from its config)."""
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    return bytes_per_position(spec.n_layers, spec.n_kv_heads, spec.head_dim, model.dtype.itemsize)


def _scored(name: str, logits: np.ndarray, reference: np.ndarray, text: list[int], kept: list[np.ndarray],
            held: int, per_position: int) -> PolicyRun:
    """A rule's scores; `kept`: its positions after each pass (none for the full cache, which keeps all)."""
    agrees = np.argmax(logits[:-1], axis=-1) == np.argmax(reference[:-1], axis=-1)
    steps = tuple(tuple(int(p) for p in positions) for positions in kept)
    return PolicyRun(name=name, nll=tuple(float(x) for x in nll_per_position(logits, text)),
                     agrees=tuple(bool(x) for x in agrees), kept=steps[-1] if steps else tuple(range(len(text))),
                     held_positions=held, cache_bytes=held * per_position, kept_steps=steps)
