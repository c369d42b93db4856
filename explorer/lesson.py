"""The guided lesson: short pages, each a claim about the run on screen, written from its numbers.

A page names the view, the layer and the what-if it needs, and writes its few sentences from the
`Run` (measured shapes, times, probabilities and cache bytes), the cost model (FLOPs, bytes, bounds:
estimated) and the chosen machine: the same page says other numbers for another prompt or model,
and every claim on it is true of the run shown. Nothing here runs the model (the app runs a decode
step first where a page needs one) or draws: `page_text` is a pure function of what it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.analysis.equivalence import WHY, EquivalenceResult
from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import Scenario, StepCosts, scenario_costs
from explorer.analysis.roofline import StepRoofline, costs_roofline
from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD
from explorer.figures.kv_bytes import bytes_text, total_bytes
from explorer.figures.lens import MAX_COLUMNS, LensColumns
from explorer.figures.theme import si_text
from explorer.run import Run
from explorer.trace import StepTrace

LESSON_BATCH = 64  # the batch of the last page's what-if: decode's lesson shows by then


@dataclass(frozen=True)
class LessonPage:
    """One page of the lesson.

    Attributes:
        key: its name in code and tests.
        title: its heading.
        view: the view it shows (one of `explorer.figures.views.VIEWS`).
        layer: "first", "middle" or "last": which decoder layer its view shows.
        batch: the roofline what-if's batch B it sets (None: the run's own).
    """

    key: str
    title: str
    view: str
    layer: str = "first"
    batch: int | None = None


PAGES = (
    LessonPage("prefill_decode", "Prefill, then one token at a time", "forward"),
    LessonPage("one_layer", "One layer, stop by stop", "journey"),
    LessonPage("memory_bound", "Why a decode step reads every weight", "roofline"),
    LessonPage("kv_cache", "What the KV cache saves", "kv_cache"),
    LessonPage("gqa", "GQA: query heads share KV heads", "attention", layer="middle"),
    LessonPage("attention_row", "The row a decode step adds", "attention", layer="last"),
    LessonPage("sampling", "From logits to a token: temperature, top-k, top-p, min-p", "sampling"),
    LessonPage("batch", f"What a batch of {LESSON_BATCH} changes on the roofline", "roofline", batch=LESSON_BATCH),
    LessonPage("lens", "What each layer would say: the logit lens", "lens"),
    LessonPage("sinks", "Attention sinks: weight parked on the first token", "attention", layer="last"),
    LessonPage("equivalence", "Equivalent is not identical", "equivalence"),
)


@dataclass(frozen=True)
class LessonInputs:
    """What the pages are written from.

    Attributes:
        run: the run, with at least one decode step.
        step: the decode step the pages speak of (>= 1).
        layer: the decoder layer the page's view shows.
        hardware: the roofline's machine.
        attention: the shown layer's probabilities at `step`, [h_q, 1, n] float32; None where the run has
            none (shape-only mode, a saved run that left them out).
        sinks: the first token's importance for every layer and head at `step`, [L, h_q]
            (`explorer.analysis.sinks`); None where the run lacks some layer's attention.
        sink_threshold: a head is a sink over this.
        equivalence: the visit's "equivalent is not identical" experiment, if it ran one.
    """

    run: Run
    step: int
    layer: int
    hardware: Hardware
    attention: np.ndarray | None = None
    sinks: np.ndarray | None = None
    sink_threshold: float = DEFAULT_SINK_THRESHOLD
    equivalence: EquivalenceResult | None = None


def page_layer(page: LessonPage, n_layers: int) -> int:
    """The decoder layer `page` shows, of `n_layers`."""
    return {"first": 0, "middle": n_layers // 2, "last": n_layers - 1}[page.layer]


def page_text(page: LessonPage, inputs: LessonInputs) -> str:
    """The page's sentences (Markdown) for this run.

    Raises:
        ValueError: `inputs.step` is not a decode step of the run.
    """
    if not 1 <= inputs.step < len(inputs.run.steps):
        raise ValueError(f"the lesson speaks of a decode step; step {inputs.step} is not one of this run's")
    return _WRITERS[page.key](inputs)


def _prefill_decode(i: LessonInputs) -> str:
    prefill, step = i.run.steps[0], i.run.steps[i.step]
    d, L, T = _spec(i).hidden_size, _spec(i).n_layers, len(prefill.input_ids)
    times = "" if step.shape_only else (
        f" The prefill took **{prefill.wall_ms:.0f} ms** for {T} tokens, this step **{step.wall_ms:.0f} ms** "
        f"for one (measured).")
    return (f"The **prefill** ran all **T = {T}** prompt tokens through the {L} layers in one pass: the residual "
            f"stream is [1, {T}, {d}] (B, T, d), the blue shapes. Each **decode** step feeds only the token "
            f"chosen last, [1, 1, {d}] (orange), and reads the keys and values of the earlier tokens from the "
            f"KV cache: at {_label(step)} the context is **n = {step.context_length}**.{times}")


def _one_layer(i: LessonInputs) -> str:
    spec, step = _spec(i), i.run.steps[i.step]
    h_q, h_kv, d_h, d = spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.hidden_size
    scores = _output_shape(i.run.steps[0], i.layer, "attn.scores")
    decode_scores = _output_shape(step, i.layer, "attn.scores")
    return (f"Layer {i.layer} of {spec.n_layers}; every layer runs these stops with its own weights (×{spec.n_layers}). "
            f"Attention: a norm, then q/k/v projections ({d} → {h_q * d_h} for Q, {d} → {h_kv * d_h} for K and V: "
            f"{h_q} query heads, {h_kv} KV heads of d_h = {d_h}), RoPE, the KV-cache write, scores "
            f"**{scores}** at the prefill but **{decode_scores}** at {_label(step)} (one query row), softmax, "
            f"the weighted sum and o_proj, added back to the stream. {_mlp_sentence(spec, i.layer)} "
            "Shapes are measured by hooks on the real modules.")


def _mlp_sentence(spec, layer: int) -> str:
    d, d_ff = spec.hidden_size, spec.intermediate_size
    if not spec.moe_layers[layer]:
        return f"The MLP: {d} → {spec.dense_intermediate_size} → {d}, added back."
    return (f"The MLP is a mixture of experts: a router scores the {spec.n_experts} experts for each token and "
            f"sends it to the best {spec.experts_per_token}; each expert runs {d} → {d_ff} → {d} on the tokens "
            "it got, and their outputs are summed, weighted by the router, then added back.")


def _memory_bound(i: LessonInputs) -> str:
    prefill, decode = _roofline(i, 0), _roofline(i, i.step)
    ridge = i.hardware.ridge_point(decode.precision.activations)
    total = decode.total.cost
    return (f"At {_label(i.run.steps[i.step])} the model does **{si_text(total.flops, 'FLOP')}** and moves "
            f"**{si_text(total.bytes, 'B')}**, nearly all of it the weights, read once for one token: "
            f"**{total.arithmetic_intensity:.1f} FLOP/byte**. {i.hardware.name} needs "
            f"**{ridge:.0f} FLOP/byte** (its ridge point) to keep its arithmetic busy, so decode waits on memory: "
            f"{decode.memory_bound_fraction:.0%} of its time lower bound "
            f"({decode.time_lower_bound_s * 1e3:.3g} ms) is memory-bound. The prefill uses each weight for all "
            f"{prefill.step.tokens} tokens: {prefill.total.cost.arithmetic_intensity:.1f} FLOP/byte. "
            "(Estimated by the cost model.)")


def _kv_cache(i: LessonInputs) -> str:
    spec, step = _spec(i), i.run.steps[i.step]
    held = total_bytes(step.kv)
    per_token = held / step.context_length
    kv_flops = 2 * spec.hidden_size * 2 * spec.n_kv_heads * spec.head_dim * spec.n_layers  # K and V, one token
    most = spec.context_window
    at_most = f"; at this model's whole context of {most:,} tokens: **{_bytes(per_token * most)}**" if most else ""
    return (f"After {_label(step)} the cache holds K and V of **n = {step.context_length}** positions in "
            f"{spec.n_layers} layers: **{_bytes(held)}** (measured), **{_bytes(per_token)} per token**{at_most}. "
            f"So a decode step computes K and V for its one new token only ({si_text(kv_flops, 'FLOP')}) instead of "
            f"all {step.context_length} again ({si_text(kv_flops * step.context_length, 'FLOP')}, computed), "
            "and reads the cache instead: the cost moves from compute to memory.")


def _gqa(i: LessonInputs) -> str:
    spec, step = _spec(i), i.run.steps[i.step]
    h_q, h_kv = spec.n_heads, spec.n_kv_heads
    held = total_bytes(step.kv)
    if h_q == h_kv:
        return (f"This model is **MHA**: each of its {h_q} query heads has its own KV head (g = 1), so its cache "
                f"holds {h_q} heads per layer ({_bytes(held)} now). GQA models share one KV head among g query heads "
                "and cache g times less.")
    g = h_q // h_kv
    return (f"The **{h_q} query heads** share **{h_kv} KV heads**: each group of **g = {g}** heads (the panels "
            f"titled with the same KV head) reads the same K and V. So the cache is {g}× smaller than an MHA model's of the same size "
            f"(**{_bytes(held)}** against {_bytes(held * g)} now), and a decode step reads {g}× fewer cache bytes. "
            f"Heads of one group still weigh the keys differently: each has its own queries (layer {i.layer}).")


def _attention_row(i: LessonInputs) -> str:
    step = i.run.steps[i.step]
    n = step.context_length
    head = f"At {_label(step)} one new query, the token fed, attends to all **n = {n}** keys: one new row per head."
    if i.attention is None:
        return f"{head} (This run holds no attention values to show: shape-only mode, or a saved run without them.)"
    row = i.attention[:, -1, :].mean(axis=0)  # [n], the heads' mean weight on each key
    top = int(np.argmax(row))
    pieces = i.run.pieces_until(i.step)
    first = float(row[0])
    where = (": an **attention sink**, weight with nowhere better to go lands on the first token." if top == 0
             else f". The first token holds {first:.2f}.")
    return (f"{head} In layer {i.layer}, averaged over its heads, the largest weight, **{row[top]:.2f}**, is on key "
            f"{top} {_quoted(pieces[top])}{where} The newest key, the token itself, holds {float(row[-1]):.2f}. "
            "Each row sums to 1 (measured softmax probabilities); the colour scale is stretched so small weights show.")


def _sampling(i: LessonInputs) -> str:
    step = i.run.steps[i.step]
    record = step.sampling
    if record is None:
        return "Shape-only mode: there are no logits, so nothing is sampled."
    vocab = record.stages[0].logits.size
    raw = _probs(record.stages[0].logits)
    top = int(np.argmax(raw))
    kept = [f"{stage.name.replace('_', '-')} keeps **{int(np.isfinite(stage.logits).sum()):,}**"
            for stage in record.stages[1:] if stage.name != "temperature"]
    how = "drew" if record.settings.get("do_sample") else "took the most likely token, greedy:"
    filters = (f" Then {', '.join(kept)}." if kept else " No filter is on.")
    return (f"{_label(step).capitalize()} scored all **{vocab:,}** tokens (the logits). Raw, the top one is "
            f"{_quoted(i.run.piece(top))} with p = **{raw[top]:.2f}**.{filters} The step {how} "
            f"{_quoted(i.run.piece(record.token_id))} (p = {record.token_prob:.2f} in the distribution it was drawn "
            "from). Each filter runs over the whole vocabulary with transformers' own logits processors; move a "
            "control in the settings to preview another choice on these same logits.")


def _batch(i: LessonInputs) -> str:
    own = _costs(i, i.step)
    batched = scenario_costs(i.run.spec, own, Scenario(batch=LESSON_BATCH))
    one, many = _of(own, i.hardware), _of(batched, i.hardware)
    gemm_one, gemm_many = _gemm_intensity(one), _gemm_intensity(many)
    return (f"The same decode step for a **batch of {LESSON_BATCH}** sequences (a what-if: the model is not run). "
            f"Each weight is read once for all {LESSON_BATCH} tokens, so the weight GEMMs' intensity goes from "
            f"**{gemm_one:.1f}** to **{gemm_many:.0f} FLOP/byte**, while attention reads each sequence's own cache and "
            f"stays where it was. The step's bound goes from {one.time_lower_bound_s * 1e3:.3g} ms for 1 token to "
            f"{many.time_lower_bound_s * 1e3:.3g} ms for {LESSON_BATCH} ({many.tokens_per_s / one.tokens_per_s:.0f}× the "
            f"tokens/s), and attention's share of it from {_share(one.attention_fraction)} to "
            f"**{_share(many.attention_fraction)}**. Set the batch back under \"Roofline what-ifs\" in the settings. "
            "(Estimated by the cost model.)")


def _lens(i: LessonInputs) -> str:
    step, lens = i.run.steps[i.step], i.run.lens(i.step)
    if lens is None:
        return "This run has no logit lens (shape-only mode, or a run saved before it): no values to read."
    chosen, rows = lens.next_ids[-1], lens.top_ids.shape[0]
    hits = np.flatnonzero(lens.top_ids[:, -1, 0] == chosen)
    first = int(hits[0]) if hits.size else None
    where = ("never the top-1 of any layer" if first is None else
             "already the top-1 of the embedding itself" if first == 0 else
             f"first the top-1 after **layer {first - 1}** of {rows - 1}")
    middle = rows // 2
    # the embedding row over the positions the figure beside it draws: every step's up to this one
    records = [i.run.lens(s) for s in range(i.step + 1)]
    shown = LensColumns.join([r for r in records if r is not None])
    columns = range(max(0, len(shown.positions) - MAX_COLUMNS), len(shown.positions))
    fed = i.run.ids
    own = int(sum(int(shown.top_ids[0, c, 0]) == fed[shown.positions[c]] for c in columns))
    return (f"Each row reads the residual stream after one layer through the model's own final norm and LM head, "
            f"over all its tokens: what the model would say if it stopped there. At {_label(step)} it chose "
            f"{_quoted(i.run.piece(chosen))}, {where}; its probability is {lens.next_probs[middle, -1]:.2g} after layer "
            f"{middle - 1} and **{lens.next_probs[-1, -1]:.2f}** at the output (the model's own logits, bit for bit). "
            f"The embedding row names the input token itself at {own} of the {len(columns)} positions drawn "
            f"({'a tied LM head reads its own embedding back' if own else 'the LM head is not the embedding'}). "
            "(Computed from the step's activations.)")


def _sinks(i: LessonInputs) -> str:
    if i.sinks is None:
        return "This run holds no attention values for every layer (shape-only mode, or a saved run without them)."
    heads = i.sinks > i.sink_threshold
    counts = heads.sum(axis=1)
    here = int(counts[i.layer])
    late = int(np.argmax(counts == counts.max()))
    return (f"For each head, the **importance** of a key is its mean attention weight over the queries that see it. "
            f"At {_label(i.run.steps[i.step])}, **{heads.mean():.0%}** of the {heads.size} (layer, head) pairs put a "
            f"mean weight over **{i.sink_threshold:g}** on the first token, which carries little meaning: "
            f"{int(counts[0])} of {heads.shape[1]} heads in layer 0, {here} in layer {i.layer} (shown, its panels "
            f"marked ●), and {int(counts.max())} in layer {late}, the first with that many. Softmax must put its "
            "weight somewhere; heads with nothing to look for park it on a token every query sees (Gu et al., ICLR "
            "2025). That is why engines that drop old tokens keep the first ones (StreamingLLM). (Computed from the "
            "attention probabilities.)")


def _equivalence(i: LessonInputs) -> str:
    result = i.equivalence
    why = WHY.removeprefix("Why: ")
    if result is None:
        return ("A KV cache, a batch, a fused attention kernel or another precision compute the same function, "
                "but not the same bits. Press **Run the experiment** in this tab: it decodes your prompt greedily "
                "and again those equivalent ways, and shows how far each step's logits move. " + why.capitalize())
    ran = [c for c in result.comparisons if not c.skipped]
    parts = [f"{c.name}: up to **{max(c.max_abs):.1e}**" for c in ran]
    flips = [f"{c.name} from step {c.diverged_at}" for c in ran if c.diverged_at is not None]
    return (f"Against the reference ({result.reference}), the logits of {len(result.tokens)} greedy steps move by "
            f"{'; '.join(parts)} (measured). "
            + (f"Greedy tokens differ: {'; '.join(flips)}. " if flips else "The greedy tokens stay the same here. ")
            + why.capitalize())


_WRITERS = {"prefill_decode": _prefill_decode, "one_layer": _one_layer, "memory_bound": _memory_bound,
            "kv_cache": _kv_cache, "gqa": _gqa, "attention_row": _attention_row, "sampling": _sampling,
            "batch": _batch, "lens": _lens, "sinks": _sinks, "equivalence": _equivalence}


def _spec(i: LessonInputs):
    if i.run.spec is None:
        raise ValueError("the lesson needs a model family the cost model knows")
    return i.run.spec


def _costs(i: LessonInputs, step: int) -> StepCosts:
    _spec(i)
    return i.run.costs(step)


def _roofline(i: LessonInputs, step: int) -> StepRoofline:
    return _of(_costs(i, step), i.hardware)


def _of(costs: StepCosts, hardware: Hardware) -> StepRoofline:
    return costs_roofline(costs.step, costs.by_op, costs.total, hardware, costs.precision)


def _gemm_intensity(roofline: StepRoofline) -> float:
    """The weight GEMMs' FLOPs over their bytes, together."""
    gemms = [p.cost for p in roofline.points if p.cost.kind in ("gemm", "experts")]
    return sum(c.flops for c in gemms) / sum(c.bytes for c in gemms)


def _output_shape(trace: StepTrace, layer: int, stop: str) -> str:
    op = next(op for op in trace.ops if op.name == f"layers.{layer}.{stop}")
    return "[" + ", ".join(str(x) for x in op.output_shapes[0]) + "]"


def _probs(logits: np.ndarray) -> np.ndarray:
    """Softmax in float64 over the finite logits."""
    shifted = np.exp(logits.astype(np.float64) - np.max(logits))
    return shifted / shifted.sum()


def _label(trace: StepTrace) -> str:
    return "the prefill" if trace.step_index == 0 else f"decode step {trace.step_index}"


def _quoted(piece: str) -> str:
    """A token piece as the page quotes it: its repr, so spaces and newlines show (Markdown escaped)."""
    return "`" + repr(piece).replace("`", "'") + "`"


def _share(fraction: float) -> str:
    """A share as a percentage, to one decimal below 10%."""
    return f"{fraction:.1%}" if fraction < 0.1 else f"{fraction:.0%}"


def _bytes(size: float) -> str:
    return bytes_text(round(size))
