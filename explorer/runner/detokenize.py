"""Token text: the piece a token chip shows, and incremental detokenisation that holds back incomplete UTF-8."""

from __future__ import annotations

from transformers.convert_slow_tokenizer import bytes_to_unicode

# Byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM2) spells each byte as one printable character.
_BYTE_OF_CHAR = {char: byte for byte, char in bytes_to_unicode().items()}


def token_piece(tokenizer, token_id: int) -> str:
    """One token's text, as a token chip shows it. A token holding part of a character's UTF-8 bytes
    (an emoji split over tokens) decodes to U+FFFD; its bytes are shown instead, escaped where they
    are not whole characters (" \\xf0\\x9f" for "ĠðŁ"). A SentencePiece byte token keeps its own
    name ("<0xF0>").

    Args:
        tokenizer: a transformers tokenizer.
        token_id: an id in its vocabulary.
    """
    piece = tokenizer.decode([token_id])
    if "\ufffd" not in piece:
        return piece
    token = tokenizer.convert_ids_to_tokens(token_id)
    if not all(char in _BYTE_OF_CHAR for char in token):
        return token
    return bytes(_BYTE_OF_CHAR[char] for char in token).decode("utf-8", errors="backslashreplace")


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
