"""`InferenceSession`: one person's inference, the prefill then one decode step at a time.

The loaded model is shared read-only; everything per person (token ids, the `DynamicCache`, the
`Run` its steps are appended to, its attention, the random generator) lives here. Model-running calls on one model are serialised by a
per-model lock, and the hooks are attached for the duration of one call only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import torch
from transformers import DynamicCache

from explorer.analysis.memory import (
    DEFAULT_ATTENTION_BUDGET_BYTES,
    PromptMemory,
    longest_prompt,
    prompt_memory,
    query_bytes,
)
from explorer.analysis.pooling import matrix_part
from explorer.config import SamplingSettings
from explorer.errors import PromptError, SessionStateError
from explorer.run import PromptInputs, Run
from explorer.runner.architectures import model_features, moe_layers
from explorer.runner.assemble import Plan, assemble_ops, stop_plan
from explorer.runner.attention_store import LiveAttention
from explorer.runner.batch import MAX_PROMPTS, Batch, pad_id
from explorer.runner.collector import collector_paused
from explorer.runner.detokenize import IncrementalDetokenizer, token_piece
from explorer.runner.devices import free_memory_bytes
from explorer.runner.gqa import recompute_probs
from explorer.runner.hooks import StepRecorder, StopForward, tracing
from explorer.runner.lens import DEFAULT_LENS_BUDGET_BYTES, LiveLens, capture_residuals, lens_positions
from explorer.runner.loaded import LoadedModel
from explorer.runner.locks import model_lock
from explorer.runner.prompts import check_prompt_chars, check_unicode
from explorer.runner.sampling import sample_next_token
from explorer.runner.timing import step_clock
from explorer.stops import stop_table
from explorer.trace import AttentionRecord, KVSnapshot, LensRecord, OpRecord, RoutingRecord, SamplingRecord, StepTrace

# The most sequences one run takes together (`prefill(batch=...)`).
MAX_BATCH = 256

# Top tokens per step whose text pieces the run names (the sampling view draws 20 of them).
PIECES_PER_STEP = 64

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
        self._stop_plans: dict[tuple[str, int], Plan] = {}  # `_stop_plan`
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

    def prefill(
        self,
        prompt: str | None = None,
        use_chat_template: bool = True,
        system_prompt: str | None = None,
        prompt_tokens: int | None = None,
        on_layer: Callable[[int, int], None] | None = None,
        batch: int = 1,
        lm_head_all: bool = False,
        prompts: list[str] | None = None,
        enable_thinking: bool = False,
        on_start: Callable[[int, PromptMemory | None], None] | None = None,
    ) -> StepTrace:
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
        self._check_batch(batch)
        start = time.perf_counter()
        rows = None if prompts is None else self._tokenize_batch(prompts, use_chat_template, system_prompt,
                                                                 enable_thinking)
        if rows is not None:
            prompt, batch = "\n".join(prompts), rows.size
            ids = rows.prefill_ids()[0]
        else:
            ids = self._tokenize(prompt, use_chat_template, system_prompt, prompt_tokens, enable_thinking)
        self._check_memory(len(ids))
        if on_start is not None:
            on_start(len(ids), self.memory_estimate(len(ids)))
        tokenize = OpRecord("tokenize", "tokenize", None, [], [[batch, len(ids)]], "int64",
                            (time.perf_counter() - start) * 1e3)
        with self._step_lock:
            self._cache = DynamicCache(config=self.loaded.model.config)
            self.ids, self.generated, self._failed_step = list(ids), [], None
            self.batch, self.lm_head_all, self._batch = batch, bool(lm_head_all), rows
            self._generator_states = []
            self.run = self._new_run()
            self.run.prompt = PromptInputs(prompt if prompt_tokens is None else None, bool(use_chat_template),
                                           system_prompt or "", prompt_tokens, bool(enable_thinking))
            self.attention.reset()
            self._detokenizer = IncrementalDetokenizer(self.loaded.tokenizer) if self._has_text() else None
            n_layers = self.loaded.model.config.num_hidden_layers
            report = None if on_layer is None else lambda layer: on_layer(layer, n_layers)
            return self._step("prefill", ids, {"tokenize": tokenize}, report)

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
            self._check_can_decode()
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
            SessionStateError: no such earlier step (`step_index` must be below the latest step), or
                a sliding-window layer has already dropped keys the earlier step's context needs.
        """
        with self._step_lock:
            steps = self.run.steps
            if self._batch is not None:
                raise SessionStateError("A batch of prompts cannot go back to an earlier step; run a new prefill.")
            if not 0 <= step_index < len(steps) - 1:
                raise SessionStateError(f"There is no earlier step {step_index} to continue from: "
                                        f"the steps run are 0 to {len(steps) - 1}.")
            context = steps[step_index].context_length
            self._crop_cache(context)
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

    def _crop_cache(self, context: int) -> None:
        """Cut every cache layer back to its first `context` positions (`DynamicCache.crop`).

        Raises:
            SessionStateError: a sliding-window layer has filled its window, so it no longer holds the
                keys of the earlier context (transformers can only crop it while it keeps them).
        """
        cache = self._cache
        for layer in cache.layers:
            window = getattr(layer, "sliding_window", None)
            if window is not None and layer.get_seq_length() >= window:
                raise SessionStateError(f"This model's sliding-window layers keep only their last {window} "
                                        "keys and have dropped the earlier ones, so the cache cannot go back "
                                        "to that step. Run a new prefill to start again.")
        cache.crop(context - cache.get_seq_length())  # a negative count: the positions to remove

    def _check_can_decode(self) -> None:
        if not self.run.steps:
            raise SessionStateError("Run the prefill first: a decode step continues a prompt.")
        if self._failed_step is not None:
            raise SessionStateError(f"The previous step failed ({self._failed_step}); its KV cache may be "
                                    "half written. Run a new prefill.")
        if self.finished:
            reason = self.run.latest.finish_reason
            raise SessionStateError(
                f"Generation has ended ({reason.replace('_', ' ')}). Run a new prefill to start again."
            )

    def _recompute_attention(self, step_index: int, layer: int, rows: tuple[int, int] | None = None,
                             key_factor: int = 1) -> np.ndarray:
        """A layer's attention probabilities for a step the session did not keep, or their part
        (`LiveAttention`; `rows` and `key_factor` as `explorer.run.AttentionSource.probs` takes them).

        Recomputing takes the step's queries, which the session keeps, and the keys in its cache
        (`explorer.runner.gqa.recompute_probs`: the same values, bit for bit). Where the cache no longer
        holds every key (a sliding-window layer keeps only its last ones, or the session was closed),
        it runs the step's whole context on a fresh cache up to `layer` instead; causal masking makes
        the step's query rows the same as in the cached pass.

        Returns:
            [h_q, q_len, kv_len] float32, rows sum to 1 (prefill [h_q, T, T], decode [h_q, 1, n]), or
            its part.

        Raises:
            IndexError: no such step or layer.
            SessionStateError: in shape-only mode (there are no values).
        """
        trace = self.run.steps[step_index]
        if not 0 <= layer < len(trace.attention):
            raise IndexError(f"layer {layer} of {len(trace.attention)}")
        if self.loaded.shape_only:
            raise SessionStateError("Shape-only mode computes no attention values.")
        held = self._cache.layers[layer] if self._cache is not None else None
        keys = held.keys if held is not None else None
        # every position the layer has seen is held (a full sliding window holds only its last ones); a
        # step in flight may have added its own keys: only the first n are read
        if keys is not None and keys.shape[-2] == held.get_seq_length() >= trace.context_length:
            inputs = self.attention.store.inputs[step_index][layer]
            mask = self._batch.mask[:, :trace.context_length] if self._batch is not None else None
            padding = mask[0] if mask is not None and not bool(mask.all()) else None  # else transformers masked none
            return recompute_probs(inputs, keys[:1, :, :trace.context_length], padding, rows, key_factor)
        return matrix_part(self._rerun_attention(trace, layer), rows, key_factor)

    def _rerun_attention(self, trace: StepTrace, layer: int) -> np.ndarray:
        recorder = StepRecorder(stop_after_layer=layer)  # the times are not kept: no device clock
        cache = DynamicCache(config=self.loaded.model.config)
        inputs = {"input_ids": torch.tensor([self.ids[: trace.context_length]], device=self.loaded.device)}
        if self._batch is not None:  # sequence 0 alone, with its padding masked as in the batch
            inputs["attention_mask"] = self._batch.mask[:1, :trace.context_length].to(self.loaded.device)
            inputs["position_ids"] = self._batch.positions()[:1, :trace.context_length].to(self.loaded.device)
        model = self.loaded.model
        with model_lock(model), torch.inference_mode(), tracing(model, cache, recorder, hook_modules=False):
            try:
                model(**inputs, cache=cache, use_cache=True, logits_to_keep=1)
            except StopForward:
                pass
        recorder.finish()
        q_len, kv_len = trace.attention[layer].shape[1:]  # a sliding-window layer sees only its last kv_len keys
        return recorder.attention[layer][:, -q_len:, -kv_len:]

    @property
    def batch_rows(self) -> list[list[int]]:
        """Each sequence's ids without padding: its prompt, then its chosen tokens up to its EOS; one row,
        the run's ids, outside a batch of prompts."""
        return self._batch.sequences() if self._batch is not None else [list(self.ids)]

    @property
    def batch_texts(self) -> list[str]:
        """Each sequence's generated text, special tokens left out ("" in shape-only mode)."""
        if not self._has_text():
            return [""] * self.batch
        return [self.text] if self._batch is None else self._batch.texts(self.loaded.tokenizer)

    def _tokenize_batch(self, prompts: list[str], use_chat_template: bool, system_prompt: str | None,
                        enable_thinking: bool) -> Batch:
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS:
            raise PromptError(f"A batch takes 1 to {MAX_PROMPTS} prompts, one per line.")
        rows = [self._encode(text, use_chat_template, system_prompt, enable_thinking) for text in prompts]
        self._check_length(max(len(row) for row in rows))
        return Batch.start(rows, pad_id(self.loaded), self.settings.seed)

    def _check_batch(self, batch) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise PromptError(f"The batch must be a whole number of sequences from 1 to {MAX_BATCH}.")
        if batch > 1 and not self.loaded.shape_only:
            raise PromptError("A batch of copies runs in shape-only mode (--config); with real weights, give "
                              "one prompt per sequence.")

    def prompt_ids(self, prompt: str, use_chat_template: bool = True, system_prompt: str | None = None,
                   enable_thinking: bool = False) -> list[int]:
        """The token ids a prefill of `prompt` would feed (the same checks; raises `PromptError` as `prefill`)."""
        return self._tokenize(prompt, use_chat_template, system_prompt, None, enable_thinking)

    def _tokenize(self, prompt, use_chat_template, system_prompt, prompt_tokens, enable_thinking) -> list[int]:
        if prompt_tokens is None:
            ids = self._encode(prompt, use_chat_template, system_prompt, enable_thinking)
            self._check_length(len(ids))
            return ids
        if not self.loaded.shape_only:
            raise PromptError("A prompt given as a token count is for shape-only mode (--config); "
                              "with real weights, give the prompt as text.")
        if not isinstance(prompt_tokens, int) or prompt_tokens < 1:
            raise PromptError("A prompt needs at least one token: give a whole number of tokens, 1 or more.")
        self._check_length(prompt_tokens)  # before allocating: a huge count is refused, not built
        return [0] * prompt_tokens

    def memory_estimate(self, n_tokens: int) -> PromptMemory | None:
        """The estimated memory of a prefill of `n_tokens` here (`explorer.analysis.memory`), in the
        model's dtype and this session's attention budget; None in shape-only mode or for a family
        the cost model does not know."""
        spec = self.run.spec
        if spec is None or self.loaded.shape_only:
            return None
        return prompt_memory(spec, n_tokens, self.loaded.model.dtype.itemsize, self.attention_budget_bytes)

    def _query_bytes(self, q_len: int) -> int:
        """The post-RoPE queries a step of `q_len` tokens keeps, all layers (as `memory_estimate`
        counts them); 0 where the estimate is not made."""
        spec = self.run.spec
        if spec is None or self.loaded.shape_only:
            return 0
        return query_bytes(spec, q_len, self.loaded.model.dtype.itemsize)

    def _check_memory(self, n_tokens: int) -> None:
        """Refuse a prompt whose estimated memory beyond the loaded weights exceeds the device's free
        memory, before the session allocates anything for it."""
        need = self.memory_estimate(n_tokens)
        if need is None:
            return
        device = torch.device(self.loaded.device)
        free = free_memory_bytes(device)
        if need.run_bytes <= free:
            return
        fits = longest_prompt(self.run.spec, self.loaded.model.dtype.itemsize, self.attention_budget_bytes, free,
                              n_tokens)
        raise PromptError(
            f"The prompt is {n_tokens:,} tokens; running it needs {need.summary()}. Beyond the loaded weights "
            f"that is {need.run_bytes / 1e6:,.0f} MB, but {device} has {free / 1e6:,.0f} MB free. Shorten the "
            f"prompt to at most {fits:,} tokens, or free memory (close other programs or sessions) and run it again."
        )

    def _check_length(self, n_tokens: int) -> None:
        limit = self.loaded.model.config.max_position_embeddings
        if n_tokens >= limit:
            raise PromptError(
                f"The prompt is {n_tokens} tokens; this model's context window is {limit} tokens "
                "and one more is needed for the first new token. Shorten the prompt."
            )
        if self.max_prompt_tokens is not None and n_tokens > self.max_prompt_tokens:
            raise PromptError(f"The prompt is {n_tokens} tokens; here the limit is {self.max_prompt_tokens}. "
                              + self.limit_advice)

    def _encode(self, prompt: str | None, use_chat_template: bool, system_prompt: str | None,
                enable_thinking: bool) -> list[int]:
        tokenizer = self.loaded.tokenizer
        if tokenizer is None:
            raise PromptError("This model has no tokenizer here: give the prompt as a token count.")
        check_prompt_chars(prompt, "prompt", self.max_prompt_tokens, self.limit_advice)
        check_prompt_chars(system_prompt, "system prompt", self.max_prompt_tokens, self.limit_advice)
        if not isinstance(prompt, str) or not prompt.strip():
            raise PromptError("The prompt is empty: type some text to run through the model.")
        check_unicode(prompt, "prompt")
        check_unicode(system_prompt or "", "system prompt")
        if use_chat_template and tokenizer.chat_template:
            messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
            messages.append({"role": "user", "content": prompt})
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                 enable_thinking=bool(enable_thinking))
            return tokenizer(text, add_special_tokens=False)["input_ids"]
        return tokenizer(prompt)["input_ids"]

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
        keeper = self.attention.store.keeper(self._query_bytes(inputs["input_ids"].shape[-1]))
        recorder = StepRecorder(step_clock(model, self.loaded.device), keep_attention=keeper, on_layer=on_layer)
        lens_width = 0 if self.loaded.shape_only else lens_positions(len(new_ids), model.config.num_hidden_layers)
        with model_lock(model), torch.inference_mode(), capture_residuals(model, lens_width) as residuals, \
                tracing(model, self._cache, recorder):
            start = time.perf_counter()
            output = model(**inputs, cache=self._cache, use_cache=True, logits_to_keep=keep)
            recorder.finish()  # on CUDA the step's one synchronise, so wall_ms covers the GPU's work
            wall_ms = (time.perf_counter() - start) * 1e3
        kv, context_length = self._kv_snapshots(), self._cache.get_seq_length()
        sampling, token_text, finish_reason = self._choose(output.logits[:, -1], extra)
        trace = StepTrace(
            stage=stage, step_index=len(self.run.steps), input_ids=list(new_ids), input_pieces=self.pieces(new_ids),
            context_length=context_length,
            ops=assemble_ops(self._stop_plan(stage, len(kv)), recorder.events, self.features, extra),
            kv=kv, attention=[AttentionRecord(i, shape, recorder.first_key_sums.get(i))
                              for i, shape in sorted(recorder.attention_shapes.items())],
            logits=sampling.stages[0].logits if sampling else None,  # the raw stage: one array, not two
            sampling=sampling, token_text=token_text, finished=bool(finish_reason), finish_reason=finish_reason,
            wall_ms=wall_ms, device=str(self.loaded.device), shape_only=self.loaded.shape_only,
            batch_texts=self.batch_texts if self._batch is not None else [],
            routing=[RoutingRecord(layer, n_experts, ids.tolist(), weights.float().cpu().numpy())
                     for layer, (ids, weights, n_experts) in sorted(recorder.routing.items())],
        )
        self.attention.store.add(recorder.attention, recorder.attention_inputs)
        # after the draw, each column's next token is known; the lens itself waits until asked for
        self.lens.add(residuals, trace.logits, self.ids[-lens_width:] if lens_width else [],
                      context_length - lens_width)
        self.run.append(trace, self._named_pieces(trace), self._text())
        return trace

    def _stop_plan(self, stage: str, n_layers: int) -> Plan:
        """The stops of a step (`explorer.stops.stop_table`) as `assemble_ops` reads them, built once per stage."""
        key = (stage, n_layers)
        if key not in self._stop_plans:
            self._stop_plans[key] = stop_plan(stop_table(self.features, n_layers, stage, self.moe_layers))
        return self._stop_plans[key]

    def _kv_snapshots(self) -> list[KVSnapshot]:
        return [
            KVSnapshot(i, list(layer.keys.shape), list(layer.values.shape),
                       layer.keys.numel() * layer.keys.element_size(),
                       layer.values.numel() * layer.values.element_size())
            for i, layer in enumerate(self._cache.layers)
        ]

    def _choose(self, logits: torch.Tensor, extra: dict[str, OpRecord]) -> tuple[SamplingRecord | None, str, str]:
        """Sample (or, shape-only, take a placeholder id) and detokenise: (how the token was chosen, the
        text it adds, why generation ends or "")."""
        start = time.perf_counter()
        vocab = int(logits.shape[-1])
        sampling = None
        if self.loaded.shape_only:
            token_id = 0
        elif self._batch is not None:
            sampling = self._batch.choose(logits, self.settings, self.loaded.eos_token_ids)
            token_id = self._batch.rows[0][-1]
        else:
            ids = torch.tensor([self.ids], dtype=torch.long)
            sampling = sample_next_token(logits[0], ids, self.settings, self._generator)
            token_id = sampling.token_id
        batch = self.batch
        extra["sample"] = OpRecord("sample", "sample", None, [[batch, vocab]], [[batch]], "int64",
                                   (time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        self._generator_states.append(self._generator.get_state())
        self.ids.append(token_id)
        self.generated.append(token_id)
        token_text = self._detokenizer.push(token_id) if self._detokenizer else ""
        extra["detokenize"] = OpRecord("detokenize", "detokenize", None, [[batch]], [], "str",
                                       (time.perf_counter() - start) * 1e3)
        return sampling, token_text, self._finish_reason(token_id)

    def _named_pieces(self, trace: StepTrace) -> dict[int, str]:
        """The pieces of the ids a step names that the run does not yet: the ids it fed, the token it
        chose and its `PIECES_PER_STEP` top tokens (its lens names its own once computed)."""
        named = set(trace.input_ids)
        if trace.logits is not None:
            named.add(trace.sampling.token_id)
            top = min(PIECES_PER_STEP, trace.logits.size)
            # torch's top-k: 0.1 ms over SmolLM2's 49,152 logits, numpy's argpartition 0.5 ms
            named.update(torch.from_numpy(trace.logits).topk(top, sorted=False).indices.tolist())
        new = sorted(named.difference(self.run.pieces))
        return dict(zip(new, self.pieces(new), strict=True))

    def _name_lens_pieces(self, record: LensRecord) -> None:
        """Name the top tokens of a logit lens just computed (`LiveLens`'s `on_record`)."""
        new = sorted(set(np.unique(record.top_ids).tolist()).difference(self.run.pieces))
        self.run.add_pieces(dict(zip(new, self.pieces(new), strict=True)))

    def _text(self) -> str:
        """The generated text, special tokens left out ("" in shape-only mode); a character still
        incomplete after the last token (part of an emoji's UTF-8 bytes) is held back."""
        if not self._has_text():
            return ""
        return self.loaded.tokenizer.decode(self.generated, skip_special_tokens=True).rstrip("\ufffd")

    def _finish_reason(self, token_id: int) -> str:
        ended = self._batch.ended if self._batch is not None else token_id in self.loaded.eos_token_ids
        if not self.loaded.shape_only and ended:
            return "eos"
        if len(self.generated) >= self.settings.max_new_tokens:
            return "max_new_tokens"
        if len(self.ids) >= self.loaded.model.config.max_position_embeddings:
            return "context_full"
        return ""

    def _has_text(self) -> bool:
        return self.loaded.tokenizer is not None and not self.loaded.shape_only

    def pieces(self, ids: list[int]) -> list[str]:
        """Each token id's text alone (`token_piece`: what a token chip shows); "" for each in shape-only mode."""
        if not self._has_text():
            return [""] * len(ids)
        return [token_piece(self.loaded.tokenizer, i) for i in ids]
