"""The check that R divides every split tensor parallelism makes, on the embedded model's sizes (9 query
heads, 3 KV heads, d_ff 1536) and others: it passes the R that divide and names what the others fail."""

from __future__ import annotations

import pytest

from explorer.errors import ConfigError
from explorer.analysis.tensor_parallel import check_ranks_divide, split_dims

SMOLLM2 = {"num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536, "hidden_size": 576}


def test_the_embedded_models_splits_take_r_3_and_refuse_r_2_naming_the_heads():
    assert split_dims(SMOLLM2) == {"query heads h_q": 9, "KV heads h_kv": 3, "MLP width d_ff": 1536}
    check_ranks_divide(SMOLLM2, 3)
    check_ranks_divide(SMOLLM2, 1)
    with pytest.raises(ConfigError, match=r"R = 2 ranks .* 2 does not divide the query heads h_q \(9\) nor the KV "
                                          r"heads h_kv \(3\)\. On this model R can be 1, 3\.$"):
        check_ranks_divide(SMOLLM2, 2)


@pytest.mark.parametrize("ranks,failing", [(4, "the query heads h_q (9) nor the KV heads h_kv (3)"),
                                           (5, "the query heads h_q (9) nor the KV heads h_kv (3) nor the MLP")])
def test_each_dimension_r_fails_is_named(ranks, failing):
    with pytest.raises(ConfigError, match="does not divide " + failing.replace("(", r"\(").replace(")", r"\)")):
        check_ranks_divide(SMOLLM2, ranks)
    with pytest.raises(ConfigError, match="at least one rank, not R = 0"):
        check_ranks_divide(SMOLLM2, 0)


def test_a_model_without_kv_heads_splits_its_query_heads_twice():
    assert split_dims({"num_attention_heads": 12, "intermediate_size": 3072})["KV heads h_kv"] == 12
