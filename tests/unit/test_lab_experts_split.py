"""Expert parallelism's sizes and sums without processes: E, k and f read from Mixtral's and Qwen3-MoE's
config fields, R refused where it does not divide E, and a hand-routed result's counts and off-rank
bytes (4 tokens, E = 4 experts, k = 2, R = 2, d = 6, float32)."""

from __future__ import annotations

import pytest

from explorer.errors import ConfigError
from explorer.lab.experts import ExpertParallelResult, ExpertRankRun, check_ranks_divide, moe_dims

MIXTRAL = {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 14336}
QWEN3_MOE = {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144}
# token -> its k = 2 experts; rank 0 owns tokens 0-1 and holds experts 0-1, rank 1 tokens 2-3 and experts 2-3
ROUTING = [[0, 2], [1, 0], [3, 2], [0, 3]]


def test_the_experts_are_read_from_either_familys_fields():
    assert moe_dims(MIXTRAL) == {"experts E": 8, "per token k": 2, "expert width f": 14336}
    assert moe_dims(QWEN3_MOE) == {"experts E": 128, "per token k": 8, "expert width f": 768}


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_an_r_that_divides_e_passes(ranks):
    check_ranks_divide(8, ranks)


@pytest.mark.parametrize("experts,ranks,message", [
    (8, 3, r"R = 3 ranks .* 3 does not divide 8\. On this model R can be 1, 2, 4, 8\.$"),
    (7, 2, r"2 does not divide 7\. On this model R can be 1, 7\.$"),
    (8, 0, r"at least one rank, not R = 0")])
def test_an_r_that_does_not_divide_e_is_refused_naming_those_that_do(experts, ranks, message):
    with pytest.raises(ConfigError, match=message):
        check_ranks_divide(experts, ranks)


def hand_routed() -> ExpertParallelResult:
    # rank 0 received: from itself expert 0 twice, expert 1 once; from rank 1 expert 0 once
    # rank 1 received: from rank 0 expert 2 once; from itself expert 2 once, expert 3 twice
    runs = tuple(ExpertRankRun(rank=q, pid=100 + q, experts=(2 * q, 2 * q + 2), weights=(), steps=((),),
                               received=(received,), layer_ms=((1.0,),), step_ms=(1.0,), tokens=())
                 for q, received in enumerate(([[[2, 1], [1, 0]]], [[[1, 0], [1, 2]]])))
    return ExpertParallelResult(
        ranks=2, dims={"experts E": 4, "per token k": 2, "expert width f": 5}, layers=1, hidden=6, moe_layers=(0,),
        prompt_tokens=4, element_bytes=4, model="hand", random_weights=False, parent_pid=1, runs=runs,
        routing=((ROUTING,),), reference_tokens=(), max_abs_diff=0.0, max_abs_logit=1.0, pieces=(), dtype="float32")


def test_a_hand_routed_steps_counts_and_off_rank_bytes():
    result = hand_routed()
    assert result.routed(0, 0) == [[2, 1, 1, 0], [1, 0, 1, 2]] == result.measured(0, 0)
    assert result.per_expert(0, 0) == [3, 1, 2, 2] and result.counts_match()
    # off-rank pairs: rank 0's token 0 -> expert 2, rank 1's token 3 -> expert 0: 2 pairs of 6 float32s
    assert result.formula_bytes(0, 0) == 2 * 6 * 4
