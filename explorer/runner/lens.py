"""The logit lens: every layer's residual stream read through the model's own final norm and LM head.

During a step, `capture_residuals` keeps the residual stream after the embedding and after each
decoder layer at the step's last positions ([P, d] each: a decode step's one position, a prefill's
last `lens_positions(T, L)`), and `LiveLens` holds them with the step's next ids and logits. Only when
a step's lens is asked for does `lens_record` pass them through the model's final norm and LM head
(and Gemma's final logit soft-capping) over the full vocabulary, keeping each cell's top-k, the
probability of the token that follows and the entropy.

Cost, per step asked for: one [P(L+1), d] x [d, V] GEMM (SmolLM2-135M decode: 31 rows x 576 x 49,152,
1.75 GFLOP, reading the 113 MB LM head once); a step nobody looks at pays only the copies of its
residuals (SmolLM2-135M decode: 31 x 576 float32, 71 KB). A prefill keeps at most `LENS_MAX_ROWS`
rows (layer-positions), so a long prompt costs what a short one does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from explorer.runner.architectures import _module, model_features
from explorer.trace import LensRecord

LENS_TOP = 5  # top tokens kept per cell (the view's hover)
LENS_MAX_ROWS = 1024  # layer-positions per step: SmolLM2's 31 rows x 33 positions (a 57 GFLOP GEMM)
_CHUNK_ROWS = 256  # rows per LM-head GEMM: [256, V] float32 logits at a time (50 MB for V = 49,152)
# Residuals a session holds for lenses not yet asked for, all steps together; past it the oldest steps'
# lenses are computed (a record is ~100x smaller) and their residuals freed. SmolLM2-135M: a 1,024-row
# prefill holds 2.4 MB, a decode step 71 KB, so 64 MiB is ~900 decode steps.
DEFAULT_LENS_BUDGET_BYTES = 64 * 2**20


def lens_positions(tokens: int, n_layers: int) -> int:
    """How many of a step's last positions the lens covers: all of them while
    `tokens x (n_layers + 1)` stays within `LENS_MAX_ROWS`, else as many as fit (at least one)."""
    return max(1, min(tokens, LENS_MAX_ROWS // (n_layers + 1)))


@contextmanager
def capture_residuals(model: nn.Module, positions: int) -> Iterator[list[torch.Tensor]]:
    """Keep the residual stream after the embedding and after each decoder layer during one forward pass.

    Yields:
        a list that fills with L + 1 tensors [positions, d] (batch row 0, the last `positions` positions),
        copies, so the step's activations are not held; `positions` 0 captures nothing.
    """
    if positions == 0:
        yield []
        return
    layers = _module(model, model_features(model).layers)
    residuals: list[torch.Tensor] = []

    def keep(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        residuals.append(hidden[0, -positions:].detach().clone())

    def keep_input(module, args):  # the first layer's input: the embedding (GPT-2: plus the position rows)
        residuals.append(args[0][0, -positions:].detach().clone())

    handles = [layers[0].register_forward_pre_hook(keep_input)]
    handles += [layer.register_forward_hook(keep) for layer in layers]
    try:
        yield residuals
    finally:
        for handle in handles:
            handle.remove()


def lens_record(model: nn.Module, residuals: list[torch.Tensor], model_logits: torch.Tensor,
                next_ids: list[int], first_position: int) -> LensRecord:
    """The lens of one step from its captured residuals.

    Args:
        model: the causal LM that ran the step.
        residuals: L + 1 tensors [P, d] from `capture_residuals`.
        model_logits: [V] the model's own last-position logits (the step's stored `StepTrace.logits`:
            float32, equal to the model's output, which the softmax takes in float32 anyway): row L's
            last cell is computed from them, so it is the model's output bit for bit (a GEMM of another
            shape may round differently).
        next_ids: [P] the token following each position (the last: the one the step chose).
        first_position: the context position of the first column.

    Returns:
        the `LensRecord`, with `compute_ms` measured here.
    """
    start = time.perf_counter()
    family = model_features(model)
    norm, head = _module(model, family.top_modules["final_norm"]), _module(model, family.top_modules["lm_head"])
    n_rows, n_positions = len(residuals), residuals[0].shape[0]
    hidden = torch.stack([r.to(head.weight.device) for r in residuals]).reshape(n_rows * n_positions, -1)
    targets = torch.tensor(next_ids, device=head.weight.device).repeat(n_rows)  # [(L+1) P], row-major
    stats = [_stats(read_out(model, norm, head, chunk), targets[i:i + _CHUNK_ROWS])
             for i, chunk in zip(range(0, len(hidden), _CHUNK_ROWS), hidden.split(_CHUNK_ROWS), strict=True)]
    top_ids, top_probs, next_probs, entropy = (torch.cat(parts) for parts in zip(*stats, strict=True))
    last = _stats(model_logits.reshape(1, -1).to(head.weight.device), targets[-1:])
    for whole, cell in zip((top_ids, top_probs, next_probs, entropy), last, strict=True):
        whole[-1] = cell[0]
    shape = (n_rows, n_positions)
    return LensRecord(
        positions=list(range(first_position, first_position + n_positions)), next_ids=list(next_ids),
        top_ids=top_ids.reshape(*shape, LENS_TOP).cpu().numpy().astype(np.int64),
        top_probs=top_probs.reshape(*shape, LENS_TOP).cpu().numpy(),
        next_probs=next_probs.reshape(shape).cpu().numpy(), entropy_bits=entropy.reshape(shape).cpu().numpy(),
        compute_ms=(time.perf_counter() - start) * 1e3,
    )


def read_out(model: nn.Module, norm: nn.Module, head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """[rows, V] logits of residual-stream rows [rows, d]: final norm, LM head, then the final logit
    soft-capping where the config has one (Gemma), as the model's `forward` does."""
    logits = head(norm(hidden))
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


def _stats(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """From [rows, V] logits (any float dtype): top-k ids and probabilities [rows, k], the targets'
    probabilities [rows] and the entropies in bits [rows], in float32 over the full vocabulary."""
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(LENS_TOP, dim=-1)
    entropy = torch.special.entr(probs).sum(-1) / math.log(2)
    return top.indices, top.values, probs.gather(-1, targets[:, None])[:, 0], entropy



@dataclass(eq=False)  # compared by identity
class _Step:
    """What a step's lens needs, until it is computed: then the record alone."""

    residuals: list[torch.Tensor] | None  # L + 1 tensors [P, d], copies
    logits: np.ndarray  # [V] float32: the step's own logits (`StepTrace.logits`, not a copy)
    next_ids: list[int]  # [P]
    first_position: int
    record: LensRecord | None = None

    @property
    def nbytes(self) -> int:
        return sum(r.numel() * r.element_size() for r in self.residuals) if self.residuals else 0


class LiveLens:
    """A live session's `explorer.run.LensSource`: each step's captured residuals, its lens computed on
    first request (under the model's lock, in inference mode) and kept; the residuals then freed.

    Args:
        model: the causal LM the session runs.
        lock: () -> the model's lock, taken while the LM head runs (not re-entrant: never called with it held).
        on_record: called with each record once computed (the session names its top tokens).
        budget_bytes: residuals held for lenses not yet asked for; past it the oldest are computed.
    """

    def __init__(self, model: nn.Module, lock: Callable[[], AbstractContextManager],
                 on_record: Callable[[LensRecord], None], budget_bytes: int = DEFAULT_LENS_BUDGET_BYTES) -> None:
        self._model, self._lock, self._on_record, self.budget_bytes = model, lock, on_record, budget_bytes
        self._steps: list[_Step | None] = []
        self.residual_bytes = 0

    def add(self, residuals: list[torch.Tensor], logits: np.ndarray | None, next_ids: list[int],
            first_position: int) -> None:
        """Hold the next step's residuals (`capture_residuals`) with its logits [V] float32, the id following
        each column and the first column's position. No lens where there are no residuals (shape-only
        mode) or no logits (a batch whose sequence 0 has ended: it is fed the pad id, nothing is drawn)."""
        step = _Step(residuals, logits, list(next_ids), first_position) if residuals and logits is not None else None
        self._steps.append(step)
        self.residual_bytes += step.nbytes if step else 0
        pending = (s for s in self._steps if s is not None and s.record is None)
        while self.residual_bytes > self.budget_bytes:
            self._compute(next(pending))

    def lens(self, step: int) -> LensRecord | None:
        """Step `step`'s record, computed on the first request (see `explorer.run.LensSource.lens`)."""
        held = self._steps[step]
        if held is None:
            return None
        return held.record if held.record is not None else self._compute(held)

    def truncate(self, steps: int) -> None:
        """Forget every step from `steps` on, residuals and records."""
        del self._steps[steps:]
        self.residual_bytes = sum(s.nbytes for s in self._steps if s is not None)

    def reset(self) -> None:
        """Forget every step (a new prefill, or the session closed)."""
        self.truncate(0)

    def _compute(self, held: _Step) -> LensRecord:
        with self._lock(), torch.inference_mode():
            if held.record is None:  # another thread may have computed it while this one waited
                logits = torch.from_numpy(held.logits)
                record = lens_record(self._model, held.residuals, logits, held.next_ids, held.first_position)
                held.record, residuals, held.residuals = record, held.residuals, None
                if held in self._steps:  # not dropped by a branch meanwhile
                    self.residual_bytes -= sum(r.numel() * r.element_size() for r in residuals)
                self._on_record(record)
        return held.record
