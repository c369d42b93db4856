"""Tensor parallelism run for real: the model saved once, R processes started by
`torch.multiprocessing` (spawn), each a rank of a gloo group on a free loopback port that shards it
by its own plan (`explorer.runner.lab.tensor_rank`), and their logits and greedy tokens checked
against the unsharded model in this process (`explorer.lab.tensor`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from explorer.analysis.tensor_parallel import check_ranks_divide, split_dims
from explorer.errors import ConfigError
from explorer.lab.tensor import Collective, RankRun, TensorParallelResult
from explorer.runner.lab.common import check_runnable, forward, passes_on, pieces
from explorer.runner.lab.processes import (
    COLLECTIVE_TIMEOUT_S,
    free_loopback_port,
    reference_tokens,
    save_model,
    start_ranks,
)
from explorer.runner.lab.tensor_rank import run_rank
from explorer.runner.loaded import LoadedModel

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
            `processes.RUN_TIMEOUT_S`.
    """
    check_runnable(loaded, prompt_ids)
    check_plan(loaded.model.config)
    config = loaded.model.config.to_dict()
    check_ranks_divide(config, ranks)
    with tempfile.TemporaryDirectory(prefix="explorer-tensor-") as workdir:
        save_model(loaded.model, workdir)
        args = (ranks, free_loopback_port(), workdir, list(prompt_ids), tokens, list(loaded.eos_token_ids),
                COLLECTIVE_TIMEOUT_S)
        start_ranks(run_rank, ranks, args)
        outputs = [torch.load(Path(workdir) / f"rank{rank}.pt") for rank in range(ranks)]
    with passes_on(loaded) as model:
        reference = reference_tokens(model, prompt_ids, tokens, loaded.eos_token_ids)
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


def _rank_run(output: dict) -> RankRun:
    steps = tuple(tuple(Collective(**call) for call in calls) for calls in output["steps"])
    return RankRun(rank=output["rank"], pid=output["pid"], stops=tuple(output["stops"]),
                   weights=tuple(output["weights"]), kv_shape=output["kv_shape"], steps=steps,
                   step_ms=tuple(output["step_ms"]), tokens=tuple(output["tokens"]))
