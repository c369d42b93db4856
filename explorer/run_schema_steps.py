"""The schema of a saved run's steps: each step's trace checked field by field against the steps before
it (ids and pieces, the context length, the KV cache, the stops, the logits and the sampling record),
with what it fixes for the steps after it (`explorer.run_schema_fields.StepFacts`). Its attention, routing and logit-lens records:
`explorer.run_schema_records`.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import get_args

from explorer.analysis.precision import canonical_dtype
from explorer.config import SamplingSettings
from explorer.errors import ConfigError, SamplingSettingsError
from explorer.run_schema_fields import (
    ADVICE,
    DAMAGED,
    MAX_LINE_CHARS,
    MAX_WHOLE,
    StepFacts,
    expect_flag,
    expect_list,
    expect_logits,
    expect_number,
    expect_object,
    expect_shape,
    expect_text,
    expect_whole,
    fail,
)
from explorer.run_schema_records import check_attention, check_lens, check_routing
from explorer.stop_names import StopKind
from explorer.trace import KVSnapshot, OpRecord, StepTrace

OP_KINDS = frozenset(get_args(StopKind))  # `OpRecord.kind`
FILTERS = ("temperature", "top_k", "top_p", "min_p")  # the sampling stages after "raw", in generate's order
FINISH_REASONS = frozenset({"", "eos", "max_new_tokens", "context_full"})
DEVICE = re.compile(r"(cpu|cuda|mps|xpu|meta)(:\d{1,3})?")  # what `str(torch.device)` gives for these
TRACE_KEYS = tuple(f.name for f in fields(StepTrace))  # and "lens" where there is one (not in runs saved before it)
# absent from runs saved before a batch's texts were, and before mixture-of-experts routing was kept
OPTIONAL_TRACE_KEYS = ("batch_texts", "routing")
OP_KEYS = tuple(f.name for f in fields(OpRecord))
KV_KEYS = tuple(f.name for f in fields(KVSnapshot))
SETTINGS_KEYS = tuple(f.name for f in fields(SamplingSettings))


def check_trace(trace, where: str, index: int, run: StepFacts) -> None:
    """One step; `run` is updated with what it fixes for the later steps."""
    expect_object(trace, where, tuple(key for key in TRACE_KEYS if key not in OPTIONAL_TRACE_KEYS))
    stage = "prefill" if index == 0 else "decode"
    if trace["stage"] != stage:
        fail(f"{where}.stage", f'"{stage}" (step {index} of the run)', trace["stage"])
    if expect_whole(trace["step_index"], f"{where}.step_index") != index:
        fail(f"{where}.step_index", f"{index} (its place in the list)", trace["step_index"])
    ids = expect_list(trace["input_ids"], f"{where}.input_ids")
    if len(ids) != 1 and (index > 0 or not ids):
        fail(f"{where}.input_ids", "one id (a decode step feeds one token)" if index else "at least one id", ids)
    pieces = expect_list(trace["input_pieces"], f"{where}.input_pieces", length=len(ids),
                   what=f"one piece per input id ({len(ids)})")
    for i, piece in enumerate(pieces):
        expect_text(piece, f"{where}.input_pieces[{i}]", MAX_LINE_CHARS)
    context = run.context + len(ids)
    if expect_whole(trace["context_length"], f"{where}.context_length") != context:
        fail(f"{where}.context_length", f"{context} (the tokens fed so far)", trace["context_length"])
    _check_kv(trace["kv"], f"{where}.kv", run, context)
    _check_ops(trace["ops"], f"{where}.ops", run, len(ids), index == 0)
    if trace.get("routing"):
        check_routing(trace["routing"], f"{where}.routing", run, run.batch * len(ids))
    for i, token_id in enumerate(ids):  # after the prefill's ops, which give the vocabulary
        expect_whole(token_id, f"{where}.input_ids[{i}]", high=run.vocab - 1, what="a token id")
    check_attention(trace["attention"], f"{where}.attention", run, len(ids), context, index == 0)
    _check_outcome(trace, where, run.vocab)
    if trace.get("lens") is not None:
        check_lens(trace, f"{where}.lens", run, [*run.fed, *ids])
    run.context = context
    run.fed.extend(ids)


def _check_kv(kv, where: str, run: StepFacts, context: int) -> None:
    """Each layer's cache: [batch, h_kv, n, d_h] with n at most the context and never shrinking."""
    what = f"one snapshot per layer ({run.n_layers})" if run.n_layers else "one snapshot per layer"
    kv = expect_list(kv, where, length=run.n_layers or None, what=what)
    if not kv:
        fail(where, what, kv)
    first = not run.n_layers
    for layer, snapshot in enumerate(kv):
        at = f"{where}[{layer}]"
        expect_object(snapshot, at, KV_KEYS, exact=True)
        if expect_whole(snapshot["layer"], f"{at}.layer") != layer:
            fail(f"{at}.layer", f"{layer} (its place in the list)", snapshot["layer"])
        key = expect_shape(snapshot["key_shape"], f"{at}.key_shape", ndim=4)
        expect_shape(snapshot["value_shape"], f"{at}.value_shape", ndim=4)
        expect_whole(snapshot["key_bytes"], f"{at}.key_bytes", high=MAX_WHOLE - 1)
        expect_whole(snapshot["value_bytes"], f"{at}.value_bytes", high=MAX_WHOLE - 1)
        if key[1] < 1 or (not first and key[1] != run.kv_heads[layer]):
            fail(f"{at}.key_shape[1]", "the layer's KV heads, at least 1 and the same at every step", key[1])
        if key[2] > context or (not first and key[2] < run.kv_lengths[layer]):
            fail(f"{at}.key_shape[2]", f"a KV length of at most {context} that never shrinks", key[2])
        if first:
            run.kv_heads.append(key[1])
            run.kv_lengths.append(key[2])
            run.head_dim = key[3]
        run.kv_lengths[layer] = key[2]
    run.n_layers = len(kv)


def _check_ops(ops, where: str, run: StepFacts, tokens: int, prefill: bool) -> None:
    """Every stop: its fields, an `embed` stop fed [B, tokens], and in the prefill an `lm_head` stop
    (the vocabulary) and stops in every layer (the journey view draws a layer's stops)."""
    ops = expect_list(ops, where)
    by_name, layers = {}, set()
    for i, op in enumerate(ops):
        at = f"{where}[{i}]"
        expect_object(op, at, OP_KEYS, exact=True)
        if not expect_text(op["name"], f"{at}.name", MAX_LINE_CHARS):
            fail(f"{at}.name", "a stop's name", op["name"])
        if op["kind"] not in OP_KINDS:
            fail(f"{at}.kind", f"an operator kind ({', '.join(sorted(OP_KINDS))})", op["kind"])
        if op["layer"] is not None:
            layers.add(expect_whole(op["layer"], f"{at}.layer", high=run.n_layers - 1, what="a layer index"))
        shapes = {key: [expect_shape(s, f"{at}.{key}[{j}]") for j, s in enumerate(expect_list(op[key], f"{at}.{key}"))]
                  for key in ("input_shapes", "output_shapes")}
        # the journey's hover reads a GEMM's [.., in] -> [.., out] and a norm's or embedding's width
        needs = {"gemm": ("input_shapes", "output_shapes"), "norm": ("output_shapes",)}.get(op["kind"], ())
        for key in needs + (("input_shapes", "output_shapes") if op["name"] == "embed" else ()):
            if not shapes[key] or not shapes[key][0]:
                fail(f"{at}.{key}", f"at least one non-empty shape (a {op['kind']} stop)", op[key])
        expect_text(op["dtype"], f"{at}.dtype", MAX_LINE_CHARS)
        if op["kind"] == "gemm":
            try:
                canonical_dtype(op["dtype"])
            except ConfigError:
                fail(f"{at}.dtype", "a dtype the cost model knows (float32, bfloat16, float16, ...)", op["dtype"])
        if op["wall_ms"] is not None:
            expect_number(op["wall_ms"], f"{at}.wall_ms", low=0)
        by_name.setdefault(op["name"], op)
    embed = by_name.get("embed")  # fed [B, tokens]: B sequences (a batch), the same B at every step
    batch = embed["input_shapes"][0][0] if embed is not None and len(embed["input_shapes"][0]) == 2 else 0
    if embed is None or embed["input_shapes"][0] != [batch, tokens] or batch < 1 or \
            (not prefill and batch != run.batch):
        fail(where, f"an embed stop fed [B, {tokens}] (B sequences of the step's tokens, B as in the prefill)")
    run.batch = batch
    if prefill:
        if "lm_head" not in by_name or not by_name["lm_head"]["output_shapes"] or \
                not by_name["lm_head"]["output_shapes"][0] or by_name["lm_head"]["output_shapes"][0][-1] < 1:
            fail(where, "an lm_head stop whose output is [.., vocabulary]")
        run.vocab, run.hidden = by_name["lm_head"]["output_shapes"][0][-1], embed["output_shapes"][0][-1]
        if layers != set(range(run.n_layers)):
            fail(where, f"the stops of each of the {run.n_layers} layers")


def _check_outcome(trace: dict, where: str, vocab: int) -> None:
    """The logits, how the next token was chosen, and the step's last fields."""
    shape_only = expect_flag(trace["shape_only"], f"{where}.shape_only")
    # a batch of prompts whose sequence 0 has ended feeds it the pad id: a decode step without either
    ended = trace["logits"] is None and trace["sampling"] is None and trace["stage"] == "decode" \
        and len(expect_list(trace.get("batch_texts", []), f"{where}.batch_texts")) > 1
    if not shape_only and not ended and (trace["logits"] is None or trace["sampling"] is None):
        fail(where, "logits and a sampling record (it is not a shape-only run)")
    if trace["logits"] is not None:
        expect_logits(trace["logits"], f"{where}.logits", vocab)
    if trace["sampling"] is not None:
        _check_sampling(trace["sampling"], f"{where}.sampling", vocab)
    expect_text(trace["token_text"], f"{where}.token_text", MAX_LINE_CHARS)
    for i, text in enumerate(expect_list(trace.get("batch_texts", []), f"{where}.batch_texts")):
        expect_text(text, f"{where}.batch_texts[{i}]")
    expect_flag(trace["finished"], f"{where}.finished")
    if trace["finish_reason"] not in FINISH_REASONS:
        reasons = ", ".join(map(repr, sorted(FINISH_REASONS)))
        fail(f"{where}.finish_reason", f"one of {reasons}", trace["finish_reason"])
    expect_number(trace["wall_ms"], f"{where}.wall_ms", low=0)
    if not DEVICE.fullmatch(expect_text(trace["device"], f"{where}.device")):
        fail(f"{where}.device", "a device such as cpu, cuda:0, mps or meta", trace["device"])


def _check_sampling(sampling, where: str, vocab: int) -> None:
    """The settings, the stages ("raw" then the filters used, in order) over the vocabulary, the draw."""
    expect_object(sampling, where, ("settings", "stages", "token_id", "token_prob"))
    settings = expect_object(sampling["settings"], f"{where}.settings", SETTINGS_KEYS, exact=True)
    expect_flag(settings["do_sample"], f"{where}.settings.do_sample")
    try:
        SamplingSettings(**settings)
    except SamplingSettingsError as exc:
        raise ConfigError(f"{DAMAGED}{where}.settings: {exc}.{ADVICE}") from exc
    stages = expect_list(sampling["stages"], f"{where}.stages")
    for i, stage in enumerate(stages):
        expect_object(stage, f"{where}.stages[{i}]", ("name", "logits"))
        expect_logits(stage["logits"], f"{where}.stages[{i}].logits", vocab)
    names = [stage["name"] for stage in stages]
    if names != ["raw", *[name for name in FILTERS if name in names]]:
        fail(f"{where}.stages", f"the stage \"raw\", then those of {', '.join(FILTERS)} that were used, in that order")
    token_id = expect_whole(sampling["token_id"], f"{where}.token_id", high=vocab - 1, what="a token id")
    if stages[-1]["logits"][token_id] is None:
        fail(f"{where}.token_id", "a token the last stage kept")
    expect_number(sampling["token_prob"], f"{where}.token_prob", low=0, high=1)
