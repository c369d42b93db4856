"""Tensor parallelism on a tiny random Llama whose every dimension is distinct (d = 48, h_q = 6,
h_kv = 2, d_h = 10, d_ff = 38, L = 3, V = 101) over R = 2 real processes: each rank's shapes are the
hand-computed slices (the embedding and LM head split by vocabulary, 51 and 50 rows), its collectives
the two all-reduces a layer and one after the embedding, (2L + 1)·B·T·d·bytes, and one all-gather of the
logits, B·T·⌈V/R⌉·bytes, its logits one process's and its greedy tokens `generate`'s; an R that does not divide is refused before any
process starts, and a rank that dies mid-run is a clear error that leaves no process or port behind."""

from __future__ import annotations

import os

import psutil
import pytest
import torch
from processes import children, listening, recorded_ports
from tiny_models import tiny_model

from explorer.errors import ConfigError, ExplorerError
from explorer.figures.lab.tensor import fig_tensor
from explorer.lab.tensor import lesson_text
from explorer.runner.lab import tensor as tensor_runner
from explorer.runner.lab.processes import FAIL_EXIT_CODE
from explorer.runner.lab.tensor import run_tensor
from explorer.runner.lab.tensor_rank import FAIL_RANK_ENV

PROMPT = "Hello there, how are you?"
TOKENS = 5
D, D_H, L, D_FF, V = 48, 10, 3, 38, 101


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", intermediate_size=D_FF)


@pytest.fixture(scope="module")
def ids(llama):
    return llama.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def before_run() -> set[int]:
    """The descendants alive before the module's run (another test's browser driver, say)."""
    return children()


@pytest.fixture(scope="module")
def result(llama, ids, before_run):
    return run_tensor(llama, ids, ranks=2, tokens=TOKENS)  # the module's one run of two processes


def test_the_run_is_two_processes_other_than_this_one(result, before_run):
    pids = [run.pid for run in result.runs]
    assert [run.rank for run in result.runs] == [0, 1]
    assert len(set(pids)) == 2 and os.getpid() not in pids and result.parent_pid == os.getpid()
    assert children() - before_run == set()  # both have ended
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


def test_each_ranks_shapes_are_its_slice_of_the_heads_and_the_mlp(result, ids):
    t = len(ids)
    expected_stops = {
        "attention input x": (1, t, D), "Q (q_proj out)": (1, t, 3 * D_H), "K (k_proj out)": (1, t, 1 * D_H),
        "V (v_proj out)": (1, t, D_H), "heads' output (o_proj in)": (1, t, 3 * D_H), "O out, all-reduced": (1, t, D),
        "gate (gate_proj out)": (1, t, 19), "up (up_proj out)": (1, t, 19), "down_proj in": (1, t, 19),
        "down out, all-reduced": (1, t, D)}
    expected_weights = {"q_proj": (30, D), "k_proj": (10, D), "v_proj": (10, D), "o_proj": (D, 30),
                        "gate_proj": (19, D), "up_proj": (19, D), "down_proj": (D, 19)}
    for run, vocab_rows in zip(result.runs, (51, 50)):  # torch.chunk's split of V = 101 rows over 2 ranks
        assert dict(run.stops) == expected_stops and len(run.stops) == len(expected_stops)
        assert dict(run.weights) == {**expected_weights, "embed_tokens": (vocab_rows, D), "lm_head": (vocab_rows, D)}
        assert run.kv_shape == (1, 1, t, D_H)  # one of the two KV heads cached on each rank


def test_every_step_runs_two_all_reduces_a_layer_and_the_ends_collectives_of_the_formulas_bytes(result, ids):
    t = len(ids)
    for run in result.runs:
        assert len(run.steps) == TOKENS  # the prefill, then TOKENS - 1 decode steps
        for step, calls in enumerate(run.steps):
            tokens = t if step == 0 else 1
            reduces = [call for call in calls if call.kind == "all_reduce"]
            assert [call.kind for call in calls] == ["all_reduce"] * (2 * L + 1) + ["all_gather_into_tensor"]
            assert all(call.shape == (1, tokens, D) and call.payload_bytes == tokens * D * 4 for call in reduces)
            assert sum(call.payload_bytes for call in reduces) == (2 * L + 1) * 1 * tokens * D * 4
            assert result.formula_bytes(step) == (2 * L + 1) * tokens * D * 4 == result.measured_bytes(step)
            gather = calls[-1].payload_bytes  # each rank's [B, T, V / R] logits, padded to ⌈V / R⌉ = 51
            assert gather == tokens * 51 * 4 == result.gather_formula_bytes(step)
            assert result.measured_bytes(step, "all_gather_into_tensor") == gather
            assert result.sent_bytes(step) == result.measured_bytes(step) + gather
            assert all(call.ms > 0 for call in calls) and run.comm_ms(step) < run.step_ms[step]


def test_the_logits_are_one_processs_and_the_tokens_generates(result, llama, ids):
    with torch.inference_mode():  # the oracle: transformers' own greedy generate, unsharded, here
        generated = llama.model.generate(torch.tensor([ids]), max_new_tokens=TOKENS, do_sample=False,
                                         min_new_tokens=TOKENS)[0, len(ids):].tolist()
    assert all(run.tokens == tuple(generated) for run in result.runs)
    assert result.reference_tokens == tuple(generated) and result.same_tokens
    assert 0 < result.max_abs_diff < 1e-5 * max(1.0, result.max_abs_logit)


def test_the_table_lesson_and_figure_say_what_was_measured(result, ids):
    lines = "\n".join(result.lines())
    assert "prefill (T = %d): 7 x all_reduce, 1 x all_gather_into_tensor" % len(ids) in lines
    assert "greedy tokens identical" in lines
    text = lesson_text(result)
    assert "**3 of 6 query heads**" in text and "**1 of 2 KV heads**" in text and "**7 all-reduces a step**" in text
    figure = fig_tensor(result)
    assert figure.layout.meta == {"view": "lab-tensor", "step": None}
    ranks = [trace for trace in figure.data if (trace.name or "").startswith("rank ")]
    assert [list(trace.text)[0] for trace in ranks] == [f"[1, {len(ids)}, 30]"] * 2


@pytest.mark.parametrize("ranks,message", [
    (4, r"4 does not divide the query heads h_q \(6\) nor the KV heads h_kv \(2\) nor the MLP width d_ff \(38\)"
        r"\. On this model R can be 1, 2\."),
    (3, r"3 does not divide the KV heads h_kv \(2\) nor the MLP width d_ff \(38\)")])
def test_an_r_that_does_not_divide_is_refused_before_any_process_starts(llama, ids, monkeypatch, ranks, message):
    monkeypatch.setattr(tensor_runner, "start_ranks", lambda *args: pytest.fail("a process was started"))
    with pytest.raises(ConfigError, match=message):
        run_tensor(llama, ids, ranks=ranks)


def test_a_rank_that_dies_mid_run_is_a_clear_error_and_leaves_nothing_behind(llama, ids, monkeypatch):
    ports = recorded_ports(monkeypatch, tensor_runner)
    monkeypatch.setenv(FAIL_RANK_ENV, "1")  # rank 1 exits right after its prefill
    before = children()
    with pytest.raises(ExplorerError, match=r"Rank [01] of 2 stopped mid-run: .*no process of the run is left "
                                            rf"\(exit codes by rank: 0: -?\d+, 1: {FAIL_EXIT_CODE}\)"):
        run_tensor(llama, ids, ranks=2, tokens=TOKENS)
    assert children() - before == set() and listening(ports[0]) == []
