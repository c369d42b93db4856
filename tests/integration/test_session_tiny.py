"""The hooked runner on tiny random models of each family: shapes, cache, attention, logits, hygiene."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from tiny_models import DIMS, QWEN3_CHAT_TEMPLATE, tiny_model
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import DynamicLayer

from explorer.analysis.shapes import predict_shapes
from explorer.analysis.spec import ModelSpec
from explorer.config import SamplingSettings
from explorer.errors import PromptError, SessionStateError
from explorer.families import traced_family
from explorer.runner import attention_recompute
from explorer.runner.session import InferenceSession
from explorer.saved import run_from_dict, run_to_dict
from explorer.stops import stop_table
from explorer.trace import StepTrace, dumps

FAMILIES = ["llama", "qwen3", "qwen2", "mistral", "phi3", "gemma3_text"]
D, HQ, HKV, DH, DFF, V = (DIMS[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                            "head_dim", "intermediate_size", "vocab_size"))
PROMPT = "What is 2+2?"


@pytest.fixture(scope="module", params=FAMILIES)
def loaded(request):
    return tiny_model(request.param)


@pytest.fixture(scope="module")
def steps(loaded):
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=10))
    return session, [session.prefill(PROMPT)] + [session.decode_step() for _ in range(3)]


def expected_layer0(T: int, n: int, family: str) -> dict[str, tuple[list, list]]:
    """Shapes of layer 0's stops from the config alone: T tokens in, context n after the step."""
    x, heads_q, heads_kv = [1, T, D], [1, HQ, T, DH], [1, HKV, T, DH]
    kv_n = [1, HKV, n, DH]
    shapes = {
        "input_norm": ([x], [x]),
        "attn.split_heads": (None, [heads_q, heads_kv, heads_kv]),
        "attn.rope": ([heads_q, heads_kv], [heads_q, heads_kv]),
        "attn.kv_cache_write": ([heads_kv, heads_kv], [kv_n, kv_n]),
        "attn.gqa_expand": ([kv_n, kv_n], [[1, HQ, n, DH]] * 2),
        "attn.scores": ([heads_q, [1, HQ, n, DH]], [[1, HQ, T, n]]),
        "attn.softmax": ([[1, HQ, T, n]], [[1, HQ, T, n]]),
        "attn.weighted_sum": ([[1, HQ, T, n], [1, HQ, n, DH]], [heads_q]),
        "attn.merge_heads": ([heads_q], [[1, T, HQ * DH]]),
        "attn.o_proj": ([[1, T, HQ * DH]], [x]),
        "attn_residual": ([x, x], [x]),
        "mlp.act": ([[1, T, DFF]] * 2, [[1, T, DFF]]),
        "mlp.down_proj": ([[1, T, DFF]], [x]),
        "mlp_residual": ([x, x], [x]),
    }
    if family == "phi3":
        shapes["attn.qkv_proj"] = ([x], [[1, T, (HQ + 2 * HKV) * DH]])
        shapes["mlp.gate_up_proj"] = ([x], [[1, T, 2 * DFF]])
    else:
        shapes |= {"attn.q_proj": ([x], [[1, T, HQ * DH]]), "attn.k_proj": ([x], [[1, T, HKV * DH]]),
                   "attn.v_proj": ([x], [[1, T, HKV * DH]]), "mlp.gate_proj": ([x], [[1, T, DFF]]),
                   "mlp.up_proj": ([x], [[1, T, DFF]])}
    return shapes


def test_every_stop_has_the_shape_the_config_predicts(steps, loaded):
    _, traces = steps
    family = loaded.model.config.model_type
    T0 = len(traces[0].input_ids)
    for k, trace in enumerate(traces):
        T, n = (T0, T0) if k == 0 else (1, T0 + k)
        table = stop_table(traced_family(family), 3, trace.stage)
        assert [op.name for op in trace.ops] == [name for name, _, _ in table]
        for rel, (inputs, outputs) in expected_layer0(T, n, family).items():
            if family == "gemma3_text" and "attn." in rel and rel.split(".")[1] in (
                    "kv_cache_write", "gqa_expand", "scores", "softmax", "weighted_sum"):
                continue  # layer 0 of the tiny Gemma 3 is a sliding-window layer: checked below
            op = trace.op(f"layers.0.{rel}")
            assert op.output_shapes == outputs, (k, rel)
            if inputs is not None:
                assert op.input_shapes == inputs, (k, rel)
        assert trace.op("embed").output_shapes == [[1, T, D]]
        assert trace.op("lm_head").input_shapes == [[1, 1, D]]
        assert trace.op("lm_head").output_shapes == [[1, 1, V]]
        assert trace.op("sample").input_shapes == [[1, V]]


def test_every_stop_of_every_layer_has_the_shape_the_analysis_predicts(steps, loaded):
    _, traces = steps
    spec = ModelSpec.from_hf_config(loaded.model.config.to_dict())
    for trace in traces:
        predicted = predict_shapes(spec, trace.stage, 1, len(trace.input_ids), trace.context_length)
        measured = {op.name: (op.input_shapes, op.output_shapes) for op in trace.ops if op.name in predicted}
        assert measured == predicted


def test_wall_times_are_measured_for_every_stop_but_views(steps):
    _, traces = steps
    for op in traces[1].ops:
        if op.kind == "reshape" and op.name.endswith("split_heads"):
            assert op.wall_ms is None
        else:
            assert op.wall_ms is not None and op.wall_ms >= 0.0, op.name
    assert traces[1].wall_ms > 0


def test_cache_grows_by_exactly_one_position_per_decode_step(steps, loaded):
    _, traces = steps
    window = loaded.model.config.to_dict().get("sliding_window")
    lengths = [t.context_length for t in traces]
    assert lengths == [lengths[0] + k for k in range(4)]
    for trace in traces:
        for snap in trace.kv:
            full = trace.context_length
            layer_type = getattr(loaded.model.config, "layer_types", None)
            sliding = layer_type is not None and layer_type[snap.layer] == "sliding_attention"
            n = min(full, window - 1) if sliding else full  # a sliding layer keeps window - 1 positions
            assert snap.key_shape == snap.value_shape == [1, HKV, n, DH]
            assert snap.key_bytes == n * HKV * DH * 4


def test_attention_rows_sum_to_one_and_are_causal(steps):
    session, traces = steps
    for trace in traces:
        for record in trace.attention:
            np.testing.assert_allclose(session.attention.probs(trace.step_index, record.layer).sum(-1), 1.0, atol=1e-5)
    prefill_probs = session.attention.probs(0, 1)
    T = prefill_probs.shape[-1]
    upper = np.triu(np.ones((T, T), dtype=bool), k=1)
    assert np.all(prefill_probs[:, upper] == 0.0)
    assert np.all(np.diagonal(prefill_probs, axis1=1, axis2=2) > 0.0)


def test_attention_equals_eager_attention(steps, loaded):
    session, traces = steps
    eager = AutoModelForCausalLM.from_config(loaded.model.config, attn_implementation="eager").eval()
    eager.load_state_dict(loaded.model.state_dict())
    n = traces[-1].context_length
    with torch.inference_mode():
        out = eager(torch.tensor([session.ids[:n]]), output_attentions=True)
    T0 = len(traces[0].input_ids)
    for layer, probs in enumerate(out.attentions):
        ours_prefill = session.attention.probs(0, layer)
        kv_len = ours_prefill.shape[-1]
        np.testing.assert_allclose(ours_prefill, probs[0, :, :T0, T0 - kv_len:T0].numpy(), atol=1e-5)
        ours_last = session.attention.probs(len(traces) - 1, layer)
        kv_len = ours_last.shape[-1]
        np.testing.assert_allclose(ours_last, probs[0, :, n - 1:n, n - kv_len:n].numpy(), atol=1e-5)


def test_cached_decode_logits_equal_a_full_recompute(steps, loaded):
    session, traces = steps
    n = traces[-1].context_length
    with torch.inference_mode():
        full = loaded.model(torch.tensor([session.ids[:n]])).logits[0, -1].numpy()
    np.testing.assert_allclose(traces[-1].logits, full, atol=1e-4, rtol=1e-4)


def test_recomputed_attention_equals_the_kept_one_bit_for_bit(steps, loaded):
    session, traces = steps
    lean = InferenceSession(loaded, SamplingSettings(max_new_tokens=10), attention_budget_bytes=0)
    lean_traces = [lean.prefill(PROMPT), lean.decode_step()]
    assert not any(lean.attention.store.kept(0, record.layer) for record in lean_traces[0].attention)
    for step in (0, 1):
        for layer in (0, 2):
            assert session.attention.store.kept(step, layer)
            recomputed, kept = lean.attention.probs(step, layer), session.attention.probs(step, layer)
            if lean._cache.layers[layer].keys.shape[-2] == lean.traces[-1].context_length:  # from the queries
                np.testing.assert_array_equal(recomputed, kept)
            else:  # a sliding-window layer without its early keys reruns the context: other GEMM shapes
                np.testing.assert_allclose(recomputed, kept, rtol=0, atol=1e-6)


def test_a_recompute_while_a_step_is_in_flight_reads_the_cache_not_a_rerun(steps, loaded, monkeypatch):
    """Attention recomputed while a decode step has written its keys but not yet its trace (the export
    button's size estimate runs beside a Next token) comes from the queries and the cached keys, equal to
    the kept matrix bit for bit; it does not rerun the whole context (minutes at 8,000 tokens)."""
    session, _ = steps
    lean = InferenceSession(loaded, SamplingSettings(max_new_tokens=10), attention_budget_bytes=0)
    lean.prefill(PROMPT)
    with torch.inference_mode():  # the step in flight: its keys in the cache, its trace not yet in the run
        loaded.model(torch.tensor([[lean.ids[-1]]]), cache=lean._cache, use_cache=True)
    monkeypatch.setattr(attention_recompute, "rerun_attention", lambda *args: pytest.fail("reran the context"))
    full = [i for i, layer in enumerate(lean._cache.layers) if type(layer) is DynamicLayer]  # not a sliding window
    if not full:
        pytest.skip("every layer of this tiny model is a sliding window shorter than the prompt: it reruns")
    for layer in full:
        np.testing.assert_array_equal(lean.attention.probs(0, layer), session.attention.probs(0, layer))


def test_kept_attention_stays_within_the_session_budget_oldest_first(loaded):
    layer_bytes = HQ * 30 * 30 * 4  # one prefill layer of a 30-token prompt
    query_bytes = DIMS["num_hidden_layers"] * HQ * DH * 4 * 33  # the queries of the prefill and 3 steps, always kept
    session = InferenceSession(loaded, attention_budget_bytes=query_bytes + 2 * layer_bytes)
    prefill = session.prefill("x" * 30, use_chat_template=False)
    store = session.attention.store
    assert [store.kept(0, r.layer) for r in prefill.attention] == [True, True, False]
    for _ in range(3):
        session.decode_step()
    assert session.query_bytes == query_bytes and store.kept_bytes <= 2 * layer_bytes
    assert not store.kept(0, 0)  # the oldest matrix went first
    assert all(store.kept(3, r.layer) for r in session.traces[-1].attention)
    np.testing.assert_allclose(session.attention.probs(0, 0).sum(-1), 1.0, atol=1e-5)


def _hook_count(model) -> int:
    """Forward hooks and wrapped `forward` methods on the model's modules plus process-wide module hooks."""
    from torch.nn.modules import module as torch_module

    per_module = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + ("forward" in vars(m))
                     for m in model.modules())
    return per_module + len(torch_module._global_forward_hooks) + len(torch_module._global_forward_pre_hooks)


def test_a_step_leaves_no_hook_and_no_change(loaded):
    model = loaded.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    impl = model.config._attn_implementation
    session = InferenceSession(loaded)
    session.prefill(PROMPT)
    session.decode_step()
    assert _hook_count(model) == 0
    assert model.config._attn_implementation == impl
    assert "update" not in vars(session._cache)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_hooks_are_removed_when_the_forward_pass_raises(loaded, monkeypatch):
    session = InferenceSession(loaded)
    session.prefill(PROMPT)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(loaded.model.model.norm, "forward", broken)
    with pytest.raises(RuntimeError, match="boom"):
        session.decode_step()
    assert vars(loaded.model.model.norm)["forward"] is broken  # the forward set before the step is put back
    assert loaded.model.config._attn_implementation != "explorer_eager"
    monkeypatch.undo()
    assert _hook_count(loaded.model) == 0
    with pytest.raises(SessionStateError, match="previous step failed \\(RuntimeError: boom\\)"):
        session.decode_step()
    session.prefill(PROMPT)
    assert session.decode_step().context_length == len(session.ids) - 1


def test_two_sessions_on_one_model_do_not_mix(loaded):
    settings = SamplingSettings(do_sample=True, temperature=1.5, seed=3, max_new_tokens=10)
    alone = InferenceSession(loaded, settings)
    alone_ids = [alone.prefill("abc").sampling.token_id] + [alone.decode_step().sampling.token_id for _ in range(3)]
    first, second = InferenceSession(loaded, settings), InferenceSession(loaded, SamplingSettings(seed=9))
    ids = [first.prefill("abc").sampling.token_id]
    second.prefill("a much longer prompt than the first")
    for _ in range(3):
        ids.append(first.decode_step().sampling.token_id)
        second.decode_step()
    assert ids == alone_ids
    assert first.traces[-1].context_length == len(first.ids) - 1
    assert second.traces[-1].context_length != first.traces[-1].context_length


def test_sessions_stepping_in_parallel_threads_match_sessions_run_alone(loaded):
    prompts = ["abc", "a much longer prompt than the first"]

    def run(prompt: str) -> list[int]:
        session = InferenceSession(loaded, SamplingSettings(do_sample=True, seed=len(prompt), max_new_tokens=10))
        session.prefill(prompt)
        for _ in range(4):
            session.decode_step()
        return session.generated

    alone = [run(p) for p in prompts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(run, prompts * 2))
    assert together == alone * 2
    assert _hook_count(loaded.model) == 0


def test_a_sampled_trace_is_strict_json_and_filtered_tokens_come_back_as_minus_inf(loaded):
    session = InferenceSession(loaded, SamplingSettings(do_sample=True, top_k=5))
    trace = session.prefill(PROMPT)
    text = dumps(trace.to_dict()).decode()
    restored = StepTrace.from_dict(json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in strict JSON")))
    assert restored.sampling.final.kept.sum() == 5
    np.testing.assert_array_equal(restored.sampling.final.logits, trace.sampling.final.logits)
    np.testing.assert_allclose(restored.sampling.final.probs, trace.sampling.final.probs)


def test_trace_round_trips_through_json(steps):
    session, traces = steps
    trace = traces[1]
    plain = json.loads(dumps(trace.to_dict()))
    restored = StepTrace.from_dict(plain)
    digits = [repr(x).lstrip("-").split("e")[0].replace(".", "").strip("0") for x in plain["logits"]]
    assert max(map(len, digits)) <= 9  # each float32 as its shortest text, not its float64 expansion
    assert [op.name for op in restored.ops] == [op.name for op in trace.ops]
    assert restored.op("layers.1.attn.scores") == trace.op("layers.1.attn.scores")
    np.testing.assert_array_equal(restored.logits, trace.logits)
    assert restored.attention == trace.attention
    _, saved = run_from_dict(json.loads(dumps(run_to_dict(session.run, session.attention))))
    np.testing.assert_array_equal(saved.probs(1, 2), session.attention.probs(1, 2))
    assert restored.sampling.token_id == trace.sampling.token_id


def test_bad_input_raises_specific_errors(loaded):
    session = InferenceSession(loaded)
    with pytest.raises(SessionStateError, match="prefill first"):
        session.decode_step()
    with pytest.raises(PromptError, match="empty"):
        session.prefill("   ")
    with pytest.raises(PromptError, match="context window is 160 tokens"):
        session.prefill("x" * 200)
    with pytest.raises(PromptError, match="token count is for shape-only mode"):
        session.prefill(prompt_tokens=5)
    with pytest.raises(PromptError, match="the limit is 10"):
        InferenceSession(loaded, max_prompt_tokens=10).prefill("x" * 11, use_chat_template=False)
    assert session.traces == ()


def test_decode_after_eos_is_refused(loaded):
    from dataclasses import replace

    every_token_ends = replace(loaded, eos_token_ids=list(range(V)))
    session = InferenceSession(every_token_ends)
    trace = session.prefill(PROMPT)
    assert trace.finished and trace.finish_reason == "eos"
    with pytest.raises(SessionStateError, match="ended \\(eos\\)"):
        session.decode_step()


def test_generation_stops_at_max_new_tokens(loaded):
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=2))
    session.prefill(PROMPT)
    last = session.decode_step()
    assert last.finished and last.finish_reason == "max_new_tokens"
    assert len(session.generated) == 2


def test_greedy_tokens_equal_generate(loaded):
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=6))
    session.prefill(PROMPT, use_chat_template=False)
    while not session.finished:
        session.decode_step()
    prompt_ids = torch.tensor([session.ids[: len(session.ids) - len(session.generated)]])
    with torch.inference_mode():
        out = loaded.model.generate(prompt_ids, do_sample=False, max_new_tokens=6, eos_token_id=1,
                                    pad_token_id=0, cache=DynamicCache(config=loaded.model.config))
    assert out[0, prompt_ids.shape[1]:].tolist() == session.generated


def test_thinking_is_off_unless_asked_through_the_chat_templates_switch():
    loaded = tiny_model("qwen3")
    loaded.tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=2))
    off = session.prefill("Hi")
    assert loaded.tokenizer.decode(off.input_ids) == "<user>Hi\n<assistant><think>  </think>  "
    assert session.run.prompt.enable_thinking is False
    on = session.prefill("Hi", enable_thinking=True)
    assert loaded.tokenizer.decode(on.input_ids) == "<user>Hi\n<assistant>"
    assert session.run.prompt.enable_thinking is True
    saved = json.loads(dumps(run_to_dict(session.run, session.attention)))  # as a file holds it
    assert run_from_dict(saved)[0].prompt.enable_thinking is True
