"""`InferenceSession`: one person's inference, the prefill then one decode step at a time.

The loaded model is shared read-only; everything per person (token ids, the `DynamicCache`, the
`Run` its steps are appended to, its attention, the random generator) lives here. Model-running calls
on one model are serialised by a per-model lock (`explorer.runner.locks`), and the hooks are attached
for the duration of one call only. The parts of a step live beside it: reading the prompt
(`prompt_ids`), the memory check (`memory_check`), choosing the token (`choice`), what the step
records (`step_record`, `pieces`), the order of steps and branching (`step_order`), and recomputing
attention it did not keep (`attention_recompute`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import torch
from transformers import DynamicCache

from explorer.analysis.memory import DEFAULT_ATTENTION_BUDGET_BYTES, PromptMemory
from explorer.config import SamplingSettings
from explorer.run import PromptInputs, Run
from explorer.runner.architectures import model_features, moe_layers
from explorer.runner.assemble import assemble_ops
from explorer.runner.attention_recompute import recompute_attention
from explorer.runner.attention_store import LiveAttention
from explorer.runner.batch import Batch
from explorer.runner.choice import draw_token, finish_reason
from explorer.runner.collector import collector_paused
from explorer.runner.detokenize import IncrementalDetokenizer
from explorer.runner.hooks import StepRecorder
from explorer.runner.lens import DEFAULT_LENS_BUDGET_BYTES, LiveLens, lens_positions
from explorer.runner.loaded import LoadedModel
from explorer.runner.locks import model_lock
from explorer.runner.memory_check import check_memory, memory_estimate, step_query_bytes
from explorer.runner.pieces import generated_text, lens_pieces, step_pieces, text_tokenizer, token_pieces
from explorer.runner.prompt_ids import PromptReader
from explorer.runner.step_order import check_branch, check_can_decode, crop_cache
from explorer.runner.step_record import StopPlans, attention_records, kv_snapshots, routing_records, traced_forward
from explorer.runner.timing import step_clock
from explorer.trace import LensRecord, OpRecord, SamplingRecord, StepTrace


class InferenceSession:
    """Prefill, then decode steps, each appended to the session's `run` and returned as a `StepTrace`;
    `attention` gives any step's attention probabilities, `run.lens(step)` its logit lens (`lens`,
    computed on first request).

    Args:
        loaded: the model, its tokenizer (None in shape-only mode) and its EOS ids.
        settings: sampling settings; `settings.seed` seeds this session's own generator.
        attention_budget_bytes: attention memory the session keeps, all steps together: the queries it
            always keeps plus float32 probabilities; the newest step's are served first, older steps give
            theirs up.
        max_prompt_tokens: refuse longer prompts (a shared app keeps one prefill from holding the
            model for minutes), and a prompt or system prompt of more than `max_prompt_chars` characters
            before tokenizing it; None allows up to the model's context window.
        limit_advice: what the refusal of a prompt past `max_prompt_tokens` tells the person to do.
        lens_budget_bytes: residual rows held for the logit lenses not yet asked for; past it the oldest
            steps' lenses are computed and their rows freed (`explorer.runner.lens.LiveLens`).
    """

    def __init__(
        self,
        loaded: LoadedModel,
        settings: SamplingSettings | None = None,
        attention_budget_bytes: int = DEFAULT_ATTENTION_BUDGET_BYTES,
        max_prompt_tokens: int | None = None,
        limit_advice: str = "Shorten the prompt.",
        lens_budget_bytes: int = DEFAULT_LENS_BUDGET_BYTES,
    ) -> None:
        self.loaded = loaded
        self.max_prompt_tokens = max_prompt_tokens
        self.limit_advice = limit_advice
        self.settings = settings or SamplingSettings()
        self.attention_budget_bytes = attention_budget_bytes
        self.features = model_features(loaded.model)
        self.moe_layers = moe_layers(loaded.model)
        self._stop_plans = StopPlans(self.features, self.moe_layers)
        self._tokenizer = text_tokenizer(loaded)  # None where tokens have no text (shape-only mode)
        self.lens_budget_bytes = lens_budget_bytes
        self.lens: LiveLens | None = None  # the run's lens source, one per run (`_new_run`)
        self.run = self._new_run()
        self.attention = LiveAttention(attention_budget_bytes, self._recompute_attention, not loaded.shape_only)
        self.ids: list[int] = []
        self.generated: list[int] = []
        self._generator = torch.Generator().manual_seed(self.settings.seed)
        self._generator_states: list[torch.Tensor] = []  # after each step's draw, to branch from it
        self._cache: DynamicCache | None = None
        self._detokenizer: IncrementalDetokenizer | None = None
        self._failed_step: str | None = None  # a step that raised may have written part of the cache
        self._step_lock = threading.Lock()  # two clicks at once run one step after the other
        self.batch = 1  # B of the current run (`prefill`)
        self.lm_head_all = False  # the LM head over every position (`prefill`)
        self._batch: Batch | None = None  # a batch of real prompts (`prefill(prompts=...)`)

    @property
    def traces(self) -> tuple[StepTrace, ...]:
        """The run's steps: the prefill, then each decode step."""
        return self.run.steps

    @property
    def finished(self) -> bool:
        """True once a step chose an EOS token, hit max_new_tokens, or filled the context."""
        return self.run.finished

    @property
    def text(self) -> str:
        """The generated text so far (`Run.text`)."""
        return self.run.text

    @property
    def query_bytes(self) -> int:
        """Bytes of the post-RoPE queries the session keeps (every step, every layer) to recompute the
        attention it does not keep: h_q x T x d_h values a layer for the prefill, h_q x d_h a decode step."""
        return self.attention.store.query_bytes

    @property
    def lens_bytes(self) -> int:
        """Bytes of the residual rows held for the logit lenses not yet asked for ((L+1) x P x d values a
        step in the model's dtype; `explorer.runner.lens.LiveLens`)."""
        return self.lens.residual_bytes

    def close(self) -> None:
        """Free the KV cache, the run, its attention, its lens residuals and the ids (the page that held
        this session closed)."""
        with self._step_lock:  # a step in flight finishes first
            self._cache, self.ids, self.generated = None, [], []
            self.run = self._new_run()
            self.attention.reset()

    def _new_run(self) -> Run:
        """A new run with its own lens source; the previous run's residuals are freed."""
        loaded = self.loaded
        if self.lens is not None:
            self.lens.reset()
        self.lens = LiveLens(loaded.model, lambda: model_lock(loaded.model), self._name_lens_pieces,
                             self.lens_budget_bytes)
        run = Run(loaded.name, loaded.description, loaded.model.config.to_dict())
        run.lens_source = self.lens
        return run

    def set_settings(self, settings: SamplingSettings) -> None:
        """Use new sampling settings from the next step on (the generator is not reseeded)."""
        self.settings = settings

    def prefill(self, prompt: str | None = None, use_chat_template: bool = True, system_prompt: str | None = None,
                prompt_tokens: int | None = None, on_layer: Callable[[int, int], None] | None = None, batch: int = 1,
                lm_head_all: bool = False, prompts: list[str] | None = None, enable_thinking: bool = False,
                on_start: Callable[[int, PromptMemory | None], None] | None = None) -> StepTrace:
        """Run the whole prompt through the model on a fresh cache and choose the first token.

        Args:
            prompt: the user's text; or None with `prompt_tokens` (shape-only mode without a tokenizer).
            use_chat_template: wrap the prompt in the tokenizer's chat template (where it has one).
            system_prompt: an optional system message for the chat template.
            prompt_tokens: a prompt given as a token count T (ids are placeholders: shape-only mode).
            on_layer: called as (layer index, layer count) once each layer's attention has run, to show
                a long prefill's progress.
            batch: B, sequences run together (shape-only mode: B copies of the placeholder prompt; every
                stop's shapes carry B; the views show sequence 0).
            lm_head_all: run the LM head over every position ([B, T, V] logits) instead of the last one
                only, as `generate` does; the next token still comes from the last position.
            prompts: a batch of real prompts (1 to `MAX_PROMPTS`), instead of `prompt`: left-padded to the
                longest with the attention mask and position ids `generate` uses, each sequence drawn with
                its own generator (seed + b) (`explorer.runner.batch`). The run records sequence 0 (its
                padded ids, logits and sampling); `batch_rows` holds every sequence's ids.
            enable_thinking: passed to the chat template as `enable_thinking` (Qwen3's switch: off, its
                template ends the generation prompt with an empty <think></think> block, so the model
                answers at once; on, it may reason in <think> first). Templates without it ignore it.
            on_start: called as (prompt tokens T, `memory_estimate(T)`) once the prompt is allowed,
                before the forward pass, to show what a long prefill will need.

        Raises:
            PromptError: empty prompt, a lone surrogate in the prompt or system prompt, no tokenizer for
                a text prompt, a token count for real weights or one that is not a whole number >= 1,
                longer than `max_prompt_tokens` or than the context window, or a prompt or system
                prompt longer than `max_prompt_chars(max_prompt_tokens)` characters (checked before
                the tokenizer runs), or a batch that is not a whole number in 1..`MAX_BATCH` (above 1: shape-only
                mode only); or a prompt whose estimated memory (`memory_estimate`, of one
                sequence) exceeds the device's free memory, refused before anything is allocated.
        """
        self._prompt_reader().check_batch(batch)
        start = time.perf_counter()
        prompt, ids, rows = self._read_prompt(prompt, prompts, use_chat_template, system_prompt, prompt_tokens,
                                              enable_thinking)
        batch = rows.size if rows is not None else batch
        check_memory(self.loaded, self.run.spec, self.attention_budget_bytes, len(ids))
        if on_start is not None:
            on_start(len(ids), self.memory_estimate(len(ids)))
        tokenize = OpRecord("tokenize", "tokenize", None, [], [[batch, len(ids)]], "int64",
                            (time.perf_counter() - start) * 1e3)
        with self._step_lock:
            self._start_run(ids, batch, lm_head_all, rows)
            self.run.prompt = PromptInputs(prompt if prompt_tokens is None else None, bool(use_chat_template),
                                           system_prompt or "", prompt_tokens, bool(enable_thinking))
            n_layers = self.loaded.model.config.num_hidden_layers
            report = None if on_layer is None else lambda layer: on_layer(layer, n_layers)
            return self._step("prefill", ids, {"tokenize": tokenize}, report)

    def _read_prompt(self, prompt: str | None, prompts: list[str] | None, use_chat_template: bool,
                     system_prompt: str | None, prompt_tokens: int | None,
                     enable_thinking: bool) -> tuple[str | None, list[int], Batch | None]:
        """(the prompt the run records, sequence 0's ids, the batch of `prompts` or None) of a prefill
        (`explorer.runner.prompt_ids`); raises `PromptError` as `prefill`."""
        reader = self._prompt_reader()
        if prompts is None:
            return prompt, reader.ids(prompt, use_chat_template, system_prompt, prompt_tokens, enable_thinking), None
        rows = reader.batch(prompts, use_chat_template, system_prompt, enable_thinking, self.settings.seed)
        return "\n".join(prompts), rows.prefill_ids()[0], rows

    def _start_run(self, ids: list[int], batch: int, lm_head_all: bool, rows: Batch | None) -> None:
        """A fresh cache, run, attention and detokenizer for a prefill of `ids` (B = `batch`)."""
        self._cache = DynamicCache(config=self.loaded.model.config)
        self.ids, self.generated, self._failed_step = list(ids), [], None
        self.batch, self.lm_head_all, self._batch = batch, bool(lm_head_all), rows
        self._generator_states = []
        self.run = self._new_run()
        self.attention.reset()
        self._detokenizer = IncrementalDetokenizer(self._tokenizer) if self._tokenizer is not None else None

    def decode_step(self, settings: SamplingSettings | None = None) -> StepTrace:
        """Feed the last chosen token through the model and choose the next one.

        Args:
            settings: sampling settings to use from this step on (as `set_settings`), applied only once
                the step is allowed, so a refused step leaves the session exactly as it was.

        Raises:
            SessionStateError: no prefill yet, generation has already ended, or the previous step
                failed part-way (its cache may be half written).
        """
        with self._step_lock:
            check_can_decode(self.run, self._failed_step)
            if settings is not None:
                self.settings = settings
            if self._batch is not None:
                self._batch.extend()
            with collector_paused():
                return self._step("decode", [self.generated[-1]], {}, None)

    def branch(self, step_index: int) -> None:
        """Continue from an earlier step: drop the steps after `step_index` and crop the KV cache to
        that step's context, so the next decode step feeds the token that step chose, with the random
        generator as it was after that step's draw. The tokens that follow are those of a session that
        stopped at `step_index` and went on with the same settings.

        A step that failed part-way after `step_index` is dropped with the others (the crop removes
        what it half wrote).

        Raises:
            SessionStateError: no such earlier step (`step_index` must be below the latest step), a
                batch of prompts, or a sliding-window layer has already dropped keys the earlier step's
                context needs (`explorer.runner.step_order`).
        """
        with self._step_lock:
            check_branch(self.run.steps, step_index, self._batch)
            context = self.run.steps[step_index].context_length
            crop_cache(self._cache, context)
            keep = step_index + 1
            self.ids, self.generated = self.ids[: context + 1], self.generated[:keep]
            self._generator.set_state(self._generator_states[step_index])
            self._generator_states = self._generator_states[:keep]
            self._failed_step = None
            self.run.truncate(keep)
            self.attention.store.truncate(keep)
            if self._detokenizer is not None:
                self._detokenizer = IncrementalDetokenizer(self.loaded.tokenizer)
                for token_id in self.generated:
                    self._detokenizer.push(token_id)

    def _recompute_attention(self, step_index: int, layer: int, rows: tuple[int, int] | None = None,
                             key_factor: int = 1) -> np.ndarray:
        """A layer's attention probabilities for a step the session did not keep, or their part
        (`LiveAttention`'s source; `explorer.runner.attention_recompute.recompute_attention`).

        Returns:
            [h_q, q_len, kv_len] float32, rows sum to 1, or its part.

        Raises:
            IndexError: no such step or layer.
            SessionStateError: in shape-only mode (there are no values).
        """
        return recompute_attention(self.loaded, self.run.steps, step_index, layer, self._cache, self.attention.store,
                                   self._batch, self.ids, rows, key_factor)

    @property
    def batch_rows(self) -> list[list[int]]:
        """Each sequence's ids without padding: its prompt, then its chosen tokens up to its EOS; one row,
        the run's ids, outside a batch of prompts."""
        return self._batch.sequences() if self._batch is not None else [list(self.ids)]

    @property
    def batch_texts(self) -> list[str]:
        """Each sequence's generated text, special tokens left out ("" in shape-only mode)."""
        if self._tokenizer is None:
            return [""] * self.batch
        return [self.text] if self._batch is None else self._batch.texts(self.loaded.tokenizer)

    def _prompt_reader(self) -> PromptReader:
        """This session's model and prompt limits, as they are now (`explorer.runner.prompt_ids`)."""
        return PromptReader(self.loaded, self.max_prompt_tokens, self.limit_advice)

    def prompt_ids(self, prompt: str, use_chat_template: bool = True, system_prompt: str | None = None,
                   enable_thinking: bool = False) -> list[int]:
        """The token ids a prefill of `prompt` would feed (the same checks; raises `PromptError` as `prefill`)."""
        return self._prompt_reader().ids(prompt, use_chat_template, system_prompt, None, enable_thinking)

    def memory_estimate(self, n_tokens: int) -> PromptMemory | None:
        """The estimated memory of a prefill of `n_tokens` here (`explorer.analysis.memory`), in the
        model's dtype and this session's attention budget; None in shape-only mode or for a family
        the cost model does not know."""
        return memory_estimate(self.loaded, self.run.spec, self.attention_budget_bytes, n_tokens)

    def _step(self, stage: str, new_ids: list[int], extra: dict[str, OpRecord], on_layer) -> StepTrace:
        """Run one step. Any failure once the forward pass has begun (the cache may hold part of the
        step, the ids the chosen token) marks the session failed, so no later step builds on it."""
        try:
            return self._run_step(stage, new_ids, extra, on_layer)
        except Exception as exc:
            self._failed_step = f"{type(exc).__name__}: {exc}"
            raise

    def _run_step(self, stage: str, new_ids: list[int], extra: dict[str, OpRecord], on_layer) -> StepTrace:
        model = self.loaded.model
        keep = 0 if self.lm_head_all else 1  # transformers: 0 keeps every position
        inputs = self._batch.inputs(stage, self.loaded.device) if self._batch is not None else {
            "input_ids": torch.tensor([new_ids] * self.batch, device=self.loaded.device)}
        query_bytes = step_query_bytes(self.loaded, self.run.spec, inputs["input_ids"].shape[-1])
        recorder = StepRecorder(step_clock(model, self.loaded.device),
                                keep_attention=self.attention.store.keeper(query_bytes), on_layer=on_layer)
        lens_width = 0 if self.loaded.shape_only else lens_positions(len(new_ids), model.config.num_hidden_layers)
        output, wall_ms, residuals = traced_forward(model, self._cache, inputs, recorder, lens_width, keep)
        kv, context_length = kv_snapshots(self._cache), self._cache.get_seq_length()
        sampling, token_text, finish = self._choose(output.logits[:, -1], extra)
        trace = StepTrace(
            stage=stage, step_index=len(self.run.steps), input_ids=list(new_ids), input_pieces=self.pieces(new_ids),
            context_length=context_length,
            ops=assemble_ops(self._stop_plans.plan(stage, len(kv)), recorder.events, self.features, extra),
            kv=kv, attention=attention_records(recorder),
            logits=sampling.stages[0].logits if sampling else None,  # the raw stage: one array, not two
            sampling=sampling, token_text=token_text, finished=bool(finish), finish_reason=finish,
            wall_ms=wall_ms, device=str(self.loaded.device), shape_only=self.loaded.shape_only,
            batch_texts=self.batch_texts if self._batch is not None else [], routing=routing_records(recorder),
        )
        self.attention.store.add(recorder.attention, recorder.attention_inputs)
        # after the draw, each column's next token is known; the lens itself waits until asked for
        self.lens.add(residuals, trace.logits, self.ids[-lens_width:] if lens_width else [],
                      context_length - lens_width)
        self.run.append(trace, step_pieces(self._tokenizer, trace, self.run.pieces),
                        generated_text(self._tokenizer, self.generated))
        return trace

    def _choose(self, logits: torch.Tensor, extra: dict[str, OpRecord]) -> tuple[SamplingRecord | None, str, str]:
        """Sample (or, shape-only, take a placeholder id) and detokenise: (how the token was chosen, the
        text it adds, why generation ends or ""); the "sample" and "detokenize" stops go into `extra`."""
        start = time.perf_counter()
        sampling, token_id = draw_token(self.loaded, self._batch, self.ids, self.settings, self._generator, logits)
        batch, vocab = self.batch, int(logits.shape[-1])
        extra["sample"] = OpRecord("sample", "sample", None, [[batch, vocab]], [[batch]], "int64",
                                   (time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        self._generator_states.append(self._generator.get_state())
        self.ids.append(token_id)
        self.generated.append(token_id)
        token_text = self._detokenizer.push(token_id) if self._detokenizer else ""
        extra["detokenize"] = OpRecord("detokenize", "detokenize", None, [[batch]], [], "str",
                                       (time.perf_counter() - start) * 1e3)
        return sampling, token_text, finish_reason(self.loaded, self._batch, token_id, len(self.generated),
                                                   len(self.ids), self.settings.max_new_tokens)

    def _name_lens_pieces(self, record: LensRecord) -> None:
        """Name the top tokens of a logit lens just computed (`LiveLens`'s `on_record`)."""
        self.run.add_pieces(lens_pieces(self._tokenizer, record, self.run.pieces))

    def pieces(self, ids: list[int]) -> list[str]:
        """Each token id's text alone (`token_piece`: what a token chip shows); "" for each in shape-only mode."""
        return token_pieces(self._tokenizer, ids)
