"""Capturing one forward pass: timed stop modules, a cache-write probe and an instrumented eager attention.

Everything is attached inside `tracing(...)` and removed in its `finally`, so a step never leaves
the model changed, whatever it raises. The attention function is transformers' eager attention
(`eager_attention_forward` in modeling_llama.py), step for step, with a clock between the steps; it
is registered under its own name and switched on only for the duration of a traced step.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from explorer.analysis.memory import block_rows
from explorer.runner.architectures import moe_layers, stop_module_names
from explorer.runner.gqa import (
    NO_BUFFERS,
    AttentionInputs,
    BlockBuffers,
    block_mask,
    first_keys,
    grouped_scores,
    grouped_weighted_sum,
    in_head_order,
    keys_read,
    merge_heads,
    softmax,
)
from explorer.runner.timing import Clock, CudaEventClock
from explorer.stop_names import parse_stop_name, stop_name

ATTN_IMPLEMENTATION = "explorer_eager"
# transformers' experts implementations (integrations/moe.py): "eager" is the modeling file's own loop over
# the experts that received tokens; on `meta` its `nonzero` has no data to run on, so a shape-only step
# runs "batched_mm" (every token through its k experts at once: the same [B*T, d] in and out).
EXPERTS_IMPLEMENTATION, META_EXPERTS_IMPLEMENTATION = "eager", "batched_mm"
_ACTIVE: ContextVar[StepRecorder | None] = ContextVar("explorer_step_recorder", default=None)
_TIMED_FORWARDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> `_timed_forwards`

Shape = list[int]


class StopForward(Exception):
    """Raised inside the forward pass to end it once the layer being recomputed has been captured."""


@dataclass(slots=True)
class Event:
    """One timed stop: its bounds as clock readings (seconds once `StepRecorder.finish` has run),
    shapes (`torch.Size`) and dtype; a stop run in query blocks also has each block's (start, end)
    in `spans`, and its time is their sum.

    Kept as torch objects during the pass (converting hundreds of them per step costs time there);
    `explorer.runner.assemble` turns them into plain lists and strings afterwards.
    """

    start: float
    end: float = 0.0
    inputs: list | tuple = ()
    outputs: list | tuple = ()
    dtype: torch.dtype | None = None
    spans: list | tuple = ()

    @property
    def seconds(self) -> float:
        """The stop's time: end - start, or the sum of its blocks' spans."""
        if self.spans:
            return sum(end - start for start, end in self.spans)
        return self.end - self.start


class StepRecorder:
    """Collects the events, attention probabilities and post-RoPE queries of one forward pass; `finish`
    ends it.

    Args:
        clock: read at every timing point (`explorer.runner.timing.step_clock`): perf_counter on
            the CPU, CUDA events on a GPU.
        keep_attention: (layer, [h_q, q_len, kv_len], bytes of the layer's queries, which are always
            kept) -> whether to copy that layer's probabilities too.
        stop_after_layer: end the pass with `StopForward` once this layer's attention is captured.
        on_layer: called with each layer's index once its attention has run (a progress report).
        block_rows: query rows per attention block; None picks them from
            `explorer.analysis.memory.ATTENTION_BLOCK_BYTES` (`block_rows`).
    """

    def __init__(
        self,
        clock: Clock = time.perf_counter,
        keep_attention: Callable[[int, Shape, int], bool] = lambda layer, shape, query_bytes: True,
        stop_after_layer: int | None = None,
        on_layer: Callable[[int], None] | None = None,
        block_rows: int | None = None,
    ) -> None:
        self.clock = clock
        self.block_rows = block_rows
        self.on_layer = on_layer
        self.keep_attention = keep_attention
        self.stop_after_layer = stop_after_layer
        self.events: dict[str, Event] = {}
        # MoE layer -> (expert ids [B*T, k], weights [B*T, k], E) as its router returned them
        self.routing: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        self.attention_shapes: dict[int, Shape] = {}
        self.attention: dict[int, np.ndarray] = {}
        self.attention_inputs: dict[int, AttentionInputs] = {}
        self.first_key_sums: dict[int, list[float]] = {}
        self._pending_attention: dict[int, torch.Tensor] = {}
        self._pending_sums: dict[int, torch.Tensor] = {}

    def finish(self) -> None:
        """After the pass: event bounds to seconds (CUDA: one synchronise) and the kept attention
        probabilities to host numpy ([h_q, q_len, kv_len] float32) in `attention`."""
        if isinstance(self.clock, CudaEventClock):
            self.clock.resolve(self.events.values())
        for layer, probs in self._pending_attention.items():
            self.attention[layer] = probs.cpu().numpy()
        self._pending_attention.clear()
        self.first_key_sums |= {layer: sums.tolist() for layer, sums in self._pending_sums.items()}
        self._pending_sums.clear()

    def record(self, key: str, start: float, inputs: list[torch.Size], outputs: list[torch.Tensor]) -> float:
        """Store a stop that ran from `start` until now; returns now (the next stop's start)."""
        now = self.clock()
        self.events[key] = Event(start, now, inputs, [t.shape for t in outputs], outputs[0].dtype)
        return now

    def record_shapes(self, key: str, start: float, inputs: list[torch.Size], outputs: list[torch.Size],
                      dtype: torch.dtype) -> float:
        """As `record`, for a stop whose result is no tensor of its own (a broadcast, a view of another)."""
        now = self.clock()
        self.events[key] = Event(start, now, inputs, outputs, dtype)
        return now

    def record_blocks(self, key: str, spans: list[tuple[float, float]], inputs: list[torch.Size],
                      outputs: list[torch.Size], dtype: torch.dtype) -> None:
        """Store a stop run in query blocks, `spans` its blocks' (start, end) readings."""
        self.events[key] = Event(spans[0][0], spans[-1][1], inputs, outputs, dtype, spans if len(spans) > 1 else ())

    def attention_inputs_of(self, layer: int, shape: Shape, inputs: AttentionInputs, on_meta: bool) -> bool:
        """Before a layer's attention: keep its queries (`inputs`, to recompute the probabilities from);
        returns whether `keep_attention` allows its probabilities to be kept too (never on `meta`)."""
        self.attention_shapes[layer] = shape
        if on_meta:
            return False
        self.attention_inputs[layer] = inputs
        return self.keep_attention(layer, shape, inputs.query.nbytes)

    def attention_block(self, layer: int, first: int, probs: torch.Tensor, keep: bool) -> None:
        """A block of a layer's probabilities [h_q, rows, <= n] in head order (the keys the block read,
        `explorer.runner.gqa.keys_read`), from query row `first`: its
        sums over the queries of the weight on the first key go into `first_key_sums` (float64; a
        decode step's one row is its own sum, float32 values that float64 holds exactly), and, where
        `keep`, its rows into the layer's float32 [h_q, q_len, n] matrix (on the model's device: a copy
        to the host here would wait for the GPU). A one-block layer's probabilities are kept as they
        are (copied only to float32, or out of a batch's tensor); a long prefill's blocks add into the
        first block's tensors in place, so they leave no small tensor each (kept in a list, they
        scattered long-lived allocations among the blocks' and a 2,048-token prefill's peak RSS rose
        from 1.2 GB to 4-5 GB in four of six runs)."""
        h_q, q_len, n = self.attention_shapes[layer]
        first_key = probs.select(2, 0)  # [h_q, rows]
        if q_len == 1:
            self._pending_sums[layer] = first_key.select(1, 0)
        elif first == 0:
            self._pending_sums[layer] = first_key.sum(-1, dtype=torch.float64)
        else:
            self._pending_sums[layer] += first_key.sum(-1, dtype=torch.float64)
        if not keep:
            return
        if probs.shape[1] == q_len:
            alone = probs.untyped_storage().nbytes() == probs.nbytes  # not batch row 0 of a larger tensor
            self._pending_attention[layer] = probs.to(torch.float32, copy=not alone)
            return
        if first == 0:  # zeros where a block read no key (`explorer.runner.gqa.keys_read`)
            self._pending_attention[layer] = probs.new_zeros((h_q, q_len, n), dtype=torch.float32)
        self._pending_attention[layer][:, first:first + probs.shape[1], :probs.shape[2]].copy_(probs)

    def attention_done(self, layer: int) -> None:
        """After a layer's attention: report progress, and end the pass if this was the layer wanted."""
        if self.on_layer is not None:
            self.on_layer(layer)
        if layer == self.stop_after_layer:
            raise StopForward


def explorer_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Eager attention's arithmetic, a block of query rows at a time, with each step timed and the
    probabilities captured.

    The scores, softmax, weighted sum and merge run on `block_rows` query rows at a time (the
    recorder's, else from the memory budget `explorer.analysis.memory.ATTENTION_BLOCK_BYTES`), so a layer's
    transient memory is a block's, not h_q x T x n; a stop's time is the sum over its blocks. Under a
    plain causal mask a block reads only the keys its rows can see (`explorer.runner.gqa.keys_read`:
    about half of a long prefill's scores), where eager computes every one and masks the rest; the
    recorded shapes are eager's. The values equal eager attention's within float32 rounding, 1e-6
    (`explorer.runner.gqa`).

    Args:
        query: [B, h_q, T, d_h] after RoPE.
        key, value: [B, h_kv, n, d_h], the whole cache after this step's write.
        attention_mask: SDPA's boolean mask [B, 1, T, n] (True: attend), or None where it is plain causal;
            each block adds eager's float mask made from it (`explorer.runner.gqa.block_mask`).
        scaling: 1 / sqrt(d_h) for most families (Gemma 3: query_pre_attn_scalar ** -0.5).
        softcap: Gemma-style logit soft-capping, None elsewhere.

    Returns:
        ([B, T, h_q, d_h] attention output, None): the probabilities go to the step's recorder, not to the
        model, which drops them (as SDPA, transformers' default, returns none).
    """
    rec, layer = _ACTIVE.get(), module.layer_idx
    batch, h_q, q_len, head_dim = query.shape
    n = key.shape[2]
    start = rec.clock()
    expanded = torch.Size([batch, h_q, n, head_dim])  # a broadcast (explorer.runner.gqa): no tensor of its own
    rec.record_shapes(stop_name(layer, "attn.gqa_expand"), start, [key.shape, value.shape], [expanded] * 2, key.dtype)
    keep = rec.attention_inputs_of(layer, [h_q, q_len, n], AttentionInputs(query[0].detach(), scaling, softcap),
                                   query.is_meta)
    rows = min(q_len, rec.block_rows or block_rows(h_q, q_len, n, query.element_size()))
    merged, spans = _attend_in_blocks(rec, layer, query, key, value, attention_mask, scaling, softcap, rows, keep)
    _record_attention_stops(rec, layer, spans, query, expanded, merged)
    rec.attention_done(layer)
    return merged, None


def _attend_in_blocks(rec: StepRecorder, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float, softcap: float | None, rows: int,
                      keep) -> tuple[torch.Tensor, list[list[tuple[float, float]]]]:
    """Scores, softmax, weighted sum and merge of `explorer_attention`, `rows` query rows at a time, each
    block's probabilities handed to the recorder (`keep`: its decision to keep this layer's). Returns the
    [B, T, h_q, d_h] output and, per stop (scores, softmax, weighted sum, merge), each block's (start, end)."""
    batch, h_q, q_len, head_dim = query.shape
    n, clock = key.shape[2], rec.clock
    merged, buffers = None, NO_BUFFERS  # one block: tensors of its own
    if rows < q_len:  # the blocks write into the layer's output and buffers
        merged, buffers = query.new_empty(batch, q_len, h_q, head_dim), BlockBuffers.for_blocks(query, rows, n)
    spans: list[list[tuple[float, float]]] = [[], [], [], []]
    for first in range(0, q_len, rows):
        block = slice(first, min(first + rows, q_len))
        start = clock()
        mask = block_mask(attention_mask, block.start, block.stop, q_len, n, query.dtype, query.device, buffers.mask)
        seen = keys_read(attention_mask is None, block.stop, q_len, n)
        scores = grouped_scores(query if merged is None else query[:, :, block], first_keys(key, seen), scaling,
                                softcap, mask, buffers.scores)
        after_scores = clock()
        probs = softmax(scores, buffers.probs)
        after_softmax = clock()
        output = grouped_weighted_sum(probs, first_keys(value, seen), buffers.output)
        after_sum = clock()
        merged = merge_heads(output, merged, block)
        after_merge = clock()
        marks = (start, after_scores, after_softmax, after_sum, after_merge)
        for stop, times in enumerate(spans):
            times.append((marks[stop], marks[stop + 1]))
        if not query.is_meta:  # kept and summed outside the timed stops, as eager has no such copy
            rec.attention_block(layer, first, in_head_order(probs), keep)
    return merged, spans


def _record_attention_stops(rec: StepRecorder, layer: int, spans: list[list[tuple[float, float]]],
                            query: torch.Tensor, expanded: torch.Size, merged: torch.Tensor) -> None:
    """Record the scores, softmax, weighted sum and merge stops of one layer: each block's times, and
    eager attention's shapes ([B, h_q, T, n] scores and probabilities, [B, h_q, T, d_h] per head)."""
    (batch, h_q, q_len, head_dim), n = query.shape, expanded[2]
    heads, per_head = torch.Size([batch, h_q, q_len, n]), torch.Size([batch, h_q, q_len, head_dim])
    rec.record_blocks(stop_name(layer, "attn.scores"), spans[0], [query.shape, expanded], [heads], query.dtype)
    rec.record_blocks(stop_name(layer, "attn.softmax"), spans[1], [heads], [heads], query.dtype)
    rec.record_blocks(stop_name(layer, "attn.weighted_sum"), spans[2], [heads, expanded], [per_head], query.dtype)
    rec.record_blocks(stop_name(layer, "attn.merge_heads"), spans[3], [per_head], [merged.shape], merged.dtype)


AttentionInterface.register(ATTN_IMPLEMENTATION, explorer_attention)
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)  # boolean, or None: plain causal


@contextmanager
def tracing(model: nn.Module, cache, recorder: StepRecorder, hook_modules: bool = True) -> Iterator[None]:
    """Attach the recorder to `model` and `cache` for one forward pass; detach everything on exit.

    Args:
        model: a transformers causal LM of a traced family (`explorer.families.FAMILIES`).
        cache: the `DynamicCache` the pass writes to; its `update` is timed.
        recorder: where events go.
        hook_modules: False to capture attention only (recomputing one layer's probabilities).
    """
    wrapped: dict[nn.Module, Callable | None] = {}
    token = _ACTIVE.set(recorder)
    previous = model.config._attn_implementation
    previous_experts = model.config._experts_implementation
    try:
        if hook_modules:
            _time_stop_modules(model, wrapped)
            _probe_cache_writes(cache, recorder)
        model.config._attn_implementation = ATTN_IMPLEMENTATION
        if moe_layers(model):
            on_meta = model.device.type == "meta"
            model.config._experts_implementation = META_EXPERTS_IMPLEMENTATION if on_meta else EXPERTS_IMPLEMENTATION
        yield
    finally:
        model.config._attn_implementation = previous
        model.config._experts_implementation = previous_experts
        cache.__dict__.pop("update", None)
        for module, forward in wrapped.items():
            if forward is None:
                del vars(module)["forward"]
            else:
                vars(module)["forward"] = forward
        _ACTIVE.reset(token)


def _time_stop_modules(model: nn.Module, restore: dict[nn.Module, Callable | None]) -> None:
    """Time each of this model's stop modules for the step, into the active recorder, by setting its
    `forward` (an instance attribute, as accelerate's hooks set one) to its timed forward
    (`_timed_forwards`). A forward the module already had as an instance attribute is timed in its
    turn; `restore` gets each module's previous one (or None), to be put back. Module hooks would instead
    send each of a step's ~400 module calls, stops or not, through torch's slower hook path. Every pass
    of a model runs under its lock (`explorer.runner.locks.model_lock`), so the wrappers see this
    step's pass alone."""
    for module, key, timed in _timed_forwards(model):
        attributes = vars(module)  # set directly: nn.Module.__setattr__'s checks cost ~1 ms a step here
        previous = restore[module] = attributes.get("forward")
        attributes["forward"] = timed if previous is None else _timed_forward(previous, module, key)


def _timed_forwards(model: nn.Module) -> list[tuple[nn.Module, str, Callable]]:
    """(stop module, canonical name, its class's forward timed) for each stop module of `model`; built
    once per model, so a step allocates no wrapper."""
    timed = _TIMED_FORWARDS.get(model)
    if timed is None:
        timed = _TIMED_FORWARDS[model] = [
            (module, key, _timed_forward(type(module).forward.__get__(module), module, key))
            for module, key in stop_module_names(model).items()
        ]
    return timed


def _timed_forward(forward: Callable, module: nn.Module, key: str) -> Callable:
    """`forward` of `module`, recording the stop `key` in the active recorder's events.

    A stop's inputs are its module's positional tensor arguments (a MoE layer's experts also take the
    expert ids and weights), its outputs the tensors it returns (a MoE router returns its logits, the
    top-k weights and the expert ids: those two are kept, off `meta`, in the recorder's `routing`)."""
    router_layer = parse_stop_name(key)[0] if key.endswith(".mlp.router") else None
    tensor = torch.Tensor  # a local name: looked up three times a call

    def timed_forward(*args, **kwargs):
        recorder = _ACTIVE.get()
        clock = recorder.clock
        start = clock()
        output = forward(*args, **kwargs)
        end = clock()
        if len(args) == 1 and isinstance(output, tensor) and isinstance(args[0], tensor):  # most stops: one in, one out
            recorder.events[key] = Event(start, end, (args[0].shape,), (output.shape,), output.dtype)
            return output
        inputs = [arg.shape for arg in args if isinstance(arg, tensor)]
        tensors = [t for t in (output if isinstance(output, tuple) else (output,)) if isinstance(t, tensor)]
        dtype = tensors[0].dtype if tensors else None
        recorder.events[key] = Event(start, end, inputs, [t.shape for t in tensors], dtype)
        if router_layer is not None and not tensors[0].is_meta:
            recorder.routing[router_layer] = (tensors[2].detach(), tensors[1].detach(), module.num_experts)
        return output

    return timed_forward


def _probe_cache_writes(cache, recorder: StepRecorder) -> None:
    update = cache.update  # the bound method of the cache's class

    def timed_update(key_states, value_states, layer_idx, *args, **kwargs):
        start = recorder.clock()
        keys, values = update(key_states, value_states, layer_idx, *args, **kwargs)
        recorder.record(stop_name(layer_idx, "attn.kv_cache_write"), start,
                        [key_states.shape, value_states.shape], [keys, values])
        return keys, values

    cache.update = timed_update

