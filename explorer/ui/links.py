"""Shareable links: the prompt, model and sampling settings as URL query parameters, and back.

`?prompt=Hi&model=smollm2-135m-instruct&sample=1&temperature=0.7&top_k=50&top_p=0.9&min_p=0&seed=3`
opens the app with those values filled in (nothing runs until Prefill is pressed).
"""

from __future__ import annotations

import math
from urllib.parse import urlencode


def _flag(value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _finite(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(value)
    return number


# Query parameter -> (field, parser). Every parser raises ValueError on a value it cannot read.
FIELDS = {
    "prompt": ("prompt", str),
    "model": ("model_choice", str),
    "custom_model": ("custom_model", str),
    "chat": ("use_chat_template", _flag),
    "system": ("system_prompt", str),
    "thinking": ("enable_thinking", _flag),
    "sample": ("do_sample", _flag),
    "temperature": ("temperature", _finite),
    "top_k": ("top_k", int),
    "top_p": ("top_p", _finite),
    "min_p": ("min_p", _finite),
    "seed": ("seed", int),
    "max_new_tokens": ("max_new_tokens", int),
}
# The sampling controls' ranges (the app's sliders and boxes use them too); a link value outside is refused.
RANGES = {"temperature": (0.05, 2.0), "top_k": (0, 200), "top_p": (0.01, 1.0), "min_p": (0.0, 1.0),
          "seed": (0, 2**63 - 1), "max_new_tokens": (1, None)}
LINK_FIELDS = tuple(field for field, _ in FIELDS.values())  # the order of the controls a link fills
MAX_PROMPT_CHARS = 20_000  # a link is not the place for a book; longer prompts are cut


def query_string(values: dict) -> str:
    """The query string (with its "?") for field values named as in `FIELDS` (e.g. "model_choice")."""
    by_field = {field: name for name, (field, _) in FIELDS.items()}
    params = {}
    for field, value in values.items():
        if field in by_field and value not in (None, ""):
            params[by_field[field]] = int(value) if isinstance(value, bool) else value
    return "?" + urlencode(params)


def values_from_query(params: dict[str, str]) -> tuple[dict, list[str]]:
    """Field values from query parameters, and the names of those that could not be read or are out
    of their control's range (`RANGES`; both ignored).

    Unknown parameters are ignored; a prompt is cut to `MAX_PROMPT_CHARS` characters.
    """
    values, unreadable = {}, []
    for name, raw in params.items():
        if name not in FIELDS:
            continue
        field, parse = FIELDS[name]
        try:
            value = parse(raw)
        except ValueError:
            unreadable.append(name)
            continue
        low, high = RANGES.get(field, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            unreadable.append(name)
            continue
        values[field] = value
    if "prompt" in values:
        values["prompt"] = values["prompt"][:MAX_PROMPT_CHARS]
    return values, unreadable
