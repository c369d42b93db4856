"""The lesson's logit-lens page counts the positions its figure draws: the prefill's and every decode
step's up to the one shown (it said "at 1 of 1 positions" beside a figure of 32)."""

from __future__ import annotations

import re

from explorer.analysis.hardware import get_hardware
from explorer.lesson import PAGES, LessonInputs, page_text
from explorer.notebook import Explorer
from tests.figure_goldens import DATA


def test_the_lens_page_counts_the_positions_of_its_figure():
    explorer = Explorer.open(DATA / "llama.json")
    run, step = explorer.run, len(explorer.run.steps) - 1
    page = next(page for page in PAGES if page.key == "lens")
    text = page_text(page, LessonInputs(run, step, 0, get_hardware("h100-sxm")))
    own, drawn = map(int, re.search(r"at (\d+) of the (\d+) positions drawn", text).groups())
    heatmap = explorer.figure("lens", step).data[0]
    assert drawn == len(heatmap.x) > 1
    assert 0 <= own <= drawn
