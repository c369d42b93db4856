"""From a prompt to the token ids a prefill feeds: the checks before and after tokenizing, the chat
template, a batch of prompts, or a token count in shape-only mode."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.config import MAX_BATCH
from explorer.errors import PromptError
from explorer.runner.batch import MAX_PROMPTS, Batch, pad_id
from explorer.runner.loaded import LoadedModel
from explorer.runner.prompts import check_prompt_chars, check_unicode



@dataclass(frozen=True)
class PromptReader:
    """Reads the prompts of one session: its model and its limits, as they are at the call.

    Attributes:
        loaded: the model; its tokenizer (None in shape-only mode) and its context window.
        max_prompt_tokens: refuse longer prompts, and a prompt or system prompt of more than
            `max_prompt_chars(max_prompt_tokens)` characters before tokenizing it; None allows up to the
            model's context window.
        limit_advice: what the refusal of a prompt past `max_prompt_tokens` tells the person to do.
    """

    loaded: LoadedModel
    max_prompt_tokens: int | None
    limit_advice: str

    def ids(self, prompt: str | None, use_chat_template: bool, system_prompt: str | None,
            prompt_tokens: int | None, enable_thinking: bool) -> list[int]:
        """The ids of a text prompt, or `prompt_tokens` placeholder ids (0) in shape-only mode.

        Raises:
            PromptError: as `encode` and `check_length`; a token count for real weights, or one that is
                not a whole number >= 1 (checked before the placeholders are built).
        """
        if prompt_tokens is None:
            ids = self.encode(prompt, use_chat_template, system_prompt, enable_thinking)
            self.check_length(len(ids))
            return ids
        if not self.loaded.shape_only:
            raise PromptError("A prompt given as a token count is for shape-only mode (--config); "
                              "with real weights, give the prompt as text.")
        if not isinstance(prompt_tokens, int) or prompt_tokens < 1:
            raise PromptError("A prompt needs at least one token: give a whole number of tokens, 1 or more.")
        self.check_length(prompt_tokens)  # before allocating: a huge count is refused, not built
        return [0] * prompt_tokens

    def batch(self, prompts: list[str], use_chat_template: bool, system_prompt: str | None,
              enable_thinking: bool, seed: int) -> Batch:
        """A batch of real prompts, each encoded as `encode` does, left-padded (`explorer.runner.batch`);
        sequence b draws with its own generator seeded `seed + b`.

        Raises:
            PromptError: not a list of 1 to `MAX_PROMPTS` prompts, or as `encode` and `check_length`
                (the longest prompt).
        """
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS:
            raise PromptError(f"A batch takes 1 to {MAX_PROMPTS} prompts, one per line.")
        rows = [self.encode(text, use_chat_template, system_prompt, enable_thinking) for text in prompts]
        self.check_length(max(len(row) for row in rows))
        return Batch.start(rows, pad_id(self.loaded), seed)

    def check_batch(self, batch) -> None:
        """Refuse a batch of copies B that is not a whole number in 1..`MAX_BATCH`, or above 1 with real
        weights (`PromptError`)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise PromptError(f"The batch must be a whole number of sequences from 1 to {MAX_BATCH}.")
        if batch > 1 and not self.loaded.shape_only:
            raise PromptError("A batch of copies runs in shape-only mode (--config); with real weights, give "
                              "one prompt per sequence.")

    def check_length(self, n_tokens: int) -> None:
        """Refuse a prompt of `n_tokens` that leaves no room in the context window for the first new
        token, or is longer than `max_prompt_tokens` (`PromptError`)."""
        limit = self.loaded.model.config.max_position_embeddings
        if n_tokens >= limit:
            raise PromptError(
                f"The prompt is {n_tokens} tokens; this model's context window is {limit} tokens "
                "and one more is needed for the first new token. Shorten the prompt."
            )
        if self.max_prompt_tokens is not None and n_tokens > self.max_prompt_tokens:
            raise PromptError(f"The prompt is {n_tokens} tokens; here the limit is {self.max_prompt_tokens}. "
                              + self.limit_advice)

    def encode(self, prompt: str | None, use_chat_template: bool, system_prompt: str | None,
               enable_thinking: bool) -> list[int]:
        """The ids of `prompt`, wrapped in the tokenizer's chat template where asked and where it has one
        (`enable_thinking` passed to it), else with the tokenizer's own special tokens.

        Raises:
            PromptError: no tokenizer, a prompt or system prompt too long in characters (checked before
                the tokenizer runs), an empty prompt, or a lone surrogate in either.
        """
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
