"""The schema of a saved run, checked before anything in the file is drawn or becomes a page's session.

Saved runs are meant to be shared, so a run file is untrusted input. `read_run` refuses a file over
`MAX_RUN_BYTES` before parsing it and turns every parse failure (not JSON, NaN or Infinity, a number
too long to read, nesting too deep) into a `ConfigError`. `check_run` then checks every field of the
parsed run: its type (a bool is not a whole number), finite numbers, text that is valid Unicode, and
shapes consistent with each other and with the model's config (ids and pieces of each step,
attention [h_q, q_len, kv_len] against the step, KV lengths that never shrink, logits over the
vocabulary). Its first finding is the message: where in the file, and what the field must be.

A hand-written checker rather than a schema library: the rules that matter are the ones between
fields (a step's attention against its KV heads and context), which a declarative schema cannot say.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from explorer.analysis.equivalence import Comparison, EquivalenceResult
from explorer.analysis.precision import canonical_dtype
from explorer.analysis.spec import ModelSpec
from explorer.config import SamplingSettings
from explorer.errors import ConfigError, SamplingSettingsError
from explorer.run import PromptInputs
from explorer.trace import KVSnapshot, LensRecord, OpRecord, RoutingRecord, StepTrace

# A 39-token, 3-step run of the embedded model is 10.9 MB, and each further decode step adds about
# 2.3 MB (its logits through the sampling stages): 512 MiB holds some 200 steps. Parsing a file this
# size takes about 10 s and 2 GB of memory here (measured with json.loads on the 2-core machine).
MAX_RUN_BYTES = 512 * 2**20
# Deepest nesting a run has: the file > traces > a step > attention > a layer > probs > head > query.
MAX_DEPTH = 16
MAX_WHOLE = 2**63  # nothing in a run is this large (a seed is below 2^63)
MAX_DIM = 2**31 - 1  # token ids, lengths and tensor dimensions
MAX_LINE_CHARS = 1_000  # a model's name, its one-line description, a stop's name, a token's piece
OP_KINDS = frozenset({"gather", "norm", "gemm", "reshape", "rope", "cache_write", "broadcast", "batched_gemm",
                      "softmax", "elementwise", "experts", "sample", "tokenize", "detokenize"})  # `OpRecord.kind`
FILTERS = ("temperature", "top_k", "top_p", "min_p")  # the sampling stages after "raw", in generate's order
FINISH_REASONS = frozenset({"", "eos", "max_new_tokens", "context_full"})
DEVICE = re.compile(r"(cpu|cuda|mps|xpu|meta)(:\d{1,3})?")  # what `str(torch.device)` gives for these
TOKEN_KEY = re.compile(r"\d{1,10}")
RUN_KEYS = ("model", "description", "config", "ids", "text", "pieces", "traces")
TRACE_KEYS = tuple(f.name for f in fields(StepTrace))  # and "lens" where there is one (not in runs saved before it)
# absent from runs saved before a batch's texts were, and before mixture-of-experts routing was kept
OPTIONAL_TRACE_KEYS = ("batch_texts", "routing")
ROUTING_KEYS = tuple(f.name for f in fields(RoutingRecord))
LENS_KEYS = tuple(f.name for f in fields(LensRecord))
EQUIVALENCE_KEYS = tuple(f.name for f in fields(EquivalenceResult))
COMPARISON_KEYS = tuple(f.name for f in fields(Comparison))
OP_KEYS = tuple(f.name for f in fields(OpRecord))
KV_KEYS = tuple(f.name for f in fields(KVSnapshot))
SETTINGS_KEYS = tuple(f.name for f in fields(SamplingSettings))
PROMPT_KEYS = tuple(f.name for f in fields(PromptInputs))
OPTIONAL_PROMPT_KEYS = ("enable_thinking",)  # absent from runs saved before Qwen3's thinking switch

DAMAGED = "The saved run is incomplete or damaged: "
ADVICE = " Load the file as the explorer exported it (Export run), or export the run again."


def read_run(path: str | Path, max_bytes: int | None = None):
    """The JSON value in a run file, refused over `max_bytes` (default `MAX_RUN_BYTES`) before it is
    read (`check_run` checks that the value is a run).

    Raises:
        ConfigError: the file cannot be read, is larger than `max_bytes`, is not UTF-8 JSON, or holds
            NaN or Infinity, a number too long to read, or nesting deeper than JSON parsing allows.
    """
    max_bytes = MAX_RUN_BYTES if max_bytes is None else max_bytes
    try:
        size = Path(path).stat().st_size
        if size > max_bytes:
            raise ConfigError(f"The file is {size / 2**20:,.0f} MiB; a saved run may be at most "
                              f"{max_bytes / 2**20:,.0f} MiB. Export a shorter run, or load another file.")
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read the saved run: {exc}") from exc
    return parse_run(text)


def parse_run(text: str):
    """`text` parsed as strict JSON.

    Raises:
        ConfigError: not JSON, NaN or Infinity, a whole number past Python's 4,300-digit limit, or
            nesting past the recursion limit.
    """
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ConfigError(f"{DAMAGED}its lists and objects are nested far deeper than a run's.{ADVICE}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"Cannot read the saved run: it is not JSON ({exc}).{ADVICE}") from exc
    except _Constant as exc:
        raise ConfigError(f"{DAMAGED}it holds {exc}, which strict JSON (what the explorer writes) has not."
                          f"{ADVICE}") from exc
    except ValueError as exc:  # int() refuses a literal of over 4,300 digits (Python's guard against slow parsing)
        raise ConfigError(f"{DAMAGED}it holds a whole number of over 4,300 digits.{ADVICE}") from exc


class _Constant(ValueError):
    """NaN, Infinity or -Infinity in the JSON text."""


def _refuse_constant(name: str):
    raise _Constant(name)


@dataclass
class _Run:
    """What the steps checked so far fix for the steps after them."""

    n_layers: int = 0
    vocab: int = 0
    heads: int = 0  # h_q
    kv_heads: list[int] = field(default_factory=list)  # h_kv per layer
    kv_lengths: list[int] = field(default_factory=list)  # per layer, the KV length after the last step
    context: int = 0  # n after the last step
    hidden: int = 0  # d, the embedding's width
    head_dim: int = 0  # d_h, from the KV cache
    fed: list[int] = field(default_factory=list)  # every id fed so far, in order
    batch: int = 0  # B, sequences run together (the prefill's embed fixes it)


def check_run(data: dict) -> None:
    """Check every field of a parsed run (a dict in the saved-run format).

    Raises:
        ConfigError: the first field that breaks the schema, named by its place in the file (e.g.
            `traces[0].input_ids[0]`), with what it must be and what to do.
    """
    _check_values(data, "", 0)
    _object(data, "", RUN_KEYS)
    _text(data["model"], "model", MAX_LINE_CHARS)
    _text(data["description"], "description", MAX_LINE_CHARS)
    _text(data["text"], "text")
    if "attention_left_out" in data:
        _text(data["attention_left_out"], "attention_left_out", MAX_LINE_CHARS)
    if "prompt" in data:
        _check_prompt(data["prompt"])
    traces = _list(data["traces"], "traces")
    if not traces:
        _fail("traces", "a list of the run's steps, the prefill first", traces)
    run = _Run()
    for index, trace in enumerate(traces):
        _check_trace(trace, f"traces[{index}]", index, run)
    ids = _list(data["ids"], "ids")
    for i, token_id in enumerate(ids):
        _whole(token_id, f"ids[{i}]", high=run.vocab - 1, what="a token id")
    if ids[: len(run.fed)] != run.fed:
        _fail("ids", "the ids fed at each step, in order (then the token chosen last)")
    pieces = _object(data["pieces"], "pieces", ())
    for key, piece in pieces.items():
        if not TOKEN_KEY.fullmatch(key) or int(key) >= run.vocab:
            _fail("pieces", f"keyed by token ids below {run.vocab}")
        _text(piece, f"pieces.{key}", MAX_LINE_CHARS)
    config = _object(data["config"], "config", ())
    _check_config(_object(config, "config", () if "n_head" in config else ("num_attention_heads",)), run)
    if "equivalence" in data:
        _check_equivalence(data["equivalence"], run, len(traces[0]["input_ids"]))


def _check_prompt(prompt) -> None:
    """What the prefill was given: the prompt's text (or null with a token count), the chat-template
    flag, the system prompt and (in runs saved since it exists) the thinking switch."""
    required = tuple(key for key in PROMPT_KEYS if key not in OPTIONAL_PROMPT_KEYS)
    _object(prompt, "prompt", required)
    if not set(prompt) <= set(PROMPT_KEYS):
        _fail("prompt", f"an object of {', '.join(PROMPT_KEYS)} (the last optional)")
    if prompt["text"] is None:
        _whole(prompt["prompt_tokens"], "prompt.prompt_tokens", low=1)
    else:
        _text(prompt["text"], "prompt.text")
        if prompt["prompt_tokens"] is not None:
            _fail("prompt.prompt_tokens", "null for a text prompt", prompt["prompt_tokens"])
    _flag(prompt["use_chat_template"], "prompt.use_chat_template")
    _text(prompt["system_prompt"], "prompt.system_prompt")
    if "enable_thinking" in prompt:
        _flag(prompt["enable_thinking"], "prompt.enable_thinking")


def _check_trace(trace, where: str, index: int, run: _Run) -> None:
    """One step; `run` is updated with what it fixes for the later steps."""
    _object(trace, where, tuple(key for key in TRACE_KEYS if key not in OPTIONAL_TRACE_KEYS))
    stage = "prefill" if index == 0 else "decode"
    if trace["stage"] != stage:
        _fail(f"{where}.stage", f'"{stage}" (step {index} of the run)', trace["stage"])
    if _whole(trace["step_index"], f"{where}.step_index") != index:
        _fail(f"{where}.step_index", f"{index} (its place in the list)", trace["step_index"])
    ids = _list(trace["input_ids"], f"{where}.input_ids")
    if len(ids) != 1 and (index > 0 or not ids):
        _fail(f"{where}.input_ids", "one id (a decode step feeds one token)" if index else "at least one id", ids)
    pieces = _list(trace["input_pieces"], f"{where}.input_pieces", length=len(ids),
                   what=f"one piece per input id ({len(ids)})")
    for i, piece in enumerate(pieces):
        _text(piece, f"{where}.input_pieces[{i}]", MAX_LINE_CHARS)
    context = run.context + len(ids)
    if _whole(trace["context_length"], f"{where}.context_length") != context:
        _fail(f"{where}.context_length", f"{context} (the tokens fed so far)", trace["context_length"])
    _check_kv(trace["kv"], f"{where}.kv", run, context)
    _check_ops(trace["ops"], f"{where}.ops", run, len(ids), index == 0)
    if trace.get("routing"):
        _check_routing(trace["routing"], f"{where}.routing", run, run.batch * len(ids))
    for i, token_id in enumerate(ids):  # after the prefill's ops, which give the vocabulary
        _whole(token_id, f"{where}.input_ids[{i}]", high=run.vocab - 1, what="a token id")
    _check_attention(trace["attention"], f"{where}.attention", run, len(ids), context, index == 0)
    _check_outcome(trace, where, run.vocab)
    if trace.get("lens") is not None:
        _check_lens(trace, f"{where}.lens", run, [*run.fed, *ids])
    run.context = context
    run.fed.extend(ids)


def _check_kv(kv, where: str, run: _Run, context: int) -> None:
    """Each layer's cache: [batch, h_kv, n, d_h] with n at most the context and never shrinking."""
    what = f"one snapshot per layer ({run.n_layers})" if run.n_layers else "one snapshot per layer"
    kv = _list(kv, where, length=run.n_layers or None, what=what)
    if not kv:
        _fail(where, what, kv)
    first = not run.n_layers
    for layer, snapshot in enumerate(kv):
        at = f"{where}[{layer}]"
        _object(snapshot, at, KV_KEYS, exact=True)
        if _whole(snapshot["layer"], f"{at}.layer") != layer:
            _fail(f"{at}.layer", f"{layer} (its place in the list)", snapshot["layer"])
        key = _shape(snapshot["key_shape"], f"{at}.key_shape", ndim=4)
        _shape(snapshot["value_shape"], f"{at}.value_shape", ndim=4)
        _whole(snapshot["key_bytes"], f"{at}.key_bytes", high=MAX_WHOLE - 1)
        _whole(snapshot["value_bytes"], f"{at}.value_bytes", high=MAX_WHOLE - 1)
        if key[1] < 1 or (not first and key[1] != run.kv_heads[layer]):
            _fail(f"{at}.key_shape[1]", "the layer's KV heads, at least 1 and the same at every step", key[1])
        if key[2] > context or (not first and key[2] < run.kv_lengths[layer]):
            _fail(f"{at}.key_shape[2]", f"a KV length of at most {context} that never shrinks", key[2])
        if first:
            run.kv_heads.append(key[1])
            run.kv_lengths.append(key[2])
            run.head_dim = key[3]
        run.kv_lengths[layer] = key[2]
    run.n_layers = len(kv)


def _check_ops(ops, where: str, run: _Run, tokens: int, prefill: bool) -> None:
    """Every stop: its fields, an `embed` stop fed [B, tokens], and in the prefill an `lm_head` stop
    (the vocabulary) and stops in every layer (the journey view draws a layer's stops)."""
    ops = _list(ops, where)
    by_name, layers = {}, set()
    for i, op in enumerate(ops):
        at = f"{where}[{i}]"
        _object(op, at, OP_KEYS, exact=True)
        if not _text(op["name"], f"{at}.name", MAX_LINE_CHARS):
            _fail(f"{at}.name", "a stop's name", op["name"])
        if op["kind"] not in OP_KINDS:
            _fail(f"{at}.kind", f"an operator kind ({', '.join(sorted(OP_KINDS))})", op["kind"])
        if op["layer"] is not None:
            layers.add(_whole(op["layer"], f"{at}.layer", high=run.n_layers - 1, what="a layer index"))
        shapes = {key: [_shape(s, f"{at}.{key}[{j}]") for j, s in enumerate(_list(op[key], f"{at}.{key}"))]
                  for key in ("input_shapes", "output_shapes")}
        # the journey's hover reads a GEMM's [.., in] -> [.., out] and a norm's or embedding's width
        needs = {"gemm": ("input_shapes", "output_shapes"), "norm": ("output_shapes",)}.get(op["kind"], ())
        for key in needs + (("input_shapes", "output_shapes") if op["name"] == "embed" else ()):
            if not shapes[key] or not shapes[key][0]:
                _fail(f"{at}.{key}", f"at least one non-empty shape (a {op['kind']} stop)", op[key])
        _text(op["dtype"], f"{at}.dtype", MAX_LINE_CHARS)
        if op["kind"] == "gemm":
            try:
                canonical_dtype(op["dtype"])
            except ConfigError:
                _fail(f"{at}.dtype", "a dtype the cost model knows (float32, bfloat16, float16, ...)", op["dtype"])
        if op["wall_ms"] is not None:
            _number(op["wall_ms"], f"{at}.wall_ms", low=0)
        by_name.setdefault(op["name"], op)
    embed = by_name.get("embed")  # fed [B, tokens]: B sequences (a batch), the same B at every step
    batch = embed["input_shapes"][0][0] if embed is not None and len(embed["input_shapes"][0]) == 2 else 0
    if embed is None or embed["input_shapes"][0] != [batch, tokens] or batch < 1 or \
            (not prefill and batch != run.batch):
        _fail(where, f"an embed stop fed [B, {tokens}] (B sequences of the step's tokens, B as in the prefill)")
    run.batch = batch
    if prefill:
        if "lm_head" not in by_name or not by_name["lm_head"]["output_shapes"] or \
                not by_name["lm_head"]["output_shapes"][0] or by_name["lm_head"]["output_shapes"][0][-1] < 1:
            _fail(where, "an lm_head stop whose output is [.., vocabulary]")
        run.vocab, run.hidden = by_name["lm_head"]["output_shapes"][0][-1], embed["output_shapes"][0][-1]
        if layers != set(range(run.n_layers)):
            _fail(where, f"the stops of each of the {run.n_layers} layers")


def _check_routing(routing, where: str, run: _Run, rows: int) -> None:
    """Each mixture-of-experts layer's routing, layers in increasing order: E experts, and for each of the
    B*T token rows k distinct expert ids below E and k weights in [0, 1]."""
    previous = -1
    for i, record in enumerate(_list(routing, where)):
        at = f"{where}[{i}]"
        _object(record, at, ROUTING_KEYS, exact=True)
        layer = _whole(record["layer"], f"{at}.layer", high=run.n_layers - 1, what="a layer index")
        if layer <= previous:
            _fail(f"{at}.layer", "layers in increasing order, each once", layer)
        previous = layer
        experts = _whole(record["n_experts"], f"{at}.n_experts", low=1)
        ids = _list(record["expert_ids"], f"{at}.expert_ids", length=rows, what=f"one row per token row ({rows})")
        k = len(_list(ids[0], f"{at}.expert_ids[0]")) if ids else 1
        _array(ids, f"{at}.expert_ids", [rows, k])
        for row in ids:
            if len(set(row)) != k or not all(type(e) is int and 0 <= e < experts for e in row):
                _fail(f"{at}.expert_ids", f"rows of {k} distinct expert ids below {experts}", row)
        _array(record["weights"], f"{at}.weights", [rows, k])
        if rows and not 0 <= np.min(record["weights"]) <= np.max(record["weights"]) <= 1 + 1e-3:
            _fail(f"{at}.weights", "routing weights in [0, 1]")


def _check_attention(attention, where: str, run: _Run, tokens: int, context: int, prefill: bool) -> None:
    """Each layer's probabilities: [h_q, tokens, tokens] in the prefill, [h_q, 1, <= context] in a
    decode step, h_q a multiple of the layer's KV heads; null where the session gave them up."""
    attention = _list(attention, where, length=run.n_layers, what=f"one record per layer ({run.n_layers})")
    for layer, record in enumerate(attention):
        at = f"{where}[{layer}]"
        _object(record, at, ("layer", "shape", "probs"))
        if _whole(record["layer"], f"{at}.layer") != layer:
            _fail(f"{at}.layer", f"{layer} (its place in the list)", record["layer"])
        heads, rows, keys = _shape(record["shape"], f"{at}.shape", ndim=3)
        if prefill and not run.heads:
            run.heads = heads
        good_keys = keys == tokens if prefill else 1 <= keys <= context
        if heads < 1 or heads != run.heads or heads % run.kv_heads[layer] or rows != tokens or not good_keys:
            expected = f"[{tokens}, {tokens}]" if prefill else f"[1, at most {context}]"
            _fail(f"{at}.shape", f"[h_q, q_len, kv_len]: h_q {run.heads or 'query heads'}, a multiple of the "
                                 f"layer's {run.kv_heads[layer]} KV heads, then {expected}", record["shape"])
        if record["probs"] is not None:
            _array(record["probs"], f"{at}.probs", [heads, rows, keys])
        if record.get("first_key_sums") is not None:  # absent from runs saved before them
            sums = _list(record["first_key_sums"], f"{at}.first_key_sums", length=heads,
                         what=f"one sum per query head ({heads})")
            for i, value in enumerate(sums):
                _number(value, f"{at}.first_key_sums[{i}]", low=0, high=rows)


def _check_outcome(trace: dict, where: str, vocab: int) -> None:
    """The logits, how the next token was chosen, and the step's last fields."""
    shape_only = _flag(trace["shape_only"], f"{where}.shape_only")
    if not shape_only and (trace["logits"] is None or trace["sampling"] is None):
        _fail(where, "logits and a sampling record (it is not a shape-only run)")
    if trace["logits"] is not None:
        _logits(trace["logits"], f"{where}.logits", vocab)
    if trace["sampling"] is not None:
        _check_sampling(trace["sampling"], f"{where}.sampling", vocab)
    _text(trace["token_text"], f"{where}.token_text", MAX_LINE_CHARS)
    for i, text in enumerate(_list(trace.get("batch_texts", []), f"{where}.batch_texts")):
        _text(text, f"{where}.batch_texts[{i}]")
    _flag(trace["finished"], f"{where}.finished")
    if trace["finish_reason"] not in FINISH_REASONS:
        reasons = ", ".join(map(repr, sorted(FINISH_REASONS)))
        _fail(f"{where}.finish_reason", f"one of {reasons}", trace["finish_reason"])
    _number(trace["wall_ms"], f"{where}.wall_ms", low=0)
    if not DEVICE.fullmatch(_text(trace["device"], f"{where}.device")):
        _fail(f"{where}.device", "a device such as cpu, cuda:0, mps or meta", trace["device"])


def _check_lens(trace: dict, where: str, run: _Run, seen: list[int]) -> None:
    """The logit lens: the step's last P positions, each followed by the next id fed (the last by the
    token chosen), [L+1, P, k] top ids and probabilities, [L+1, P] next-token probabilities and entropies."""
    if trace["shape_only"] or trace["sampling"] is None:
        _fail(where, "null (a shape-only step has no values)")
    lens = _object(trace["lens"], where, LENS_KEYS, exact=True)
    context = len(seen)
    positions = _list(lens["positions"], f"{where}.positions")
    if not positions or positions != list(range(context - len(positions), context)):
        _fail(f"{where}.positions", f"the step's last positions, in order, up to {context - 1}")
    following = [*seen[positions[0] + 1:], trace["sampling"]["token_id"]]
    if lens["next_ids"] != following:
        _fail(f"{where}.next_ids", "the id that follows each position (the last: the token chosen)")
    rows, width = run.n_layers + 1, len(positions)
    top = _list(lens["top_ids"], f"{where}.top_ids", length=rows, what=f"one row per layer and the embedding ({rows})")
    first = _list(top[0], f"{where}.top_ids[0]", length=width, what=f"one cell per position ({width})")
    k = len(_list(first[0], f"{where}.top_ids[0][0]", what="a cell's top token ids"))
    if k < 1:
        _fail(f"{where}.top_ids[0][0]", "at least one token id")
    _array(lens["top_ids"], f"{where}.top_ids", [rows, width, k])
    for row in top:
        for cell in row:
            for token_id in cell:
                _whole(token_id, f"{where}.top_ids", high=run.vocab - 1, what="token ids")
    for name, shape, high in (("top_probs", [rows, width, k], 1), ("next_probs", [rows, width], 1),
                              ("entropy_bits", [rows, width], np.log2(run.vocab) + 1e-3)):
        _array(lens[name], f"{where}.{name}", shape)
        if not 0 <= np.min(lens[name]) <= np.max(lens[name]) <= high:
            _fail(f"{where}.{name}", f"numbers in [0, {high:.4g}]")
    _number(lens["compute_ms"], f"{where}.compute_ms", low=0)


def _check_equivalence(result, run: _Run, prompt_tokens: int) -> None:
    """The experiment on the prompt: its reference, the greedy tokens of its steps, and per comparison
    one non-negative number per step (none where it was skipped, with why) and the step it diverged at."""
    where = "equivalence"
    _object(result, where, EQUIVALENCE_KEYS, exact=True)
    _text(result["reference"], f"{where}.reference", MAX_LINE_CHARS)
    if _whole(result["prompt_tokens"], f"{where}.prompt_tokens") != prompt_tokens:
        _fail(f"{where}.prompt_tokens", f"{prompt_tokens} (the prompt's tokens)", result["prompt_tokens"])
    tokens = _list(result["tokens"], f"{where}.tokens")
    if not tokens:
        _fail(f"{where}.tokens", "the greedy token of at least one step")
    for i, token_id in enumerate(tokens):
        _whole(token_id, f"{where}.tokens[{i}]", high=run.vocab - 1, what="a token id")
    _number(result["wall_ms"], f"{where}.wall_ms", low=0)
    for i, comparison in enumerate(_list(result["comparisons"], f"{where}.comparisons")):
        at = f"{where}.comparisons[{i}]"
        _object(comparison, at, COMPARISON_KEYS, exact=True)
        _text(comparison["name"], f"{at}.name", MAX_LINE_CHARS)
        skipped = _text(comparison["skipped"], f"{at}.skipped", MAX_LINE_CHARS)
        steps = 0 if skipped else len(tokens)
        for key in ("max_abs", "mean_abs", "argmax"):
            values = _list(comparison[key], f"{at}.{key}", length=steps, what=f"{steps} values, one per step")
            for j, value in enumerate(values):
                if key == "argmax":
                    _whole(value, f"{at}.{key}[{j}]", high=run.vocab - 1, what="a token id")
                else:
                    _number(value, f"{at}.{key}[{j}]", low=0)
        if comparison["diverged_at"] is not None:
            _whole(comparison["diverged_at"], f"{at}.diverged_at", high=max(0, steps - 1), what="a step")


def _check_sampling(sampling, where: str, vocab: int) -> None:
    """The settings, the stages ("raw" then the filters used, in order) over the vocabulary, the draw."""
    _object(sampling, where, ("settings", "stages", "token_id", "token_prob"))
    settings = _object(sampling["settings"], f"{where}.settings", SETTINGS_KEYS, exact=True)
    _flag(settings["do_sample"], f"{where}.settings.do_sample")
    try:
        SamplingSettings(**settings)
    except SamplingSettingsError as exc:
        raise ConfigError(f"{DAMAGED}{where}.settings: {exc}.{ADVICE}") from exc
    stages = _list(sampling["stages"], f"{where}.stages")
    for i, stage in enumerate(stages):
        _object(stage, f"{where}.stages[{i}]", ("name", "logits"))
        _logits(stage["logits"], f"{where}.stages[{i}].logits", vocab)
    names = [stage["name"] for stage in stages]
    if names != ["raw", *[name for name in FILTERS if name in names]]:
        _fail(f"{where}.stages", f"the stage \"raw\", then those of {', '.join(FILTERS)} that were used, in that order")
    token_id = _whole(sampling["token_id"], f"{where}.token_id", high=vocab - 1, what="a token id")
    if stages[-1]["logits"][token_id] is None:
        _fail(f"{where}.token_id", "a token the last stage kept")
    _number(sampling["token_prob"], f"{where}.token_prob", low=0, high=1)


def _check_config(config: dict, run: _Run) -> None:
    """The config of the model that ran: its heads and layers as traced, and, for a family the cost
    model knows, the dimensions it reads (a family it does not know is drawn without a roofline)."""
    key = "num_attention_heads" if "num_attention_heads" in config else "n_head"  # GPT-2 names it n_head
    heads = _whole(config[key], f"config.{key}", low=1)
    text_config = config.get("text_config") if config.get("model_type") == "gemma3" else config
    layer_counts = [text_config.get(key) for key in ("num_hidden_layers", "n_layer")] \
        if isinstance(text_config, dict) else []
    if heads != run.heads or any(count not in (None, run.n_layers) for count in layer_counts):
        # checked before the spec: its per-layer tuples are as long as the config says
        _fail("config", f"the config of the model that ran ({run.heads} query heads, {run.n_layers} layers)")
    try:
        spec = ModelSpec.from_hf_config(config)
    except ConfigError:
        return
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError, IndexError) as exc:
        raise ConfigError(f"{DAMAGED}config cannot be read as a model's config ({type(exc).__name__}: {exc})."
                          f"{ADVICE}") from exc
    traced = {"layers": run.n_layers, "query heads": run.heads, "KV heads": run.kv_heads[0],
              "head_dim": run.head_dim, "hidden size": run.hidden, "vocabulary": run.vocab}
    configured = {"layers": spec.n_layers, "query heads": spec.n_heads, "KV heads": spec.n_kv_heads,
                  "head_dim": spec.head_dim, "hidden size": spec.hidden_size, "vocabulary": spec.vocab_size}
    for name, value in traced.items():
        if configured[name] != value:
            _fail("config", f"the config of the model that ran (its {name}: {configured[name]}, the steps' {value})")


def _check_values(value, where: str, depth: int) -> None:
    """Every value in the file: nesting of at most `MAX_DEPTH`, text that is valid Unicode (a lone
    surrogate cannot be sent to the page), whole numbers below `MAX_WHOLE`, finite numbers."""
    if depth > MAX_DEPTH:
        _fail(where or "the file", f"nested at most {MAX_DEPTH} lists or objects deep")
    if isinstance(value, dict):
        for key, item in value.items():
            _unicode(key, where)
            _check_values(item, f"{where}.{key[:40]}" if where else key[:40], depth + 1)
    elif isinstance(value, list):
        types = set(map(type, value))
        if types <= {int, float, type(None)}:  # a list of numbers (logits, a row of probabilities): one pass
            if int in types and any(type(v) is int and not -MAX_WHOLE < v < MAX_WHOLE for v in value):
                _fail(where, "whole numbers of fewer than 19 digits")
            try:  # JSON has no NaN (refused when parsed), so inf is the only non-finite float; null reads as NaN
                infinite = float in types and np.isinf(np.array(value, dtype=np.float64)).any()
            except OverflowError:  # a whole number past float64
                infinite = True
            if infinite:
                _fail(where, "finite numbers")
        else:
            for i, item in enumerate(value):
                _check_values(item, f"{where}[{i}]", depth + 1)
    elif isinstance(value, str):
        _unicode(value, where)
    elif type(value) is int and not -MAX_WHOLE < value < MAX_WHOLE:
        _fail(where, "a whole number of fewer than 19 digits")
    elif type(value) is float and not np.isfinite(value):
        _fail(where, "a finite number", value)


def _unicode(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        _fail(where or "the file", "valid Unicode text (it holds a lone surrogate, \\ud800-\\udfff)")


def _fail(where: str, expected: str, *value) -> None:
    """Raise the `ConfigError` for a field: where it is, what it must be and, given `value`, what it is."""
    got = f", not {_describe(value[0])}" if value else ""
    raise ConfigError(f"{DAMAGED}{where} must be {expected}{got}.{ADVICE}")


def _describe(value) -> str:
    """A value as the message names it, never echoing text from the file."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return "text" if isinstance(value, str) else "an object"


def _object(value, where: str, keys: tuple[str, ...], exact: bool = False) -> dict:
    """`value` if it is an object holding `keys` (only those, if `exact`)."""
    if type(value) is not dict:
        _fail(where or "the file", "an object", value)
    missing = [key for key in keys if key not in value]
    if missing:
        raise ConfigError(f"{DAMAGED}{where or 'the file'} lacks {', '.join(missing)}.{ADVICE}")
    if exact and len(value) != len(keys):
        _fail(where, f"an object of exactly {', '.join(keys)}")
    return value


def _list(value, where: str, length: int | None = None, what: str = "a list") -> list:
    """`value` if it is a list (of `length` items, if given; `what` says what it must be)."""
    if type(value) is not list or (length is not None and len(value) != length):
        _fail(where, what, value)
    return value


def _whole(value, where: str, low: int = 0, high: int = MAX_DIM, what: str = "a whole number") -> int:
    if type(value) is not int:  # a bool is an int to Python, not to a run
        _fail(where, what, value)
    if not low <= value <= high:
        _fail(where, f"{what} in [{low}, {high}]", value)
    return value


def _number(value, where: str, low: float = -np.inf, high: float = np.inf) -> float:
    if type(value) not in (int, float) or not low <= value <= high:
        _fail(where, f"a number in [{low:g}, {high:g}]", value)
    return value


def _flag(value, where: str) -> bool:
    if type(value) is not bool:
        _fail(where, "true or false", value)
    return value


def _text(value, where: str, max_chars: int | None = None) -> str:
    if type(value) is not str:
        _fail(where, "text", value)
    if max_chars is not None and len(value) > max_chars:
        _fail(where, f"text of at most {max_chars:,} characters")
    return value


def _shape(value, where: str, ndim: int | None = None) -> list[int]:
    """A tensor shape: a list of whole numbers (`ndim` of them, if given)."""
    shape = _list(value, where, length=ndim, what="a shape" if ndim is None else f"a shape of {ndim} dimensions")
    for i, size in enumerate(shape):
        _whole(size, f"{where}[{i}]", what="a dimension")
    return shape


def _logits(value, where: str, vocab: int) -> None:
    """[vocab] numbers, null for a filtered-out token (-inf), at least one token kept."""
    _array(value, where, [vocab], nulls=True)
    if all(v is None for v in value):
        _fail(where, "logits that keep at least one token (a number, not null)")


def _array(value, where: str, shape: list[int], nulls: bool = False) -> None:
    """A nested list of `shape` holding numbers (and nulls, where `nulls`); finite: `_check_values`."""
    if type(value) is not list or len(value) != shape[0]:
        _fail(where, f"a list of shape {shape}", value)
    if len(shape) > 1:
        for i, item in enumerate(value):
            _array(item, f"{where}[{i}]", shape[1:], nulls)
    elif not set(map(type, value)) <= ({int, float, type(None)} if nulls else {int, float}):
        _fail(where, "numbers" + (" or null" if nulls else ""))
