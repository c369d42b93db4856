"""A step under tensor parallelism over R ranks (Megatron-LM, Shoeybi et al. 2019), predicted: each
rank's operators on the machine's roofline with its shard of the weights (the query and KV heads,
d_ff and the vocabulary split R ways; norms, residuals and RoPE tables whole on every rank), and the
collectives on a link: 2L + 1 all-reduces of the [B, T, d] residual (two a layer, after the O and
down projections; one after the vocabulary-parallel embedding) and one all-gather of the
vocabulary-parallel LM head's logits, as `explorer.lab.tensor` runs and measures it. Operators and
collectives run one after another (no overlap): a lower bound of the step's time on both counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from explorer.analysis.collectives import CollectiveTime, all_gather, all_reduce
from explorer.analysis.hardware import Hardware, Link
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.roofline import StepRoofline, step_roofline
from explorer.analysis.spec import ModelSpec
from explorer.errors import ConfigError

ALL_REDUCES_PER_LAYER = 2  # after the O projection, after the down projection
EMBEDDING_ALL_REDUCES = 1  # after the vocabulary-parallel embedding's lookups


def split_dims(config: dict) -> dict[str, int]:
    """The sizes tensor parallelism splits across the ranks, by name, from a transformers config.

    Returns:
        {"query heads h_q": .., "KV heads h_kv": .., "MLP width d_ff": ..}.
    """
    heads = int(config["num_attention_heads"])
    return {"query heads h_q": heads, "KV heads h_kv": int(config.get("num_key_value_heads") or heads),
            "MLP width d_ff": int(config["intermediate_size"])}


def check_ranks_divide(config: dict, ranks: int, most: int = 8) -> None:
    """Refuse an R that does not divide every split, naming the dimensions it fails and the R that work.

    Raises:
        ConfigError: R below 1, or a dimension of `split_dims` that R does not divide.
    """
    if ranks < 1:
        raise ConfigError(f"Tensor parallelism needs at least one rank, not R = {ranks}.")
    dims = split_dims(config)
    failing = [f"the {name} ({size})" for name, size in dims.items() if size % ranks]
    if not failing:
        return
    working = [str(r) for r in range(1, most + 1) if all(size % r == 0 for size in dims.values())]
    raise ConfigError(
        f"Tensor parallelism over R = {ranks} ranks splits the query heads, the KV heads and the MLP's d_ff "
        f"across them, so R must divide each: {ranks} does not divide {' nor '.join(failing)}. "
        f"On this model R can be {', '.join(working)}.")


def rank_spec(spec: ModelSpec, ranks: int) -> ModelSpec:
    """The model one rank of R holds: h_q / R query and h_kv / R KV heads, d_ff / R, ⌈V / R⌉ vocabulary
    rows; d, L and the head dim d_h whole.

    Raises:
        ConfigError: an R that does not divide the query heads, the KV heads or d_ff (named).
    """
    config = {"num_attention_heads": spec.n_heads, "num_key_value_heads": spec.n_kv_heads,
              "intermediate_size": spec.intermediate_size}
    check_ranks_divide(config, ranks)
    return replace(spec, n_heads=spec.n_heads // ranks, n_kv_heads=spec.n_kv_heads // ranks,
                   intermediate_size=spec.intermediate_size // ranks,
                   dense_intermediate_size=spec.dense_intermediate_size // ranks,
                   vocab_size=-(-spec.vocab_size // ranks))


@dataclass(frozen=True)
class StepCollectives:
    """A step's collectives on R ranks joined by a link (computed).

    Attributes:
        link: the link between the ranks.
        all_reduce: one all-reduce of the [B, T, d] residual, B·T·d·bytes.
        all_reduces: how many a step: 2L + 1.
        gather: the all-gather of the logits, B·T_out·V·bytes gathered (T_out = 1 but with the LM head
            over all positions).
    """

    link: Link
    all_reduce: CollectiveTime
    all_reduces: int
    gather: CollectiveTime

    @property
    def seconds(self) -> float:
        """(2L + 1) all-reduces and the all-gather on the link, seconds."""
        return self.all_reduces * self.all_reduce.seconds + self.gather.seconds


def step_collectives(spec: ModelSpec, step: Step, options: CostOptions, link: Link, ranks: int) -> StepCollectives:
    """The all-reduces and the logits' all-gather of `step` of the whole model `spec` over `ranks` ranks
    (activations in `options`' format; 0 s at R = 1)."""
    element = options.precision.activation_bytes
    logits_rows = step.rows if options.lm_head_all_positions else step.batch
    alpha, beta = link.latency_s, link.bandwidth_bytes_per_s
    return StepCollectives(link, all_reduce(step.rows * spec.hidden_size * element, ranks, alpha, beta),
                           ALL_REDUCES_PER_LAYER * spec.n_layers + EMBEDDING_ALL_REDUCES,
                           all_gather(logits_rows * spec.vocab_size * element, ranks, alpha, beta))


@dataclass(frozen=True)
class TensorParallelStep:
    """One step on R ranks: a rank's operators and the collectives on the link (all computed).

    Attributes:
        ranks: R.
        roofline: one rank's operators on the machine (its shard: `rank_spec`).
        collectives: the step's all-reduces and all-gather on the link.
    """

    ranks: int
    roofline: StepRoofline
    collectives: StepCollectives

    @property
    def operators_s(self) -> float:
        """One rank's operators' time lower bound, seconds."""
        return self.roofline.time_lower_bound_s

    @property
    def step_s(self) -> float:
        """Operators then collectives, no overlap, seconds."""
        return self.operators_s + self.collectives.seconds

    @property
    def communication_share(self) -> float:
        """The collectives' share of the step, 0..1."""
        return self.collectives.seconds / self.step_s


def tensor_parallel_step(spec: ModelSpec, step: Step, hardware: Hardware, link: Link, ranks: int,
                         options: CostOptions | None = None) -> TensorParallelStep:
    """`step` of `spec` split over `ranks` ranks of `hardware` joined by `link`.

    Raises:
        ConfigError: an R that does not divide the query heads, the KV heads or d_ff (named), or a
            machine without a rate for the activation format.
    """
    options = options or CostOptions()
    roofline = step_roofline(rank_spec(spec, ranks), step, hardware, options)
    return TensorParallelStep(ranks, roofline, step_collectives(spec, step, options, link, ranks))
