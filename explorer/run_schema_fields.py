"""The checks of one field of a saved run: its type, its range, a shape, a nested list of numbers, and
every value in the file (nesting, valid Unicode, finite numbers); each returns the value it checked or
raises the `ConfigError` that names the field's place in the file and what it must be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from explorer.errors import ConfigError

# Deepest nesting a run has: the file > traces > a step > attention > a layer > probs > head > query.
MAX_DEPTH = 16
MAX_WHOLE = 2**63  # nothing in a run is this large (a seed is below 2^63)
MAX_DIM = 2**31 - 1  # token ids, lengths and tensor dimensions
MAX_LINE_CHARS = 1_000  # a model's name, its one-line description, a stop's name, a token's piece
DAMAGED = "The saved run is incomplete or damaged: "
ADVICE = " Load the file as the explorer exported it (Export run), or export the run again."


@dataclass
class StepFacts:
    """What the steps checked so far fix for the steps after them."""

    n_layers: int = 0
    vocab: int = 0
    heads: int = 0  # h_q
    kv_heads: list[int] = field(default_factory=list)  # h_kv per layer
    kv_lengths: list[int] = field(default_factory=list)  # per layer, the KV length after the last step
    context: int = 0  # n after the last step
    hidden: int = 0  # d, the embedding's width
    head_dim: int = 0  # d_h, from the KV cache
    fed: list[int] = field(default_factory=list)  # every id fed so far, in order
    batch: int = 0  # B, sequences run together (the prefill's embed fixes it)


def check_values(value, where: str, depth: int) -> None:
    """Every value in the file: nesting of at most `MAX_DEPTH`, text that is valid Unicode (a lone
    surrogate cannot be sent to the page), whole numbers below `MAX_WHOLE`, finite numbers."""
    if depth > MAX_DEPTH:
        fail(where or "the file", f"nested at most {MAX_DEPTH} lists or objects deep")
    if isinstance(value, dict):
        for key, item in value.items():
            _unicode(key, where)
            check_values(item, f"{where}.{key[:40]}" if where else key[:40], depth + 1)
    elif isinstance(value, list):
        types = set(map(type, value))
        if types <= {int, float, type(None)}:  # a list of numbers (logits, a row of probabilities): one pass
            if int in types and any(type(v) is int and not -MAX_WHOLE < v < MAX_WHOLE for v in value):
                fail(where, "whole numbers of fewer than 19 digits")
            try:  # JSON has no NaN (refused when parsed), so inf is the only non-finite float; null reads as NaN
                infinite = float in types and np.isinf(np.array(value, dtype=np.float64)).any()
            except OverflowError:  # a whole number past float64
                infinite = True
            if infinite:
                fail(where, "finite numbers")
        else:
            for i, item in enumerate(value):
                check_values(item, f"{where}[{i}]", depth + 1)
    elif isinstance(value, str):
        _unicode(value, where)
    elif type(value) is int and not -MAX_WHOLE < value < MAX_WHOLE:
        fail(where, "a whole number of fewer than 19 digits")
    elif type(value) is float and not np.isfinite(value):
        fail(where, "a finite number", value)


def _unicode(text: str, where: str) -> None:
    """Refuse text that UTF-8 cannot encode (a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        fail(where or "the file", "valid Unicode text (it holds a lone surrogate, \\ud800-\\udfff)")


def fail(where: str, expected: str, *value) -> None:
    """Raise the `ConfigError` for a field: where it is, what it must be and, given `value`, what it is."""
    got = f", not {_describe(value[0])}" if value else ""
    raise ConfigError(f"{DAMAGED}{where} must be {expected}{got}.{ADVICE}")


def _describe(value) -> str:
    """A value as the message names it, never echoing text from the file."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return "text" if isinstance(value, str) else "an object"


def expect_object(value, where: str, keys: tuple[str, ...], exact: bool = False) -> dict:
    """`value` if it is an object holding `keys` (only those, if `exact`)."""
    if type(value) is not dict:
        fail(where or "the file", "an object", value)
    missing = [key for key in keys if key not in value]
    if missing:
        raise ConfigError(f"{DAMAGED}{where or 'the file'} lacks {', '.join(missing)}.{ADVICE}")
    if exact and len(value) != len(keys):
        fail(where, f"an object of exactly {', '.join(keys)}")
    return value


def expect_list(value, where: str, length: int | None = None, what: str = "a list") -> list:
    """`value` if it is a list (of `length` items, if given; `what` says what it must be)."""
    if type(value) is not list or (length is not None and len(value) != length):
        fail(where, what, value)
    return value


def expect_whole(value, where: str, low: int = 0, high: int = MAX_DIM, what: str = "a whole number") -> int:
    """`value` if it is a whole number in [low, high] (a bool is not; `what` says what it must be)."""
    if type(value) is not int:  # a bool is an int to Python, not to a run
        fail(where, what, value)
    if not low <= value <= high:
        fail(where, f"{what} in [{low}, {high}]", value)
    return value


def expect_number(value, where: str, low: float = -np.inf, high: float = np.inf) -> float:
    """`value` if it is a number (int or float, not a bool) in [low, high]."""
    if type(value) not in (int, float) or not low <= value <= high:
        fail(where, f"a number in [{low:g}, {high:g}]", value)
    return value


def expect_flag(value, where: str) -> bool:
    """`value` if it is true or false."""
    if type(value) is not bool:
        fail(where, "true or false", value)
    return value


def expect_text(value, where: str, max_chars: int | None = None) -> str:
    """`value` if it is text (of at most `max_chars` characters, if given)."""
    if type(value) is not str:
        fail(where, "text", value)
    if max_chars is not None and len(value) > max_chars:
        fail(where, f"text of at most {max_chars:,} characters")
    return value


def expect_shape(value, where: str, ndim: int | None = None) -> list[int]:
    """A tensor shape: a list of whole numbers (`ndim` of them, if given)."""
    shape = expect_list(value, where, length=ndim, what="a shape" if ndim is None else f"a shape of {ndim} dimensions")
    for i, size in enumerate(shape):
        expect_whole(size, f"{where}[{i}]", what="a dimension")
    return shape


def expect_logits(value, where: str, vocab: int) -> None:
    """[vocab] numbers, null for a filtered-out token (-inf), at least one token kept."""
    expect_array(value, where, [vocab], nulls=True)
    if all(v is None for v in value):
        fail(where, "logits that keep at least one token (a number, not null)")


def expect_array(value, where: str, shape: list[int], nulls: bool = False) -> None:
    """A nested list of `shape` holding numbers (and nulls, where `nulls`); finite: `check_values`."""
    if type(value) is not list or len(value) != shape[0]:
        fail(where, f"a list of shape {shape}", value)
    if len(shape) > 1:
        for i, item in enumerate(value):
            expect_array(item, f"{where}[{i}]", shape[1:], nulls)
    elif not set(map(type, value)) <= ({int, float, type(None)} if nulls else {int, float}):
        fail(where, "numbers" + (" or null" if nulls else ""))
