"""Every view drawn from a `Run` built by hand: no model, no torch, no session (`fig_<view>(data, options)`)."""

from __future__ import annotations

import numpy as np
import pytest
from figure_traces import TINY, hand_run

from explorer.analysis.hardware import get_hardware
from explorer.figures.attention import stack_attention
from explorer.figures.views import FIGURES, VIEWS, AttentionRows, ViewData, ViewOptions, draw
from explorer.run import Run

H100 = get_hardware("h100-sxm")


@pytest.fixture(scope="module")
def built():
    return hand_run(TINY, decode_steps=3)


def data_for(run: Run, attention, view: str, options: ViewOptions) -> ViewData:
    """What the handler fetches for `view` (`explorer.ui.views.view_data`), here by hand."""
    shown = run.step(options.step).step_index
    if view == "attention":
        blocks = [attention.probs(step, options.layer) for step in range(shown + 1)]
        return ViewData(run, attention=AttentionRows(stack_attention(blocks)))
    if view == "roofline":
        return ViewData(run, costs=tuple(run.costs(step) for step in sorted({0, shown})), hardware=H100)
    if view == "lens":
        return ViewData(run, lens=tuple(run.lens(step) for step in range(shown + 1)))
    return ViewData(run)


def test_every_view_draws_every_step_of_a_hand_built_run(built):
    run, attention = built
    assert VIEWS == tuple(FIGURES)
    for step in range(len(run.steps)):
        for layer in range(TINY.n_layers):
            options = ViewOptions(step, layer, False, "h100-sxm")
            for view in VIEWS:
                fig = draw(view, data_for(run, attention, view, options), options)
                assert fig.layout.meta == {"view": view, "step": step}, (view, step, layer)


def test_the_attention_view_draws_the_sources_blocks_stacked(built):
    run, attention = built
    options = ViewOptions(2, 1, True, "h100-sxm")
    fig = FIGURES["attention"](data_for(run, attention, "attention", options), options)
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
    fig = FIGURES["sampling"](ViewData(run), options)
    chosen = run.steps[1].sampling.token_id
    assert f"'{run.piece(chosen)}' (id {chosen})" in fig.layout.title.text


def test_the_roofline_view_says_so_where_the_cost_model_has_no_costs(built):
    run, _ = built
    fig = FIGURES["roofline"](ViewData(run), ViewOptions(0, 0, False, "h100-sxm"))
    assert fig.layout.meta["view"] == "roofline" and "does not know" in fig.layout.annotations[0].text


def test_a_run_is_append_only_and_refuses_a_step_out_of_order(built):
    run, _ = built
    assert isinstance(run.steps, tuple) and [s.step_index for s in run.steps] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="appended after"):
        run.append(run.steps[1], {}, "")
    with pytest.raises(AttributeError):
        run.steps[0].step_index = 5  # a frozen step
