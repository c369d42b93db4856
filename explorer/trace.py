"""The contract between the runner and everything that shows a step: plain data, no torch.

A `StepTrace` holds what one forward pass (the prefill, or one decode step) computed: every stop
with its shapes and wall time, the KV cache after the step, the shape of each layer's attention, the
last-position logits and how the next token was chosen. It is frozen once made (a `explorer.run.Run`
holds the steps in order), and it round-trips through JSON (`to_dict`, written by `dumps` / `from_dict`),
so a trace can be saved, shared and drawn without the model. The attention probabilities themselves come from an
`explorer.run.AttentionSource`, which holds them within one memory budget.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np
import orjson

Shape = list[int]


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One stop of the forward pass.

    Attributes:
        name: canonical stop name, e.g. `embed`, `layers.3.attn.k_proj`, `lm_head` (see
            `explorer.stop_names.stop_name`).
        kind: operator kind (`explorer.stop_names.StopKind`): gather, norm, gemm, reshape, rope,
            cache_write, broadcast, batched_gemm, softmax, elementwise, experts, sample, tokenize,
            detokenize; each stop's is its row's in `explorer.stop_catalogue`.
        layer: decoder layer index, None outside the layers.
        input_shapes: shapes of the inputs, e.g. [[1, 17, 576]].
        output_shapes: shapes of the outputs (two for K and V where a stop produces both). A step's
            records share equal shape lists (`explorer.runner.assemble`): read them, never change them.
        dtype: dtype of the output, e.g. "float32", "int64".
        wall_ms: measured wall time in milliseconds; None for a stop that launches no kernel (a view).
    """

    name: str
    kind: str
    layer: int | None
    input_shapes: list[Shape]
    output_shapes: list[Shape]
    dtype: str
    wall_ms: float | None


@dataclass(frozen=True)
class KVSnapshot:
    """One layer's KV cache after a step.

    Attributes:
        layer: decoder layer index.
        key_shape: [batch, n_kv_heads, n, head_dim].
        value_shape: [batch, n_kv_heads, n, head_dim].
        key_bytes: bytes held by the key tensor.
        value_bytes: bytes held by the value tensor.
    """

    layer: int
    key_shape: Shape
    value_shape: Shape
    key_bytes: int
    value_bytes: int


@dataclass(frozen=True)
class AttentionRecord:
    """The shape of one layer's attention probabilities for this step's queries (batch row 0); the
    values come from an `explorer.run.AttentionSource` (`probs(step, layer)`).

    Attributes:
        layer: decoder layer index.
        shape: [n_heads, q_len, kv_len]: prefill [h_q, T, T], decode [h_q, 1, n] (a sliding-window
            layer: kv_len up to its window).
        first_key_sums: [n_heads] each head's sum over this step's queries of its probability on the
            layer's first key, in float64, taken in the step from the probabilities it computed (the
            attention sinks read these, `explorer.analysis.sinks`); None on the meta device and in runs
            saved before them.
    """

    layer: int
    shape: Shape
    first_key_sums: list[float] | None = None


@dataclass(frozen=True)
class RoutingRecord:
    """One mixture-of-experts layer's routing in one step, as its router (`mlp.gate`) returned it:
    measured by a hook, not recomputed.

    Attributes:
        layer: decoder layer index.
        n_experts: E, the layer's routed experts.
        expert_ids: [B*T, k] ints: the experts each token row went to (row b*T + t), highest weight first.
        weights: [B*T, k] float32: their weights in the sum of the experts' outputs (Mixtral: the top-k
            softmax probabilities renormalised to sum to 1; Qwen3-MoE: renormalised only with
            `norm_topk_prob`, else the probabilities over all E).
    """

    layer: int
    n_experts: int
    expert_ids: list[list[int]]
    weights: np.ndarray

    @property
    def tokens_per_expert(self) -> list[int]:
        """[E] how many (token row, slot) pairs chose each expert: the rows of that expert's GEMMs
        (tokens_e; they sum to B*T*k, each token choosing k distinct experts)."""
        return np.bincount(np.asarray(self.expert_ids, dtype=np.int64).ravel(), minlength=self.n_experts).tolist()

    @property
    def experts_hit(self) -> int:
        """Experts that received at least one token: the experts whose weights the step read."""
        return sum(1 for count in self.tokens_per_expert if count)

    def to_dict(self) -> dict:
        """A dict that `dumps` writes as strict JSON (the weights kept as a numpy array)."""
        return {"layer": self.layer, "n_experts": self.n_experts, "expert_ids": [list(row) for row in self.expert_ids],
                "weights": self.weights}

    @classmethod
    def from_dict(cls, data: dict) -> RoutingRecord:
        """The inverse of `to_dict`."""
        return cls(int(data["layer"]), int(data["n_experts"]), [list(row) for row in data["expert_ids"]],
                   float32_array(data["weights"]))


@dataclass(frozen=True)
class SamplingStage:
    """The logits after one stage of the sampling pipeline, over the full vocabulary.

    Attributes:
        name: "raw", "temperature", "top_k", "top_p" or "min_p".
        logits: [vocab] float32; filtered-out tokens are -inf.
    """

    name: str
    logits: np.ndarray

    @property
    def probs(self) -> np.ndarray:
        """[vocab] float32 softmax of `logits`; 0 where filtered out."""
        return softmax(self.logits)

    @property
    def kept(self) -> np.ndarray:
        """[vocab] bool: tokens still allowed after this stage."""
        return np.isfinite(self.logits)


@dataclass(frozen=True)
class SamplingRecord:
    """How the next token was chosen.

    Attributes:
        settings: the `SamplingSettings` as a dict.
        stages: raw logits then each active filter, in the order `generate` applies them.
        token_id: the chosen token id.
        token_prob: its probability in the final stage's distribution (greedy: in the raw softmax).
    """

    settings: dict
    stages: list[SamplingStage]
    token_id: int
    token_prob: float

    @property
    def final(self) -> SamplingStage:
        """The distribution the token was drawn from."""
        return self.stages[-1]


@dataclass(frozen=True)
class LensRecord:
    """The logit lens of one step: the residual stream after the embedding (row 0) and after each
    decoder layer (row l), passed through the model's own final norm and LM head over the full
    vocabulary, at the step's last `len(positions)` positions; only these statistics of each
    [vocab] distribution are kept.

    Attributes:
        positions: [P] the context positions of the columns (0-based; a decode step: its one position).
        next_ids: [P] the token that follows each position: the prompt's next token, and at the last
            position the token the step chose.
        top_ids: [L+1, P, k] int, each cell's top-k token ids, most probable first.
        top_probs: [L+1, P, k] float32, their probabilities.
        next_probs: [L+1, P] float32, the probability of `next_ids` in each cell.
        entropy_bits: [L+1, P] float32, each cell's entropy in bits.
        compute_ms: measured wall time of the lens in milliseconds (not part of the step's `wall_ms`).

    Row L at the last position is the model's own logits (the tensor sampling reads), bit for bit.
    """

    positions: list[int]
    next_ids: list[int]
    top_ids: np.ndarray
    top_probs: np.ndarray
    next_probs: np.ndarray
    entropy_bits: np.ndarray
    compute_ms: float

    def to_dict(self) -> dict:
        """A dict that `dumps` writes as strict JSON (the arrays kept as numpy arrays)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> LensRecord:
        """The inverse of `to_dict`."""
        return cls(list(data["positions"]), list(data["next_ids"]), np.array(data["top_ids"], dtype=np.int64),
                   float32_array(data["top_probs"]), float32_array(data["next_probs"]),
                   float32_array(data["entropy_bits"]), float(data["compute_ms"]))


@dataclass(frozen=True)
class StepTrace:
    """Everything one forward pass computed.

    Attributes:
        stage: "prefill" or "decode".
        step_index: 0 for the prefill, k for the k-th decode step.
        input_ids: ids that entered this step (T of them).
        input_pieces: their text pieces.
        context_length: n, the cache length after this step.
        ops: every stop for every layer, in execution order.
        kv: each layer's KV cache after the step.
        attention: each layer's attention record.
        logits: [vocab] float32 last-position logits.
        sampling: how the next token was chosen.
        token_text: the text the chosen token adds (may be "" while a UTF-8 character is incomplete).
        finished: True when the chosen token ends generation.
        finish_reason: "eos", "max_new_tokens" or "".
        wall_ms: wall time of the whole forward pass in milliseconds.
        device: where it ran, e.g. "cpu", "cuda:0", "meta".
        shape_only: True when run on the meta device (no values: logits, attention and sampling empty).
        batch_texts: a batch of real prompts: each sequence's generated text after this step, special
            tokens left out (`logits`, `sampling` and `token_text` are sequence 0's); else empty.
        routing: each mixture-of-experts layer's routing (`RoutingRecord`), in layer order; empty for a
            dense model and in shape-only mode (no values to route by).

    The step's logit lens is not here: it is computed on request (`explorer.run.Run.lens`).
    """

    stage: str
    step_index: int
    input_ids: list[int]
    input_pieces: list[str]
    context_length: int
    ops: list[OpRecord]
    kv: list[KVSnapshot]
    attention: list[AttentionRecord]
    logits: np.ndarray | None
    sampling: SamplingRecord | None
    token_text: str = ""
    finished: bool = False
    finish_reason: str = ""
    wall_ms: float = 0.0
    device: str = "cpu"
    shape_only: bool = False
    batch_texts: list[str] = field(default_factory=list)
    routing: list[RoutingRecord] = field(default_factory=list)

    def op(self, name: str) -> OpRecord:
        """The stop called `name`. Raises KeyError if the step has no such stop."""
        for record in self.ops:
            if record.name == name:
                return record
        raise KeyError(name)

    def to_dict(self) -> dict:
        """A dict that `dumps` writes as strict JSON: the float32 arrays (logits, sampling stages) kept
        as numpy arrays, which it writes as nested lists with the -inf of a filtered-out token as null
        (`from_dict` turns it back into -inf)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["input_ids"], data["input_pieces"] = list(self.input_ids), list(self.input_pieces)
        data["batch_texts"] = list(self.batch_texts)
        for name in ("ops", "kv", "attention"):  # records of ints, strings and lists of ints: no array in them
            data[name] = [_record_dict(record) for record in data[name]]
        data["sampling"] = None if self.sampling is None else asdict(self.sampling)
        data["routing"] = [record.to_dict() for record in self.routing]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> StepTrace:
        """The inverse of `to_dict`."""
        data = dict(data)
        data["ops"] = [OpRecord(**op) for op in data["ops"]]
        data["kv"] = [KVSnapshot(**kv) for kv in data["kv"]]
        data["attention"] = [AttentionRecord(a["layer"], a["shape"], a.get("first_key_sums")) for a in data["attention"]]
        data["logits"] = float32_array(data["logits"])
        if data["sampling"] is not None:
            s = data["sampling"]
            stages = [SamplingStage(st["name"], float32_array(st["logits"])) for st in s["stages"]]
            data["sampling"] = SamplingRecord(s["settings"], stages, s["token_id"], s["token_prob"])
        data["routing"] = [RoutingRecord.from_dict(record) for record in data.get("routing") or []]
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float32; -inf entries get probability 0."""
    shifted = logits.astype(np.float32) - np.max(logits, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def _record_dict(record) -> dict:
    """A record's fields as a dict, each list copied (shapes: lists of lists of ints)."""
    return {f.name: _copied(getattr(record, f.name)) for f in fields(record)}


def _copied(value):
    return [_copied(item) for item in value] if isinstance(value, list) else value


def float32_array(value) -> np.ndarray | None:
    """The inverse of `dumps` for one float32 array: nested lists (null for -inf) -> ndarray
    float32; None stays None."""
    if value is None:
        return None
    array = np.array(value, dtype=object)
    array[array == None] = -np.inf  # noqa: E711 (elementwise comparison)
    return array.astype(np.float32)


def dumps(value) -> bytes:
    """`value` (dicts, lists, numpy arrays and scalars) as strict JSON, UTF-8, written by orjson:
    each float32 as its shortest text ("0.1", not 0.10000000149011612), which reads back to the same
    float32 bit for bit; -inf, inf and NaN as null; a whole-number key as text (as `json.dumps` writes it); no
    spaces.

    Raises:
        TypeError: a value JSON cannot hold (orjson.JSONEncodeError is a TypeError).
    """
    return orjson.dumps(value, default=_contiguous, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def _contiguous(value):
    """orjson writes only C-contiguous arrays: a view (a slice, a transpose) is copied first."""
    if isinstance(value, np.ndarray) and not value.flags.c_contiguous:
        return np.ascontiguousarray(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
