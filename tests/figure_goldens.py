"""Figures that must not change: saved runs of tiny models and the SHA-256 of every view's JSON drawn
from them at several view settings, written once by `python tests/figure_goldens.py --write` and
compared by tests/unit/test_figures_unchanged.py.

The runs are saved files, not live runs, so their measured times are fixed and the hashes compare
the drawing alone: a change to how a view fetches or draws its data that alters one byte of a figure
fails the test. Regenerate the goldens only from a commit whose figures are known to be right (and
after a plotly upgrade: the hashes name the plotly version they were drawn with).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import plotly

from explorer.analysis.measured import Scenario
from explorer.config import SamplingSettings
from explorer.figures.view_types import ViewOptions, ViewSources
from explorer.figures.views import VIEWS, render
from explorer.runner.view_services import RUNNER_SERVICES
from explorer.saved import load_run

DATA = Path(__file__).parent / "data" / "figure_goldens"
HASHES = DATA / "hashes.json"
EXAMPLES = json.loads((Path(__file__).parents[1] / "explorer" / "ui" / "assets" / "examples.json").read_text())
# (run name, tiny family or a shape-only preset, the example it runs, decode steps)
CASES = (("llama", "llama", 0, 3), ("gpt2", "gpt2", 1, 3), ("gemma3", "gemma3_text", 2, 3),
         ("qwen3_moe", "qwen3_moe", 3, 2), ("shape_only", "qwen3-8b", 0, 1))
HARDWARE = "h100-sxm"


def option_sets(last: int, n_layers: int) -> dict[str, ViewOptions]:
    """The view settings each view is drawn at: the defaults at the latest step, a mid step with the
    last layer, heads averaged and presenter mode, a zoom window, a what-if, a lens statistic, a preview."""
    preview = SamplingSettings(do_sample=True, temperature=1.3, top_k=9, top_p=0.8, seed=5)
    return {
        "latest": ViewOptions(last, 0, False, HARDWARE),
        "prefill-last-layer": ViewOptions(0, n_layers - 1, True, HARDWARE, presenter=True),
        "mid-zoom": ViewOptions(min(1, last), 1, False, HARDWARE, zoom=5, sink_threshold=0.1),
        "what-if": ViewOptions(last, 0, False, HARDWARE, what_if=Scenario(batch=64, kv="fp8", fused=True)),
        "lens-entropy": ViewOptions(last, 0, False, HARDWARE, lens_stat="entropy"),
        "preview": ViewOptions(last, 0, False, HARDWARE, preview=preview),
    }


def figure_hashes(path: Path) -> dict[str, str]:
    """`view|settings` -> SHA-256 of the figure's JSON, for every view of the saved run at `path`."""
    run, attention = load_run(path)
    hashes = {}
    sources = ViewSources(attention, RUNNER_SERVICES, saved=True)
    for name, options in option_sets(len(run.steps) - 1, len(run.steps[0].kv)).items():
        for view in VIEWS:
            figure = render(run, sources, options, view)
            hashes[f"{view}|{name}"] = hashlib.sha256(figure.to_json().encode()).hexdigest()
    return hashes


def all_hashes() -> dict:
    """Every case's hashes, with the plotly version they were drawn with."""
    return {"plotly": plotly.__version__,
            "runs": {name: figure_hashes(DATA / f"{name}.json") for name, *_ in CASES}}


def write_runs() -> None:
    """Run each case live (greedy or as its example samples) and save it under `DATA`."""
    from tests.tiny_models import tiny_model

    from explorer.notebook import Explorer

    DATA.mkdir(parents=True, exist_ok=True)
    for name, model, example, steps in CASES:
        settings = {key: EXAMPLES[example][key] for key in ("do_sample", "temperature", "top_k", "top_p", "min_p", "seed")}
        if "-" in model:  # a shape-only preset
            explorer = Explorer.load(config=model, **settings)
            explorer.prefill(prompt_tokens=17)
        else:
            explorer = Explorer(tiny_model(model), SamplingSettings(**settings))
            explorer.prefill(EXAMPLES[example]["prompt"])
        explorer.decode(steps)
        explorer.save(DATA / f"{name}.json")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the runs and the hashes anew")
    if parser.parse_args().write:
        write_runs()
        HASHES.write_text(json.dumps(all_hashes(), indent=1, sort_keys=True) + "\n")
    print(json.dumps(all_hashes() == json.loads(HASHES.read_text())))
