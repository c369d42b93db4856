"""Pipeline parallelism run for real: the model saved once, S processes started by
`torch.multiprocessing` (spawn), each a stage of a gloo group on a free loopback port holding a
contiguous range of the layers (`explorer.runner.lab.pipeline_stage`), M micro-batches of the
prompt through them, and the last stage's logits checked against the whole model in this process
(`explorer.lab.pipeline`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from explorer.errors import ConfigError
from explorer.lab.pipeline import PipelineResult, Slot, StageRun, Transfer, check_pipeline
from explorer.runner.lab.common import check_runnable, forward, passes_on, pieces
from explorer.runner.lab.pipeline_stage import run_stage
from explorer.runner.lab.processes import COLLECTIVE_TIMEOUT_S, free_loopback_port, save_model, start_ranks
from explorer.runner.loaded import LoadedModel

STAGE_PARTS = ("embed_tokens", "layers", "norm", "rotary_emb")  # what a stage's base model must have


def run_pipeline(loaded: LoadedModel, prompt_ids: list[int], stages: int = 3,
                 microbatches: int = 4) -> PipelineResult:
    """Split the model's layers over `stages` processes and run a batch of `microbatches` requests,
    each the prompt, through them as that many micro-batches in GPipe's order (the prefill, forward
    only); compare the last stage's logits with the whole model's in this process.

    Args:
        loaded: a model with real weights whose base model is a stack of decoder layers between an
            embedding and a final norm (Llama, Qwen2, Qwen3, Mistral, Gemma 3).
        prompt_ids: the prompt's token ids (T of them); each micro-batch is [1, T].
        stages: S, the processes, 1 to the model's L layers.
        microbatches: M, 1 to `MAX_MICROBATCHES`.

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt, or one too long.
        ConfigError: a model of another shape, an S above L or an M out of range (before any process
            starts).
        ExplorerError: a stage that failed or died mid-run (the others are stopped), or a run past
            `processes.RUN_TIMEOUT_S`.
    """
    check_runnable(loaded, prompt_ids)
    check_stack(loaded.model)
    config = loaded.model.config
    check_pipeline(config.num_hidden_layers, stages, microbatches)
    with tempfile.TemporaryDirectory(prefix="explorer-pipeline-") as workdir:
        save_model(loaded.model, workdir)
        args = (stages, free_loopback_port(), workdir, list(prompt_ids), microbatches, COLLECTIVE_TIMEOUT_S)
        start_ranks(run_stage, stages, args, noun="stage")
        outputs = [torch.load(Path(workdir) / f"stage{stage}.pt") for stage in range(stages)]
    with passes_on(loaded) as model:
        one_process = forward(model, list(prompt_ids), None)  # [T, V]
    last = outputs[-1]
    delta = torch.cat([(last["logits"] - one_process).abs().flatten(),
                       (last["last_logits"] - one_process[-1]).abs().flatten()])
    tokens = last["last_logits"].argmax(-1).tolist()
    reference = int(one_process[-1].argmax())
    return PipelineResult(
        stages=stages, microbatches=microbatches, layers=config.num_hidden_layers, hidden=config.hidden_size,
        vocab=config.vocab_size, prompt_tokens=len(prompt_ids), element_bytes=loaded.model.dtype.itemsize,
        parent_pid=os.getpid(), runs=_stage_runs(outputs), last_logits=last["last_logits"], tokens=tuple(tokens),
        reference_token=reference, max_abs_diff=float(delta.max()), max_abs_logit=float(one_process.abs().max()),
        pieces=pieces(loaded, [*prompt_ids, tokens[0]]), dtype=loaded.dtype)


def check_stack(model) -> None:
    """Refuse a model whose base model is not an embedding, decoder layers and a final norm that a
    stage can run from `inputs_embeds`.

    Raises:
        ConfigError: a base model without one of `STAGE_PARTS` or an LM head (GPT-2, say).
    """
    missing = [part for part in STAGE_PARTS if not hasattr(model.base_model, part)]
    if missing or getattr(model, "lm_head", None) is None:
        raise ConfigError(f"This model's family ({model.config.model_type}) is not split into stages here: the "
                          "experiment runs models whose base model is an embedding, decoder layers and a final "
                          "norm, with an LM head (the embedded model, Llama, Qwen2, Qwen3, Mistral, Gemma 3).")


def _stage_runs(outputs: list[dict]) -> tuple[StageRun, ...]:
    """Each stage's output as a `StageRun`, its times in ms since the earliest slot's start."""
    zero = min(slot["start_s"] for output in outputs for slot in output["slots"])

    def ms(seconds: float) -> float:
        return (seconds - zero) * 1e3

    def transfers(calls: list[dict]) -> tuple[Transfer, ...]:
        return tuple(Transfer(micro=c["micro"], peer=c["peer"], shape=c["shape"], payload_bytes=c["payload_bytes"],
                              at_ms=ms(c["at_s"])) for c in calls)

    return tuple(StageRun(stage=o["stage"], pid=o["pid"], layers=tuple(o["layers"]), holds=tuple(o["holds"]),
                          parameters=o["parameters"], sends=transfers(o["sends"]), recvs=transfers(o["recvs"]),
                          slots=tuple(Slot(micro=s["micro"], start_ms=ms(s["start_s"]), end_ms=ms(s["end_s"]))
                                      for s in o["slots"]))
                 for o in outputs)
