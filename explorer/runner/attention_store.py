"""A live session's attention: every step's post-RoPE queries, and as many probability matrices as fit
beside them within one memory budget; any other matrix is recomputed from the queries and the cached
keys (`LiveAttention`, the session's `explorer.run.AttentionSource`). A long prefill's pooled view
(its key-block masses, `explorer.analysis.pooling`) is kept apart, within `POOLED_BYTES`, so that
the next decode step's figure does not recompute it."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from explorer.analysis.pooling import matrix_part
from explorer.runner.gqa import AttentionInputs

# The pooled views a session keeps beside its attention budget: a 2,048-token prefill layer's key-block
# masses are 3.7 MB on the embedded model (9 heads x 2,048 rows x 50 blocks, float32), a 8,192-token
# one's 15 MB; the least recently drawn go first.
POOLED_BYTES = 32 * 2**20


class AttentionStore:
    """The queries of every step and the float32 probability matrices kept beside them, least
    recently used first out.

    Each step costs the same bookkeeping however many steps came before (running byte counts and an
    ordered map of the kept matrices).

    Args:
        budget_bytes: queries plus kept matrices, all steps together.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.inputs: list[dict[int, AttentionInputs]] = []  # per step, by layer
        self.query_bytes = 0
        self.kept_bytes = 0
        self._kept: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._pooled: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()  # (step, layer, factor)
        self._pooled_bytes = 0

    def keeper(self, step_query_bytes: int) -> Callable[[int, list[int], int], bool]:
        """For the next step's `StepRecorder`: (layer, [h_q, q_len, kv_len], the layer's query bytes) ->
        whether to keep that layer's matrix. The step's own matrices come first: they are refused only
        where they would not fit beside every query, the step's own included: `step_query_bytes`, the
        estimate of all its layers' queries, is counted before its first matrix, so that the prefill's
        peak stays within the budget too (a layer's queries beyond the estimate are counted as they
        come; 0 where the model is not known); older matrices give way after the step (`add`)."""
        used, reserved = self.query_bytes + step_query_bytes, step_query_bytes

        def keep(layer: int, shape: list[int], query_bytes: int) -> bool:
            nonlocal used, reserved
            used += max(0, query_bytes - reserved)
            reserved = max(0, reserved - query_bytes)
            size = math.prod(shape) * 4
            if used + size > self.budget_bytes:
                return False
            used += size
            return True

        return keep

    def add(self, matrices: dict[int, np.ndarray], inputs: dict[int, AttentionInputs]) -> None:
        """Take a finished step's queries and the matrices it kept (by layer); give up kept matrices,
        least recently used first, until the store is within its budget."""
        step = len(self.inputs)
        self.inputs.append(inputs)
        self.query_bytes += sum(layer.query.nbytes for layer in inputs.values())
        for layer, probs in matrices.items():
            self._kept[(step, layer)] = probs
            self.kept_bytes += probs.nbytes
        self._shrink()

    def truncate(self, steps: int) -> None:
        """Forget the queries and kept matrices of every step from `steps` on (a session continuing
        from an earlier step)."""
        del self.inputs[steps:]
        self.query_bytes = sum(layer.query.nbytes for step in self.inputs for layer in step.values())
        for key in [key for key in self._kept if key[0] >= steps]:
            self.kept_bytes -= self._kept.pop(key).nbytes
        for key in [key for key in self._pooled if key[0] >= steps]:
            self._pooled_bytes -= self._pooled.pop(key).nbytes

    def get(self, step: int, layer: int) -> np.ndarray | None:
        """The kept matrix (now the most recently used), or None where it is not kept."""
        probs = self._kept.get((step, layer))
        if probs is not None:
            self._kept.move_to_end((step, layer))
        return probs

    def keep(self, step: int, layer: int, probs: np.ndarray) -> None:
        """Keep a recomputed matrix, as the most recently used, where it fits beside the queries
        (older matrices give way)."""
        if probs.nbytes <= self.budget_bytes - self.query_bytes and (step, layer) not in self._kept:
            self._kept[(step, layer)] = probs
            self.kept_bytes += probs.nbytes
            self._shrink()

    def kept(self, step: int, layer: int) -> bool:
        """Whether the matrix is kept (`get` would not recompute it)."""
        return (step, layer) in self._kept

    def pooled(self, step: int, layer: int, factor: int) -> np.ndarray | None:
        """The kept key-block masses of a matrix (now the most recently used), or None."""
        mass = self._pooled.get((step, layer, factor))
        if mass is not None:
            self._pooled.move_to_end((step, layer, factor))
        return mass

    def keep_pooled(self, step: int, layer: int, factor: int, mass: np.ndarray) -> None:
        """Keep a matrix's key-block masses within `POOLED_BYTES`, the least recently used going first."""
        old = self._pooled.pop((step, layer, factor), None)
        self._pooled_bytes += mass.nbytes - (0 if old is None else old.nbytes)
        self._pooled[(step, layer, factor)] = mass
        while self._pooled_bytes > POOLED_BYTES:
            self._pooled_bytes -= self._pooled.popitem(last=False)[1].nbytes

    def _shrink(self) -> None:
        while self._kept and self.kept_bytes > self.budget_bytes - self.query_bytes:
            _, probs = self._kept.popitem(last=False)
            self.kept_bytes -= probs.nbytes


class LiveAttention:
    """A live session's `AttentionSource`: a kept matrix, else one recomputed (and kept, within the
    budget, so a redraw does not recompute it).

    Args:
        budget_bytes: the session's attention memory, queries and kept matrices together.
        recompute: (step, layer, rows, key_factor) -> the session's recompute of a matrix or its part
            (as `explorer.run.AttentionSource.probs` returns it).
        has_values: False in shape-only mode (no weights, so no probabilities).
    """

    def __init__(self, budget_bytes: int, recompute: Callable[[int, int, tuple[int, int] | None, int], np.ndarray],
                 has_values: bool) -> None:
        self.budget_bytes, self._recompute, self._has_values = budget_bytes, recompute, has_values
        self.store = AttentionStore(budget_bytes)

    def reset(self) -> None:
        """Forget every query and matrix (a new prefill, or the session closed)."""
        self.store = AttentionStore(self.budget_bytes)

    def has(self, step: int, layer: int) -> bool:
        """True for every step and layer of a session with weights (see `AttentionSource.has`)."""
        return self._has_values

    def kept(self, step: int, layer: int) -> bool:
        """Whether the store keeps the matrix (see `AttentionSource.kept`)."""
        return self.store.kept(step, layer)

    def probs(self, step: int, layer: int, rows: tuple[int, int] | None = None, key_factor: int = 1) -> np.ndarray:
        """See `explorer.run.AttentionSource.probs`: a whole matrix is kept within the budget once
        recomputed, a whole matrix's key-block masses within `POOLED_BYTES`; a few rows are not kept."""
        store = self.store
        probs = store.get(step, layer)
        if probs is not None:
            return matrix_part(probs, rows, key_factor)
        if rows is None and key_factor == 1:
            probs = self._recompute(step, layer, None, 1)
            store.keep(step, layer, probs)
            return probs
        if rows is not None:
            return self._recompute(step, layer, rows, key_factor)
        mass = store.pooled(step, layer, key_factor)
        if mass is None:
            mass = self._recompute(step, layer, None, key_factor)
            store.keep_pooled(step, layer, key_factor, mass)
        return mass
