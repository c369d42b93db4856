"""What a session keeps to show attention: every step's post-RoPE queries, and the newest probability
matrices within a memory budget (any other matrix is recomputed from the queries and the cached keys)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from explorer.runner.gqa import AttentionInputs
from explorer.trace import AttentionRecord, StepTrace


class AttentionStore:
    """The queries of every step and as many float32 probability matrices as fit beside them.

    Each step costs the same bookkeeping however many steps came before (running byte counts and a
    queue of the kept matrices, oldest first).

    Args:
        budget_bytes: queries plus kept matrices, all steps together.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.inputs: list[dict[int, AttentionInputs]] = []  # per step, by layer
        self.query_bytes = 0
        self._kept: deque[AttentionRecord] = deque()
        self._kept_bytes = 0

    def keeper(self) -> Callable[[int, list[int], int], bool]:
        """For the next step's `StepRecorder`: (layer, [h_q, q_len, kv_len], the layer's query bytes) ->
        whether to keep that layer's matrix. The step's own matrices come first: they are refused only
        where they would not fit beside every query, older matrices give way after the step (`add`)."""
        used = self.query_bytes

        def keep(layer: int, shape: list[int], query_bytes: int) -> bool:
            nonlocal used
            used += query_bytes
            size = math.prod(shape) * 4
            if used + size > self.budget_bytes:
                return False
            used += size
            return True

        return keep

    def add(self, trace: StepTrace, inputs: dict[int, AttentionInputs]) -> None:
        """Take a finished step's queries and kept matrices; drop kept matrices, oldest first, until the
        store is within its budget (a dropped matrix keeps its shape: `probs` becomes None)."""
        self.inputs.append(inputs)
        self.query_bytes += sum(layer.query.nbytes for layer in inputs.values())
        for record in trace.attention:
            if record.probs is not None:
                self._kept.append(record)
                self._kept_bytes += record.probs.nbytes
        while self._kept and self._kept_bytes > self.budget_bytes - self.query_bytes:
            record = self._kept.popleft()
            self._kept_bytes -= record.probs.nbytes
            record.probs = None
