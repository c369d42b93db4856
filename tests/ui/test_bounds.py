"""A number box's raw value read as the page shows it (`as_shown`), and the sampling preview's
keystrokes: an empty box draws nothing and raises nothing, a value past the range is clipped."""

from __future__ import annotations

import gradio as gr
import pytest

from explorer.ui.bounds import as_shown
from explorer.ui.handlers import on_sampling_keystroke


@pytest.mark.parametrize(("value", "shown"), [(None, None), (float("nan"), None), (-1.0, 0.05), (5.0, 2.0),
                                              (0.7, 0.7), (0.123, 0.12)])
def test_a_slider_value_is_read_clipped_to_its_range_and_rounded(value, shown):
    slider = gr.Slider(0.05, 2.0, value=1.0, step=0.01, precision=2)
    assert as_shown(slider, value) == shown


def test_other_components_values_pass_unchanged():
    assert as_shown(gr.Checkbox(), True) is True and as_shown(gr.Dropdown(choices=["a"]), "a") == "a"
    assert as_shown(gr.Number(minimum=0, maximum=10, precision=0), 12.4) == 10


def test_a_keystroke_that_leaves_a_box_empty_draws_nothing_and_raises_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr("explorer.ui.handlers.redraw.on_sampling_change", lambda *args: calls.append(args) or "drawn")
    components = (gr.Checkbox(), gr.Slider(0.05, 2.0, precision=2))
    assert isinstance(on_sampling_keystroke(components, None, 0, True, None, False), type(gr.skip()))
    assert calls == []
    assert on_sampling_keystroke(components, "visit", 3, True, -1.0, False) == "drawn"
    assert calls == [("visit", 3, True, 0.05, False)]
