"""The warm-up after a load: one tiny traced step, thrown away, so that no step a person runs carries
the start-up costs."""

from __future__ import annotations

import transformers

from explorer.config import SamplingSettings
from explorer.errors import ModelLoadError, first_line
from explorer.runner.embedded import Progress, report
from explorer.runner.loaded import LoadedModel
from explorer.runner.session import InferenceSession

# Every logits processor on, so each one's first call is paid here (greedy: the decode step).
WARM_UP_SAMPLING = SamplingSettings(do_sample=True, temperature=0.7, top_k=5, top_p=0.9, min_p=0.05,
                                    max_new_tokens=2)


def warm_up(loaded: LoadedModel, progress: Progress | None = None) -> None:
    """Run a tiny traced prefill (sampled, every filter on) and a greedy decode step, and throw them
    away, so that no step a person runs carries the start-up costs that would show as wall time.

    The first traced step after a load pays one-off costs in its stops' times. Measured on SmolLM2 on
    a 2-core CPU (one torch thread, the other core busy; medians of 4 fresh processes, the first
    prefill against the 4 after it): tokenize (the chat template's first compilation) 5.7 against
    0.53 ms, embed 0.28 against 0.09 ms; with this warm-up 0.74 and 0.16 ms. `sample` showed no
    first-call cost (3.9 against 3.7 ms; 3.6 warmed up): where it is the longest bar the machine is
    busy (with two threads and the other core taken it read 30-230 ms in every step), not cold. On a
    GPU the first kernels' loading and library handles add to the first step too (not measured
    here). The same path a session runs (`InferenceSession`: hooks, eager attention, the sampling
    processors, the detokenizer) pays them here, on the prompt "Hi": about the cost of one short
    prefill and one decode step (0.4-0.6 s there). A model without a tokenizer is not warmed up: a
    step on real weights needs a text prompt.

    Raises:
        ModelLoadError: the warm-up step failed, so every step would (a library older than the
            package's floors, say): the load stops here with the reason, not at a person's first Prefill.
    """
    if loaded.shape_only or loaded.tokenizer is None:
        return
    report(progress, "Warming up: one tiny traced step, so the first one shown carries no start-up cost")
    session = InferenceSession(loaded, WARM_UP_SAMPLING)
    try:
        session.prefill("Hi")
        if not session.finished:
            session.decode_step(SamplingSettings(max_new_tokens=2))
    except Exception as exc:  # whatever broke it would break every step a person runs
        raise ModelLoadError(
            f"{loaded.name} loaded, but a first traced step on it failed ({first_line(exc)}), so no step could "
            f"run. If a library is older than the explorer needs, `pip check` names it (transformers here: "
            f"{transformers.__version__}).") from exc
    finally:
        session.close()
