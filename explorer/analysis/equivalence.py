"""The "equivalent is not identical" experiment's result, as plain data (the runner measures it,
`explorer.runner.equivalence`; the figure and the CLI show it).

Each comparison runs the same greedy decode two mathematically equivalent ways, both fed the same
tokens (the reference's greedy choices), and reports how far their logits differ at each step and
where the variant's own greedy choice first differs from the reference's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

DEFAULT_STEPS = 8  # greedy steps compared where none are asked for (the prefill's choice is step 0)
MAX_STEPS = 32

WHY = ("Why: floating-point addition is not associative, so a kernel that sums in another order (another "
       "batch shape or padding, a fused attention kernel, another precision, or one row of a recomputed "
       "matrix instead of a cached one) rounds differently: the same maths, different last bits, and a "
       "greedy choice between two near-tied tokens can flip.")


@dataclass(frozen=True)
class Comparison:
    """One equivalent way against the reference, step by step (measured).

    Attributes:
        name: what differs, e.g. "in a batch of 4 (left-padded)".
        max_abs: [steps] the max over the vocabulary of |logits - reference logits| at each step.
        mean_abs: [steps] the mean of it.
        argmax: [steps] the variant's own greedy choice at each step.
        diverged_at: the first step whose greedy choice differs from the reference's; None if none does.
        skipped: why the comparison did not run ("" when it did).
    """

    name: str
    max_abs: list[float]
    mean_abs: list[float]
    argmax: list[int]
    diverged_at: int | None
    skipped: str = ""


@dataclass(frozen=True)
class EquivalenceResult:
    """The experiment on one prompt.

    Attributes:
        reference: how the reference ran, e.g. "alone, SDPA attention, float32, KV cache, cpu".
        prompt_tokens: T.
        tokens: [steps] the reference's greedy tokens (step 0: the prefill's choice).
        comparisons: each equivalent way.
        wall_ms: measured time of the whole experiment.
    """

    reference: str
    prompt_tokens: int
    tokens: list[int]
    comparisons: list[Comparison]
    wall_ms: float

    def to_dict(self) -> dict:
        """Plain JSON-ready data (a saved run holds it under "equivalence")."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EquivalenceResult:
        """The inverse of `to_dict` (a checked saved run's, `explorer.run_schema`)."""
        return cls(**{**data, "comparisons": [Comparison(**c) for c in data["comparisons"]]})

    def lines(self, piece) -> list[str]:
        """A table, one row per comparison, for the CLI; `piece(id)` names a token."""
        rows = [f"reference: {self.reference}; prompt {self.prompt_tokens} tokens; greedy tokens "
                f"{''.join(piece(t) for t in self.tokens)!r}; {self.wall_ms / 1e3:.1f} s (measured)",
                f"{'variant':<38} {'step':>4} {'max |Δlogit|':>13} {'mean |Δlogit|':>14}  greedy"]
        for comparison in self.comparisons:
            if comparison.skipped:
                rows.append(f"{comparison.name:<38} skipped: {comparison.skipped}")
                continue
            for step, (top, mean) in enumerate(zip(comparison.max_abs, comparison.mean_abs, strict=True)):
                same = comparison.argmax[step] == self.tokens[step]
                rows.append(f"{comparison.name if step == 0 else '':<38} {step:>4} {top:>13.3g} {mean:>14.3g}  "
                            f"{'same' if same else 'DIFFERS: ' + repr(piece(comparison.argmax[step]))}")
        rows.append(WHY)
        return rows
