"""Pipeline parallelism on a tiny random Llama whose every dimension is distinct (d = 48, h_q = 6,
h_kv = 2, d_h = 10, d_ff = 38, L = 3, V = 101) over S = 2 real processes and M = 3 micro-batches:
stage 0 holds layers 0-1 and the embedding, stage 1 layer 2, the final norm and the LM head (their
parameters counted by hand); (S - 1)·M = 3 sends, each [1, T, d], B_micro·T·d·bytes; a schedule in
which no stage computes a micro-batch before the previous stage has sent it; the bubble recomputed
from the slots and GPipe's formula exact; the last stage's logits the unsharded model's forward. An
S above L is refused before any process starts, and a stage that dies mid-run is a clear error that
leaves no process or port behind."""

from __future__ import annotations

import os
from fractions import Fraction

import psutil
import pytest
import torch
from processes import children, listening, recorded_ports
from tiny_models import tiny_model

from explorer.errors import ConfigError, ExplorerError
from explorer.figures.lab.pipeline import fig_pipeline
from explorer.lab.pipeline import lesson_text
from explorer.runner.lab import pipeline as pipeline_runner
from explorer.runner.lab.pipeline import run_pipeline
from explorer.runner.lab.pipeline_stage import FAIL_STAGE_ENV
from explorer.runner.lab.processes import FAIL_EXIT_CODE

PROMPT = "Hello there, how are you?"
S, M = 2, 3
D, D_H, H_Q, H_KV, L, D_FF, V = 48, 10, 6, 2, 3, 38, 101
LAYER_PARAMS = D * H_Q * D_H * 2 + D * H_KV * D_H * 2 + 3 * D * D_FF + 2 * D  # Q, O; K, V; gate, up, down; 2 norms


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
    return run_pipeline(llama, ids, stages=S, microbatches=M)  # the module's one run of two processes


def test_the_run_is_two_processes_other_than_this_one_and_they_have_ended(result, before_run):
    pids = [run.pid for run in result.runs]
    assert [run.stage for run in result.runs] == [0, 1]
    assert len(set(pids)) == S and os.getpid() not in pids and result.parent_pid == os.getpid()
    assert children() - before_run == set()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


def test_each_stage_holds_its_contiguous_layers_and_its_end_of_the_model(result, llama):
    first, last = result.runs
    assert (first.layers, first.holds) == ((0, 2), ("embedding",))
    assert (last.layers, last.holds) == ((2, 3), ("final norm", "LM head"))
    assert LAYER_PARAMS == sum(p.numel() for p in llama.model.model.layers[0].parameters())  # the hand count
    assert first.parameters == 2 * LAYER_PARAMS + V * D  # layers 0-1 and the [V, d] embedding
    assert last.parameters == LAYER_PARAMS + D + V * D  # layer 2, the final norm's d and the [V, d] LM head


def test_every_send_is_one_micro_batchs_activations_of_the_formulas_bytes(result, ids):
    t = len(ids)
    first, last = result.runs
    assert len(result.sends) == (S - 1) * M and first.recvs == () and last.sends == ()
    for sent, received, micro in zip(first.sends, last.recvs, range(M), strict=True):
        assert (sent.micro, sent.peer, received.micro, received.peer) == (micro, 1, micro, 0)
        assert sent.shape == received.shape == (1, t, D)
        assert sent.payload_bytes == received.payload_bytes == 1 * t * D * 4 == result.send_formula_bytes
        assert received.at_ms >= sent.at_ms  # received after it was sent


def test_the_schedule_is_gpipes_and_its_bubble_is_the_idle_share(result):
    first, last = result.runs
    for run in result.runs:  # each stage runs the micro-batches in order, one at a time
        assert [slot.micro for slot in run.slots] == list(range(M))
        assert all(a.end_ms <= b.start_ms for a, b in zip(run.slots, run.slots[1:], strict=False))
        assert all(slot.ms > 0 for slot in run.slots)
    # stage 1 computes micro-batch m only after stage 0 has computed and sent it
    assert all(a.end_ms <= b.start_ms for a, b in zip(first.slots, last.slots, strict=True))
    makespan = last.slots[-1].end_ms
    busy = sum(slot.end_ms - slot.start_ms for run in result.runs for slot in run.slots)
    assert first.slots[0].start_ms == 0 and result.makespan_ms == makespan
    assert result.bubble == pytest.approx(1 - busy / (S * makespan)) and 0 < result.bubble < 1
    assert result.formula_bubble == Fraction(1, 4)  # (S - 1) / (M + S - 1) = 1 / 4


def test_the_logits_are_the_unsharded_models_forward(result, llama, ids):
    with torch.inference_mode():  # the oracle: the whole model in this process
        logits = llama.model(torch.tensor([ids])).logits[0].float()
    assert result.last_logits.shape == (M, V)
    for row in result.last_logits:
        assert (row - logits[-1]).abs().max() <= 1e-5 * logits[-1].abs().max()
    assert result.max_abs_logit == pytest.approx(float(logits.abs().max()))
    assert result.max_abs_diff <= 1e-5 * result.max_abs_logit
    assert result.tokens == (int(logits[-1].argmax()),) * M == (result.reference_token,) * M and result.same_token


def test_the_table_lesson_and_figure_say_what_was_measured(result, ids):
    lines = "\n".join(result.lines())
    assert "sends: 3 measured, (S - 1)·M = 3 computed" in lines and f"1·{len(ids)}·48·4" in lines
    assert "(S - 1)/(M + S - 1) = 1/4 = 25.0%" in lines and "next token identical" in lines
    text = lesson_text(result)
    assert f"**[1, {len(ids)}, 48]**" in text and "**3 sends**" in text and "**25%**" in text
    figure = fig_pipeline(result)
    assert figure.layout.meta == {"view": "lab-pipeline", "step": None}
    micro = [trace for trace in figure.data if (trace.name or "").startswith("micro-batch ")]
    assert len(micro) == M and all(list(trace.text) == [f"m{m}"] * S for m, trace in enumerate(micro))
    assert [list(trace.base) for trace in micro] == [[run.slots[m].start_ms for run in result.runs] for m in range(M)]


@pytest.mark.parametrize("stages,microbatches,message", [
    (4, 2, r"S must be 1 to L = 3, not 4"), (0, 2, r"S must be 1 to L = 3, not 0"),
    (2, 17, r"The micro-batches M must be 1 to 16, not 17")])
def test_an_s_above_l_or_an_m_out_of_range_is_refused_before_any_process_starts(llama, ids, monkeypatch, stages,
                                                                                 microbatches, message):
    monkeypatch.setattr(pipeline_runner, "start_ranks", lambda *args, **kwargs: pytest.fail("a process was started"))
    with pytest.raises(ConfigError, match=message):
        run_pipeline(llama, ids, stages=stages, microbatches=microbatches)


def test_a_model_without_an_embedding_layers_and_norm_stack_is_refused_before_any_process_starts(monkeypatch):
    monkeypatch.setattr(pipeline_runner, "start_ranks", lambda *args, **kwargs: pytest.fail("a process was started"))
    gpt2 = tiny_model("gpt2")  # its base model is wte, h and ln_f
    with pytest.raises(ConfigError, match=r"This model's family \(gpt2\) is not split into stages here"):
        run_pipeline(gpt2, gpt2.tokenizer("Hello")["input_ids"], stages=2, microbatches=2)


def test_a_stage_that_dies_mid_run_is_a_clear_error_and_leaves_nothing_behind(llama, ids, monkeypatch):
    ports = recorded_ports(monkeypatch, pipeline_runner)
    monkeypatch.setenv(FAIL_STAGE_ENV, "1")  # stage 1 exits right after its first micro-batch
    before = children()
    with pytest.raises(ExplorerError, match=r"Stage [01] of 2 stopped mid-run: .*no process of the run is left "
                                            rf"\(exit codes by stage: 0: -?\d+, 1: {FAIL_EXIT_CODE}\)"):
        run_pipeline(llama, ids, stages=S, microbatches=M)
    assert children() - before == set() and listening(ports[0]) == []
