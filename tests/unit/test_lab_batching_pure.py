"""Continuous batching's pure parts, checked by hand on a 20-token prompt cut into R = 4 requests of
5, 10, 15 and 20 tokens generating 2, 5, 8 and 8 (new_tokens 8), pages of 4 positions: the schedule,
each step's packed and padded token counts, the page table, the memory, the lines and the figure."""

from __future__ import annotations

import math

import pytest

from explorer.errors import PromptError
from explorer.figures.lab.batching import fig_batching
from explorer.figures.lab.frame import presenter_frame
from explorer.lab.batching import (
    BatchingResult,
    kv_bytes_per_position,
    lesson_text,
    page_tables,
    plan_requests,
    step_layouts,
)

REQUESTS = plan_requests(20, 4, 8)
LAYOUTS = step_layouts(REQUESTS)
TABLES = page_tables(LAYOUTS, 4)


def test_the_requests_are_the_prompts_prefixes_admitted_one_a_step():
    assert [(r.prompt_tokens, r.new_tokens, r.admitted_step, r.last_step) for r in REQUESTS] == [
        (5, 2, 0, 1), (10, 5, 1, 5), (15, 8, 2, 9), (20, 8, 3, 10)]
    assert [REQUESTS[1].phase(step) for step in (0, 1, 2, 5, 6)] == ["waiting", "prefill", "decode", "decode", "done"]
    assert [REQUESTS[1].context(step) for step in (1, 2, 5, 9)] == [10, 11, 14, 14]  # the last token is never fed


def test_each_steps_packed_and_padded_tokens_by_hand():
    assert len(LAYOUTS) == 11
    assert [x.requests for x in LAYOUTS[:5]] == [(0,), (0, 1), (1, 2), (1, 2, 3), (1, 2, 3)]
    assert LAYOUTS[3].lengths == (1, 1, 20) and LAYOUTS[3].cu_seqlens == (0, 1, 2, 22)
    assert [x.num_tokens for x in LAYOUTS] == [5, 11, 16, 22, 3, 3, 2, 2, 2, 2, 1]
    assert [x.padded_tokens for x in LAYOUTS] == [5, 20, 30, 60, 3, 3, 2, 2, 2, 2, 1]
    assert sum(x.wasted_tokens for x in LAYOUTS) == 130 - 69


def test_pages_are_taken_as_requests_grow_and_reused_after_they_retire():
    assert TABLES[0].block_tables == {0: (0, 1)}
    assert TABLES[1].block_tables == {0: (0, 1), 1: (2, 3, 4)}
    assert TABLES[2].block_tables == {1: (2, 3, 4), 2: (0, 1, 5, 6)}  # request 0's pages, freed, reused
    assert TABLES[8].block_tables == {2: (0, 1, 5, 6, 13, 2), 3: (7, 8, 9, 10, 11, 14, 3)}
    assert TABLES[-1].pages_total == 15


@pytest.mark.parametrize("block_size", [1, 3, 4, 16, 256])
def test_no_page_is_held_twice_and_each_request_holds_ceil_n_over_block(block_size):
    for layout, table in zip(LAYOUTS, page_tables(LAYOUTS, block_size), strict=True):
        held = [page for pages in table.block_tables.values() for page in pages]
        assert len(held) == len(set(held)) and set(table.block_tables) == set(layout.requests)
        for request, context in zip(layout.requests, layout.contexts, strict=True):
            assert len(table.block_tables[request]) == math.ceil(context / block_size)


def test_kv_bytes_per_position_and_the_memory_of_each_layout():
    assert kv_bytes_per_position(layers=30, kv_heads=3, head_dim=64, element_bytes=4) == 46_080  # SmolLM2, float32
    result = _result()
    assert result.peak_step == 4
    memory = result.memory[4]
    assert (memory.used_positions, memory.paged_positions, memory.padded_positions) == (51, 60, 63)
    assert result.tokens_per_s(True) == pytest.approx(23 / 0.5) and result.tokens_per_s(False) == pytest.approx(23)


def test_bad_input_is_refused_with_a_message():
    with pytest.raises(PromptError, match="3 to 8 requests, not 9"):
        plan_requests(20, 9, 8)
    with pytest.raises(PromptError, match="prompt has 3 tokens: 4 requests"):
        plan_requests(3, 4, 8)
    with pytest.raises(PromptError, match="block size must be at least 1"):
        page_tables(LAYOUTS, 0)


def test_lines_lesson_and_figure_say_what_was_measured():
    result = _result()
    text = "\n".join(result.lines())
    assert "packed 69, padded 130 (61 padding)" in text and "identical to each request run alone" in text
    assert text.splitlines()[5].split()[:5] == ["3", "20", "8", "3", "10"]  # admitted at 3, retired after 10
    lesson = lesson_text(result)
    assert "**11 steps**" in lesson and "**69 tokens**" in lesson and "46.0 tokens/s" in lesson
    fig = fig_batching(result)
    assert fig.layout.meta == {"view": "lab-batching", "step": None} and fig.layout.height <= 560
    timeline, pages = fig.data[0], fig.data[-1]
    assert list(timeline.z[3][:4]) == [0, 0, 0, 1] and timeline.text[3][3] == "20"  # waiting x3, then its prefill
    assert tuple(pages.y) == ("request 1", "request 2", "request 3", "free")
    assert tuple([bar.y for bar in fig.data if bar.type == "bar"][0]) == tuple(x.num_tokens for x in LAYOUTS)
    assert "identical" in fig.layout.title.text and "(measured)" in fig.layout.title.text


def _result() -> BatchingResult:
    tokens = tuple(tuple(range(r.new_tokens)) for r in REQUESTS)
    return BatchingResult(
        requests=REQUESTS, layouts=LAYOUTS, packed_shapes=tuple((1, x.num_tokens, 48) for x in LAYOUTS), tables=TABLES,
        block_size=4, bytes_per_position=480, batched_tokens=tokens, alone_tokens=tokens, max_abs_diff=1e-7,
        max_abs_logit=0.5, batched_ms=500.0, alone_ms=1000.0, repeats=1, texts=("a", "b", "c", "d"), device="cpu",
        dtype="float32")


def test_the_legend_gives_each_entry_its_own_colour_and_labels_have_room():
    """No two legend entries share a colour ("prefill" and "packed" were one blue); the bars' labels sit
    under the subplot's title (the axis reaches past the tallest bar); the title's clauses keep a
    separator where they share a line."""
    fig = fig_batching(_result())
    colours = {}
    for trace in fig.data:
        if trace.showlegend is not False and trace.name:
            colour = trace.marker.color
            colours.setdefault(colour if isinstance(colour, str) else tuple(colour), []).append(trace.name)
    assert all(len(names) == 1 for names in colours.values()), colours
    rgb = {colour: tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5)) for colour in colours}
    for first in rgb:  # nor two greys (or blues) a reader cannot tell apart
        for second in rgb:
            distance = sum((a - b) ** 2 for a, b in zip(rgb[first], rgb[second], strict=True)) ** 0.5
            assert first == second or distance > 40, (colours[first], colours[second])
    bars = [trace for trace in fig.data if trace.type == "bar"]
    assert all(trace.cliponaxis is False for trace in bars)
    assert fig.layout.yaxis2.range[1] >= 1.2 * max(max(trace.y) for trace in bars)
    assert f"{_result().max_abs_diff:.1g}; " in fig.layout.title.text.replace("<br>", " ")
    presenter = presenter_frame(fig_batching(_result())).layout.title.text.replace("<br>", " ")
    assert f"{_result().max_abs_diff:.1g}; " in presenter
