"""Hand-built `StepTrace`s for the figure tests: real stop names, shapes predicted from a spec.

`TINY` is a Llama-like model with every dimension distinct (2 layers, 4 query heads, 2 KV heads,
head_dim 8, d 32, d_ff 37, vocab 97), so a swapped axis shows. `SMOLLM2` has the embedded model's
dimensions, for payload sizes. Wall times are made up (distinct per stop); attention probabilities
are random, causal, rows summing to 1. `sampling_record` filters logits with numpy the way
transformers' processors do (temperature, top-k, top-p, min-p), without torch.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from explorer.analysis.shapes import cache_length, predict_shapes
from explorer.analysis.spec import ModelSpec
from explorer.families import traced_family
from explorer.run import Run, SavedAttention, SavedLens
from explorer.stops import stop_table
from explorer.trace import (
    AttentionRecord,
    KVSnapshot,
    LensRecord,
    OpRecord,
    SamplingRecord,
    SamplingStage,
    StepTrace,
    softmax,
)

TINY = ModelSpec(family="llama", hidden_size=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                 intermediate_size=37, vocab_size=97, dense_intermediate_size=37)
SMOLLM2 = ModelSpec(family="llama", hidden_size=576, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64,
                    intermediate_size=1536, vocab_size=49152, dense_intermediate_size=1536,
                    tie_word_embeddings=True, moe_layers=(False,) * 30)
GPT2 = ModelSpec(family="gpt2", hidden_size=24, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=6,
                 intermediate_size=37, vocab_size=97, dense_intermediate_size=37, tie_word_embeddings=True)
PROMPT_PIECES = ["<|im_start|>", "user", "\n", "What", " is", " 2", "+", "2", "?", "<|im_end|>", "\n"]
GENERATED_PIECES = ["4", ".", " The", " answer", " is", " 4", "<|im_end|>"]
NON_FLOAT_DTYPES = {"tokenize": "int64", "sample": "int64", "detokenize": "str"}


def run_traces(spec: ModelSpec = TINY, prompt: list[str] = PROMPT_PIECES, decode_steps: int = 3,
               seed: int = 0) -> list[StepTrace]:
    """The prefill of `prompt` and `decode_steps` decode steps (each feeding one `GENERATED_PIECES` piece)."""
    traces = [step_trace(spec, prompt, 0, seed)]
    for k in range(1, decode_steps + 1):
        piece = GENERATED_PIECES[(k - 1) % len(GENERATED_PIECES)]
        traces.append(step_trace(spec, [piece], k, seed, context=len(prompt) + k))
    return traces


def step_trace(spec: ModelSpec, pieces: list[str], step_index: int, seed: int = 0,
               context: int | None = None) -> StepTrace:
    """One step: the prefill of `pieces` (step 0) or decode step `step_index` feeding `pieces[0]`."""
    stage = "prefill" if step_index == 0 else "decode"
    tokens = len(pieces)
    context = tokens if context is None else context
    rng = np.random.default_rng(seed + step_index)
    return StepTrace(
        stage=stage, step_index=step_index, input_ids=list(range(3, 3 + tokens)), input_pieces=list(pieces),
        context_length=context, ops=step_ops(spec, stage, tokens, context),
        kv=[kv_snapshot(spec, layer, context) for layer in range(spec.n_layers)],
        attention=[AttentionRecord(layer, _probs(spec, layer, tokens, context, rng)[0])
                   for layer in range(spec.n_layers)],
        logits=rng.normal(size=spec.vocab_size).astype(np.float32), sampling=None,
        token_text=GENERATED_PIECES[step_index % len(GENERATED_PIECES)], wall_ms=12.5 + step_index,
    )


def step_attention(spec: ModelSpec, trace: StepTrace, seed: int = 0) -> dict[int, np.ndarray]:
    """The attention probabilities of a `step_trace` step by layer (the same random draws)."""
    rng = np.random.default_rng(seed + trace.step_index)
    tokens = len(trace.input_ids)
    return {layer: _probs(spec, layer, tokens, trace.context_length, rng)[1] for layer in range(spec.n_layers)}


def lens_record(spec: ModelSpec, trace: StepTrace, seed: int = 0) -> LensRecord:
    """A logit lens over random [L+1, T, vocab] logits (its statistics computed with numpy), each
    position followed by the next input id and the last by the token the step chose."""
    rng = np.random.default_rng(seed + 100 + trace.step_index)
    tokens = len(trace.input_ids)
    probs = softmax(rng.normal(scale=3, size=(spec.n_layers + 1, tokens, spec.vocab_size)).astype(np.float32))
    next_ids = [*trace.input_ids[1:], trace.sampling.token_id]
    top = np.argsort(-probs, axis=-1, kind="stable")[..., :5]
    entropy = -(probs * np.log2(probs)).sum(-1)
    return LensRecord(list(range(trace.context_length - tokens, trace.context_length)), next_ids, top,
                      np.take_along_axis(probs, top, -1), probs[:, np.arange(tokens), next_ids], entropy, 1.5)


def hf_config(spec: ModelSpec) -> dict:
    """A Llama `config.json` with `spec`'s dimensions (the config a hand-built run names)."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": spec.hidden_size,
            "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
            "num_key_value_heads": spec.n_kv_heads, "head_dim": spec.head_dim,
            "intermediate_size": spec.intermediate_size, "vocab_size": spec.vocab_size,
            "tie_word_embeddings": spec.tie_word_embeddings, "max_position_embeddings": 8192}


def hand_run(spec: ModelSpec = TINY, decode_steps: int = 3, seed: int = 0) -> tuple[Run, SavedAttention]:
    """A `Run` built by hand, no model: `run_traces`' steps, each choosing its token with
    `sampling_record`, every token id named, with the attention of every step."""
    run = Run("hand-built", f"a hand-built {spec.family} run", hf_config(spec))
    matrices, lenses = {}, {}
    for trace in run_traces(spec, decode_steps=decode_steps, seed=seed):
        trace = replace(trace, sampling=sampling_record(trace.logits, top_k=5, seed=seed + trace.step_index))
        lenses[trace.step_index] = lens_record(spec, trace, seed)
        matrices |= {(trace.step_index, layer): probs for layer, probs in step_attention(spec, trace, seed).items()}
        pieces = dict(zip(trace.input_ids, trace.input_pieces, strict=True)) if trace.step_index == 0 else {}
        named = run.pieces  # a copy: taken once
        pieces |= {i: f"tok{i}" for i in range(spec.vocab_size) if i not in pieces and i not in named}
        run.append(trace, pieces, "".join(GENERATED_PIECES[: trace.step_index + 1]))
    run.lens_source = SavedLens(lenses)
    return run, SavedAttention(matrices, "not built")


def step_ops(spec: ModelSpec, stage: str, tokens: int, context: int) -> list[OpRecord]:
    """Every stop of the step in execution order; wall time 0.01 ms x (position + 1), None for the view."""
    shapes = predict_shapes(spec, stage, 1, tokens, context)
    shapes["tokenize"] = ([], [[1, tokens]])
    shapes["sample"] = ([[1, spec.vocab_size]], [[1]])
    shapes["detokenize"] = ([[1]], [])
    ops = []
    for position, (name, kind, layer) in enumerate(stop_table(traced_family(spec.family), spec.n_layers, stage)):
        inputs, outputs = shapes[name]
        wall_ms = None if name.endswith("split_heads") else round(0.01 * (position + 1), 4)
        ops.append(OpRecord(name, kind, layer, inputs, outputs, NON_FLOAT_DTYPES.get(name, "float32"), wall_ms))
    return ops


def kv_snapshot(spec: ModelSpec, layer: int, context: int) -> KVSnapshot:
    """Layer `layer`'s float32 cache after a step reaching context `context`; a sliding-window layer
    keeps its last window - 1 positions, as transformers' `DynamicSlidingWindowLayer` does."""
    window = spec.window(layer)
    held = context if window is None else min(context, window - 1)
    shape = [1, spec.n_kv_heads, held, spec.head_dim]
    size_bytes = math.prod(shape) * 4
    return KVSnapshot(layer, shape, list(shape), size_bytes, size_bytes)


def _probs(spec: ModelSpec, layer: int, tokens: int, context: int,
           rng: np.random.Generator) -> tuple[list[int], np.ndarray]:
    """Random causal probabilities [h_q, T, kv_len] float32, rows summing to 1."""
    kv_len = cache_length(spec, layer, tokens, context)
    scores = rng.normal(size=(spec.n_heads, tokens, kv_len)).astype(np.float32)
    query_pos = np.arange(kv_len - tokens, kv_len)[:, None]  # positions of the queries among the keys
    scores[:, np.arange(kv_len)[None, :] > query_pos] = -np.inf
    exp = np.exp(scores - scores.max(-1, keepdims=True))
    probs = (exp / exp.sum(-1, keepdims=True)).astype(np.float32)
    return list(probs.shape), probs


def sampling_record(logits: np.ndarray, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    min_p: float = 0.0, seed: int = 0) -> SamplingRecord:
    """The stages of `logits` ([vocab] float32) through each active filter and a seeded draw from the
    last stage; with every filter off, greedy (the argmax of the raw logits)."""
    do_sample = (temperature, top_k, top_p, min_p) != (1.0, 0, 1.0, 0.0)
    stages = [SamplingStage("raw", logits.astype(np.float32))]
    if temperature != 1.0:
        stages.append(SamplingStage("temperature", stages[-1].logits / np.float32(temperature)))
    if top_k:
        threshold = np.sort(stages[-1].logits)[-top_k]
        stages.append(SamplingStage("top_k", _kept(stages[-1].logits, stages[-1].logits >= threshold)))
    if top_p < 1.0:
        order = np.argsort(-stages[-1].logits, kind="stable")
        cumulative = np.cumsum(stages[-1].probs[order])
        keep = np.zeros(len(logits), bool)
        keep[order[: int(np.searchsorted(cumulative, top_p)) + 1]] = True
        stages.append(SamplingStage("top_p", _kept(stages[-1].logits, keep)))
    if min_p > 0.0:
        probs = stages[-1].probs
        stages.append(SamplingStage("min_p", _kept(stages[-1].logits, probs >= min_p * probs.max())))
    final = softmax(stages[-1].logits)
    token_id = (int(np.random.default_rng(seed).choice(len(final), p=final / final.sum())) if do_sample
                else int(np.argmax(logits)))
    settings = {"do_sample": do_sample, "temperature": temperature, "top_k": top_k, "top_p": top_p,
                "min_p": min_p, "seed": seed, "max_new_tokens": 64}
    return SamplingRecord(settings, stages, token_id, float(final[token_id]))


def _kept(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    return np.where(keep, logits, -np.inf).astype(np.float32)
