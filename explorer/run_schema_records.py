"""The schema of a saved step's per-layer records: its attention probabilities, its mixture-of-experts
routing and its logit lens, each against the shapes the run's steps fix (`StepFacts`).
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from explorer.run_schema_fields import (
    StepFacts,
    expect_array,
    expect_list,
    expect_number,
    expect_object,
    expect_shape,
    expect_whole,
    fail,
)
from explorer.trace import LensRecord, RoutingRecord

ROUTING_KEYS = tuple(f.name for f in fields(RoutingRecord))
LENS_KEYS = tuple(f.name for f in fields(LensRecord))


def check_attention(attention, where: str, run: StepFacts, tokens: int, context: int, prefill: bool) -> None:
    """Each layer's probabilities: [h_q, tokens, tokens] in the prefill, [h_q, 1, <= context] in a
    decode step, h_q a multiple of the layer's KV heads; null where the session gave them up."""
    attention = expect_list(attention, where, length=run.n_layers, what=f"one record per layer ({run.n_layers})")
    for layer, record in enumerate(attention):
        at = f"{where}[{layer}]"
        expect_object(record, at, ("layer", "shape", "probs"))
        if expect_whole(record["layer"], f"{at}.layer") != layer:
            fail(f"{at}.layer", f"{layer} (its place in the list)", record["layer"])
        heads, rows, keys = expect_shape(record["shape"], f"{at}.shape", ndim=3)
        if prefill and not run.heads:
            run.heads = heads
        good_keys = keys == tokens if prefill else 1 <= keys <= context
        if heads < 1 or heads != run.heads or heads % run.kv_heads[layer] or rows != tokens or not good_keys:
            expected = f"[{tokens}, {tokens}]" if prefill else f"[1, at most {context}]"
            fail(f"{at}.shape", f"[h_q, q_len, kv_len]: h_q {run.heads or 'query heads'}, a multiple of the "
                                 f"layer's {run.kv_heads[layer]} KV heads, then {expected}", record["shape"])
        if record["probs"] is not None:
            expect_array(record["probs"], f"{at}.probs", [heads, rows, keys])
        if record.get("first_key_sums") is not None:  # absent from runs saved before them
            sums = expect_list(record["first_key_sums"], f"{at}.first_key_sums", length=heads,
                         what=f"one sum per query head ({heads})")
            for i, value in enumerate(sums):
                expect_number(value, f"{at}.first_key_sums[{i}]", low=0, high=rows)


def check_routing(routing, where: str, run: StepFacts, rows: int) -> None:
    """Each mixture-of-experts layer's routing, layers in increasing order: E experts, and for each of the
    B*T token rows k distinct expert ids below E and k weights in [0, 1]."""
    previous = -1
    for i, record in enumerate(expect_list(routing, where)):
        at = f"{where}[{i}]"
        expect_object(record, at, ROUTING_KEYS, exact=True)
        layer = expect_whole(record["layer"], f"{at}.layer", high=run.n_layers - 1, what="a layer index")
        if layer <= previous:
            fail(f"{at}.layer", "layers in increasing order, each once", layer)
        previous = layer
        experts = expect_whole(record["n_experts"], f"{at}.n_experts", low=1)
        ids = expect_list(record["expert_ids"], f"{at}.expert_ids", length=rows, what=f"one row per token row ({rows})")
        k = len(expect_list(ids[0], f"{at}.expert_ids[0]")) if ids else 1
        expect_array(ids, f"{at}.expert_ids", [rows, k])
        for row in ids:
            if len(set(row)) != k or not all(type(e) is int and 0 <= e < experts for e in row):
                fail(f"{at}.expert_ids", f"rows of {k} distinct expert ids below {experts}", row)
        expect_array(record["weights"], f"{at}.weights", [rows, k])
        if rows and not 0 <= np.min(record["weights"]) <= np.max(record["weights"]) <= 1 + 1e-3:
            fail(f"{at}.weights", "routing weights in [0, 1]")


def check_lens(trace: dict, where: str, run: StepFacts, seen: list[int]) -> None:
    """The logit lens: the step's last P positions, each followed by the next id fed (the last by the
    token chosen), [L+1, P, k] top ids and probabilities, [L+1, P] next-token probabilities and entropies."""
    if trace["shape_only"] or trace["sampling"] is None:
        fail(where, "null (a shape-only step has no values)")
    lens = expect_object(trace["lens"], where, LENS_KEYS, exact=True)
    context = len(seen)
    positions = expect_list(lens["positions"], f"{where}.positions")
    if not positions or positions != list(range(context - len(positions), context)):
        fail(f"{where}.positions", f"the step's last positions, in order, up to {context - 1}")
    following = [*seen[positions[0] + 1:], trace["sampling"]["token_id"]]
    if lens["next_ids"] != following:
        fail(f"{where}.next_ids", "the id that follows each position (the last: the token chosen)")
    rows, width = run.n_layers + 1, len(positions)
    top = expect_list(lens["top_ids"], f"{where}.top_ids", length=rows,
                      what=f"one row per layer and the embedding ({rows})")
    first = expect_list(top[0], f"{where}.top_ids[0]", length=width, what=f"one cell per position ({width})")
    k = len(expect_list(first[0], f"{where}.top_ids[0][0]", what="a cell's top token ids"))
    if k < 1:
        fail(f"{where}.top_ids[0][0]", "at least one token id")
    expect_array(lens["top_ids"], f"{where}.top_ids", [rows, width, k])
    for row in top:
        for cell in row:
            for token_id in cell:
                expect_whole(token_id, f"{where}.top_ids", high=run.vocab - 1, what="token ids")
    for name, shape, high in (("top_probs", [rows, width, k], 1), ("next_probs", [rows, width], 1),
                              ("entropy_bits", [rows, width], np.log2(run.vocab) + 1e-3)):
        expect_array(lens[name], f"{where}.{name}", shape)
        if not 0 <= np.min(lens[name]) <= np.max(lens[name]) <= high:
            fail(f"{where}.{name}", f"numbers in [0, {high:.4g}]")
    expect_number(lens["compute_ms"], f"{where}.compute_ms", low=0)
