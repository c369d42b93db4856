"""The speculative experiment's words and figure from hand-built results: the ratio is said the way it
went (slower is slower), the acceptance is defined where it is printed (per guess and per round), a run
with no round (one token) prints and draws, and the figure's rounds, slots, bars and token text agree
with the text."""

from __future__ import annotations

import pytest

from explorer.figures.lab.speculative import MAX_ROUNDS_DRAWN, TOKEN_FONT_PX, fig_speculative
from explorer.lab.speculative import Round, SpeculativeResult, lesson_text


def a_round(accepted: int, guesses: int = 4, context: int = 20) -> Round:
    return Round(guesses=tuple(range(10, 10 + guesses)), accepted=accepted, full_token=99,
                 guess_pieces=tuple(f"g{i}" for i in range(guesses)), full_piece="F",
                 verify_input_shape=(1, guesses + 1, 576), context=context, verify_bytes=5.4e8,
                 decode_bytes=5.4e8, draft_bytes=4 * 2.2e8)


def a_result(rounds: tuple[Round, ...], speculative_ms: float, plain_ms: float, tokens: int | None = None,
             dtype: str = "float32") -> SpeculativeResult:
    count = tokens or 1 + sum(len(r.emitted) for r in rounds)
    ids = tuple(range(count))
    return SpeculativeResult(prompt_tokens=3, layers=30, depth=12, guesses=4, rounds=rounds, tokens=ids,
                             plain_tokens=ids, speculative_ms=speculative_ms, plain_ms=plain_ms, repeats=3,
                             pieces=("a",) * (3 + 2 * count), device="cpu", dtype=dtype)


def test_a_slower_run_is_said_slower_in_the_lines_the_lesson_and_the_title():
    slow = a_result((a_round(0),) * 15, speculative_ms=16 * 257.8, plain_ms=16 * 63.3)
    assert slow.speed_up == pytest.approx(63.3 / 257.8)
    said = "4.07x the time per token (slower)"
    assert said in "\n".join(slow.lines()) and said in lesson_text(slow)
    assert said in fig_speculative(slow).layout.title.text
    assert "0.25x" not in lesson_text(slow) + "\n".join(slow.lines())
    fast = a_result((a_round(4),) * 3, speculative_ms=100.0, plain_ms=160.0)
    assert "1.60x the speed (faster)" in lesson_text(fast)


def test_the_acceptance_is_defined_per_guess_and_per_round():
    # 3 of 20 rounds accept their first guess (1 guess each): 3 of 80 guesses, 15% of rounds
    result = a_result((a_round(1),) * 3 + (a_round(0),) * 17, 1.0, 1.0)
    assert result.acceptance_rate == pytest.approx(3 / 80) and result.first_guess_rate == pytest.approx(0.15)
    text = result.acceptance_text()
    assert "acceptance 4% per guess (3 of the 80 guesses accepted)" in text
    assert "first guess accepted in 15% of the 20 rounds" in text and "0.15 guesses accepted a round" in text
    assert text in "\n".join(result.lines()) and text in lesson_text(result)


def test_one_token_and_no_round_prints_a_result_and_draws():
    result = a_result((), speculative_ms=1.0, plain_ms=1.0, tokens=1)
    assert result.bytes_per_token(True) == result.bytes_per_token(False) == 0
    assert "no round to speculate (ask for 2 or more tokens)" in "\n".join(result.lines())
    assert "no round of guesses ran" in lesson_text(result)
    assert fig_speculative(result).layout.meta["view"] == "lab-speculative"


def test_the_bytes_are_named_in_the_runs_dtype():
    result = a_result((a_round(1),) * 4, 1.0, 1.0, dtype="float32")
    assert "(estimated, float32)" in "\n".join(result.lines()) and "estimated in float32" in lesson_text(result)
    assert "float32" in fig_speculative(result).layout.annotations[-1].text


def test_the_figure_draws_every_round_the_text_counts_and_one_slot_a_token():
    rounds = (a_round(0),) * 14 + (a_round(0, guesses=1),)  # the last round guesses fewer
    fig = fig_speculative(a_result(rounds, 1.0, 1.0))
    assert len(rounds) <= MAX_ROUNDS_DRAWN
    layout = fig.layout
    assert "all 15 rounds (verify passes)" in layout.yaxis.title.text
    assert list(layout.xaxis.ticktext) == ["guess 1", "guess 2", "guess 3", "guess 4", "full model"]
    full = next(trace for trace in fig.data if trace.name == "full model's token")
    assert len(full.y) == 15 and set(full.base) == {4}  # the full model's token always in its own slot
    cells = [trace for trace in fig.data if trace.type == "bar" and trace.orientation == "h"]
    assert all(trace.textfont.size == TOKEN_FONT_PX and trace.textangle == 0 for trace in cells)
    assert layout.uniformtext.minsize == TOKEN_FONT_PX and layout.uniformtext.mode == "show"


def test_a_longer_run_says_how_many_rounds_it_draws():
    fig = fig_speculative(a_result((a_round(0),) * (MAX_ROUNDS_DRAWN + 4), 1.0, 1.0))
    assert f"first {MAX_ROUNDS_DRAWN} of {MAX_ROUNDS_DRAWN + 4} rounds" in fig.layout.yaxis.title.text


def test_the_bars_labels_have_room_above_the_taller_bar():
    fig = fig_speculative(a_result((a_round(0),) * 4, speculative_ms=400.0, plain_ms=100.0))
    for trace, axis in zip([t for t in fig.data if t.type == "bar" and t.orientation != "h"],
                           (fig.layout.yaxis2, fig.layout.yaxis3), strict=True):
        assert trace.cliponaxis is False and axis.range[1] >= 1.2 * max(trace.y)
