"""The sampling figure from hand-built sampling records: stages, removed tokens, the top-p cut, the draw."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from explorer.figures.sampling import sampling_figure, token_labels
from explorer.figures.theme import HIGHLIGHT_COLOUR, visible_piece
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
    final = trace(fig, "final")
    assert list(final.customdata) == [int(RANKED_IDS[0]), int(RANKED_IDS[2])]
    assert list(final.marker.color) == ["#56B4E9", HIGHLIGHT_COLOUR]


def test_final_panel_shows_the_renormalised_survivors_and_their_count():
    rec = full_pipeline()
    kept = int(rec.final.kept.sum())
    fig = sampling_figure(rec, piece, 5)
    assert f"kept {kept} of 1,200" in fig.layout.title.text
    assert any(f"kept {kept} of 1,200" in a.text for a in fig.layout.annotations)
    final = trace(fig, "final")
    assert len(final.y) == kept
    assert final.y.sum() == pytest.approx(1.0, rel=1e-5)
    assert final.marker.color[1] == HIGHLIGHT_COLOUR  # the drawn token is the 2nd most probable


def test_cumulative_curve_of_the_distribution_entering_top_p():
    rec = full_pipeline()
    fig = sampling_figure(rec, piece, 5)
    curve = trace(fig, "cumulative probability")
    assert np.all(np.diff(curve.y) >= 0)
    assert curve.y[-1] == pytest.approx(1.0, abs=1e-6)
    assert curve.x[0] == 1 and curve.x[-1] == VOCAB
    assert curve.y[0] == pytest.approx(rec.stages[2].probs.max(), rel=1e-5)  # after top-k, before top-p
    kept = int(rec.stages[3].kept.sum())
    head = trace(fig, "kept by top-p")
    assert head.x[-1] == kept and list(head.x) == list(range(1, kept + 1))
    assert head.y[-1] >= 0.8 > head.y[-2]
    assert list(trace(fig, "kept/removed boundary").x) == [kept, kept]
    threshold = trace(fig, "top-p = 0.8")
    assert list(threshold.y) == pytest.approx([0.8, 0.8])


def test_without_top_p_the_curve_is_the_final_distribution_and_has_no_threshold():
    fig = sampling_figure(top_k3(), piece, 2)
    assert not [t for t in fig.data if t.name.startswith("top-p =")]
    assert list(trace(fig, "kept by top-k").x) == [1, 2, 3]
    curve = trace(fig, "cumulative probability")
    assert curve.y[2] == pytest.approx(1.0, abs=1e-6)


def test_greedy_says_argmax_of_the_raw_logits():
    fig = sampling_figure(greedy(), piece, 0)
    assert "greedy: argmax of the raw logits" in fig.layout.title.text
    assert f"(id {int(RANKED_IDS[0])})" in fig.layout.title.text
    assert [t.name for t in fig.data if t.type == "bar"] == ["raw", "final"]
    assert not [t for t in fig.data if t.name == "kept/removed boundary"]


def test_pieces_show_whitespace_and_duplicates_carry_their_id():
    assert visible_piece(" the\n") == "␣the↵"
    assert visible_piece("") == "∅"
    labels = token_labels([5, 9, 3], {5: " Paris", 9: " Paris", 3: "x"}.get)
    assert labels == {5: "␣Paris (5)", 9: "␣Paris (9)", 3: "x"}
    raw = trace(sampling_figure(full_pipeline(), piece, 5), "raw")
    assert raw.x[:3] == (f"␣Paris ({RANKED_IDS[0]})", f"␣Paris ({RANKED_IDS[1]})", "↵")


def test_meta_axes_and_payload():
    fig = sampling_figure(full_pipeline(), piece, 5)
    assert fig.layout.meta == {"view": "sampling", "step": 5}
    assert fig.layout.xaxis.type == "category" and fig.layout.xaxis3.type == "category"
    assert fig.layout.xaxis2.type == "log"
    assert fig.layout.yaxis2.title.text == "cumulative probability"
    assert fig.layout.xaxis2.title.text == "rank (tokens sorted by probability)"
    assert len(fig.to_json()) < 40_000
