"""What every lab experiment does with the model: check it has weights, run plain transformers forward
passes on a `DynamicCache`, each in a turn of its own on the model's lock (`explorer.runner.passes`),
decode greedily, time a call (the waits for turns left out), record the shape a module outputs, and
estimate a pass's FLOPs with the cost model."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator

import torch
from transformers import DynamicCache

from explorer.analysis.costs import step_costs
from explorer.analysis.hardware import get_hardware
from explorer.analysis.precision import Precision, canonical_dtype
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.roofline import what_if
from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError, SessionStateError
from explorer.lab.fidelity import shipped_text
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import model_pass, waited_s

MAX_PROMPT_TOKENS = 2048  # what an experiment runs on the shared model: a few passes of this at most
BOUND_HARDWARE = "h100-sxm"  # the GPU whose roofline the lossy experiments' predicted bounds are on


def check_runnable(loaded: LoadedModel, prompt_ids: list[int], max_tokens: int = MAX_PROMPT_TOKENS) -> None:
    """Refuse what an experiment cannot run.

    Raises:
        SessionStateError: shape-only mode (no weights: nothing to compare or time).
        PromptError: no prompt ids, or more than `max_tokens`.
    """
    if loaded.shape_only:
        raise SessionStateError("Shape-only mode has no weights: the lab runs the model for real, so load one "
                                "with weights (the embedded model, or a hub id).")
    if not 1 <= len(prompt_ids) <= max_tokens:
        raise PromptError(f"The lab takes a prompt of 1 to {max_tokens} tokens, not {len(prompt_ids)}.")


@contextlib.contextmanager
def passes_on(loaded: LoadedModel) -> Iterator[torch.nn.Module]:
    """The model, without autograd. Its lock is not held: each forward pass takes a turn of its own
    (`forward`, `explorer.runner.passes.model_pass`), so another page's step waits for one pass, not
    for the experiment."""
    with torch.inference_mode():
        yield loaded.model


def new_cache(model) -> DynamicCache:
    return DynamicCache(config=model.config)


def forward(model, ids: list[int], cache: DynamicCache | None, keep: int = 0) -> torch.Tensor:
    """Run `ids` ([1, T]) after whatever `cache` holds (the cache grows by T); returns the logits of
    the last `keep` positions (0: every position), [T or keep, V] float32 on the CPU. One turn on the
    model's lock."""
    tensor = torch.tensor([ids], device=model.device)
    with model_pass(model):
            return model(input_ids=tensor, cache=cache, use_cache=cache is not None,
                     logits_to_keep=keep).logits[0].float().cpu()


def greedy(model, cache: DynamicCache, logits: torch.Tensor, steps: int, eos_ids=(),
           times_ms: list[float] | None = None) -> list[int]:
    """Up to `steps` greedy tokens after `logits` ([V], the last position's), decoding on `cache`; as
    `generate` does, the tokens end with the first of `eos_ids` (kept) where one is chosen earlier. Each
    decode step's wall time is appended to `times_ms` where given (measured as `median_ms` does)."""
    tokens = [int(logits.argmax())]
    while len(tokens) < steps and tokens[-1] not in eos_ids:
        step = lambda: tokens.append(int(forward(model, [tokens[-1]], cache)[-1].argmax()))  # noqa: E731
        if times_ms is None:
            step()
        else:
            times_ms.extend(median_ms([step], 1))
    return tokens


def until_eos(tokens: list[int], eos_ids) -> list[int]:
    """`tokens` up to and including the first of `eos_ids` (all of them where none is there)."""
    end = next((i for i, token in enumerate(tokens) if token in eos_ids), len(tokens) - 1)
    return tokens[:end + 1]


def median_ms(runs: list[Callable[[], object]], repeats: int) -> list[float]:
    """The median wall time of `repeats` calls of each of `runs`, in ms (measured; the device
    synchronised), less the time each call waited for turns on the model (other pages' passes). The
    runs take turns, so a machine that slows down meanwhile slows them alike."""
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, kept in zip(runs, times, strict=True):
            start, waited = time.perf_counter(), waited_s()
            run()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            kept.append((time.perf_counter() - start - (waited_s() - waited)) * 1e3)
    return [statistics.median(kept) for kept in times]


@contextlib.contextmanager
def output_shapes(module: torch.nn.Module) -> Iterator[list[tuple[int, ...]]]:
    """The shape of each output of `module` in this thread's passes while the block runs (a forward hook,
    always removed; the passes of other pages' threads, which take turns meanwhile, are not recorded)."""
    shapes: list[tuple[int, ...]] = []
    mine = threading.get_ident()

    def record(_module, _args, output) -> None:
        if threading.get_ident() == mine:
            shapes.append(tuple(output.shape))

    handle = module.register_forward_hook(record)
    try:
        yield shapes
    finally:
        handle.remove()


def pass_cost(model, tokens: int, context: int) -> tuple[float, float]:
    """(FLOPs, bytes) of a `forward` of `tokens` new tokens whose cache then holds `context`
    positions, batch 1, the LM head over every position as `forward` runs it, bytes in the model's
    dtype (estimated by the cost model, `explorer.analysis.costs.step_costs`)."""
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    dtype = canonical_dtype(str(model.dtype))
    options = CostOptions(Precision(dtype, dtype, dtype), lm_head_all_positions=True)
    costs = step_costs(spec, Step("prefill", 1, tokens, context), options)
    return sum(cost.flops for cost in costs), sum(cost.bytes for cost in costs)


def pieces(loaded: LoadedModel, ids: list[int]) -> tuple[str, ...]:
    """Each token's text (its id in brackets where the model has no tokenizer)."""
    if loaded.tokenizer is None:
        return tuple(f"[{token}]" for token in ids)
    return tuple(loaded.tokenizer.decode([token]) for token in ids)



def text_ids(loaded: LoadedModel, max_tokens: int) -> list[int]:
    """The shipped text's first `max_tokens` token ids (`explorer.lab.fidelity.shipped_text`), no
    special tokens, at most the model's context length."""
    ids = loaded.tokenizer(shipped_text(), add_special_tokens=False)["input_ids"]
    return ids[:min(max_tokens, context_length(loaded.model))]


def context_length(model) -> int:
    """The positions the model was built for (`max_position_embeddings`, GPT-2's `n_positions`)."""
    config = model.config
    return int(getattr(config, "max_position_embeddings", None) or config.n_positions)


def greedy_timed(model, cache: DynamicCache, logits: torch.Tensor, steps: int,
                 eos_ids=()) -> tuple[list[int], float]:
    """`greedy`'s tokens and the median wall time of its decode steps, ms (measured; one more decode
    step of the last token on `cache` is timed where there is none: `steps` 1, or an end at once)."""
    times_ms: list[float] = []
    tokens = greedy(model, cache, logits, steps, eos_ids, times_ms)
    if not times_ms:
        times_ms = median_ms([lambda: forward(model, tokens[-1:], cache)], 1)
    return tokens, statistics.median(times_ms)


def predicted_decode_s(model, context: int, batch: int = 1, **formats: str) -> tuple[float, str]:
    """(the roofline's lower bound on one decode step, s; the machine and format it is for, e.g.
    "NVIDIA H100 SXM5 80GB (a reference GPU; float32 as run)") for `batch` sequences of `context`
    positions on `BOUND_HARDWARE`, in the model's own dtype with `formats` changed (weights="int4",
    kv="fp8", ...: `explorer.analysis.roofline.what_if`; estimated by the cost model). A GPU of the
    catalogue, since the bound is what a kernel for those formats would reach; the run's dtype, since
    that is what was measured."""
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    dtype = canonical_dtype(str(model.dtype))
    hardware = get_hardware(BOUND_HARDWARE)
    options = CostOptions(Precision(dtype, dtype, dtype))
    roofline = what_if(spec, Step("decode", batch, 1, context), hardware, options, **formats)
    run_dtype = str(model.dtype).removeprefix("torch.")
    return roofline.time_lower_bound_s, f"{hardware.name} (a reference GPU; {run_dtype} as run)"
