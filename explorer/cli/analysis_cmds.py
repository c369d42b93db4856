"""`python -m explorer roofline ...` and `python -m explorer info ...`: analysis of a config, no model.

`--config` takes a preset name or a path to a `config.json` (or its folder), read through
transformers' config class of its family (`explorer.runner.configs`), so a key the file leaves out
takes transformers' default. That import happens in the handlers: this module itself stays free of
torch and transformers, like the analysis it prints.
"""

from __future__ import annotations

import argparse

from explorer.analysis.collectives import crossover_bytes
from explorer.analysis.hardware import get_link, hardware_names, link_names
from explorer.analysis.kv_cache import kv_bytes_per_token, kv_bytes_per_token_per_layer
from explorer.analysis.memory import DEFAULT_ATTENTION_BUDGET_BYTES, prompt_memory
from explorer.analysis.params import param_counts
from explorer.analysis.precision import DTYPE_BITS, Precision
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.roofline import RooflinePoint, StepRoofline, standard_what_ifs, step_roofline
from explorer.analysis.spec import ModelSpec
from explorer.analysis.tensor_parallel import TensorParallelStep, rank_spec, tensor_parallel_step
from explorer.cli.options import HelpFormatter, whole
from explorer.errors import UsageError

_DTYPES = sorted(DTYPE_BITS)
DEFAULT_CONTEXT = 4096
DEFAULT_TOKENS = 512


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `roofline` and `info` commands."""
    roofline = subparsers.add_parser("roofline", help="per-operator FLOPs, bytes and roofline bound of a step",
                                     formatter_class=HelpFormatter)
    roofline.add_argument("--config", required=True, help="preset name or path to a config.json")
    roofline.add_argument("--stage", choices=("prefill", "decode"), default="decode",
                          help="the step: the prompt's prefill or one decode step")
    roofline.add_argument("--batch", type=whole(1), default=1, help="B, sequences in the batch")
    roofline.add_argument("--context", type=whole(1),
                          help=f"decode: n, cache positions after the step (includes the new token; "
                               f"default {DEFAULT_CONTEXT})")
    roofline.add_argument("--tokens", type=whole(1), help=f"prefill: T, prompt tokens (default {DEFAULT_TOKENS})")
    roofline.add_argument("--hardware", default="h100-sxm",
                          help=f"one of {', '.join(hardware_names())} (measured: the CUDA GPU where there is "
                               "one, else the CPU), or a path to a JSON entry")
    roofline.add_argument("--weight-dtype", choices=_DTYPES, default="bf16", help="the weights' dtype")
    roofline.add_argument("--act-dtype", choices=_DTYPES, default="bf16", help="the activations' dtype")
    roofline.add_argument("--kv-dtype", choices=_DTYPES, default="bf16", help="the KV cache's dtype")
    roofline.add_argument("--merged", action="store_true", help="qkv_proj and gate_up_proj as engines run them")
    roofline.add_argument("--fused-attention", action="store_true", help="score matrix kept on chip (FlashAttention)")
    roofline.add_argument("--lm-head-all", action="store_true", help="LM head over all positions, not the last")
    roofline.add_argument("--per-layer", action="store_true", help="one row per stop instead of summed over layers")
    roofline.add_argument("--what-ifs", action="store_true",
                          help="also print KV fp8, int4 weights, batch x4, context x4")
    roofline.add_argument("--tp", type=whole(1), default=1,
                          help="R, tensor-parallel ranks: the operators of one rank's shard, then the "
                               "all-reduces and the logits' all-gather on --link")
    roofline.add_argument("--link", choices=link_names(),
                          help="the link between the ranks, for --tp above 1 (default nvlink4)")
    roofline.set_defaults(handler=run_roofline)

    info = subparsers.add_parser("info", help="dimensions, parameter counts and KV-cache bytes of a config",
                                 formatter_class=HelpFormatter)
    info.add_argument("--config", required=True, help="preset name or path to a config.json")
    info.add_argument("--kv-dtype", choices=_DTYPES, default="bf16", help="the KV cache's dtype")
    info.add_argument("--prompt-tokens", type=whole(1),
                      help="also estimate the memory the explorer needs to run a prompt of this many tokens")
    info.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                      help="the run's dtype for --prompt-tokens (fp32: the CPU's; bf16: CUDA's)")
    info.set_defaults(handler=run_info)


def run_roofline(args: argparse.Namespace) -> int:
    """Print the per-operator roofline table of one step and its total."""
    from explorer.runner.configs import resolved_config

    config = resolved_config(args.config)
    spec = ModelSpec.from_hf_config(config)
    step = _step(args, spec)
    options = CostOptions(
        precision=Precision(weights=args.weight_dtype, activations=args.act_dtype, kv=args.kv_dtype),
        merged_projections=args.merged, lm_head_all_positions=args.lm_head_all,
        fused_attention=args.fused_attention,
    )
    from explorer.runner.devices import pick_device
    from explorer.runner.probe import resolve_hardware

    hardware = resolve_hardware(args.hardware, pick_device("auto"))  # this-machine: the GPU where there is one
    shard = rank_spec(spec, args.tp)  # the whole model at R = 1
    result = step_roofline(shard, step, hardware, options, by_op=not args.per_layer)
    print(_roofline_header(args.config, result))
    if args.tp > 1:
        print(f"one rank of R = {args.tp}: h_q {shard.n_heads}, h_kv {shard.n_kv_heads}, d_ff "
              f"{shard.intermediate_size}, V {shard.vocab_size} (weights / R)")
    print(format_roofline_table(result))
    if args.tp > 1:
        link = get_link(args.link or "nvlink4")
        print(format_communication(tensor_parallel_step(spec, step, hardware, link, args.tp, options)))
    if args.what_ifs:
        print("\nwhat-if                     time lower bound ms   tokens/s   speedup")
        for variant in standard_what_ifs(shard, step, hardware, options):
            time_ms, rate = variant.roofline.time_lower_bound_s * 1e3, variant.roofline.tokens_per_s
            print(f"{variant.label:<28}{time_ms:>19.3f}{rate:>11.0f}{variant.speedup:>9.2f}x")
    return 0


def _step(args: argparse.Namespace, spec: ModelSpec) -> Step:
    """The step the flags describe, checked against the stage and the model's context window.

    Raises:
        UsageError: a flag of the other stage, --link without --tp, or more positions than the model's
            context window.
    """
    if args.stage == "prefill" and args.context is not None:
        raise UsageError("--context is for --stage decode; a prefill's context is its --tokens.")
    if args.stage == "decode" and args.tokens is not None:
        raise UsageError("--tokens is for --stage prefill; a decode step has one token and a --context.")
    if args.link is not None and args.tp == 1:
        raise UsageError("--link is for --tp above 1: one device sends nothing over a link.")
    positions = (args.tokens or DEFAULT_TOKENS) if args.stage == "prefill" else (args.context or DEFAULT_CONTEXT)
    spec.check_positions(positions)
    return Step.prefill(positions, args.batch) if args.stage == "prefill" else Step.decode(positions, args.batch)


def _roofline_header(config: str, result: StepRoofline) -> str:
    step, hw, p = result.step, result.hardware, result.precision
    peak, peak_dtype = hw.peak_flops_per_s(p.activations)
    where = f"T={step.tokens}" if step.stage == "prefill" else f"context n={step.context}"
    return (
        f"{config}: {step.stage}, batch {step.batch}, {where}; weights {p.weights}, activations "
        f"{p.activations}, KV {p.kv}\n{hw.name}: {peak / 1e12:.1f} TFLOP/s dense {peak_dtype}, "
        f"{hw.memory_bandwidth_bytes_per_s / 1e12:.2f} TB/s, ridge point "
        f"{peak / hw.memory_bandwidth_bytes_per_s:.0f} FLOP/byte\n"
    )


def format_roofline_table(result: StepRoofline) -> str:
    """The roofline as a text table: operator, GFLOP, GB, FLOP/byte, bound, time lower bound (ms)."""
    header = f"{'operator':<28}{'GFLOP':>12} {'GB':>9} {'FLOP/byte':>10}  {'bound':<8}{'time >= ms':>11}"
    lines = [header, "-" * len(header)]
    lines += [_row(point.cost.name, point) for point in result.points]
    lines.append("-" * len(header))
    total = result.total
    lines.append(_row("step total", total, time_ms=result.time_lower_bound_s * 1e3))
    memory_share = result.memory_bound_fraction * 100
    tokens = f"{result.step.rows} token" + ("s" if result.step.rows != 1 else "")
    lines.append(f"\n{tokens} per step: at most {result.tokens_per_s:,.0f} tokens/s; "
                 f"{memory_share:.0f}% of the time bound is in memory-bound operators; attention "
                 f"{result.attention_fraction:.0%} of it, weight GEMMs {result.weight_gemm_fraction:.0%}.")
    return "\n".join(lines)


def format_communication(tp: TensorParallelStep) -> str:
    """The collectives of a tensor-parallel step on their link beside one rank's operators (computed):
    each collective's size, time and whether latency or bandwidth bounds it, then the step's total."""
    link, reduce, gather = tp.collectives.link, tp.collectives.all_reduce, tp.collectives.gather
    crossover = crossover_bytes(tp.ranks, link.latency_s, link.bandwidth_bytes_per_s)
    lines = [f"\ncollectives on {link.name}: {link.bandwidth_bytes_per_s / 1e9:.3g} GB/s each way, "
             f"latency {link.latency_s * 1e6:.3g} µs a step\nlatency-bound below n* = p·latency·bandwidth = "
             f"{binary_bytes(crossover)} (computed)",
             f"{'collective':<28}{'each':>10}{'µs each':>10}  {'bound':<10}{'time ms':>9}"]
    reduces = tp.collectives.all_reduces
    for label, collective, times in ((f"all-reduce x{reduces} (2L + 1)", reduce, reduces),
                                     ("all-gather of the logits", gather, 1)):
        lines.append(f"{label:<28}{binary_bytes(collective.payload_bytes):>10}{collective.seconds * 1e6:>10.2f}  "
                     f"{collective.bound:<10}{times * collective.seconds * 1e3:>9.3f}")
    lines.append(f"\nstep on {tp.ranks} ranks (computed, no overlap): operators {tp.operators_s * 1e3:.3f} ms + "
                 f"collectives {tp.collectives.seconds * 1e3:.3f} ms = {tp.step_s * 1e3:.3f} ms\n"
                 f"the collectives: {tp.communication_share:.0%} of the step")
    return "\n".join(lines)


def binary_bytes(n: float) -> str:
    """Bytes in powers of 1024: "16 KiB", "32 MiB", "512 B"."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _row(name: str, point: RooflinePoint, time_ms: float | None = None) -> str:
    cost = point.cost
    time_ms = point.time_lower_bound_s * 1e3 if time_ms is None else time_ms
    # an operator that moves no bytes (softmax inside a fused kernel) has no intensity: it runs on chip
    intensity, bound = (f"{point.arithmetic_intensity:>10.1f}", point.bound) if cost.bytes else (f"{'-':>10}", "on chip")
    return f"{name:<28}{cost.flops / 1e9:>12.3f} {cost.bytes / 1e9:>9.3f} {intensity}  {bound:<8}{time_ms:>11.3f}"


def run_info(args: argparse.Namespace) -> int:
    """Print a config's dimensions, parameter counts and KV-cache bytes per token."""
    from explorer.runner.configs import resolved_config

    spec = ModelSpec.from_hf_config(resolved_config(args.config))
    if args.prompt_tokens is not None:
        spec.check_positions(args.prompt_tokens)
    counts = param_counts(spec)
    windows = sorted({w for w in spec.layer_windows if w})
    rows = [
        ("family", spec.family),
        ("layers L", spec.n_layers),
        ("hidden size d", spec.hidden_size),
        ("query heads h_q", spec.n_heads),
        ("key/value heads h_kv", f"{spec.n_kv_heads} (GQA group size {spec.gqa_group_size})"),
        ("head dim d_h", spec.head_dim),
        ("MLP width d_ff", spec.intermediate_size),
        ("vocabulary V", spec.vocab_size),
        ("tied LM head", "yes" if spec.tie_word_embeddings else "no"),
        ("sliding window", ", ".join(map(str, windows)) or "none"),
    ]
    if spec.is_moe:
        rows.append(("experts", f"{spec.n_experts}, {spec.experts_per_token} per token"))
    rows += [
        ("parameters, total", f"{counts.total:,}"),
        ("parameters, non-embedding", f"{counts.non_embedding:,}"),
        ("parameters, active per token", f"{counts.active_per_token:,}"),
        (f"KV cache per token ({args.kv_dtype})", f"{kv_bytes_per_token(spec, args.kv_dtype):,} B "
         f"({kv_bytes_per_token_per_layer(spec, args.kv_dtype):,} B per layer)"),
    ]
    if args.prompt_tokens is not None:
        rows += _memory_rows(spec, args.prompt_tokens, args.dtype)
    print(f"{args.config}")
    for label, value in rows:
        print(f"  {label:<32}{value}")
    return 0


def _memory_rows(spec: ModelSpec, prompt_tokens: int, dtype: str) -> list[tuple[str, str]]:
    """The estimated memory of the explorer's hooked prefill of `prompt_tokens` (`explorer.analysis.memory`)."""
    need = prompt_memory(spec, prompt_tokens, DTYPE_BITS[dtype] // 8, DEFAULT_ATTENTION_BUDGET_BYTES)
    mb = 1e6
    return [
        (f"memory for {prompt_tokens:,} tokens ({dtype})", f"{need.total_bytes / mb:,.0f} MB estimated"),
        ("  weights", f"{need.weight_bytes / mb:,.0f} MB"),
        ("  KV cache", f"{need.kv_cache_bytes / mb:,.0f} MB"),
        ("  kept queries", f"{need.query_bytes / mb:,.0f} MB"),
        ("  kept attention matrices", f"{need.kept_matrix_bytes / mb:,.0f} MB"),
        ("  attention transient, a layer", f"{need.attention_transient_bytes / mb:,.0f} MB"),
        ("  activations, a layer", f"{need.activation_bytes / mb:,.0f} MB"),
        ("kept by the session after it", f"{need.kept_bytes / mb:,.0f} MB (KV cache, queries, matrices)"),
    ]
