"""What every command shares about its options: the values each numeric option takes (argparse `type=`
checks, so a bad value is argparse's usage error naming the option: "argument --steps: must be >= 1,
not 0", exit code 2), and the help's defaults and environment variables.

No torch, no transformers: the checks run before any model work.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# The variables the commands read, for their help's "environment" section.
MODEL_ENVIRONMENT = """environment:
  EXPLORER_CACHE_DIR   where the embedded model is converted (default: the user cache folder)
  HF_HOME, HF_TOKEN    the Hugging Face cache and token that hub models are read with
  HF_HUB_OFFLINE=1     never contact the hub: only models already in the cache or a folder"""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The help of every command: each option's default appended ("(default: 3)") where it has a value
    and its help does not already say it; the description and epilog kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if any(action.default is nothing for nothing in (None, False, argparse.SUPPRESS)) \
                or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def whole(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse `type=` for a whole number in minimum..maximum (no top where None).

    The returned check raises `argparse.ArgumentTypeError` ("must be >= 1, not 0"), which argparse
    reports with the option's name and exit code 2.
    """
    where = f">= {minimum}" if maximum is None else f"{minimum} to {maximum}"

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number {where}, not {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {where}, not {value}")
        return value

    check.__name__ = "whole number"
    return check


def real(minimum: float, maximum: float, low_open: bool = False) -> Callable[[str], float]:
    """An argparse `type=` for a finite number in [minimum, maximum] ((minimum, maximum] if `low_open`).

    The returned check raises `argparse.ArgumentTypeError` ("must be in (0, 1], not 0.0").
    """
    where = f"{'(' if low_open else '['}{minimum:g}, {maximum:g}]"

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in {where}, not {text!r}") from None
        low_ok = value > minimum if low_open else value >= minimum
        if not (math.isfinite(value) and low_ok and value <= maximum):
            raise argparse.ArgumentTypeError(f"must be in {where}, not {value:g}")
        return value

    check.__name__ = "number"
    return check
