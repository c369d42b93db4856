"""The prefix-caching experiment's words follow its numbers: a cached pass that measured slower is said
to be slower (never "-11% of the time" saved, nor "the time fell"), a faster one is said to save time,
and the figure's title and time bar agree."""

from __future__ import annotations

from explorer.figures.lab.prefix import fig_prefix
from explorer.lab.prefix import PrefixCacheResult, lesson_text, time_change


def hand_built(full_ms: float, suffix_ms: float) -> PrefixCacheResult:
    return PrefixCacheResult(
        first_tokens=20, prefix_tokens=18, total_tokens=26, full_input_shape=(1, 26, 576),
        suffix_input_shape=(1, 8, 576), reused_kv_shape=(1, 3, 18, 64), final_kv_shape=(1, 3, 26, 64),
        full_cost=(7.0e9, 6.0e8), suffix_cost=(2.2e9, 5.5e8), full_ms=full_ms, suffix_ms=suffix_ms, repeats=3,
        max_abs_diff=4e-5, max_abs_logit=20.0, full_tokens=(1, 2), cached_tokens=(1, 2),
        pieces=("a",) * 30, device="cpu", dtype="float32")


def test_a_slower_cached_pass_is_said_slower():
    slower = hand_built(full_ms=50.0, suffix_ms=55.5)
    text, lesson = "\n".join(slower.lines()), lesson_text(slower)
    assert "11% more time (slower)" in text and "11% more time (slower)" in lesson
    assert "-11%" not in text + lesson and "The time fell less than the FLOPs" not in lesson
    assert "the time did not fall at all" in lesson
    figure = fig_prefix(slower)
    assert "11% more time (slower)" in figure.layout.title.text
    assert figure.layout.yaxis2.range[1] > 111 * 1.1  # the slower bar and its label inside the plot


def test_a_faster_cached_pass_that_saves_less_than_the_flops_says_why():
    faster = hand_built(full_ms=50.0, suffix_ms=40.0)
    lesson = lesson_text(faster)
    assert "20% less time" in lesson and "The time fell less than the FLOPs" in lesson
    assert time_change(10.0, 10.0) == "0% less time"
