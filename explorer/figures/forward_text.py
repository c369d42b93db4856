"""The forward-pass diagram's words: each node's label (its measured output shapes) and hover (its
shape equation in symbols and numbers, its estimated cost, its measured time, what engines do),
and the key to the dimensions. Pure Python over traces.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from explorer.analysis.records import OpCost
from explorer.analysis.timing_stats import ms_number, noise_text, spread_text, stop_timing
from explorer.families import Family
from explorer.figures.dims import coloured
from explorer.figures.stop_docs import engine_note, stop_doc, weight_shape
from explorer.figures.theme import plain_label, si_text, visible_piece
from explorer.journey import shape_text, step_label
from explorer.stop_catalogue import CATALOGUE
from explorer.stop_names import parse_stop_name
from explorer.trace import OpRecord, StepTrace

PREFILL_TEXT, DECODE_TEXT = "#0b4f8a", "#9a3a00"  # the prefill's shapes in blue, the decode step's in orange


@dataclass(frozen=True)
class Stages:
    """The traces drawn: the prefill and the shown decode step (None while the prefill is shown), with
    each one's stops by name and the analytic costs of the shown layer's stops (empty: not known)."""

    prefill: StepTrace
    decode: StepTrace | None
    prefill_ops: dict[str, OpRecord]
    decode_ops: dict[str, OpRecord]
    costs: tuple[dict[str, OpCost], ...]
    family: Family | None = None  # its formulas (LayerNorm, GPT-2's Conv1D); None: the Llama block's

    @property
    def weights_in_out(self) -> bool:
        """The layers' weights are stored [in, out], applied as X · W (GPT-2's `Conv1D`)."""
        return self.family is not None and self.family.conv1d

    def weight(self, stop: str) -> list[int] | None:
        """The shape of the weight `stop` multiplies by, as the model stores it (`weight_shape`)."""
        return weight_shape(self.prefill_ops[stop], _vocab(self.prefill), self.weights_in_out)

    @property
    def traces(self) -> list[StepTrace]:
        return [self.prefill] if self.decode is None else [self.prefill, self.decode]


def escaped(keys) -> list[str]:
    """Node keys as a figure carries them: escaped (a saved run's stop names are its author's text)."""
    return [plain_label(key) for key in keys]


def node_label(key: str, stages: Stages, tied: bool) -> str:
    if key == "kv_cache":
        layer = _layer(stages)
        lengths = [f'<span style="color:{colour}">n={trace.kv[layer].key_shape[2]}</span>'
                   for trace, colour in zip(stages.traces, (PREFILL_TEXT, DECODE_TEXT), strict=False)]
        return "<b>KV cache</b> " + " ".join(lengths) + "<br><br><br>"
    if key.startswith("W:"):
        stop = key[2:]
        op = stages.prefill_ops[stop]
        symbol = _weight_symbol(stop)
        if tied and stop in ("embed", "lm_head"):
            symbol += " (tied)"
        return f"<b>{symbol}</b><br>{_compact(stages.weight(stop))}"
    lines = [f"<b>{plain_label(_short(key))}</b>"]
    for ops, colour in ((stages.prefill_ops, PREFILL_TEXT), (stages.decode_ops, DECODE_TEXT)):
        op = ops.get(key)
        if ops is stages.decode_ops and stages.decode is None:
            continue
        lines.append(f'<span style="color:{colour}">{plain_label(_output_text(key, op, stages, ops))}</span>')
    return "<br>".join(lines)


def _output_text(key: str, op: OpRecord | None, stages: Stages, ops: dict[str, OpRecord]) -> str:
    """A node's measured output, compact and whole: "[1,35,576]", equal outputs once with "×2", unequal
    ones each (split heads: q's then k's and v's, "[1,9,35,64] [1,3,35,64]×2", the per-head shapes);
    the token piece at detokenize; the ids a decode step feeds at tokenize."""
    if key == "detokenize":
        trace = stages.prefill if ops is stages.prefill_ops else stages.decode
        return repr(visible_piece(trace.token_text, 10))
    if op is None:
        embed = ops["embed"]
        return f"{_compact(embed.input_shapes[0])} fed"
    runs = [(shape, len(list(equal))) for shape, equal in groupby(op.output_shapes)]
    return " ".join(_compact(shape) + (f"×{count}" if count > 1 else "") for shape, count in runs)


def _compact(shape: list[int] | None) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]" if shape else "text"


def _short(key: str) -> str:
    relative = parse_stop_name(key)[1]
    row = CATALOGUE.get(relative)
    return row.label if row else relative.split(".")[-1]


def _weight_symbol(stop: str) -> str:
    """"W_q" for q_proj, "γ" for a norm, "E" for the embedding (from the stop docs' weight symbols)."""
    return _doc(stop)[2].split(" ")[0]


def _doc(stop: str, family: Family | None = None) -> tuple[str, str, str]:
    """(formula, shapes in symbols, weight in symbols as stored) of a stop (`stop_doc`); a stop the docs
    do not know (a saved run's own name) has none, and its weight is "W"."""
    formula, symbols, weight = stop_doc(parse_stop_name(stop)[1], family)
    return formula, symbols, weight or "W"


def _layer(stages: Stages) -> int:
    """The layer drawn."""
    return next(op.layer for op in stages.prefill_ops.values() if op.layer is not None)


def _vocab(trace: StepTrace) -> int:
    return trace.op("lm_head").output_shapes[0][-1]


def node_hover(key: str, stages: Stages, tied: bool) -> str:
    """A node's shape equation in symbols (coloured) and in numbers per step, its FLOPs and bytes
    (estimated by the cost model), its wall time (measured), and what inference engines do there."""
    if key == "kv_cache":
        return _kv_hover(stages)
    if key.startswith("W:"):
        stop = key[2:]
        shape = stages.weight(stop)
        symbols = _doc(stop, stages.family)[2]
        note = "<br>the same matrix as the LM head's (tied embeddings)" if tied and stop in ("embed", "lm_head") else ""
        return (f"<b>weight of {plain_label(stop)}</b><br>{coloured(symbols)} = {shape_text(shape)}<br>"
                f"read in full at every step, whatever T is{note}")
    relative = parse_stop_name(key)[1]
    formula, symbols, weight_symbols = stop_doc(relative, stages.family)  # no weight: no "· Wᵀ"
    in_out = stages.weights_in_out and stages.prefill_ops[key].layer is not None
    lines = [f"<b>{plain_label(key)}</b> ({plain_label(stages.prefill_ops[key].kind)}): {formula}",
             "symbols: " + coloured(_equation(symbols, weight_symbols, in_out))]
    for index, (trace, ops) in enumerate(((stages.prefill, stages.prefill_ops), (stages.decode, stages.decode_ops))):
        if trace is None:
            continue
        lines.append(f"{step_label(trace)}: {_numbers(ops.get(key), stages, weight_symbols)}")
        lines.append("    " + _cost_text(key, index, stages) + " · " + _wall_text(ops.get(key), trace))
    lines.append(f"<i>engines: {engine_note(relative)}</i>")
    return "<br>".join(lines)


def _equation(symbols: str, weight_symbols: str | None, in_out: bool = False) -> str:
    """"[B, T, d] · W_q [h_q·d_h, d]ᵀ → [B, T, h_q·d_h]" for a GEMM (a weight stored [in, out]: no ᵀ);
    the shapes in symbols otherwise."""
    if not weight_symbols or "→" not in symbols or weight_symbols.startswith(("γ", "E")):
        return symbols
    inputs, outputs = symbols.split(" → ", 1)
    return f"{inputs} · {weight_symbols}{'' if in_out else 'ᵀ'} → {outputs}"


def _numbers(op: OpRecord | None, stages: Stages, weight_symbols: str | None) -> str:
    if op is None:
        return "not run in this step"
    inputs = " ".join(shape_text(shape) for shape in op.input_shapes) or "text"
    outputs = " ".join(shape_text(shape) for shape in op.output_shapes) or "text"
    if op.kind == "gemm" and weight_symbols:
        transposed = "" if stages.weights_in_out and op.layer is not None else "ᵀ"
        return f"{inputs} · {shape_text(stages.weight(op.name))}{transposed} → {outputs}"
    return f"{inputs} → {outputs}"


def _cost_text(key: str, index: int, stages: Stages) -> str:
    cost = stages.costs[index].get(key) if index < len(stages.costs) else None
    if cost is None:
        return "no arithmetic" if stages.costs else "cost not modelled for this family"
    return f"estimated (cost model): {si_text(cost.flops, 'FLOP')}, {si_text(cost.bytes, 'B')} moved"


def _wall_text(op: OpRecord | None, trace: StepTrace) -> str:
    if trace.shape_only:
        return "not timed (shape-only: no kernel ran)"
    if op is None or op.wall_ms is None:
        return "no kernel (a view)"
    text = f"measured: {ms_number(op.wall_ms)} ms (one run; noisy){noise_text(op.wall_ms)}"
    timing = stop_timing(trace, op)  # the same stop in the step's other layers
    return text + (f"; {spread_text(timing, with_range=False)}" if timing is not None and timing.repeated else "")


def _kv_hover(stages: Stages) -> str:
    lines = ["<b>KV cache</b> of this layer: K and V of every position so far, " + coloured("[B, h_kv, n, d_h]") + " ×2"]
    layer = _layer(stages)
    for trace in stages.traces:
        kv = trace.kv[layer]
        window = f" (a sliding window: the context is {trace.context_length})" if \
            kv.key_shape[2] < trace.context_length else ""
        lines.append(f"after {step_label(trace)}: n = {kv.key_shape[2]}{window}, {shape_text(kv.key_shape)} ×2, "
                     f"{si_text(kv.key_bytes + kv.value_bytes, 'B')}")
    lines.append("a decode step writes one position and reads all n")
    lines.append(f"<i>engines: {engine_note('attn.kv_cache_write')}</i>")
    return "<br>".join(lines)


def dimension_values(stages: Stages) -> str:
    """"B=1 T=35 n=35 d=576 ...", each symbol in its colour, read from the measured shapes; a
    mixture-of-experts model adds E (experts) and k (experts per token) from its router's outputs
    (d_ff where a dense MLP shows it)."""
    trace = stages.decode or stages.prefill
    ops = stages.decode_ops or stages.prefill_ops
    split = next(op for name, op in ops.items() if name.endswith("attn.split_heads"))
    act = next((op for name, op in ops.items() if name.endswith("mlp.act")), None)
    router = next((op for name, op in ops.items() if name.endswith("mlp.router")), None)
    q_shape, kv_shape = split.output_shapes[0], split.output_shapes[-1]
    values = {"B": q_shape[0], "T": len(trace.input_ids), "n": trace.context_length,
              "d": ops["embed"].output_shapes[0][-1], "h_q": q_shape[1], "h_kv": kv_shape[1], "d_h": q_shape[-1],
              "d_ff": act.output_shapes[0][-1] if act else None, "V": _vocab(trace)}
    text = " ".join(coloured(symbol) + f"={value}" for symbol, value in values.items() if value is not None)
    if router is not None:
        text += f" E={router.output_shapes[0][-1]} k={router.output_shapes[1][-1]}"
    return text


def stage_title(trace: StepTrace) -> str:
    return f"{step_label(trace)} (T={len(trace.input_ids)}, n={trace.context_length})"
