"""Every view drawn from a `Run` built by hand through the view table: no model, no torch, no session
(each row's fetch, then its `fig_<view>(data, options)`)."""

from __future__ import annotations

import numpy as np
import pytest
from figure_traces import TINY, hand_run

from explorer.analysis.hardware import get_hardware
from explorer.figures.attention import stack_attention
from explorer.figures.view_types import (
    AttentionData, AttentionRows, RooflineData, RunData, SamplingData, ViewOptions, ViewServices, ViewSources,
)
from explorer.figures.views import VIEW_TABLE, VIEWS, draw, render
from explorer.run import Run

H100 = get_hardware("h100-sxm")


def no_runner(*_):
    raise AssertionError("a hand-built run's views asked the runner")


# The runner's services as a front end without torch would lend them: catalogue machines only.
CATALOGUE_ONLY = ViewServices(resolve_hardware=lambda key, device: get_hardware(key), measured_roofs=no_runner,
                              hardware_key=lambda device: "this-machine", resample=no_runner)


@pytest.fixture(scope="module")
def built():
    return hand_run(TINY, decode_steps=3)


def data_for(run: Run, attention, view: str, options: ViewOptions) -> RunData:
    """What the view table fetches for `view`, here built by hand."""
    shown = run.step(options.step).step_index
    if view == "attention":
        blocks = [attention.probs(step, options.layer) for step in range(shown + 1)]
        return AttentionData(run, rows=AttentionRows(stack_attention(blocks)))
    if view == "roofline":
        return RooflineData(run, costs=tuple(run.costs(step) for step in sorted({0, shown})), hardware=H100)
    return VIEW_TABLE[view].data(run)


def test_every_view_draws_every_step_of_a_hand_built_run_through_the_view_table(built):
    run, attention = built
    sources = ViewSources(attention, CATALOGUE_ONLY)
    assert VIEWS == tuple(VIEW_TABLE) == ("forward", "journey", "attention", "kv_cache", "sampling", "roofline", "lens")
    for step in range(len(run.steps)):
        for layer in range(TINY.n_layers):
            options = ViewOptions(step, layer, False, "h100-sxm")
            for view, row in VIEW_TABLE.items():
                data = row.fetch(run, sources, options)
                assert type(data) is row.data, view
                fig = render(run, sources, options, view)
                assert fig.layout.meta == {"view": view, "step": step}, (view, step, layer)
                assert fig.to_json() == draw(view, data, options).to_json()


def test_the_fetched_data_is_what_the_view_needs(built):
    run, attention = built
    sources = ViewSources(attention, CATALOGUE_ONLY)
    options = ViewOptions(2, 1, False, "h100-sxm")
    rows = VIEW_TABLE["attention"].fetch(run, sources, options).rows
    np.testing.assert_array_equal(rows.values, data_for(run, attention, "attention", options).rows.values)
    roofline = VIEW_TABLE["roofline"].fetch(run, sources, options)
    assert roofline.hardware == H100 and not roofline.measured  # the run ran on no catalogue machine
    assert roofline.costs == (run.costs(0), run.costs(2)) and roofline.executed == ()
    lens = VIEW_TABLE["lens"].fetch(run, sources, options).lens
    assert lens == tuple(run.lens(step) for step in range(3))


def test_the_attention_view_draws_the_sources_blocks_stacked(built):
    run, attention = built
    options = ViewOptions(2, 1, True, "h100-sxm")
    fig = VIEW_TABLE["attention"].fig(data_for(run, attention, "attention", options), options)
    n = run.steps[2].context_length
    mean = np.zeros((n, n), np.float32)
    prefill = attention.probs(0, 1).mean(0)
    mean[: len(prefill), : len(prefill)] = prefill
    for step in (1, 2):
        row = attention.probs(step, 1).mean(0)[0]
        mean[n - 3 + step, : len(row)] = row
    drawn = np.asarray(fig.data[0].z, np.float32)  # NaN above the causal diagonal: not drawn
    np.testing.assert_allclose(np.nan_to_num(drawn), mean, atol=1e-6)
    assert np.isnan(drawn).sum() == n * (n - 1) // 2


def test_the_sampling_view_names_the_drawn_token_by_the_runs_piece(built):
    run, _ = built
    options = ViewOptions(1, 0, False, "h100-sxm")
    fig = VIEW_TABLE["sampling"].fig(SamplingData(run), options)
    chosen = run.steps[1].sampling.token_id
    assert f"'{run.piece(chosen)}' (id {chosen})" in fig.layout.title.text


def test_the_roofline_view_says_so_where_the_cost_model_has_no_costs(built):
    run, _ = built
    fig = VIEW_TABLE["roofline"].fig(RooflineData(run), ViewOptions(0, 0, False, "h100-sxm"))
    assert fig.layout.meta["view"] == "roofline" and "does not know" in fig.layout.annotations[0].text


def test_a_run_is_append_only_and_refuses_a_step_out_of_order(built):
    run, _ = built
    assert isinstance(run.steps, tuple) and [s.step_index for s in run.steps] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="appended after"):
        run.append(run.steps[1], {}, "")
    with pytest.raises(AttributeError):
        run.steps[0].step_index = 5  # a frozen step
