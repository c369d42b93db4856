"""The lab's experiments, one row each: its name, title, parameters, figure and lesson text. The
runner's function for each is `explorer.runner.lab.RUNNERS[name]`; the CLI (`explorer lab NAME`)
and the app's Lab tab are built from these rows.

Adding an experiment: its result and lesson text (`explorer/lab/<name>.py`), its run
(`explorer/runner/lab/<name>.py`, listed in `RUNNERS`), its figure (`explorer/figures/lab/<name>.py`)
and one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from explorer.figures.lab.batching import fig_batching
from explorer.figures.lab.chunked import fig_chunked
from explorer.figures.lab.evict import fig_evict
from explorer.figures.lab.experts_lab import fig_experts
from explorer.figures.lab.kvquant import fig_kvquant
from explorer.figures.lab.pipeline import fig_pipeline
from explorer.figures.lab.prefix import fig_prefix
from explorer.figures.lab.quant import fig_quant
from explorer.figures.lab.speculative import fig_speculative
from explorer.figures.lab.tensor import fig_tensor
from explorer.figures.lab.tiles import fig_tiles
from explorer.lab import (
    batching, chunked, evict, experts, kvquant, pipeline, prefix, quant, speculative, tensor, tiles,
)
from explorer.lab.params import LabParam


@dataclass(frozen=True)
class Experiment:
    """One experiment of the lab.

    Attributes:
        name: its key (`explorer lab NAME`, the app's menu value, `RUNNERS`).
        title: its name in the app's menu and the CLI's help.
        what: one sentence on what it runs and what it proves.
        params: its parameters: whole numbers, in the order the app's boxes show them, and at most
            one menu (`LabParam.choices`), the app's menu beside them.
        figure: (result) -> its figure.
        lesson: (result) -> its lesson page (Markdown) from the run's numbers.
        local_only: refused where the app is hosted (it starts processes of its own).
    """

    name: str
    title: str
    what: str
    params: tuple[LabParam, ...]
    figure: Callable[[Any], go.Figure]
    lesson: Callable[[Any], str]
    local_only: bool = False


LAB = {experiment.name: experiment for experiment in (
    Experiment(
        "prefix", "Prefix caching",
        "A second request that shares your prompt's first P tokens reuses its KV cache and prefills only its "
        "own suffix: the FLOPs and time saved, and the logits and greedy tokens equal to a full prefill.",
        (LabParam("prefix", "Shared prefix P (tokens; 0: the whole prompt)", 0, 0, 2048,
                  help="positions of the prompt the second request shares; 0: all of them"),),
        fig_prefix, prefix.lesson_text),
    Experiment(
        "chunked", "Chunked prefill",
        "Your prompt prefilled C tokens at a time on one KV cache: each chunk's shapes, its [C, n] band of the "
        "causal triangle, its time and its weight GEMMs' arithmetic intensity (about C), and the logits and "
        "greedy tokens equal to one prefill's.",
        (LabParam("chunk", "Chunk size C (tokens; 0: the whole prompt at once)", 16, 0, 2048, hosted_maximum=512,
                  help="tokens per chunk; 0: all of them in one chunk"),),
        fig_chunked, chunked.lesson_text),
    Experiment(
        "batching", "Continuous batching with a page table",
        "R requests cut from your prompt, of different lengths and numbers of tokens to generate, admitted one a "
        "step and retired when done, each step one packed forward pass: the packed and padded layouts, the KV "
        "cache's pages and block tables, each request's tokens and logits equal to it run alone, and the tokens/s.",
        (LabParam("requests", "Requests R", 4, 3, 8, hosted_maximum=4,
                  help="requests in the batch; request i is the prompt's first T(i+1)/R tokens"),
         LabParam("block_size", "KV page size (positions)", 16, 1, 256, help="positions of K and V a page holds"),
         LabParam("new_tokens", "Max new tokens a request", 8, 1, 32, hosted_maximum=16,
                  help="the most a request generates (request i: min(this, 2 + 3i))")),
        fig_batching, batching.lesson_text),
    Experiment(
        "speculative", "Speculative decoding, self-drafted",
        "The model's first k layers (then its final norm and LM head) guess g tokens; the full model verifies "
        "them in one pass and keeps the agreeing ones: the acceptance, the time per token against plain "
        "decoding, the bytes the verify pass reads, and the tokens equal to plain greedy decoding's.",
        (LabParam("depth", "Draft layers k (fewer than the model's L)", 12, 1, 127,
                  help="decoder layers the draft runs before its exit to the final norm and LM head"),
         LabParam("guesses", "Guesses per round g", 4, 1, 8, help="tokens the draft guesses before each verify pass"),
         LabParam("tokens", "Tokens to generate", 16, 1, 256, hosted_maximum=32,
                  help="tokens decoded each way, plain and speculative")),
        fig_speculative, speculative.lesson_text),
    Experiment(
        "tiles", "FlashAttention's tiles (online softmax)",
        "One query row of a layer's attention computed B_c keys at a time with a running max, sum and "
        "rescaled output, as FlashAttention does: equal to the eager row, without the [h_q, T, T] scores.",
        (LabParam("block", "Block B_c (keys a tile)", 16, 1, 8192,
                  help="keys per block of the online softmax; at least the row's keys: one block"),
         LabParam("layer", "Layer", 0, 0, 255, help="the layer whose attention is tiled, 0 to L - 1"),
         LabParam("head", "Query head", 0, 0, 255, help="the query head, 0 to h_q - 1 (GQA: its KV head is head // g)"),
         LabParam("position", "Query position (from 0; -1: the last)", -1, -1, 8191,
                  help="the query row's position, counted from 0 (0 to T - 1); -1: the last, which sees every key")),
        fig_tiles, tiles.lesson_text),
    Experiment(
        "quant", "Weight quantization (INT8, INT4)",
        "The decoder's linear weights rounded to INT8 (per output channel) and INT4 (per group of G): what "
        "each costs in KL, top-1 agreement and perplexity of a fixed text, beside the bytes a weight and the "
        "roofline's predicted decode speed.",
        (LabParam("bits", "Weight format", 0, 0, 8, help="the variant run",
                  choices=(("both", 0), ("int8", 8), ("int4", 4))),
         LabParam("group_size", "INT4 group size G (weights per scale)", 32, 1, 4096,
                  help="input weights sharing one INT4 scale; at least a row's inputs: one scale a row "
                       "(per channel)"),
         LabParam("continue_tokens", "Greedy tokens N", 12, 1, 128, hosted_maximum=32,
                  help="tokens each variant generates after the prompt"),
         LabParam("text_tokens", "Text tokens scored", 256, 2, 2048, hosted_maximum=384,
                  help="the shipped text's first tokens, for KL and perplexity")),
        fig_quant, quant.lesson_text),
    Experiment(
        "kvquant", "KV-cache quantization (INT8, FP8)",
        "Every cached key and value stored as INT8 or FP8 (e4m3) codes with one fp16 scale per token per KV head, "
        "dequantized when attention reads them: what each costs in KL, top-1 agreement and perplexity of a fixed "
        "text, beside the cache's bytes per token and the roofline's predicted decode speed at batch 64.",
        (LabParam("kv_format", "KV-cache format", 0, 0, 2, help="the quantized cache run",
                  choices=(("both", 0), ("int8", 1), ("fp8-e4m3", 2))),
         LabParam("continue_tokens", "Greedy tokens N", 12, 1, 128, hosted_maximum=32,
                  help="tokens each cache generates after the prompt"),
         LabParam("text_tokens", "Text tokens scored", 256, 2, 2048, hosted_maximum=384,
                  help="the shipped text's first tokens, for KL and perplexity")),
        fig_kvquant, kvquant.lesson_text),
    Experiment(
        "evict", "KV eviction and attention sinks",
        "The shipped text decoded one token at a time with a KV cache of at most W positions: the most recent W, "
        "the first S (attention sinks) and the most recent, or H2O's heavy hitters and the most recent: each "
        "rule's perplexity and top-1 agreement against the full cache, its bytes, and the positions it keeps.",
        (LabParam("window", "Window W (positions the cache keeps)", 32, 1, 2048, hosted_maximum=256,
                  help="the most positions the cache holds; fewer than the text's tokens"),
         LabParam("sinks", "Sinks S (first tokens kept)", 4, 0, 2047, help="the first positions 'sinks' keeps, below W"),
         LabParam("text_tokens", "Text tokens decoded", 96, 2, 2048, hosted_maximum=256,
                  help="the shipped text's first tokens, fed one at a time"),
         LabParam("positions", "Positions of the kept keys", 0, 0, 1,
                  help="as-cached: each key keeps the position it was cached at and a new token its place in "
                       "the text; renumbered: the kept keys numbered 0..n-1 inside the cache, as StreamingLLM does",
                  choices=(("as-cached", 0), ("renumbered", 1)))),
        fig_evict, evict.lesson_text),
    Experiment(
        "tensor", "Tensor parallelism over R processes",
        "The model sharded over R processes (torch.distributed, gloo), by its own tensor-parallel plan: each rank's "
        "query and KV heads and MLP columns, the two all-reduces a layer and their bytes and time against the "
        "compute, and the logits and greedy tokens equal to one process's. Runs locally only, not on the hosted app.",
        (LabParam("ranks", "Ranks R (processes; R divides h_q, h_kv and d_ff)", 3, 1, 8,
                  help="processes the model is sharded over, each one thread"),
         LabParam("tokens", "Greedy tokens N", 8, 1, 64, help="tokens each rank decodes after the prefill")),
        fig_tensor, tensor.lesson_text, local_only=True),
    Experiment(
        "pipeline", "Pipeline parallelism over S processes",
        "The model's layers split over S processes (torch.distributed, gloo), a contiguous range each, and a batch "
        "of M requests (each the prompt) sent through them as M micro-batches in GPipe's order: the activations "
        "each stage sends and their bytes, the schedule as it ran and its bubble against (S - 1)/(M + S - 1), and "
        "the logits equal to one process's. Runs locally only, not on the hosted app.",
        (LabParam("stages", "Stages S (processes; 1 to the model's L layers)", 3, 1, 8,
                  help="processes the decoder's layers are split over, a contiguous range each, one thread each"),
         LabParam("microbatches", "Micro-batches M (requests, each the prompt)", 4, 1, pipeline.MAX_MICROBATCHES,
                  help="requests in the batch, one micro-batch each, sent through the stages one after another")),
        fig_pipeline, pipeline.lesson_text, local_only=True),
    Experiment(
        "experts", "Expert parallelism over R processes",
        "A mixture-of-experts model's experts spread over R processes (torch.distributed, gloo; the loaded model if "
        "it is one, else a tiny Qwen3-MoE with random weights): the tokens each expert computed on each rank, the "
        "all-to-alls that carry them there and back, their bytes against the router's counts, and the logits and "
        "greedy tokens equal to one process's. Runs locally only, not on the hosted app.",
        (LabParam("ranks", "Ranks R (processes; R divides the experts E)", 2, 1, 8,
                  help="processes the experts are spread over, each one thread"),
         LabParam("tokens", "Greedy tokens N", 6, 1, 64, help="tokens each rank decodes after the prefill")),
        fig_experts, experts.lesson_text, local_only=True),
)}
