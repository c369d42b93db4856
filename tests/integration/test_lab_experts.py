"""Expert parallelism on a tiny random Qwen3-MoE whose every dimension is distinct (d = 48, E = 8
experts, k = 4 a token, f = 19, L = 3 with layer 1 dense, V = 101) over R = 2 real processes: rank 0
holds experts 0-3 and rank 1 experts 4-7 (by hand), the rows each expert computed are the unsharded
router's top-k counted here (transformers' own router logits), each all-to-all's off-rank bytes are
(pairs off-rank)·d·bytes, the logits are one process's and the greedy tokens `generate`'s; an R that
does not divide E is refused before any process starts, and a rank that dies mid-run is a clear error
that leaves no process or port behind."""

from __future__ import annotations

import os

import psutil
import pytest
import torch
from processes import children, listening, recorded_ports
from tiny_models import tiny_model

from explorer.errors import ConfigError, ExplorerError
from explorer.figures.lab.experts_lab import fig_experts
from explorer.lab.experts import lesson_text
from explorer.runner.lab import experts as experts_runner
from explorer.runner.lab.experts import run_experts
from explorer.runner.lab.experts_rank import FAIL_RANK_ENV
from explorer.runner.lab.processes import FAIL_EXIT_CODE

PROMPT = "Hello there, how are you?"
TOKENS = 4
D, E, K, F, L = 48, 8, 4, 19, 3
MOE_LAYERS = (0, 2)  # the tiny Qwen3-MoE keeps layer 1 dense


@pytest.fixture(scope="module")
def moe():
    return tiny_model("qwen3_moe", num_experts=E)


@pytest.fixture(scope="module")
def ids(moe):
    return moe.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]



@pytest.fixture(scope="module")
def before_run() -> set[int]:
    return children()


@pytest.fixture(scope="module")
def result(moe, ids, before_run):
    return run_experts(moe, ids, ranks=2, tokens=TOKENS)  # the module's one run of two processes


def oracle_grid(moe, ids: list[int], step: int, moe_index: int, tokens: tuple[int, ...]) -> list[list[int]]:
    """[source rank][expert] pairs of step `step`, from the unsharded model's router logits here: softmax,
    top-k, each token's pairs counted for the rank owning its row (rows 0..⌈N/2⌉ - 1 rank 0's)."""
    with torch.inference_mode():
        out = moe.model(input_ids=torch.tensor([ids + list(tokens[:-1])]), output_router_logits=True)
    logits = out.router_logits[moe_index]  # [T + N - 1, E]
    chosen = logits.softmax(-1).topk(K, dim=-1).indices
    rows = chosen[:len(ids)] if step == 0 else chosen[len(ids) + step - 1:len(ids) + step]
    owned = -(-len(rows) // 2)
    grid = [[0] * E for _ in range(2)]
    for token, experts in enumerate(rows.tolist()):
        for expert in experts:
            grid[token // owned][expert] += 1
    return grid


def test_the_run_is_two_processes_other_than_this_one(result, before_run):
    pids = [run.pid for run in result.runs]
    assert [run.rank for run in result.runs] == [0, 1]
    assert len(set(pids)) == 2 and os.getpid() not in pids and result.parent_pid == os.getpid()
    assert children() - before_run == set()  # both have ended
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


def test_each_rank_holds_its_half_of_the_experts(result):
    assert result.moe_layers == MOE_LAYERS and not result.random_weights
    assert [run.experts for run in result.runs] == [(0, 4), (4, 8)]
    for run in result.runs:
        assert dict(run.weights) == {"gate_up_proj": (4, 2 * F, D), "down_proj": (4, D, F), "router": (E, D)}


def test_the_rows_each_expert_computed_are_the_unsharded_routers_top_k(result, moe, ids):
    assert len(result.runs[0].steps) == TOKENS
    for step in range(TOKENS):
        for moe_index in range(len(MOE_LAYERS)):
            grid = oracle_grid(moe, ids, step, moe_index, result.reference_tokens)
            assert result.measured(step, moe_index) == grid
            assert sum(map(sum, grid)) == K * (len(ids) if step == 0 else 1)
    assert result.counts_match()


def test_each_all_to_all_sends_the_off_rank_pairs_rows_of_the_formulas_bytes(result, moe, ids):
    for step in range(TOKENS):
        n = len(ids) if step == 0 else 1
        owned = -(-n // 2)
        for moe_index, layer in enumerate(MOE_LAYERS):
            grid = oracle_grid(moe, ids, step, moe_index, result.reference_tokens)
            off = sum(grid[0][4:]) + sum(grid[1][:4])  # rank 0's pairs to experts 4-7, rank 1's to 0-3
            assert result.measured_bytes(step, moe_index) == off * D * 4 == result.formula_bytes(step, moe_index)
            assert result.measured_bytes(step, moe_index, "combine") == off * D * 4
            for run in result.runs:
                calls = [c for c in run.steps[step] if c.layer == layer]
                assert [c.label for c in calls] == ["dispatch", "combine", "gather"]
                dispatch, combine, gather = calls
                assert dispatch.send_rows == (sum(grid[run.rank][:4]), sum(grid[run.rank][4:]))
                assert dispatch.payload_bytes == sum(dispatch.send_rows) * D * 4 and dispatch.row_bytes == D * 4
                assert sum(combine.send_rows) == sum(grid[0][run.experts[0]:run.experts[1]]) + \
                    sum(grid[1][run.experts[0]:run.experts[1]])  # back: every row it computed
                assert gather.shape == (owned, D) and gather.payload_bytes == owned * D * 4
                assert all(c.ms > 0 for c in calls)


def test_the_logits_are_one_processs_and_the_tokens_generates(result, moe, ids):
    with torch.inference_mode():  # the oracle: transformers' own greedy generate, unsharded, here
        generated = moe.model.generate(torch.tensor([ids]), max_new_tokens=TOKENS, do_sample=False,
                                       min_new_tokens=TOKENS)[0, len(ids):].tolist()
    assert all(run.tokens == tuple(generated) for run in result.runs)
    assert result.reference_tokens == tuple(generated) and result.same_tokens
    assert 0 <= result.max_abs_diff < 1e-5 * max(1.0, result.max_abs_logit)


def test_the_table_lesson_and_figure_say_what_was_measured(result, ids):
    lines = "\n".join(result.lines())
    assert "rank 0: experts 0-3, gate_up_proj [4, 38, 48], down_proj [4, 48, 19], router [8, 48]" in lines
    assert "same as the one-process router's top-k (computed): yes" in lines and "greedy tokens identical" in lines
    text = lesson_text(result)
    assert "**experts 0-3**" in text and f"the {K * len(ids)} pairs of {len(ids)} tokens" in text
    loads = [sum(map(sum, (row[:4] for row in result.measured(0, 0)))),
             sum(map(sum, (row[4:] for row in result.measured(0, 0))))]  # the rows each rank's experts computed
    assert f"rank 0 {loads[0]}, rank 1 {loads[1]} of {K * len(ids)} rows" in text
    assert f"**{max(loads) / (K * len(ids) / 2):.2f}× an even share**" in text
    figure = fig_experts(result)
    assert figure.layout.meta == {"view": "lab-experts", "step": None}
    heat = next(trace for trace in figure.data if trace.type == "heatmap")
    assert [list(row) for row in heat.z] == result.measured(0, 0) and list(heat.x) == [f"e{e}" for e in range(E)]
    bars = [trace for trace in figure.data if trace.type == "bar"]
    assert [trace.name for trace in bars] == ["compute", "all-to-alls (ms, bytes sent off-rank)", "all-gather"]
    assert all(len(trace.y) == L for trace in bars)


@pytest.mark.parametrize("family,ranks,message", [
    ("qwen3_moe", 3, r"3 does not divide 8\. On this model R can be 1, 2, 4, 8\."),
    ("llama", 3, r"E = 8 experts .*3 does not divide 8")])  # a dense model: the tiny random MoE's E
def test_an_r_that_does_not_divide_e_is_refused_before_any_process_starts(
        moe, ids, monkeypatch, family, ranks, message):
    monkeypatch.setattr(experts_runner, "start_ranks", lambda *args: pytest.fail("a process was started"))
    loaded = moe if family == "qwen3_moe" else tiny_model("llama")
    with pytest.raises(ConfigError, match=message):
        run_experts(loaded, ids, ranks=ranks)


def test_a_rank_that_dies_mid_run_is_a_clear_error_and_leaves_nothing_behind(moe, ids, monkeypatch):
    ports = recorded_ports(monkeypatch, experts_runner)
    monkeypatch.setenv(FAIL_RANK_ENV, "1")  # rank 1 exits right after its prefill
    before = children()
    with pytest.raises(ExplorerError, match=r"Rank [01] of 2 stopped mid-run: .*no process of the run is left "
                                            rf"\(exit codes by rank: 0: -?\d+, 1: {FAIL_EXIT_CODE}\)"):
        run_experts(moe, ids, ranks=2, tokens=TOKENS)
    assert children() - before == set() and listening(ports[0]) == []


def test_a_dense_model_runs_the_tiny_random_moe_labelled_so_and_one_rank_sends_nothing_off_rank(ids):
    dense = tiny_model("llama")  # V = 101: the random MoE's vocabulary
    one = run_experts(dense, ids, ranks=1, tokens=2)
    assert one.random_weights and one.dims == {"experts E": 8, "per token k": 2, "expert width f": 32}
    assert one.moe_layers == (0, 1, 2, 3) and [run.experts for run in one.runs] == [(0, 8)]
    assert one.counts_match() and one.same_tokens and one.max_abs_diff < 1e-5 * max(1.0, one.max_abs_logit)
    assert all(one.measured_bytes(step, moe) == 0 == one.formula_bytes(step, moe)
               for step in range(2) for moe in range(4))
    shown = ["\n".join(one.lines()), lesson_text(one), fig_experts(one).layout.title.text.replace("<br>", " ")]
    assert all("a tiny Qwen3-MoE (random weights, seeded)" in text for text in shown)
