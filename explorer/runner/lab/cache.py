"""The results of the experiments over the shipped text, kept per model: thirty visitors pressing the
same button with the same parameters get the first one's result at once (labelled as such by the app).

Only "quant", "kvquant" and "evict" are kept: they measure the shipped text (`explorer.lab.texts`),
so their result is the same for every visitor with the same parameters, except where it also reads
the prompt ("quant" and "kvquant": the prompt's logits and continuation; "evict": a prompt long
enough to be decoded in place of the text), whose ids then join the key. The other experiments
measure the visitor's own prompt and run each time. A key asked for while it is being computed
waits for that computation rather than starting another.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from explorer.lab.evict import decodes_prompt
from explorer.runner.lab import RUNNERS
from explorer.runner.loaded import LoadedModel

KEPT = ("quant", "kvquant", "evict")
MAX_RESULTS = 64  # per model, the least recently asked for dropped first
_RESULTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> OrderedDict[key, Computed]
_GUARD = threading.Lock()


@dataclass(frozen=True)
class Computed:
    """An experiment's result and when it was computed.

    Attributes:
        result: the runner's result (`explorer.lab.<experiment>`).
        computed_at: seconds since the epoch, when it was computed.
        cached: True where this result was computed for an earlier call.
        reads_prompt: True where the prompt's ids are part of the key.
    """

    result: object
    computed_at: float
    cached: bool = False
    reads_prompt: bool = False


def run_experiment(name: str, loaded: LoadedModel, prompt_ids: list[int], params: dict[str, int]) -> Computed:
    """`RUNNERS[name](loaded, prompt_ids, **params)`, or the result kept for the same model, experiment,
    parameters (and prompt, where the result reads it).

    Raises:
        ExplorerError: what the runner raises (nothing is kept then).
    """
    if name not in KEPT:
        return Computed(RUNNERS[name](loaded, prompt_ids, **params), time.time())
    prompt = tuple(prompt_ids) if reads_prompt(name, prompt_ids, params) else None
    key = (name, tuple(sorted(params.items())), prompt)
    with _GUARD:
        results = _RESULTS.setdefault(loaded.model, OrderedDict())
        entry = results.setdefault(key, _Entry())
        results.move_to_end(key)
        while len(results) > MAX_RESULTS:
            results.popitem(last=False)
    with entry.lock:  # a second caller of the same key waits for the first's result
        if entry.computed is not None:
            return Computed(entry.computed.result, entry.computed.computed_at, True, prompt is not None)
        entry.computed = Computed(RUNNERS[name](loaded, prompt_ids, **params), time.time(),
                                  reads_prompt=prompt is not None)
        return entry.computed


def reads_prompt(name: str, prompt_ids: list[int], params: dict[str, int]) -> bool:
    """Whether experiment `name`'s result depends on the prompt's ids (see the module's docstring)."""
    if name == "evict":
        return decodes_prompt(len(prompt_ids), params["window"])
    return True


class _Entry:
    """One key's result, once computed, and the lock its computation holds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.computed: Computed | None = None
