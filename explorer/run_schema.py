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

This module reads the file and checks the run as a whole: its header (model, description, prompt,
ids, pieces), the model's config against the steps and the equivalence experiment. Each step:
`explorer.run_schema_steps`; a step's attention, routing and logit-lens records:
`explorer.run_schema_records`; one field's type and range: `explorer.run_schema_fields`.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

from explorer.analysis.equivalence import Comparison, EquivalenceResult
from explorer.analysis.spec import ModelSpec
from explorer.errors import ConfigError
from explorer.run import PromptInputs
from explorer.run_schema_fields import (
    ADVICE,
    DAMAGED,
    MAX_LINE_CHARS,
    StepFacts,
    check_values,
    expect_flag,
    expect_list,
    expect_number,
    expect_object,
    expect_text,
    expect_whole,
    fail,
)
from explorer.run_schema_steps import check_trace

# A 39-token, 3-step run of the embedded model is 10.9 MB, and each further decode step adds about
# 2.3 MB (its logits through the sampling stages): 512 MiB holds some 200 steps. Parsing a file this
# size takes about 10 s and 2 GB of memory here (measured with json.loads on the 2-core machine).
MAX_RUN_BYTES = 512 * 2**20
TOKEN_KEY = re.compile(r"\d{1,10}")
RUN_KEYS = ("model", "description", "config", "ids", "text", "pieces", "traces")
EQUIVALENCE_KEYS = tuple(f.name for f in fields(EquivalenceResult))
COMPARISON_KEYS = tuple(f.name for f in fields(Comparison))
PROMPT_KEYS = tuple(f.name for f in fields(PromptInputs))
OPTIONAL_PROMPT_KEYS = ("enable_thinking",)  # absent from runs saved before Qwen3's thinking switch


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


def check_run(data: dict) -> None:
    """Check every field of a parsed run (a dict in the saved-run format).

    Raises:
        ConfigError: the first field that breaks the schema, named by its place in the file (e.g.
            `traces[0].input_ids[0]`), with what it must be and what to do.
    """
    check_values(data, "", 0)
    expect_object(data, "", RUN_KEYS)
    expect_text(data["model"], "model", MAX_LINE_CHARS)
    expect_text(data["description"], "description", MAX_LINE_CHARS)
    expect_text(data["text"], "text")
    if "attention_left_out" in data:
        expect_text(data["attention_left_out"], "attention_left_out", MAX_LINE_CHARS)
    if "prompt" in data:
        _check_prompt(data["prompt"])
    traces = expect_list(data["traces"], "traces")
    if not traces:
        fail("traces", "a list of the run's steps, the prefill first", traces)
    run = StepFacts()
    for index, trace in enumerate(traces):
        check_trace(trace, f"traces[{index}]", index, run)
    ids = expect_list(data["ids"], "ids")
    for i, token_id in enumerate(ids):
        expect_whole(token_id, f"ids[{i}]", high=run.vocab - 1, what="a token id")
    if ids[: len(run.fed)] != run.fed:
        fail("ids", "the ids fed at each step, in order (then the token chosen last)")
    pieces = expect_object(data["pieces"], "pieces", ())
    for key, piece in pieces.items():
        if not TOKEN_KEY.fullmatch(key) or int(key) >= run.vocab:
            fail("pieces", f"keyed by token ids below {run.vocab}")
        expect_text(piece, f"pieces.{key}", MAX_LINE_CHARS)
    config = expect_object(data["config"], "config", ())
    _check_config(expect_object(config, "config", () if "n_head" in config else ("num_attention_heads",)), run)
    if "equivalence" in data:
        _check_equivalence(data["equivalence"], run, len(traces[0]["input_ids"]))


def _check_prompt(prompt) -> None:
    """What the prefill was given: the prompt's text (or null with a token count), the chat-template
    flag, the system prompt and (in runs saved since it exists) the thinking switch."""
    required = tuple(key for key in PROMPT_KEYS if key not in OPTIONAL_PROMPT_KEYS)
    expect_object(prompt, "prompt", required)
    if not set(prompt) <= set(PROMPT_KEYS):
        fail("prompt", f"an object of {', '.join(PROMPT_KEYS)} (the last optional)")
    if prompt["text"] is None:
        expect_whole(prompt["prompt_tokens"], "prompt.prompt_tokens", low=1)
    else:
        expect_text(prompt["text"], "prompt.text")
        if prompt["prompt_tokens"] is not None:
            fail("prompt.prompt_tokens", "null for a text prompt", prompt["prompt_tokens"])
    expect_flag(prompt["use_chat_template"], "prompt.use_chat_template")
    expect_text(prompt["system_prompt"], "prompt.system_prompt")
    if "enable_thinking" in prompt:
        expect_flag(prompt["enable_thinking"], "prompt.enable_thinking")


def _check_equivalence(result, run: StepFacts, prompt_tokens: int) -> None:
    """The experiment on the prompt: its reference, the greedy tokens of its steps, and per comparison
    one non-negative number per step (none where it was skipped, with why) and the step it diverged at."""
    where = "equivalence"
    expect_object(result, where, EQUIVALENCE_KEYS, exact=True)
    expect_text(result["reference"], f"{where}.reference", MAX_LINE_CHARS)
    if expect_whole(result["prompt_tokens"], f"{where}.prompt_tokens") != prompt_tokens:
        fail(f"{where}.prompt_tokens", f"{prompt_tokens} (the prompt's tokens)", result["prompt_tokens"])
    tokens = expect_list(result["tokens"], f"{where}.tokens")
    if not tokens:
        fail(f"{where}.tokens", "the greedy token of at least one step")
    for i, token_id in enumerate(tokens):
        expect_whole(token_id, f"{where}.tokens[{i}]", high=run.vocab - 1, what="a token id")
    expect_number(result["wall_ms"], f"{where}.wall_ms", low=0)
    for i, comparison in enumerate(expect_list(result["comparisons"], f"{where}.comparisons")):
        at = f"{where}.comparisons[{i}]"
        expect_object(comparison, at, COMPARISON_KEYS, exact=True)
        expect_text(comparison["name"], f"{at}.name", MAX_LINE_CHARS)
        skipped = expect_text(comparison["skipped"], f"{at}.skipped", MAX_LINE_CHARS)
        steps = 0 if skipped else len(tokens)
        for key in ("max_abs", "mean_abs", "argmax"):
            values = expect_list(comparison[key], f"{at}.{key}", length=steps, what=f"{steps} values, one per step")
            for j, value in enumerate(values):
                if key == "argmax":
                    expect_whole(value, f"{at}.{key}[{j}]", high=run.vocab - 1, what="a token id")
                else:
                    expect_number(value, f"{at}.{key}[{j}]", low=0)
        if comparison["diverged_at"] is not None:
            expect_whole(comparison["diverged_at"], f"{at}.diverged_at", high=max(0, steps - 1), what="a step")


def _check_config(config: dict, run: StepFacts) -> None:
    """The config of the model that ran: its heads and layers as traced, and, for a family the cost
    model knows, the dimensions it reads (a family it does not know is drawn without a roofline)."""
    key = "num_attention_heads" if "num_attention_heads" in config else "n_head"  # GPT-2 names it n_head
    heads = expect_whole(config[key], f"config.{key}", low=1)
    text_config = config.get("text_config") if config.get("model_type") == "gemma3" else config
    layer_counts = [text_config.get(key) for key in ("num_hidden_layers", "n_layer")] \
        if isinstance(text_config, dict) else []
    if heads != run.heads or any(count not in (None, run.n_layers) for count in layer_counts):
        # checked before the spec: its per-layer tuples are as long as the config says
        fail("config", f"the config of the model that ran ({run.heads} query heads, {run.n_layers} layers)")
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
            fail("config", f"the config of the model that ran (its {name}: {configured[name]}, the steps' {value})")
