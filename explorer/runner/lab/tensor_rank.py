"""One rank of the tensor-parallel experiment, in a process of its own (started by
`torch.multiprocessing`, spawn): join the gloo group, load the model, shard it with PyTorch's
tensor-parallel API by the model's own plan (`config.base_model_tp_plan`: ColwiseParallel /
RowwiseParallel on DTensors), prefill and decode greedily while a dispatch mode records every
collective, and write what it measured to a file for the parent (`explorer.runner.lab.tensor`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from explorer.lab.tensor import STOPS
from explorer.runner.lab.processes import die_if_asked, joined_group, warm_up_collectives

FAIL_RANK_ENV = "EXPLORER_TENSOR_FAIL_RANK"  # a rank that exits after its prefill (to test a death mid-run)
COLLECTIVES = {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast"}


class CollectiveRecorder(TorchDispatchMode):
    """Every collective of torch.distributed's functional ops (what DTensor's redistributions call)
    dispatched while it is active: its kind, input shape and bytes, and the wall time from its issue
    to its completion (it is waited on at once, as the next op would wait on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace, _, kind = func.overloadpacket._qualified_op_name.partition("::")
        if namespace != "_c10d_functional" or kind not in COLLECTIVES:
            return func(*args, **(kwargs or {}))
        start = time.perf_counter()
        out = torch.ops._c10d_functional.wait_tensor(func(*args, **(kwargs or {})))
        tensor = args[0]
        self.calls.append({"kind": kind, "shape": tuple(tensor.shape), "ms": (time.perf_counter() - start) * 1e3,
                           "payload_bytes": tensor.numel() * tensor.element_size()})
        return out


def run_rank(rank: int, world: int, port: int, workdir: str, prompt_ids: list[int], tokens: int,
             eos_ids: list[int], timeout_s: float) -> None:
    """The rank's whole run; writes `workdir/rank<rank>.pt` (see `measure`)."""
    with joined_group(rank, world, port, timeout_s):
        model = sharded_model(Path(workdir) / "model", world)
        warm_up_collectives(world)
        result = measure(model, rank, prompt_ids, tokens, eos_ids)
        torch.save(result, Path(workdir) / f"rank{rank}.pt")
        dist.barrier()


def sharded_model(path: Path, world: int):
    """The model saved at `path` parallelized over a CPU mesh of `world` ranks by transformers' own
    tensor-parallel plan for it (`model._tp_plan`: its config's plan for the decoder layers and its
    class's for the ends): the embedding split by vocabulary rows ("embedding_rowwise": each rank looks
    up the ids in its rows, an all-reduce adds the [B, T, d] lookups), Q, K, V, gate and up by columns,
    O and down by rows, and the LM head by vocabulary ("colwise_gather_output": each rank's logits of
    its V / R tokens, all-gathered). The norms stay whole on every rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()  # R loading bars would bury the parent's output
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel,
              "embedding_rowwise": lambda: RowwiseParallel(input_layouts=Replicate()),
              "colwise_gather_output": lambda: ColwiseParallel(output_layouts=Replicate())}
    plan = {name: styles[style]() for name, style in model._tp_plan.items()}
    parallelize_module(model, init_device_mesh("cpu", (world,)), plan)
    return model


def measure(model, rank: int, prompt_ids: list[int], tokens: int, eos_ids: list[int]) -> dict:
    """Prefill `prompt_ids` ([1, T]) and decode up to `tokens` greedy tokens (stopping after an EOS),
    each step under a `CollectiveRecorder`, layer 0's shapes recorded in the prefill.

    Returns:
        {"rank", "pid", "stops", "weights", "kv_shape", "steps" (each step's collectives),
         "step_ms", "tokens", and on rank 0 "logits": [T + N - 1, V] float32, every step's logits}.
    """
    from transformers import DynamicCache

    layer = model.base_model.layers[0]
    cache = DynamicCache(config=model.config)
    steps, step_ms, logits, chosen = [], [], [], []
    ids = list(prompt_ids)
    with torch.no_grad():  # DTensor's parallel styles are not run under inference_mode here
        while len(chosen) < tokens and not (chosen and chosen[-1] in eos_ids):
            with _stop_shapes(layer) if not steps else contextlib.nullcontext([]) as stops, \
                    CollectiveRecorder() as recorder:
                start = time.perf_counter()
                out = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True).logits[0].float()
                step_ms.append((time.perf_counter() - start) * 1e3)
            if not steps:
                kv_shape, first_stops = tuple(cache.layers[0].keys.shape), list(stops)
                die_if_asked(FAIL_RANK_ENV, rank)
            steps.append(recorder.calls)
            logits.append(out)
            chosen.append(int(out[-1].argmax()))
            ids = [chosen[-1]]
    weights = [(name, tuple(_local(layer.get_submodule(module).weight).shape))
               for name, module in (("q_proj", "self_attn.q_proj"), ("k_proj", "self_attn.k_proj"),
                                    ("v_proj", "self_attn.v_proj"), ("o_proj", "self_attn.o_proj"),
                                    ("gate_proj", "mlp.gate_proj"), ("up_proj", "mlp.up_proj"),
                                    ("down_proj", "mlp.down_proj"))]
    weights += [("embed_tokens", tuple(_local(model.get_input_embeddings().weight).shape)),
                ("lm_head", tuple(_local(model.get_output_embeddings().weight).shape))]
    result = {"rank": rank, "pid": os.getpid(), "stops": first_stops, "weights": weights, "kv_shape": kv_shape,
              "steps": steps, "step_ms": step_ms, "tokens": chosen}
    if rank == 0:
        result["logits"] = torch.cat(logits)
    return result


@contextlib.contextmanager
def _stop_shapes(layer) -> Iterator[list[tuple[str, tuple[int, ...]]]]:
    """(stop, local shape) of each of `STOPS` as layer runs once (forward hooks, always removed)."""
    shapes: list[tuple[str, tuple[int, ...]]] = []
    handles = []
    for path, side, name, _split in STOPS:
        def hook(_module, args, output, side=side, name=name):
            shapes.append((name, tuple(_local(args[0] if side == "in" else output).shape)))
        handles.append(layer.get_submodule(path).register_forward_hook(hook))
    try:
        yield shapes
    finally:
        for handle in handles:
            handle.remove()


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank; a plain tensor as it is."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor

