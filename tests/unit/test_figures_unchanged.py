"""Every view drawn from saved runs of tiny models (llama, GPT-2, Gemma 3's sliding windows, Qwen3-MoE,
shape-only Qwen3-8B) at six view settings is byte for byte the figure the goldens hold
(tests/figure_goldens.py): a restructuring of how views fetch and draw their data changes nothing
a user sees."""

from __future__ import annotations

import json

import plotly
import pytest

from tests.figure_goldens import CASES, DATA, HASHES, figure_hashes

GOLDEN = json.loads(HASHES.read_text())


@pytest.mark.parametrize("name", [name for name, *_ in CASES])
def test_every_view_draws_the_golden_figure(name):
    assert plotly.__version__ == GOLDEN["plotly"], \
        "plotly changed: check the figures by eye, then `python -m tests.figure_goldens --write`"
    drawn = figure_hashes(DATA / f"{name}.json")
    changed = sorted(key for key, digest in drawn.items() if GOLDEN["runs"][name].get(key) != digest)
    assert drawn.keys() == GOLDEN["runs"][name].keys()
    assert changed == []
