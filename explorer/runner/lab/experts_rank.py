"""One rank of the expert-parallel experiment, in a process of its own (started by
`torch.multiprocessing`, spawn): join the gloo group, load the mixture-of-experts model, keep only its
own E / R experts of every MoE layer, and run each MoE layer as an expert-parallel one (`ExpertParallelMoe`:
the router on every token, this rank's share of the tokens sent to the ranks holding their experts
with an all-to-all, computed there, sent back with a second all-to-all, combined with the router's
weights, and the shares all-gathered), prefill and decode greedily while `CollectiveRecorder` measures
every collective, and write what it measured to a file for the parent (`explorer.runner.lab.experts`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

from explorer.runner.lab.processes import die_if_asked, joined_group, warm_up_collectives
from explorer.runner.lab.tensor_rank import CollectiveRecorder

FAIL_RANK_ENV = "EXPLORER_EXPERTS_FAIL_RANK"  # a rank that exits after its prefill (to test a death mid-run)


class LabelledRecorder(CollectiveRecorder):
    """`CollectiveRecorder` whose every call also carries what it was for (`label`: "dispatch",
    "combine" or "gather"), its MoE layer, an all-to-all's rows sent to each rank (`send_rows`, its
    input split sizes) and a row's bytes (`row_bytes`)."""

    def __init__(self) -> None:
        super().__init__()
        self.label: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        count = len(self.calls)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if len(self.calls) > count:
            sent = args[0]
            self.calls[-1].update(self.label, row_bytes=sent.shape[-1] * sent.element_size(), send_rows=(
                tuple(int(n) for n in args[2]) if self.calls[-1]["kind"] == "all_to_all_single" else ()))
        return out


class ExpertParallelMoe(nn.Module):
    """A `*SparseMoeBlock` (Mixtral, Qwen3-MoE) run expert-parallel, in place of it.

    Every rank holds every token ([B, T, d], attention replicated) and runs the router on all N = B·T
    of them, so each rank knows where every token goes: no counts need exchanging. Rank r owns the
    token rows [r·c, (r + 1)·c), c = ⌈N / R⌉; it sends each of its (token, expert) pairs' hidden state
    to the rank holding that expert (all-to-all, sorted by expert), computes the rows it received
    with its experts, returns them (a second all-to-all), adds them weighted by the router into its
    rows, and an all-gather gives every rank all N rows again.
    """

    def __init__(self, block: nn.Module, layer: int, rank: int, world: int, recorder: list) -> None:
        super().__init__()
        self.gate, experts = block.gate, block.experts
        total = experts.gate_up_proj.shape[0]
        self.per_rank, self.rank, self.world, self.layer = total // world, rank, world, layer
        self.first = rank * self.per_rank
        end = self.first + self.per_rank
        self.gate_up_proj = nn.Parameter(experts.gate_up_proj.data[self.first:end].clone())  # [E/R, 2f, d]
        self.down_proj = nn.Parameter(experts.down_proj.data[self.first:end].clone())  # [E/R, d, f]
        self.act_fn = experts.act_fn
        self.recorder = recorder  # [the active LabelledRecorder], set by `measure`
        self.received: list[list[list[int]]] = []  # per forward: [source rank][local expert] rows computed

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, d] -> [B, T, d], the block's output."""
        batch, length, width = hidden.shape
        flat = hidden.reshape(-1, width)
        _, weights, ids = self.gate(flat)  # [N, k] each, on every token
        rows = -(-flat.shape[0] // self.world)  # c, the rows a rank owns (the last may own fewer)
        tokens, slots, mine = self._pairs(ids, self.rank, rows)
        send_rows = [int((mine // self.per_rank == q).sum()) for q in range(self.world)]
        incoming = [self._pairs(ids, source, rows)[2] for source in range(self.world)]
        incoming = [experts[experts // self.per_rank == self.rank] for experts in incoming]
        got = self._exchange("dispatch", flat[tokens], [len(e) for e in incoming], send_rows)
        local = torch.cat(incoming) - self.first  # [m], the local expert of each received row
        out = torch.zeros_like(got)
        for expert in local.unique().tolist():
            chosen = local == expert
            out[chosen] = self._expert(got[chosen], expert)
        self.received.append([[int((e - self.first == j).sum()) for j in range(self.per_rank)] for e in incoming])
        back = self._exchange("combine", out, send_rows, [len(e) for e in incoming])  # [n·k, d]
        first = self.rank * rows
        combined = torch.zeros(rows, width, dtype=flat.dtype)
        combined.index_add_(0, tokens - first, (back * weights[tokens, slots, None]).to(flat.dtype))
        self.recorder[0].label = {"label": "gather", "layer": self.layer}
        gathered = _waited(funcol.all_gather_single(combined, 0, dist.group.WORLD))  # [R·c, d]
        return gathered[: flat.shape[0]].reshape(batch, length, width)

    def _pairs(self, ids: torch.Tensor, source: int, rows: int):
        """Rank `source`'s (token, slot) pairs sorted by expert (stable): token rows, slots, experts, [n·k] each."""
        first = source * rows
        experts = ids[first:first + rows].reshape(-1)
        order = torch.argsort(experts, stable=True)
        k = ids.shape[1]
        return first + order // k, order % k, experts[order]

    def _exchange(self, label: str, rows: torch.Tensor, receive: list[int], send: list[int]) -> torch.Tensor:
        """An all-to-all of `rows` ([Σ send, d], grouped by the rank each goes to) -> [Σ receive, d]."""
        self.recorder[0].label = {"label": label, "layer": self.layer}
        return _waited(funcol.all_to_all_single(rows.contiguous(), receive, send, dist.group.WORLD))

    def _expert(self, x: torch.Tensor, expert: int) -> torch.Tensor:
        """Local expert `expert`'s MLP on x [m, d] -> [m, d], as transformers' eager experts compute it."""
        gate, up = nn.functional.linear(x, self.gate_up_proj[expert]).chunk(2, dim=-1)
        return nn.functional.linear(self.act_fn(gate) * up, self.down_proj[expert])


def run_rank(rank: int, world: int, port: int, workdir: str, prompt_ids: list[int], tokens: int,
             eos_ids: list[int], timeout_s: float) -> None:
    """The rank's whole run; writes `workdir/rank<rank>.pt` (see `measure`)."""
    with joined_group(rank, world, port, timeout_s):
        model, blocks, recorder = expert_parallel_model(Path(workdir) / "model", rank, world)
        warm_up_collectives(world)
        result = measure(model, blocks, recorder, rank, prompt_ids, tokens, eos_ids)
        torch.save(result, Path(workdir) / f"rank{rank}.pt")
        dist.barrier()


def expert_parallel_model(path: Path, rank: int, world: int):
    """The model saved at `path` with each MoE layer's block replaced by an `ExpertParallelMoe` holding
    this rank's experts [r·E/R, (r + 1)·E/R). Returns (model, {layer: block}, the recorder's slot)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()  # R loading bars would bury the parent's output
    model = AutoModelForCausalLM.from_pretrained(path, experts_implementation="eager").eval()
    recorder: list = [LabelledRecorder()]
    blocks = {}
    for index, layer in enumerate(model.base_model.layers):
        if hasattr(layer.mlp, "experts"):
            blocks[index] = layer.mlp = ExpertParallelMoe(layer.mlp, index, rank, world, recorder)
    return model, blocks, recorder


def measure(model, blocks: dict, recorder: list, rank: int, prompt_ids: list[int], tokens: int,
            eos_ids: list[int]) -> dict:
    """Prefill `prompt_ids` ([1, T]) and decode up to `tokens` greedy tokens (stopping after an EOS),
    each step under a fresh `LabelledRecorder`, each decoder layer timed by hooks.

    Returns:
        {"rank", "pid", "experts": (first, end), "weights": [(name, local shape)] of the first MoE layer,
         "steps": each step's collectives, "received": [step][MoE layer][source rank][local expert] rows,
         "layer_ms": [step][layer] wall ms, "step_ms", "tokens", and on rank 0 "logits": [T + N - 1, V]}.
    """
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    layer_ms: list[list[float]] = []
    handles = _time_layers(model.base_model.layers, layer_ms)
    steps, step_ms, logits, chosen = [], [], [], []
    ids = list(prompt_ids)
    with torch.no_grad():
        while len(chosen) < tokens and not (chosen and chosen[-1] in eos_ids):
            recorder[0] = LabelledRecorder()
            layer_ms.append([])
            with recorder[0]:
                start = time.perf_counter()
                out = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True).logits[0].float()
                step_ms.append((time.perf_counter() - start) * 1e3)
            if not steps:
                die_if_asked(FAIL_RANK_ENV, rank)
            steps.append(recorder[0].calls)
            logits.append(out)
            chosen.append(int(out[-1].argmax()))
            ids = [chosen[-1]]
    for handle in handles:
        handle.remove()
    block = blocks[min(blocks)]
    result = {"rank": rank, "pid": os.getpid(), "experts": (block.first, block.first + block.per_rank),
              "weights": [("gate_up_proj", tuple(block.gate_up_proj.shape)),
                          ("down_proj", tuple(block.down_proj.shape)), ("router", tuple(block.gate.weight.shape))],
              "steps": steps, "layer_ms": layer_ms, "step_ms": step_ms, "tokens": chosen,
              "received": [[blocks[index].received[step] for index in sorted(blocks)] for step in range(len(steps))]}
    if rank == 0:
        result["logits"] = torch.cat(logits)
    return result


def _time_layers(layers, layer_ms: list[list[float]]) -> list:
    """Forward hooks that append each decoder layer's wall ms to `layer_ms[-1]`; returns their handles."""
    handles = []
    for layer in layers:
        starts: list[float] = []
        handles.append(layer.register_forward_pre_hook(lambda *_, starts=starts: starts.append(time.perf_counter())))
        handles.append(layer.register_forward_hook(
            lambda *_, starts=starts: layer_ms[-1].append((time.perf_counter() - starts.pop()) * 1e3)))
    return handles


def _waited(tensor: torch.Tensor) -> torch.Tensor:
    """A functional collective's result as a plain tensor (the recorder has already waited on it)."""
    return tensor.wait() if isinstance(tensor, funcol.AsyncCollectiveTensor) else tensor

