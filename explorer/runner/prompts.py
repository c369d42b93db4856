"""The prompt checks made before any tokenizer reads a prompt: its length in characters, and valid Unicode."""

from __future__ import annotations

from explorer.errors import PromptError

# The prompt text allowed per token of `max_prompt_tokens`, checked before the tokenizer runs (which
# spends seconds and gigabytes on megabytes of text): 99% of SmolLM2's 49,152 tokens are at most 16
# characters and English text averages 3-4 per token; only runs of spaces, '#' or '=' are longer.
CHARS_PER_TOKEN_MAX = 16


def max_prompt_chars(max_prompt_tokens: int | None) -> int | None:
    """The longest prompt (or system prompt) text, characters, under a cap of `max_prompt_tokens`
    (None: no cap)."""
    return None if max_prompt_tokens is None else max_prompt_tokens * CHARS_PER_TOKEN_MAX


def check_prompt_chars(text: str | None, what: str, max_prompt_tokens: int | None, advice: str) -> None:
    """Refuse a text far too long to fit `max_prompt_tokens` before any tokenizer reads it.

    Args:
        text: the prompt or the system prompt (None: nothing to check).
        what: its name in the message ("prompt", "system prompt").
        max_prompt_tokens: the prompt cap, tokens; None: no cap.
        advice: what the message tells the person to do.

    Raises:
        PromptError: `text` is longer than `max_prompt_chars(max_prompt_tokens)` characters.
    """
    most = max_prompt_chars(max_prompt_tokens)
    if most is not None and isinstance(text, str) and len(text) > most:
        raise PromptError(f"The {what} is {len(text):,} characters; here the limit is {most:,} characters "
                          f"(for {max_prompt_tokens} tokens). {advice}")


def check_unicode(text: str, what: str) -> None:
    """Raise `PromptError` if `text` cannot be encoded as UTF-8 (it holds a lone UTF-16 surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PromptError(
            f"The {what} holds a character that is not valid Unicode (a lone surrogate, {text[exc.start]!r}, "
            f"at position {exc.start}), often left by a broken copy and paste. Delete it and try again."
        ) from exc
