"""An experiment's parameters: each a whole number in a range, with a smaller cap in hosted mode, read
the same way from the CLI, the app and the API."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from explorer.errors import PromptError


@dataclass(frozen=True)
class LabParam:
    """One whole-number parameter of an experiment.

    Attributes:
        name: its name (the CLI's `--name`, the API's parameter).
        label: what the app's box says.
        default: the value where none is given.
        minimum, maximum: the range anywhere.
        hosted_maximum: a smaller top where the app is hosted (None: `maximum`): the sizes a visitor
            may ask of a shared model.
        help: one line on what it does.
    """

    name: str
    label: str
    default: int
    minimum: int
    maximum: int
    hosted_maximum: int | None = None
    help: str = ""

    def top(self, hosted: bool) -> int:
        """The largest value allowed (hosted mode: its cap)."""
        return min(self.maximum, self.hosted_maximum or self.maximum) if hosted else self.maximum

    def read(self, value, hosted: bool = False) -> int:
        """`value` as this parameter: None (an empty box) is the default.

        Raises:
            PromptError: not a whole number, or out of the range (hosted mode: its cap), the message
                naming the parameter and its range.
        """
        if value is None:
            return self.default
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                or value != int(value):
            raise PromptError(f"{self.label} must be a whole number, not {value!r}.")
        top = self.top(hosted)
        if not self.minimum <= value <= top:
            where = " here (this app is shared)" if top < self.maximum else ""
            raise PromptError(f"{self.label} must be {self.minimum} to {top}{where}, not {int(value)}.")
        return int(value)


def read_params(params: tuple[LabParam, ...], values: dict, hosted: bool = False) -> dict[str, int]:
    """Every parameter's value from `values` (by name; a missing one is its default).

    Raises:
        PromptError: a value that is not a whole number in its range.
    """
    return {param.name: param.read(values.get(param.name), hosted) for param in params}
