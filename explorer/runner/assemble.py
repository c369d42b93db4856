"""Turning one pass's recorded events into the ordered stops of a `StepTrace`.

Stops that are modules or steps of the attention function were timed directly. The rest are
bounded by their neighbours: GPT-2's sum of token and position embeddings between the position lookup
and the first norm; RoPE runs between the last projection (or QK-norm) and the cache
write; a residual add between the end of its branch (a MoE layer's: its experts) and the next norm; the MLP activation in the
gaps after the gate projection (Llama runs silu(gate) before the up projection) and before the down
projection. Splitting into heads is a view: it launches no kernel, so its wall time is None.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from explorer.families import Family
from explorer.runner.devices import dtype_name
from explorer.runner.hooks import Event
from explorer.stop_names import parse_stop_name, stop_name
from explorer.trace import OpRecord

_PROJECTIONS = ("q_proj", "q_norm", "k_proj", "k_norm", "v_proj", "qkv_proj")


Plan = list[tuple[str, str, int | None, Callable | None]]


def stop_plan(table: list[tuple[str, str, int | None]]) -> Plan:
    """`table` (`explorer.stops.stop_table(...)`) as (name, kind, layer, builder) rows for `assemble_ops`:
    a derived stop's builder, None for a stop timed directly. Built once per stop table, so a step
    parses no stop name."""
    return [(name, kind, layer, _DERIVED.get(parse_stop_name(name)[1]) if layer is not None else None)
            for name, kind, layer in table]


def assemble_ops(
    plan: Plan,
    events: dict[str, Event],
    family: Family,
    extra: dict[str, OpRecord],
) -> list[OpRecord]:
    """The stops of `plan`, in its order, each with shapes, dtype and wall time.

    Args:
        plan: `stop_plan(...)` of this step's stop table.
        events: the recorder's events, keyed by canonical name.
        family: the model's family (`explorer.families`).
        extra: stops measured by the session itself (tokenize, sample, detokenize).

    Raises:
        RuntimeError: a stop of the table was not seen in the pass (a family the table misdescribes).
    """
    ops = []
    record = _Records()
    layer_events: _LayerEvents | None = None
    for name, kind, layer, builder in plan:
        if builder is not None:
            if layer_events is None or layer_events.layer != layer:
                layer_events = _LayerEvents(events, layer)
            ops.append(builder(record, name, kind, layer, layer_events, family))
        elif (event := events.get(name)) is not None:
            ops.append(record.event(name, kind, layer, event))
        elif name in extra:
            ops.append(extra[name])
        elif name == "embed_add":
            ops.append(_embed_add(record, name, kind, events))
        else:
            raise RuntimeError(f"stop {name} was not observed in the forward pass")
    return ops


class _Records:
    """Builds one step's records: shapes as lists of ints, the dtype as a name ("float32").

    Each distinct list of shapes is built once a step and shared by the records that have it (records
    are frozen, their shapes read, never changed): a decode step's ~600 records then hold a few dozen
    lists instead of ~2,900, which the garbage collector would otherwise scan again and again."""

    def __init__(self) -> None:
        # (input shapes, output shapes, dtype) -> (input lists, output lists, dtype name)
        self._fields: dict[tuple, tuple[list[list[int]], list[list[int]], str]] = {}
        self._lists: dict[tuple[torch.Size, ...], list[list[int]]] = {}

    def __call__(self, name: str, kind: str, layer: int | None, inputs: list, outputs: list, dtype: torch.dtype,
                 wall_ms: float | None) -> OpRecord:
        key = (tuple(inputs), tuple(outputs), dtype)
        fields = self._fields.get(key)
        if fields is None:
            fields = self._fields[key] = (self._shared(key[0]), self._shared(key[1]),
                                          dtype_name(dtype))
        return OpRecord(name, kind, layer, fields[0], fields[1], fields[2], wall_ms)

    def event(self, name: str, kind: str, layer: int | None, event: Event, outputs: list | None = None) -> OpRecord:
        """The record of a stop timed directly (its event's shapes, dtype and time)."""
        return self(name, kind, layer, event.inputs, event.outputs if outputs is None else outputs, event.dtype,
                    event.seconds * 1e3)

    def _shared(self, shapes: tuple[torch.Size, ...]) -> list[list[int]]:
        lists = self._lists.get(shapes)
        if lists is None:
            lists = self._lists[shapes] = [list(shape) for shape in shapes]
        return lists


class _LayerEvents:
    """Events of one layer by relative name, and its projections' (and QK-norms') events in order."""

    def __init__(self, events: dict[str, Event], layer: int) -> None:
        self.events, self.layer = events, layer
        self.next_layer_start = events.get(stop_name(layer + 1, "input_norm")) or events["final_norm"]
        self.projections = {p: event for p in _PROJECTIONS if (event := self.get(f"attn.{p}")) is not None}

    def __getitem__(self, rel: str) -> Event:
        return self.events[stop_name(self.layer, rel)]

    def get(self, rel: str) -> Event | None:
        return self.events.get(stop_name(self.layer, rel))


def _ms(start: float, end: float) -> float:
    return max(end - start, 0.0) * 1e3


def _split_heads(record, name, kind, layer, ev: _LayerEvents, family) -> OpRecord:
    inputs = [e.outputs[0] for rel, e in ev.projections.items() if not rel.endswith("_norm")]
    write, scores = ev["attn.kv_cache_write"], ev["attn.scores"]
    outputs = [scores.inputs[0], *write.inputs]
    return record(name, kind, layer, inputs, outputs, scores.dtype, None)


def _rope(record, name, kind, layer, ev: _LayerEvents, family) -> OpRecord:
    write, scores = ev["attn.kv_cache_write"], ev["attn.scores"]
    last_end = max(e.end for e in ev.projections.values())
    shapes = [scores.inputs[0], write.inputs[0]]
    return record(name, kind, layer, shapes, shapes, scores.dtype, _ms(last_end, write.start))


def _merge_heads(record, name, kind, layer, ev: _LayerEvents, family) -> OpRecord:
    return record.event(name, kind, layer, ev["attn.merge_heads"], outputs=ev["attn.o_proj"].inputs)


def _attn_residual(record, name, kind, layer, ev: _LayerEvents, family: Family) -> OpRecord:
    if family.sandwich_norms:
        branch_end, next_start = ev["post_attn_norm"].end, ev["pre_mlp_norm"].start
    else:
        branch_end, next_start = ev["attn.o_proj"].end, ev["post_attn_norm"].start
    return _residual(record, name, kind, layer, ev["attn.o_proj"], _ms(branch_end, next_start))


def _mlp_residual(record, name, kind, layer, ev: _LayerEvents, family: Family) -> OpRecord:
    experts = ev.get("mlp.experts")
    if experts is not None:  # a MoE layer: the experts' [B*T, d] sum is viewed back as [B, T, d], then added
        return _residual(record, name, kind, layer, ev["post_attn_norm"], _ms(experts.end, ev.next_layer_start.start))
    branch = ev["post_mlp_norm"] if family.sandwich_norms else ev["mlp.down_proj"]
    return _residual(record, name, kind, layer, ev["mlp.down_proj"], _ms(branch.end, ev.next_layer_start.start))


def _residual(record, name, kind, layer, branch_out: Event, wall_ms: float) -> OpRecord:
    shape = branch_out.outputs[0]
    return record(name, kind, layer, [shape, shape], [shape], branch_out.dtype, wall_ms)


def _embed_add(record: _Records, name: str, kind: str, events: dict[str, Event]) -> OpRecord:
    """GPT-2's token embeddings [B, T, d] plus the position table's rows [1, T, d] (broadcast over B),
    timed from the end of the position lookup to the first layer's norm (the add and the dropout)."""
    tokens, positions = events["embed"], events["pos_embed"]
    after = events.get(stop_name(0, "input_norm")) or events["final_norm"]
    return record(name, kind, None, [tokens.outputs[0], positions.outputs[0]], [tokens.outputs[0]],
                  tokens.dtype, _ms(positions.end, after.start))


def _mlp_act(record, name, kind, layer, ev: _LayerEvents, family: Family) -> OpRecord:
    if not family.gated_mlp:  # GPT-2's GELU is a module of its own, hooked
        return record.event(name, kind, layer, ev["mlp.act"])
    down = ev["mlp.down_proj"]
    if family.fused_gate_up:
        wall_ms = _ms(ev["mlp.gate_up_proj"].end, down.start)
    else:
        gate, up = ev["mlp.gate_proj"], ev["mlp.up_proj"]
        wall_ms = _ms(gate.end, up.start) + _ms(up.end, down.start)
    shape = down.inputs[0]
    return record(name, kind, layer, [shape, shape], [shape], down.dtype, wall_ms)


_DERIVED = {
    "attn.split_heads": _split_heads,
    "attn.rope": _rope,
    "attn.merge_heads": _merge_heads,
    "attn_residual": _attn_residual,
    "mlp_residual": _mlp_residual,
    "mlp.act": _mlp_act,
}
