"""The lab's experiments, one row each: its name, title, parameters, figure and lesson text. The
runner's function for each is `explorer.runner.lab.RUNNERS[name]`; the CLI (`explorer lab NAME`)
and the app's Lab tab are built from these rows.

Adding an experiment: its result and lesson text (`explorer/lab/<name>.py`), its run
(`explorer/runner/lab/<name>.py`, listed in `RUNNERS`), its figure (`explorer/figures/lab/<name>.py`)
and one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from explorer.figures.lab.prefix import fig_prefix
from explorer.figures.lab.quant import fig_quant
from explorer.lab import prefix, quant
from explorer.lab.params import LabParam


@dataclass(frozen=True)
class Experiment:
    """One experiment of the lab.

    Attributes:
        name: its key (`explorer lab NAME`, the app's menu value, `RUNNERS`).
        title: its name in the app's menu and the CLI's help.
        what: one sentence on what it runs and what it proves.
        params: its whole-number parameters, in the order the app's boxes show them.
        figure: (result) -> its figure.
        lesson: (result) -> its lesson page (Markdown) from the run's numbers.
    """

    name: str
    title: str
    what: str
    params: tuple[LabParam, ...]
    figure: Callable[[Any], go.Figure]
    lesson: Callable[[Any], str]


LAB = {experiment.name: experiment for experiment in (
    Experiment(
        "prefix", "Prefix caching",
        "A second request that shares your prompt's first P tokens reuses its KV cache and prefills only its "
        "own suffix: the FLOPs and time saved, and the logits and greedy tokens equal to a full prefill.",
        (LabParam("prefix", "Shared prefix P (tokens; 0: the whole prompt)", 0, 0, 2048,
                  help="positions of the prompt the second request shares; 0: all of them"),),
        fig_prefix, prefix.lesson_text),
    Experiment(
        "quant", "Weight quantization (INT8, INT4)",
        "The decoder's linear weights rounded to INT8 (per output channel) and INT4 (per group of G): what "
        "each costs in KL, top-1 agreement and perplexity of a fixed text, beside the bytes a weight and the "
        "roofline's predicted decode speed.",
        (LabParam("bits", "Bits (8, 4; 0: both)", 0, 0, 8, help="the variant run: 8 (INT8), 4 (INT4), 0 both"),
         LabParam("group_size", "INT4 group size G (weights per scale)", 32, 1, 4096,
                  help="input weights sharing one INT4 scale"),
         LabParam("continue_tokens", "Greedy tokens N", 12, 1, 128, hosted_maximum=32,
                  help="tokens each variant generates after the prompt"),
         LabParam("text_tokens", "Text tokens scored", 256, 2, 2048, hosted_maximum=384,
                  help="the shipped text's first tokens, for KL and perplexity")),
        fig_quant, quant.lesson_text),
)}
