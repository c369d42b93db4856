"""Incremental detokenisation: the text each new token adds, holding back incomplete UTF-8."""

from __future__ import annotations


class IncrementalDetokenizer:
    """Turns a growing list of generated ids into text deltas.

    Byte-level tokenizers can split one character (an accented letter, an emoji) over several
    tokens; decoding such a prefix ends in U+FFFD. The delta is then held back ("") until the
    character is complete, so the deltas always concatenate to the decoded text.

    Args:
        tokenizer: a transformers tokenizer.
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = ""

    def push(self, token_id: int) -> str:
        """Add one id; return the text it completes ("" while a character is still incomplete)."""
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=False)
        if text.endswith("\ufffd"):
            return ""
        delta, self.shown = text[len(self.shown):], text
        return delta
