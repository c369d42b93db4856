"""Expert parallelism run for real: the mixture-of-experts model (the loaded one, or a tiny seeded
Qwen3-MoE with random weights where the loaded model is dense) saved once, R processes started by
`torch.multiprocessing` (spawn), each a rank of a gloo group on a free loopback port holding E / R
experts of every MoE layer (`explorer.runner.lab.experts_rank`), and their routing counts, all-to-all
bytes, logits and greedy tokens checked against the unsharded model in this process
(`explorer.lab.experts`). The process helpers are the tensor experiment's."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen3MoeConfig

from explorer.families import traced_family
from explorer.lab.experts import Exchange, ExpertParallelResult, ExpertRankRun, check_ranks_divide, moe_dims
from explorer.runner.lab.common import check_runnable, forward, pieces
from explorer.runner.lab.experts_rank import run_rank
from explorer.runner.lab.processes import (
    COLLECTIVE_TIMEOUT_S,
    free_loopback_port,
    reference_tokens,
    save_model,
    start_ranks,
)
from explorer.runner.loaded import LoadedModel

RANDOM_SEED = 0
# The tiny Qwen3-MoE run where the loaded model is dense: E = 8 experts (R = 1, 2, 4, 8 divide it), k = 2
RANDOM_MOE = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
                  norm_topk_prob=True, max_position_embeddings=4096, tie_word_embeddings=True)


def run_experts(loaded: LoadedModel, prompt_ids: list[int], ranks: int = 2, tokens: int = 6) -> ExpertParallelResult:
    """Spread the MoE model's experts over `ranks` processes, prefill `prompt_ids` and decode up to
    `tokens` greedy tokens on every rank; compare the experts' rows with the one-process router's
    top-k, rank 0's logits with the unsharded model's and every rank's tokens with its `generate`.

    Args:
        loaded: a model with weights; a Mixtral or Qwen3-MoE is run itself, any other is replaced by a
            tiny Qwen3-MoE with random weights (seed `RANDOM_SEED`) of its vocabulary.
        prompt_ids: the prompt's token ids (T of them; batch B = 1).
        ranks: R, the processes; R must divide the experts E.
        tokens: the most greedy tokens decoded (fewer where one is an EOS).

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt, or one too long.
        ConfigError: an R that does not divide E (before any process starts).
        ExplorerError: a rank that failed or died mid-run (the others are stopped), or a run past
            `processes.RUN_TIMEOUT_S`.
    """
    check_runnable(loaded, prompt_ids)
    random_weights = not traced_family(loaded.model.config.model_type).moe
    config = RANDOM_MOE if random_weights else loaded.model.config.to_dict()
    check_ranks_divide(moe_dims(config)["experts E"], ranks)
    model = random_moe(loaded.model.config.vocab_size) if random_weights else loaded.model
    config = model.config.to_dict()
    with tempfile.TemporaryDirectory(prefix="explorer-experts-") as workdir:
        save_model(model, workdir)
        start_ranks(run_rank, ranks, (ranks, free_loopback_port(), workdir, list(prompt_ids), tokens,
                            list(loaded.eos_token_ids), COLLECTIVE_TIMEOUT_S))
        outputs = [torch.load(Path(workdir) / f"rank{rank}.pt") for rank in range(ranks)]
    reference = reference_tokens(model, prompt_ids, tokens, loaded.eos_token_ids)
    chosen = outputs[0]["tokens"]
    with routed(model) as ids:  # every step's logits [T + N - 1, V], each MoE layer's top-k [T + N - 1, k]
        one_process = forward(model, list(prompt_ids) + chosen[:-1], None)
    t = len(prompt_ids)
    routing = [[layer[:t].tolist() for layer in ids.values()]]
    routing += [[layer[t + step - 1:t + step].tolist() for layer in ids.values()] for step in range(1, len(chosen))]
    delta = (outputs[0]["logits"] - one_process).abs()
    return ExpertParallelResult(
        ranks=ranks, dims=moe_dims(config), layers=config["num_hidden_layers"], hidden=config["hidden_size"],
        moe_layers=tuple(ids), prompt_tokens=t, element_bytes=model.dtype.itemsize,
        model="a tiny Qwen3-MoE" if random_weights else loaded.name, random_weights=random_weights,
        parent_pid=os.getpid(), runs=tuple(_rank_run(output) for output in outputs), routing=tuple(routing),
        reference_tokens=tuple(reference), max_abs_diff=float(delta.max()),
        max_abs_logit=float(one_process.abs().max()), pieces=pieces(loaded, list(prompt_ids) + chosen),
        dtype=str(model.dtype).removeprefix("torch."))


def random_moe(vocab: int) -> torch.nn.Module:
    """A tiny Qwen3-MoE (`RANDOM_MOE`) with random weights, seeded, of `vocab` tokens, float32, eager experts."""
    torch.manual_seed(RANDOM_SEED)
    config = Qwen3MoeConfig(vocab_size=vocab, **RANDOM_MOE)
    return AutoModelForCausalLM.from_config(config, experts_implementation="eager").eval()


@contextlib.contextmanager
def routed(model) -> Iterator[dict[int, torch.Tensor]]:
    """{MoE layer: its router's top-k expert ids [N, k]} of the forward passes run inside (forward
    hooks on each `*SparseMoeBlock.gate`, always removed; the last pass's ids kept)."""
    ids: dict[int, torch.Tensor] = {}
    handles = [layer.mlp.gate.register_forward_hook(lambda _m, _a, out, index=index: ids.update({index: out[2]}))
               for index, layer in enumerate(model.base_model.layers) if hasattr(layer.mlp, "experts")]
    try:
        yield ids
    finally:
        for handle in handles:
            handle.remove()


def _rank_run(output: dict) -> ExpertRankRun:
    steps = tuple(tuple(Exchange(label=c["label"], layer=c["layer"], shape=c["shape"], payload_bytes=c["payload_bytes"],
                                 send_rows=c["send_rows"], row_bytes=c["row_bytes"], ms=c["ms"]) for c in calls)
                  for calls in output["steps"])
    return ExpertRankRun(rank=output["rank"], pid=output["pid"], experts=tuple(output["experts"]),
                         weights=tuple(output["weights"]), steps=steps, received=output["received"],
                         layer_ms=tuple(map(tuple, output["layer_ms"])), step_ms=tuple(output["step_ms"]),
                         tokens=tuple(output["tokens"]))
