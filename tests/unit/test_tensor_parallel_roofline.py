"""Tensor parallelism in the roofline: one rank's shard, the collectives on a link by hand, and the
CLI's lesson for Llama-3-70B at R = 8 on NVLink 4 (decode latency-bound, prefill bandwidth-bound)."""

from __future__ import annotations

import pytest

from explorer.analysis.hardware import get_hardware, get_link
from explorer.analysis.records import Step
from explorer.analysis.roofline import step_roofline
from explorer.analysis.spec import ModelSpec
from explorer.analysis.tensor_parallel import rank_spec, tensor_parallel_step
from explorer.cli import main
from explorer.config import load_hf_config
from explorer.errors import ConfigError

LLAMA_70B = ModelSpec.from_hf_config(load_hf_config("llama-3-70b"))


def test_a_rank_holds_one_rth_of_the_heads_d_ff_and_vocabulary():
    shard = rank_spec(LLAMA_70B, 8)
    assert (shard.n_heads, shard.n_kv_heads, shard.intermediate_size, shard.vocab_size) == (8, 1, 3584, 16032)
    assert (shard.hidden_size, shard.n_layers, shard.head_dim) == (8192, 80, 128)
    assert rank_spec(LLAMA_70B, 1) == LLAMA_70B


def test_an_r_that_does_not_divide_is_refused_naming_the_dimension():
    with pytest.raises(ConfigError, match=r"3 does not divide the query heads h_q \(64\) nor the KV heads h_kv \(8\)"):
        rank_spec(LLAMA_70B, 3)
    with pytest.raises(ConfigError, match=r"16 does not divide the KV heads h_kv \(8\)\. On this model R can be "
                                          r"1, 2, 4, 8\."):
        rank_spec(LLAMA_70B, 16)


def test_llama_70b_decode_and_prefill_collectives_by_hand():
    """Decode B = T = 1: an all-reduce of 8192·2 B = 16 KiB, 14 steps of 0.6 µs = 8.4 µs + 2·7/8 · 16384 /
    450e9 s = 0.0637 µs: latency-bound; (2L + 1) = 161 of them. Prefill T = 2048: 32 MiB, 2·7/8 · 2^25 /
    450e9 = 130.5 µs of bandwidth against 8.4 µs: bandwidth-bound."""
    h100, nvlink = get_hardware("h100-sxm"), get_link("nvlink4")
    decode = tensor_parallel_step(LLAMA_70B, Step.decode(4096), h100, nvlink, 8)
    assert decode.collectives.all_reduces == 161 and decode.collectives.all_reduce.payload_bytes == 16384
    assert decode.collectives.all_reduce.seconds == pytest.approx(8.4e-6 + 1.75 * 16384 / 450e9)
    assert decode.collectives.all_reduce.bound == "latency"
    assert decode.collectives.gather.payload_bytes == 128256 * 2
    assert decode.operators_s == step_roofline(rank_spec(LLAMA_70B, 8), Step.decode(4096), h100).time_lower_bound_s
    prefill = tensor_parallel_step(LLAMA_70B, Step.prefill(2048), h100, nvlink, 8)
    assert prefill.collectives.all_reduce.payload_bytes == 32 << 20
    assert prefill.collectives.all_reduce.bound == "bandwidth"
    assert prefill.collectives.all_reduce.bandwidth_s == pytest.approx(1.75 * 2**25 / 450e9)
    assert prefill.collectives.seconds == pytest.approx(161 * prefill.collectives.all_reduce.seconds
                                                 + prefill.collectives.gather.seconds)
    assert 0 < decode.communication_share < 1 and prefill.step_s == prefill.operators_s + prefill.collectives.seconds


def test_the_cli_prints_latency_bound_decode_and_bandwidth_bound_prefill(capsys):
    def collectives(*argv):
        assert main(["roofline", "--config", "llama-3-70b", "--tp", "8", "--link", "nvlink4", *argv]) == 0
        text = capsys.readouterr().out
        assert "one rank of R = 8: h_q 8, h_kv 1, d_ff 3584, V 16032" in text
        row = next(line for line in text.splitlines() if line.startswith("all-reduce x161 (2L + 1)"))
        return row.split()[5:9], text

    decode, text = collectives()
    assert decode == ["16", "KiB", "8.46", "latency"]
    assert "the collectives: 21% of the step" in text
    prefill, text = collectives("--stage", "prefill", "--tokens", "2048")
    assert prefill == ["32", "MiB", "138.89", "bandwidth"]
    assert "the collectives: 30% of the step" in text


def test_the_cli_refuses_a_tp_that_does_not_divide_and_a_link_without_tp(capsys):
    assert main(["roofline", "--config", "llama-3-70b", "--tp", "3"]) != 0
    assert "3 does not divide the query heads h_q (64)" in capsys.readouterr().err
    assert main(["roofline", "--config", "llama-3-70b", "--link", "pcie5"]) == 2
    assert "--link is for --tp above 1" in capsys.readouterr().err


def test_the_roofline_what_if_draws_the_collectives_beside_one_ranks_operators():
    """The notebook's (and the app's) roofline under Scenario(tp=8): the operators are one rank's, a bar
    per stage holds the 161 all-reduces' time on NVLink 4, and the title says each step's share."""
    from explorer.analysis.measured import Scenario
    from explorer.notebook import Explorer

    shapes = Explorer.load(config="llama-3-70b")
    shapes.prefill(prompt_tokens=16)
    shapes.decode(1)
    figure = shapes.figure("roofline", hardware="h100-sxm", what_if=Scenario(tp=8, tokens=2048, context=4096))
    bars = {trace.name: trace for trace in figure.data if "collectives" in trace.name}
    decode = bars["decode collectives on nvlink4"]
    assert list(decode.y) == ["all-reduce ×161 (TP 8)", "all-gather of logits (TP 8)"]
    assert decode.x[0] == pytest.approx(161 * (8.4 + 1.75 * 16384 / 450e9 * 1e6), rel=1e-5)
    assert "latency-bound" in decode.hovertext[0]
    assert "bandwidth-bound" in bars["prefill collectives on nvlink4"].hovertext[0]
    title = figure.layout.title.text
    assert "TP = 8 on nvlink4" in title and "decode ≥ 5.252 ms" in title
    assert "Collectives on NVLink 4 (H100 SXM, 18 links): decode + 1.367 ms (21% of the step, all-reduces " \
           "latency-bound), prefill + 22.37 ms (30% of the step, all-reduces bandwidth-bound)" in title
    with pytest.raises(ConfigError, match=r"does not divide the query heads h_q \(64\)"):
        shapes.figure("roofline", hardware="h100-sxm", what_if=Scenario(tp=3))


def test_the_what_if_menus_read_the_tp_degree_and_its_link():
    from explorer.analysis.measured import Scenario
    from explorer.ui.handlers.controls import AS_RUN, scenario_from

    keep = (AS_RUN,) * 6 + (False,) * 3
    assert scenario_from(*keep, "8", "pcie5") == Scenario(tp=8, link="pcie5")
    assert scenario_from(*keep, AS_RUN, "bogus") == Scenario() and not Scenario(link="ib-ndr").active
    assert not Scenario(tp=1).active and Scenario(tp=2).changes() == ["TP = 2 on nvlink4"]


@pytest.mark.parametrize("argv", [("--stage", "decode", "--context", "4096"),
                                  ("--stage", "prefill", "--tokens", "2048")])
def test_the_roofline_page_shows_the_lines_the_cli_prints(capsys, argv):
    """docs/views/roofline.md quotes the CLI's collectives for Llama-3-70B at R = 8 on NVLink 4: the
    same lines, so the page cannot drift from the cost model."""
    from docs_code import ROOT

    assert main(["roofline", "--config", "llama-3-70b", "--tp", "8", "--link", "nvlink4", *argv]) == 0
    printed = capsys.readouterr().out.split("collective  ")[1].splitlines()
    page = (ROOT / "docs/views/roofline.md").read_text(encoding="utf-8")
    for line in ["collective  " + printed[0], *printed[1:]]:
        assert line in page
