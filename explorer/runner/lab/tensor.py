"""Tensor parallelism run for real: the model saved once, R processes started by
`torch.multiprocessing` (spawn), each a rank of a gloo group on a free loopback port that shards it
by its own plan (`explorer.runner.lab.tensor_rank`), and their logits and greedy tokens checked
against the unsharded model in this process (`explorer.lab.tensor`)."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException
from transformers import GenerationConfig

from explorer.analysis.tensor_parallel import check_ranks_divide, split_dims
from explorer.errors import ConfigError, ExplorerError
from explorer.lab.tensor import Collective, RankRun, TensorParallelResult
from explorer.runner.lab.common import check_runnable, forward, passes_on, pieces
from explorer.runner.lab.tensor_rank import run_rank
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import model_pass

COLLECTIVE_TIMEOUT_S = 120.0  # a rank waits this long for the others in a collective before it fails
RUN_TIMEOUT_S = 900.0  # the whole run, start-up included (each process imports torch and loads the model)
STYLES = {"colwise", "rowwise"}


def run_tensor(loaded: LoadedModel, prompt_ids: list[int], ranks: int = 3, tokens: int = 8) -> TensorParallelResult:
    """Shard the model over `ranks` processes, prefill `prompt_ids` and decode up to `tokens` greedy
    tokens on every rank; compare rank 0's logits with the unsharded model's and every rank's tokens
    with its `generate`.

    Args:
        loaded: a model with real weights whose config has a tensor-parallel plan of column- and
            row-wise projections (Llama, Qwen2, Mistral, ...).
        prompt_ids: the prompt's token ids (T of them; batch B = 1).
        ranks: R, the processes; R must divide the query heads, the KV heads and d_ff.
        tokens: the most greedy tokens decoded (fewer where one is an EOS).

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt, or one too long.
        ConfigError: a model without such a plan, or an R that does not divide a split (before any
            process starts).
        ExplorerError: a rank that failed or died mid-run (the others are stopped), or a run past
            `RUN_TIMEOUT_S`.
    """
    check_runnable(loaded, prompt_ids)
    check_plan(loaded.model.config)
    config = loaded.model.config.to_dict()
    check_ranks_divide(config, ranks)
    with tempfile.TemporaryDirectory(prefix="explorer-tensor-") as workdir:
        with model_pass(loaded.model):  # one turn: no other page's traced pass has wrapped its modules
            loaded.model.save_pretrained(Path(workdir) / "model")
        args = (ranks, free_loopback_port(), workdir, list(prompt_ids), tokens, list(loaded.eos_token_ids),
                COLLECTIVE_TIMEOUT_S)
        start_ranks(ranks, args)
        outputs = [torch.load(Path(workdir) / f"rank{rank}.pt") for rank in range(ranks)]
    with passes_on(loaded) as model:
        reference = _reference_tokens(model, prompt_ids, tokens, loaded.eos_token_ids)
        chosen = outputs[0]["tokens"]
        one_process = forward(model, list(prompt_ids) + chosen[:-1], None)  # every step's logits, [T + N - 1, V]
    delta = (outputs[0]["logits"] - one_process).abs()
    return TensorParallelResult(
        ranks=ranks, layers=config["num_hidden_layers"], hidden=config["hidden_size"], vocab=config["vocab_size"],
        head_dim=int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]),
        splits=split_dims(config), prompt_tokens=len(prompt_ids), element_bytes=loaded.model.dtype.itemsize,
        parent_pid=os.getpid(), runs=tuple(_rank_run(output) for output in outputs),
        reference_tokens=tuple(reference), max_abs_diff=float(delta.max()),
        max_abs_logit=float(one_process.abs().max()), pieces=pieces(loaded, list(prompt_ids) + chosen),
        dtype=loaded.dtype)


def check_plan(config) -> None:
    """Refuse a model whose config has no tensor-parallel plan of column- and row-wise projections.

    Raises:
        ConfigError: no `base_model_tp_plan`, or one with another style (what its family needs more).
    """
    plan = getattr(config, "base_model_tp_plan", None) or {}
    others = sorted({style for style in plan.values()} - STYLES)
    if not plan or others:
        raise ConfigError(f"This model's family ({config.model_type}) has no tensor-parallel plan of column- and "
                          f"row-wise projections{' (its plan also has ' + ', '.join(others) + ')' if others else ''}: "
                          "the experiment runs Llama-style models (the embedded model, Llama, Qwen2, Mistral).")


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it; rank 0's store binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_ranks(ranks: int, args: tuple, run_timeout_s: float = RUN_TIMEOUT_S) -> None:
    """Run `run_rank(rank, *args)` in `ranks` spawned processes and wait for all of them; whatever
    happens, none is left running.

    Raises:
        ExplorerError: a rank raised or died (torch's launcher then stops the others), or the run
            took longer than `run_timeout_s`.
    """
    context = mp.start_processes(run_rank, args=args, nprocs=ranks, join=False, start_method="spawn")
    deadline = time.monotonic() + run_timeout_s
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise ExplorerError(f"The {ranks} ranks did not finish within {run_timeout_s:.0f} s; they were "
                                    "stopped.")
    except ProcessException as exc:
        raise ExplorerError(f"Rank {exc.error_index} of {ranks} stopped mid-run: {_reason(exc)}. The other ranks "
                            f"were stopped and no process of the run is left (exit codes by rank: "
                            f"{_exit_codes(context)}).") from None
    finally:
        _stop_all(context.processes)


def _reason(exc: Exception) -> str:
    """What torch's launcher says of a rank that failed, in a line."""
    if isinstance(exc, mp.ProcessExitedException):
        how = f"killed by {exc.signal_name}" if exc.signal_name else f"exited with code {exc.exit_code}"
        return f"its process {exc.error_pid} {how}"
    lines = [line for line in str(getattr(exc, "msg", exc)).splitlines() if line.strip()]
    return f"it raised {lines[-1].strip() if lines else type(exc).__name__}"


def _exit_codes(context) -> str:
    _stop_all(context.processes)
    return ", ".join(f"{rank}: {process.exitcode}" for rank, process in enumerate(context.processes))


def _stop_all(processes) -> None:
    """Terminate every process still alive, then kill what a few seconds did not end; join them all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


def _reference_tokens(model, prompt_ids: list[int], tokens: int, eos_ids: list[int]) -> list[int]:
    """The unsharded model's greedy tokens in this process: `generate`, no sampling, stopping at an EOS."""
    settings = GenerationConfig(max_new_tokens=tokens, do_sample=False, eos_token_id=eos_ids or None,
                                pad_token_id=(eos_ids or [0])[0])
    ids = torch.tensor([prompt_ids], device=model.device)
    with model_pass(model):  # one turn for the whole generate (local only: no other page shares the model)
        return model.generate(ids, generation_config=settings)[0, len(prompt_ids):].tolist()


def _rank_run(output: dict) -> RankRun:
    steps = tuple(tuple(Collective(**call) for call in calls) for calls in output["steps"])
    return RankRun(rank=output["rank"], pid=output["pid"], stops=tuple(output["stops"]),
                   weights=tuple(output["weights"]), kv_shape=output["kv_shape"], steps=steps,
                   step_ms=tuple(output["step_ms"]), tokens=tuple(output["tokens"]))
