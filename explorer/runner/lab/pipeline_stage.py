"""One stage of the pipeline-parallel experiment, in a process of its own (started by
`torch.multiprocessing`, spawn): join the gloo group, load the model and keep only the stage's
layers (and the embedding on stage 0, the final norm and LM head on the last), run the M
micro-batches in GPipe's order, receiving each one's activations from the previous stage with
`recv` and sending its own to the next with `isend`, and write what it measured to a file for the
parent (`explorer.runner.lab.pipeline`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from explorer.lab.pipeline import MICRO_BATCH_ROWS, layer_ranges
from explorer.runner.lab.processes import die_if_asked, joined_group

FAIL_STAGE_ENV = "EXPLORER_PIPELINE_FAIL_STAGE"  # a stage that exits after its first micro-batch (a test's)


def run_stage(stage: int, stages: int, port: int, workdir: str, prompt_ids: list[int], microbatches: int,
              timeout_s: float) -> None:
    """The stage's whole run; writes `workdir/stage<stage>.pt` (see `measure`)."""
    with joined_group(stage, stages, port, timeout_s):
        model, layers, holds = stage_model(Path(workdir) / "model", stage, stages)
        result = measure(model, stage, stages, prompt_ids, microbatches)
        result.update(layers=layers, holds=holds, parameters=sum(p.numel() for p in model.parameters()))
        torch.save(result, Path(workdir) / f"stage{stage}.pt")
        dist.barrier()


def stage_model(path: Path, stage: int, stages: int):
    """The model saved at `path` with only what stage `stage` of `stages` holds: its contiguous range
    of decoder layers (`layer_ranges`), the embedding on stage 0, the final norm and the LM head on the
    last stage; the rest dropped (the norm of an earlier stage made the identity, so that its base
    model's output is the last layer's residual stream).

    Returns:
        (model, its [first, end) layers, what it holds besides them).
    """
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()  # S loading bars would bury the parent's output
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    base = model.base_model
    first, end = layer_ranges(model.config.num_hidden_layers, stages)[stage]
    base.layers = torch.nn.ModuleList(base.layers[first:end])
    holds = []
    if stage == 0:
        holds.append("embedding")
    else:
        base.embed_tokens = None
    if stage == stages - 1:
        holds += ["final norm", "LM head"]
    else:
        base.norm = torch.nn.Identity()
        model.lm_head = None
    return model, (first, end), holds


def stage_forward(model, stage: int, stages: int, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """The stage's layers on one micro-batch: stage 0 from the ids ([B_micro, T]), another from the
    received activations `hidden` ([B_micro, T, d]). Returns the activations to send, [B_micro, T, d],
    or on the last stage the logits, [B_micro, T, V]. No KV cache: the prefill only."""
    inputs = {"input_ids": ids} if stage == 0 else {"inputs_embeds": hidden}
    out = model.base_model(**inputs, use_cache=False).last_hidden_state
    return model.lm_head(out) if stage == stages - 1 else out


def measure(model, stage: int, stages: int, prompt_ids: list[int], microbatches: int) -> dict:
    """One untimed warm-up of the stage's layers (no communication), a barrier, then the M micro-batches
    in order: receive micro-batch m's activations from stage - 1 (`recv`), compute, send the output to
    stage + 1 (`isend`, waited on after the last micro-batch), each slot's start and end on the
    system-wide monotonic clock.

    Returns:
        {"stage", "pid", "slots" (micro, start_s, end_s), "sends" and "recvs" (micro, peer, shape,
         payload_bytes, at_s), and on the last stage "logits": micro-batch 0's [T, V] float32 and
         "last_logits": each micro-batch's last position, [M, V] float32}.
    """
    ids = torch.tensor([prompt_ids] * MICRO_BATCH_ROWS)  # one micro-batch: [B_micro, T]
    shape = (MICRO_BATCH_ROWS, len(prompt_ids), model.config.hidden_size)
    slots, sends, recvs, pending, logits = [], [], [], [], []
    with torch.no_grad():
        stage_forward(model, stage, stages, ids, torch.zeros(shape, dtype=model.dtype))
        dist.barrier()
        start = time.monotonic()
        for micro in range(microbatches):
            hidden = torch.empty(shape, dtype=model.dtype)
            if stage > 0:
                dist.recv(hidden, src=stage - 1)
                start = time.monotonic()
                recvs.append(_transfer(micro, stage - 1, hidden, start))
            out = stage_forward(model, stage, stages, ids, hidden)
            end = time.monotonic()
            slots.append({"micro": micro, "start_s": start, "end_s": end})
            if stage < stages - 1:
                pending.append(dist.isend(out, dst=stage + 1))
                sends.append(_transfer(micro, stage + 1, out, end))
            else:
                logits.append(out[0].float())
            die_if_asked(FAIL_STAGE_ENV, stage)
            start = end
        for work in pending:
            work.wait()
    result = {"stage": stage, "pid": os.getpid(), "slots": slots, "sends": sends, "recvs": recvs}
    if stage == stages - 1:
        result.update(logits=logits[0], last_logits=torch.stack([out[-1] for out in logits]))
    return result


def _transfer(micro: int, peer: int, tensor: torch.Tensor, at_s: float) -> dict:
    return {"micro": micro, "peer": peer, "shape": tuple(tensor.shape),
            "payload_bytes": tensor.numel() * tensor.element_size(), "at_s": at_s}
