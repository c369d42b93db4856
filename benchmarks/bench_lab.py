"""Every lab experiment on the embedded model, at its defaults and at the slowest parameters the hosted
caps allow: the run's wall time, and how long another page's step waited for the model meanwhile
(prints measurements, never asserts).

The other page is a thread that, while the experiment runs, asks the model's lock for one decode step
(a one-token forward on a cache of the prompt) again and again, as a visitor's Next token does: its
longest wait and the most turns it saw ahead of it are printed. With `--whole-run` each experiment
holds the model's lock for its whole run, as experiments did before they took turns pass by pass,
so one run of the script prints both ways side by side on the same machine.

Run: python benchmarks/bench_lab.py [--only quant,evict] [--params default,worst] [--whole-run] [--alone]
[--threads N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time

import torch
from transformers import DynamicCache

from explorer.lab.table import LAB
from explorer.runner.lab import RUNNERS
from explorer.runner.locks import model_lock
from explorer.runner.loading import load_model
from explorer.runner.session import InferenceSession
from explorer.runner.step_order import crop_cache

PROMPT = "The capital of France is Paris. Tell me about the history of the city, its river and its bridges."
# the slowest run each experiment's hosted caps allow (`LabParam.hosted_maximum`; uncapped sizes at the
# values a visitor would try)
WORST_IN_CAPS = {
    "prefix": {"prefix": 0},
    "chunked": {"chunk": 1},
    "batching": {"requests": 4, "new_tokens": 16},
    "speculative": {"depth": 1, "guesses": 4, "tokens": 32},
    "tiles": {"block": 1},
    "quant": {"bits": 0, "continue_tokens": 32, "text_tokens": 384},
    "kvquant": {"kv_format": 0, "continue_tokens": 32, "text_tokens": 384},
    "evict": {"window": 32, "text_tokens": 256},
}


class OtherPage(threading.Thread):
    """Another page's decode steps, one after another, each waiting its turn on the model's lock."""

    def __init__(self, model, prompt_ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.model, self.prompt_ids = model, prompt_ids
        self.waits_ms: list[float] = []
        self.most_ahead = 0
        self.stop = threading.Event()

    def run(self) -> None:
        lock = model_lock(self.model)
        with torch.inference_mode():
            cache = DynamicCache(config=self.model.config)
            with lock:  # the page's prefill (every pass on the shared model in a turn of its own)
                self.model(input_ids=torch.tensor([self.prompt_ids]), cache=cache, use_cache=True)
            while not self.stop.is_set():
                began = time.perf_counter()
                with lock.turn(self._ahead):
                    self.waits_ms.append((time.perf_counter() - began) * 1e3)
                    self.model(input_ids=torch.tensor([[self.prompt_ids[-1]]]), cache=cache, use_cache=True)
                    crop_cache(cache, len(self.prompt_ids))
                time.sleep(0.02)  # the page draws its figure meanwhile

    def _ahead(self, ahead: int) -> None:
        self.most_ahead = max(self.most_ahead, ahead)


def timed(loaded, name: str, ids: list[int], params: dict, whole_run: bool,
          alone: bool) -> tuple[float, OtherPage]:
    """One run of experiment `name` with `params`, another page stepping meanwhile (unless `alone`);
    (seconds, that page)."""
    other = OtherPage(loaded.model, ids)
    if alone:
        other.stop.set()  # its prefill only, before the run
    other.start()
    time.sleep(0.2)
    held = model_lock(loaded.model) if whole_run else contextlib.nullcontext()
    began = time.perf_counter()
    with held:
        RUNNERS[name](loaded, ids, **params)
    seconds = time.perf_counter() - began
    other.stop.set()
    other.join()
    return seconds, other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the experiments a shared app runs (tensor starts processes of its own: local only, bench_lab_tensor.py)
    shared = ",".join(name for name, experiment in LAB.items() if not experiment.local_only)
    parser.add_argument("--only", default=shared, help="experiments, comma-separated")
    parser.add_argument("--params", default="default,worst", help="default, worst (in the hosted caps), or both")
    parser.add_argument("--whole-run", action="store_true", help="also run each holding the lock for its whole run")
    parser.add_argument("--alone", action="store_true", help="no other page stepping: the run's own time")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(device="cpu")
    ids = InferenceSession(loaded).prompt_ids(PROMPT, True)  # the chat template: the model answers at length
    print(f"{loaded.description}; {torch.get_num_threads()} threads; prompt of {len(ids)} tokens (chat template)")
    RUNNERS["tiles"](loaded, ids)  # warm up
    ways = (False, True) if args.whole_run else (False,)
    print(f"{'experiment':<12} {'params':<9} {'way':<10} {'run s':>7} {'step waits':>10} {'median ms':>9} "
          f"{'max ms':>8} {'most ahead':>10}")
    for name in args.only.split(","):
        defaults = {param.name: param.default for param in LAB[name].params}
        chosen = {"default": defaults, "worst": defaults | WORST_IN_CAPS[name]}
        for label in args.params.split(","):
            params = chosen[label]
            for whole_run in ways:
                seconds, other = timed(loaded, name, ids, params, whole_run, args.alone)
                waits = other.waits_ms or [0.0]
                print(f"{name:<12} {label:<9} {'whole run' if whole_run else 'by pass':<10} {seconds:>7.1f} "
                      f"{len(other.waits_ms):>10} {statistics.median(waits):>9.0f} {max(waits):>8.0f} "
                      f"{other.most_ahead:>10}", flush=True)
    print("(all measured: wall time; 'step waits': the other page's decode steps during the run, each one's "
          "wait for the model; 'most ahead': the most turns it saw ahead of it)")


if __name__ == "__main__":
    main()
