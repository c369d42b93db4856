"""`python -m explorer trace PROMPT`: run one inference and print its journey, stop by stop."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from explorer.analysis.precision import DTYPE_CHOICES
from explorer.cli.options import MODEL_ENVIRONMENT, HelpFormatter, real, whole
from explorer.config import MAX_BATCH, MAX_TEMPERATURE, MIN_TEMPERATURE, SEED_LIMIT, SamplingSettings
from explorer.errors import UsageError
from explorer.journey import journey_header, journey_rows, shape_text, step_label, timing_note
from explorer.saved import save_run
from explorer.trace import StepTrace

DEFAULT_STEPS = 3


def register(subparsers) -> None:
    """Add the `trace` command."""
    parser = subparsers.add_parser(
        "trace", help="trace the prefill and decode steps of one inference", formatter_class=HelpFormatter,
        description="Run the prefill and a few decode steps, printing one layer's stops with their shapes.",
        epilog=MODEL_ENVIRONMENT,
    )
    parser.add_argument("prompt", nargs="?", help="the prompt (omit with --prompt-tokens in shape-only mode)")
    parser.add_argument("--steps", type=whole(1), default=DEFAULT_STEPS, help="decode steps after the prefill")
    parser.add_argument("--layer", type=whole(0), default=0, help="which decoder layer's stops and K cache to print")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", help="hub id or local folder of a causal LM (default: the embedded SmolLM2)")
    source.add_argument("--config", help="shape-only: a preset name or a config.json path (no weights)")
    parser.add_argument("--prompt-tokens", type=whole(1), help="give the prompt as a token count (shape-only)")
    parser.add_argument("--batch", type=whole(1, MAX_BATCH), default=1,
                        help="B, sequences run together: with --config, B copies of the prompt; with weights, "
                             "the prompt's B lines, one prompt each (at most 8), left-padded")
    parser.add_argument("--lm-head-all", action="store_true",
                        help="run the LM head over every position ([B, T, V] logits), not the last one only")
    parser.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    parser.add_argument("--system", help="system prompt for the chat template")
    parser.add_argument("--thinking", action="store_true",
                        help="let a thinking model reason first (Qwen3's chat template: enable_thinking; off by default)")
    parser.add_argument("--sample", action="store_true",
                        help="sample instead of greedy decoding (implied by any sampling setting below)")
    parser.add_argument("--temperature", type=real(MIN_TEMPERATURE, MAX_TEMPERATURE), default=1.0,
                        help="divides the logits before sampling")
    parser.add_argument("--top-k", type=whole(0), default=0, help="0 disables")
    parser.add_argument("--top-p", type=real(0, 1, low_open=True), default=1.0, help="1.0 disables")
    parser.add_argument("--min-p", type=real(0, 1), default=0.0, help="0.0 disables")
    parser.add_argument("--seed", type=whole(0, SEED_LIMIT - 1), default=0,
                        help="seed of the run's own random generator (the same seed, the same tokens)")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA, then Apple MPS, then CPU), cpu, cuda, cuda:1, mps")
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                        help="weights' dtype; auto: bfloat16 on CUDA, float32 on CPU and MPS")
    parser.add_argument("--json", type=Path, help="save the whole run to this file (the saved-run format: it "
                        "opens in the app and with Explorer.open)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load, prefill, decode `args.steps` times, print the journey; returns the exit code.

    Raises:
        UsageError: options that do not fit one another or the model (checked before the model loads).
        ExplorerError: the model cannot be loaded or run the prompt, or the --json file cannot be written.
    """
    from explorer.runner.drive import decode_steps
    from explorer.runner.loading import load, resolved_model_config
    from explorer.runner.session import InferenceSession

    _check_early(args)
    settings = _settings(args)
    _check_layer(args.layer, resolved_model_config(model=args.model, config=args.config).num_hidden_layers)
    loaded = load(model=args.model, config=args.config, device=args.device, dtype=args.dtype,
                  progress=lambda message: print(message, file=sys.stderr))
    print(f"model: {loaded.description}")
    session = InferenceSession(loaded, settings)
    prompts = _lines(args.prompt) if args.batch > 1 and not loaded.shape_only else None
    traces = [session.prefill(args.prompt, use_chat_template=not args.no_chat_template,
                              system_prompt=args.system, prompt_tokens=args.prompt_tokens,
                              enable_thinking=args.thinking, batch=1 if prompts else args.batch,
                              lm_head_all=args.lm_head_all, prompts=prompts,
                              on_start=_say_estimate)]
    if not session.finished:
        traces += decode_steps(session, args.steps)
    print_journey(traces, session.text, args.layer, loaded.eos_token_ids)
    if prompts:
        print("\nevery sequence (sequence 0 above; left-padded to the longest prompt):")
        for b, (text, row) in enumerate(zip(session.batch_texts, session.batch_rows, strict=True)):
            ended = " [ended: end-of-sequence]" if row[-1] in loaded.eos_token_ids else ""
            print(f"  {b}: {prompts[b]!r} -> {text!r}{ended}")
    if args.json:
        _write_json(args.json, session)
    return 0


def _say_estimate(n_tokens: int, estimate) -> None:
    """Before the prefill: the prompt's length and its estimated memory (`explorer.analysis.memory`)."""
    if estimate is not None:
        print(f"Prefill of {n_tokens:,} tokens: {estimate.summary()}", file=sys.stderr)


def _settings(args: argparse.Namespace) -> SamplingSettings:
    filters = (args.temperature != 1.0, args.top_k != 0, args.top_p != 1.0, args.min_p != 0.0)
    settings = SamplingSettings(
        do_sample=args.sample or any(filters), temperature=args.temperature, top_k=args.top_k,
        top_p=args.top_p, min_p=args.min_p, max_new_tokens=args.steps + 1, seed=args.seed,
    )
    if any(filters) and not args.sample:
        print("note: sampling settings given, so sampling is on (as with --sample)", file=sys.stderr)
    return settings


def _check_early(args: argparse.Namespace) -> None:
    """Refuse options that do not fit one another before the model loads (seconds) rather than after.

    Raises:
        UsageError: no prompt, a --batch without as many prompt lines, or a --json path in no folder.
    """
    if args.prompt_tokens is None and not (args.prompt or "").strip():
        raise UsageError("The prompt is empty: give some text (or --prompt-tokens N with --config).")
    if args.batch > 1 and args.config is None and len(_lines(args.prompt)) != args.batch:
        raise UsageError(f"--batch {args.batch} with real weights takes {args.batch} prompts, one per line of "
                            "the prompt (or use --config for shape-only copies).")
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        raise UsageError(f"Cannot write the trace to {args.json}: give a file path in an existing folder.")


def _lines(prompt: str | None) -> list[str]:
    """The prompt's non-empty lines: one prompt each in a batch."""
    return [line for line in (prompt or "").splitlines() if line.strip()]


def _check_layer(layer: int, n_layers: int) -> None:
    """Refuse a layer the model lacks, from its config, before the model loads.

    Raises:
        UsageError: `layer` outside 0..n_layers - 1.
    """
    if not 0 <= layer < n_layers:
        raise UsageError(f"--layer must be in 0..{n_layers - 1} for this model ({n_layers} layers).")


def _write_json(path: Path, session) -> None:
    """The whole run in the saved-run format (`explorer.saved`), every attention matrix with it: the
    file opens in the app (Load a saved run) and in `Explorer.open`.

    Raises:
        ExportError: the file cannot be written.
    """
    save_run(session.run, session.attention, path)
    print(f"\nwrote the run ({len(session.run.steps)} steps) to {path} ({path.stat().st_size / 1e6:.1f} MB); "
          "open it in the app or with Explorer.open")


def print_journey(traces: list[StepTrace], text: str, layer: int = 0, eos_ids: Sequence[int] = ()) -> None:
    """Print one layer's stop table and K cache per step, the chosen tokens and the generated text
    (sequence 0's, in a batch: `eos_ids` name the step where it chose an end-of-sequence token).

    The table's ms columns are measured wall times in milliseconds, each layer stop's the median
    [p10-p90] over the step's layers (`explorer.journey.journey_rows`); a shape-only run prints no
    times, and its summary line says so.
    """
    prefill, decode = traces[0], traces[1] if len(traces) > 1 else None
    batch = prefill.op("embed").input_shapes[0][0]
    sequences = f" x {batch} sequences" if batch > 1 else ""
    if prefill.shape_only:
        print(f"\nprefill: {len(prefill.input_ids)} tokens{sequences}, shape-only: no compute, no times")
    else:
        print(f"\nprefill: {len(prefill.input_ids)} tokens{sequences} in {prefill.wall_ms:.1f} ms (measured, one run)")
    print(_table(prefill, decode, layer))
    print(timing_note(prefill))
    print(f"\nlayer {layer} K cache:")
    for trace in traces:
        kv = trace.kv[layer]
        print(f"  after {step_label(trace):<9} {shape_text(kv.key_shape):<18} {kv.key_bytes:>10,} B")
    _print_expert_load(traces, layer)
    print("\nchosen tokens:")
    for trace in traces:
        print(f"  {step_label(trace):<9} {trace.token_text!r:<16} {_chosen(trace)}")
    print(f"\ngenerated text: {text!r}{_ending(traces, eos_ids)}")


def _chosen(trace: StepTrace) -> str:
    """How sure the step was of its token, or why it has no values."""
    if trace.sampling is not None:
        return f"p={trace.sampling.token_prob:.3f}"
    if trace.shape_only:
        return "(shape-only: no values)"
    return "(sequence 0 had ended: fed the pad id, nothing drawn)"  # a batch's other sequences ran on


def _ending(traces: list[StepTrace], eos_ids: Sequence[int]) -> str:
    """Why sequence 0's text ends: the step that chose end-of-sequence, else why the run stopped."""
    eos = next((t for t in traces if t.sampling is not None and t.sampling.token_id in eos_ids), None)
    if eos is not None:
        return f" [ended: end-of-sequence at {step_label(eos)}]"
    return f" [ended: {traces[-1].finish_reason.replace('_', ' ')}]" if traces[-1].finished else ""


def _print_expert_load(traces: list[StepTrace], layer: int) -> None:
    """A mixture-of-experts layer: the token rows each expert got per step (computed from the router's
    measured choices), or in shape-only mode the expected B*T*k/E; nothing for a dense layer."""
    router = next((op for op in traces[0].ops if op.name == f"layers.{layer}.mlp.router"), None)
    if router is None:
        return
    experts, per_token = router.output_shapes[0][-1], router.output_shapes[1][-1]
    print(f"\nlayer {layer} experts: token rows per expert (E = {experts}, k = {per_token} per token):")
    for trace in traces:
        record = next((r for r in trace.routing if r.layer == layer), None)
        rows = trace.op(f"layers.{layer}.mlp.router").input_shapes[0][0]
        load = (f"{record.tokens_per_expert} (counted from the measured routing)" if record is not None else
                f"{rows * per_token / experts:.3g} each expected (B*T*k/E; shape-only: no routing)")
        print(f"  {step_label(trace):<9} {load}")


def _table(prefill: StepTrace, decode: StepTrace | None, layer: int) -> str:
    header = journey_header(prefill)
    rows = [header] + journey_rows(prefill, decode, layer)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
