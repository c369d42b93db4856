"""The sampling figure from hand-built sampling records: stages, removed tokens, each filter's cut over
the whole vocabulary, the draw, and a preview beside the step's own draw."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import plotly.graph_objects as go
import pytest

from explorer.figures.sampling import PREVIEW_COLOUR, same_sampling, sampling_figure, token_labels
from explorer.figures.theme import HIGHLIGHT_COLOUR, presenter_style, visible_piece
from explorer.trace import SamplingRecord, SamplingStage

VOCAB = 1200
# A permutation, so that a token's id is not its rank (an index mix-up shows).
RANKED_IDS = np.random.default_rng(7).permutation(VOCAB)
RAW = np.empty(VOCAB, np.float32)
RAW[RANKED_IDS] = np.linspace(9.0, -3.0, VOCAB, dtype=np.float32) - 0.4 * np.arange(VOCAB) ** 0.5
NEUTRAL = {"do_sample": False, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 1,
           "max_new_tokens": 8}
PIECES = {int(RANKED_IDS[0]): " Paris", int(RANKED_IDS[1]): " Paris", int(RANKED_IDS[2]): "\n"}


def piece(token_id: int) -> str:
    return PIECES.get(token_id, f"t{token_id}")


def filtered(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    return np.where(keep, logits, -np.inf).astype(np.float32)


def probs_of(logits: np.ndarray) -> np.ndarray:
    """Softmax among the survivors, computed independently of explorer.trace."""
    exp = np.where(np.isfinite(logits), np.exp(logits.astype(np.float64) - np.max(logits)), 0.0)
    return exp / exp.sum()


def top_k_stage(logits: np.ndarray, k: int) -> np.ndarray:
    return filtered(logits, np.isin(np.arange(VOCAB), np.argsort(-logits)[:k]))


def top_p_stage(logits: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of the most probable tokens whose cumulative probability reaches top_p."""
    order = np.argsort(-logits)
    cumulative = np.cumsum(probs_of(logits)[order])
    count = int(np.searchsorted(cumulative, top_p) + 1)
    return filtered(logits, np.isin(np.arange(VOCAB), order[:count]))


def record(settings: dict, names_and_logits: list[tuple[str, np.ndarray]], token_id: int) -> SamplingRecord:
    stages = [SamplingStage(name, logits) for name, logits in names_and_logits]
    return SamplingRecord(settings, stages, token_id, float(probs_of(stages[-1].logits)[token_id]))


def full_pipeline() -> SamplingRecord:
    """temperature 0.7 -> top-k 50 -> top-p 0.8 -> min-p 0.15, drawing the 2nd most probable token."""
    temperature = RAW / 0.7
    top_k = top_k_stage(temperature, 50)
    top_p = top_p_stage(top_k, 0.8)
    min_p = filtered(top_p, probs_of(top_p) >= 0.15 * probs_of(top_p).max())
    settings = {**NEUTRAL, "do_sample": True, "temperature": 0.7, "top_k": 50, "top_p": 0.8, "min_p": 0.15}
    stages = [("raw", RAW), ("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("min_p", min_p)]
    return record(settings, stages, int(RANKED_IDS[1]))


def top_k3() -> SamplingRecord:
    return record({**NEUTRAL, "do_sample": True, "top_k": 3}, [("raw", RAW), ("top_k", top_k_stage(RAW, 3))], int(RANKED_IDS[0]))


def greedy() -> SamplingRecord:
    return record(NEUTRAL, [("raw", RAW)], int(RANKED_IDS[0]))


def top_p_keeping(count: int, token_rank: int = 1) -> SamplingRecord:
    """top-p alone, its threshold set between the cumulative probabilities of ranks `count` - 1 and
    `count`, so that it keeps exactly `count` tokens; draws the token of rank `token_rank`."""
    cumulative = np.cumsum(probs_of(RAW)[RANKED_IDS])
    top_p = float((cumulative[count - 2] + cumulative[count - 1]) / 2) if count > 1 else float(cumulative[0] / 2)
    stage = top_p_stage(RAW, top_p)
    assert int(np.isfinite(stage).sum()) == count
    return record({**NEUTRAL, "do_sample": True, "top_p": top_p}, [("raw", RAW), ("top_p", stage)],
                  int(RANKED_IDS[token_rank - 1]))


def trace(fig, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, [t.name for t in fig.data]
    return matches[0]


def test_top_k_3_removes_exactly_the_fourth_and_later_tokens():
    fig = sampling_figure(top_k3(), piece, 2, top_n=10)
    raw, top_k = trace(fig, "raw"), trace(fig, "top-k")
    assert list(top_k.customdata) == [int(i) for i in RANKED_IDS[:10]]
    expected = probs_of(top_k_stage(RAW, 3))[RANKED_IDS[:10]]
    np.testing.assert_allclose(top_k.y, expected, rtol=1e-5)
    assert list(top_k.text) == [""] * 3 + ["×"] * 7
    assert all("removed by top-k" in h for h in top_k.hovertext[3:])
    assert not any("removed" in h for h in top_k.hovertext[:3])
    assert list(raw.text) == [""] * 10
    np.testing.assert_allclose(raw.y, probs_of(RAW)[RANKED_IDS[:10]], rtol=1e-5)


def test_every_stage_trace_is_the_softmax_among_that_stages_survivors():
    rec = full_pipeline()
    fig = sampling_figure(rec, piece, 5, top_n=20)
    assert [t.name for t in fig.data[:5]] == ["raw", "temperature", "top-k", "top-p", "min-p"]
    ids = [int(i) for i in RANKED_IDS[:20]]
    for bars, stage in zip(fig.data[:5], rec.stages, strict=True):
        assert bars.y.dtype == np.float32
        np.testing.assert_allclose(bars.y, probs_of(stage.logits)[ids], rtol=1e-5, atol=1e-7)
        assert [text == "×" for text in bars.text] == list(~np.isfinite(stage.logits[ids]))


def test_a_token_is_marked_with_the_stage_that_first_removed_it():
    rec = full_pipeline()
    kept_by_top_p = int(rec.stages[3].kept.sum())
    kept_by_min_p = int(rec.stages[4].kept.sum())
    assert kept_by_min_p < kept_by_top_p < 20  # the figure shows tokens removed by each
    fig = sampling_figure(rec, piece, 5, top_n=20)
    min_p = trace(fig, "min-p")
    assert "removed by min-p" in min_p.hovertext[kept_by_min_p]
    assert "removed by top-p" in min_p.hovertext[kept_by_top_p]
    assert "removed by top-p" in trace(fig, "top-p").hovertext[kept_by_top_p]
    assert "removed" not in trace(fig, "top-k").hovertext[kept_by_top_p]


def test_the_drawn_token_is_named_and_always_shown():
    rec = replace(top_k3(), token_id=int(RANKED_IDS[2]))  # ranked 3rd, outside a top_n of 2
    fig = sampling_figure(rec, piece, 2, top_n=2)
    assert list(trace(fig, "raw").customdata) == [int(RANKED_IDS[0]), int(RANKED_IDS[2])]
    assert f"drawn '↵' (id {rec.token_id}), p = {rec.token_prob:.2f}" in fig.layout.title.text
    assert list(trace(fig, "drawn").customdata) == [rec.token_id] and list(trace(fig, "drawn").x) == [3]
    final = trace(fig, "final")
    assert list(final.customdata) == [int(RANKED_IDS[0]), int(RANKED_IDS[2])]
    assert list(final.marker.color) == ["#56B4E9", HIGHLIGHT_COLOUR]


def test_final_panel_shows_the_renormalised_survivors_and_their_count():
    rec = full_pipeline()
    kept = int(rec.final.kept.sum())
    fig = sampling_figure(rec, piece, 5)
    assert f"one of the {kept} tokens the filters kept" in fig.layout.title.text
    assert any(f"all {kept} kept, renormalised" in a.text for a in fig.layout.annotations)
    final = trace(fig, "final")
    assert len(final.y) == kept
    assert final.y.sum() == pytest.approx(1.0, rel=1e-5)
    assert final.marker.color[1] == HIGHLIGHT_COLOUR  # the drawn token is the 2nd most probable


def test_each_filter_cut_is_drawn_at_its_survivor_count_over_the_whole_vocabulary():
    rec = full_pipeline()
    fig = sampling_figure(rec, piece, 5, top_n=5)  # fewer bars than any filter keeps
    counts = [int(np.isfinite(stage.logits).sum()) for stage in rec.stages]  # raw, temperature, top-k, top-p, min-p
    assert counts[:3] == [VOCAB, VOCAB, 50] and counts[2] > counts[3] > counts[4] > 5
    for label, entering, kept in (("top-k", VOCAB, counts[2]), ("top-p", counts[2], counts[3]),
                                  ("min-p", counts[3], counts[4])):
        assert list(trace(fig, f"{label} keeps {kept}").x) == [kept + 0.5, kept + 0.5]
        band = trace(fig, f"removed by {label}")
        assert min(band.x) == kept + 0.5 and max(band.x) >= entering
        assert f"removed {entering - kept:,} tokens" in band.hovertemplate
        assert any(a.text == f"{label} keeps {kept}" for a in fig.layout.annotations)
    assert any(f"{VOCAB:,} tokens → top-k 50 → top-p {counts[3]} → min-p {counts[4]}" in a.text
               for a in fig.layout.annotations)
    assert all(text == "" for text in trace(fig, "top-p").text)  # the five bars shown: all kept


def test_a_top_p_cut_past_the_bars_shown_is_counted_and_drawn():
    rec = top_p_keeping(32)
    fig = sampling_figure(rec, piece, 2)  # the top 20 bars: none removed
    assert all(text == "" for text in trace(fig, "top-p").text)
    assert list(trace(fig, "top-p keeps 32").x) == [32.5, 32.5]
    assert any(a.text == "top-p keeps 32" for a in fig.layout.annotations)
    assert any("top 20 of the 32 kept" in a.text for a in fig.layout.annotations)
    kept = trace(fig, "kept")
    assert list(kept.x) == list(range(1, 33))  # every kept rank on the curve, none past the cut


def test_top_p_keeping_one_token():
    rec = top_p_keeping(1)
    fig = sampling_figure(rec, piece, 2)
    assert list(trace(fig, "top-p keeps 1").x) == [1.5, 1.5]
    assert "the only token the filters kept" in fig.layout.title.text
    assert list(trace(fig, "final").customdata) == [rec.token_id]
    assert fig.layout.xaxis3.range[1] >= 7  # one bar is a bar, not the panel's width


def test_cumulative_curve_of_the_distribution_entering_top_p():
    rec = full_pipeline()
    fig = sampling_figure(rec, piece, 5)
    curve = trace(fig, "cumulative probability")
    assert np.all(np.diff(curve.y) >= 0)
    assert curve.y[-1] == pytest.approx(1.0, abs=1e-6)
    assert curve.x[0] == 1 and curve.x[-1] == VOCAB
    assert curve.y[0] == pytest.approx(rec.stages[2].probs.max(), rel=1e-5)  # after top-k, before top-p
    kept = int(rec.stages[3].kept.sum())
    at = dict(zip(curve.x, curve.y, strict=True))
    assert at[kept] >= 0.8 > at[kept - 1]  # top-p's rule, read off the curve at its cut
    assert at[50] == pytest.approx(1.0, abs=1e-6)  # entering top-p: top-k's 50 hold everything
    assert list(trace(fig, "top-p = 0.8").y) == pytest.approx([0.8, 0.8])
    assert fig.layout.yaxis2.title.text == "cumulative p, entering top-p"


def test_without_top_p_the_curve_is_the_distribution_the_filters_start_from():
    fig = sampling_figure(top_k3(), piece, 2)
    assert not [t for t in fig.data if t.name.startswith("top-p =")]
    assert list(trace(fig, "kept").x) == [1, 2, 3]
    curve = trace(fig, "cumulative probability")
    np.testing.assert_allclose(curve.y[:3], np.cumsum(probs_of(RAW)[RANKED_IDS[:3]]), rtol=1e-5)
    assert fig.layout.yaxis2.title.text == "cumulative p, raw softmax"


def test_greedy_says_argmax_of_the_raw_logits():
    fig = sampling_figure(greedy(), piece, 0)
    assert "greedy: argmax of the raw logits" in fig.layout.title.text
    assert f"(id {int(RANKED_IDS[0])})" in fig.layout.title.text
    assert [t.name for t in fig.data if t.type == "bar"] == ["raw", "final"]
    assert not [t for t in fig.data if " keeps " in t.name or t.name.startswith("removed by")]
    mark = trace(fig, "drawn")
    assert list(mark.x) == [1] and list(mark.text) == ["argmax"]


def test_the_numbers_are_labelled_measured():
    fig = sampling_figure(full_pipeline(), piece, 5)
    assert f"transformers' logits processors from this step's measured logits, over all {VOCAB:,} tokens" \
        in fig.layout.title.text
    assert "measured" in fig.layout.yaxis.title.text and "measured" in fig.layout.yaxis3.title.text


def preview_of(step: SamplingRecord) -> SamplingRecord:
    """Other settings on the same raw logits (temperature 2, top-k 200), drawing rank 40."""
    temperature = RAW / 2.0
    top_k = top_k_stage(temperature, 200)
    settings = {**NEUTRAL, "do_sample": True, "temperature": 2.0, "top_k": 200, "seed": 9}
    return record(settings, [("raw", RAW), ("temperature", temperature), ("top_k", top_k)], int(RANKED_IDS[39]))


def test_a_preview_is_titled_so_and_keeps_the_steps_own_draw_marked():
    own = full_pipeline()
    preview = preview_of(own)
    fig = sampling_figure(preview, piece, 5, own=own)
    title = fig.layout.title.text
    assert title.startswith("PREVIEW (not what the step did): temperature 2, top-k 200 on step 5's measured logits")
    assert f"would keep 200 tokens; a draw with seed 9 gives 't{preview.token_id}'" in title
    assert f"the step drew ' Paris' (id {own.token_id}, orange), p = {own.token_prob:.2f}" in title
    assert "(temperature 0.7, top-k 50, top-p 0.8, min-p 0.15); here p = " in title
    assert list(trace(fig, "drawn").customdata) == [own.token_id]  # the step's token, from its own record
    assert list(trace(fig, "preview draw").customdata) == [preview.token_id]
    assert list(trace(fig, "preview draw").x) == [40]
    for name in ("raw", "final"):  # both tokens in the bars, the step's in orange, the preview's dark
        ids = list(trace(fig, name).customdata)
        assert own.token_id in ids and preview.token_id in ids
    final = trace(fig, "final")
    colours = dict(zip(final.customdata, final.marker.color, strict=True))
    assert colours[own.token_id] == HIGHLIGHT_COLOUR and colours[preview.token_id] == PREVIEW_COLOUR
    assert [a.text for a in fig.layout.annotations if a.text in ("the step drew", "preview draw")] == \
        ["the step drew", "preview draw"] * 2  # in (a) and in (c)
    np.testing.assert_allclose(trace(fig, "top-k").y, probs_of(preview.final.logits)[list(trace(fig, "top-k").customdata)],
                               rtol=1e-5, atol=1e-7)  # the panels show the preview's stages


def test_a_preview_that_removes_the_steps_token_says_so():
    own = replace(top_k3(), token_id=int(RANKED_IDS[2]))
    preview = record({**NEUTRAL, "do_sample": True, "top_k": 1}, [("raw", RAW), ("top_k", top_k_stage(RAW, 1))],
                     int(RANKED_IDS[0]))
    fig = sampling_figure(preview, piece, 2, own=own)
    assert "this preview's top-k removes it" in fig.layout.title.text
    assert own.token_id in list(trace(fig, "top-k").customdata)  # still shown in (a), marked removed
    assert own.token_id not in list(trace(fig, "final").customdata)
    assert list(trace(fig, "drawn").customdata) == [own.token_id]


def test_settings_that_choose_as_the_step_did_are_the_same_sampling():
    sampled = {**NEUTRAL, "do_sample": True, "temperature": 0.7, "top_p": 0.9, "seed": 3}
    assert same_sampling(sampled, dict(sampled))
    assert same_sampling({**sampled, "max_new_tokens": 99}, sampled)  # not part of the draw
    assert same_sampling({**NEUTRAL, "temperature": 1.5, "seed": 8}, NEUTRAL)  # greedy ignores the rest
    assert not same_sampling({**sampled, "seed": 2**63 - 1}, {**sampled, "seed": 2**63 - 2})
    for change in ({"temperature": 0.71}, {"top_k": 5}, {"top_p": 0.95}, {"min_p": 0.1}, {"seed": 4},
                   {"do_sample": False}):
        assert not same_sampling({**sampled, **change}, sampled), change


def test_pieces_show_whitespace_and_duplicates_carry_their_id():
    assert visible_piece(" the\n") == "␣the↵"
    assert visible_piece("") == "∅"
    labels = token_labels([5, 9, 3], {5: " Paris", 9: " Paris", 3: "x"}.get)
    assert labels == {5: "␣Paris (5)", 9: "␣Paris (9)", 3: "x"}
    raw = trace(sampling_figure(full_pipeline(), piece, 5), "raw")
    assert raw.x[:3] == (f"␣Paris ({RANKED_IDS[0]})", f"␣Paris ({RANKED_IDS[1]})", "↵")


def test_meta_axes_height_and_payload():
    fig = sampling_figure(full_pipeline(), piece, 5)
    assert fig.layout.meta == {"view": "sampling", "step": 5}
    assert fig.layout.xaxis.type == "category" and fig.layout.xaxis3.type == "category"
    assert fig.layout.xaxis2.type == "log"
    assert fig.layout.xaxis2.title.text == "rank by raw logit (1 = most probable), log scale"
    assert fig.layout.height <= 640
    assert len(fig.to_json()) < 40_000


def test_a_full_size_vocabulary_stays_small_and_presenter_style_applies():
    vocab = 151_936  # Qwen's
    raw = np.random.default_rng(3).normal(0, 3, vocab).astype(np.float32)
    temperature = raw / 1.3
    keep = np.isin(np.arange(vocab), np.argsort(-temperature)[:50])
    top_k = filtered(temperature, keep)
    own = SamplingRecord({**NEUTRAL, "do_sample": True, "temperature": 1.3, "top_k": 50},
                         [SamplingStage("raw", raw), SamplingStage("temperature", temperature),
                          SamplingStage("top_k", top_k)], int(np.argmax(raw)), 0.1)
    preview = SamplingRecord({**NEUTRAL, "do_sample": True}, [SamplingStage("raw", raw)], int(np.argmin(raw)), 0.0)
    for fig in (sampling_figure(own, lambda i: f" w{i}", 3), sampling_figure(preview, lambda i: f" w{i}", 3, own=own)):
        assert len(fig.to_json()) < 300_000
        assert trace(fig, "cumulative probability").x[-1] == vocab
        title_y = fig.layout.title.y
        big = presenter_style(go.Figure(fig))
        assert big.layout.title.font.size > fig.layout.title.font.size
        lines_added = big.layout.title.text.count("<br>") - fig.layout.title.text.count("<br>")
        # a title too long for the larger text wraps into added lines, anchored at the top, the figure
        # taller by as much; one that fits keeps its place
        assert big.layout.height >= round(1.5 * fig.layout.height)
        assert (big.layout.height > round(1.5 * fig.layout.height)) == (lines_added > 0)
        assert big.layout.title.y == title_y if lines_added == 0 else 0 < big.layout.title.y < 1
    assert list(trace(fig, "preview draw").x) == [vocab]  # the least probable token, drawn at the last rank
