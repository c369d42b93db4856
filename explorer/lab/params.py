"""An experiment's parameters: each a whole number in a range, with a smaller cap in hosted mode, or a
menu of named choices; read the same way from the CLI, the app and the API."""

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
        choices: a menu instead of a number: (name, value) pairs, the name what a person picks (the
            app's menu, the CLI's option, the API's parameter), the value what the experiment's runner
            takes; `default`, `minimum` and `maximum` are values.
    """

    name: str
    label: str
    default: int
    minimum: int
    maximum: int
    hosted_maximum: int | None = None
    help: str = ""
    choices: tuple[tuple[str, int], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The menu's names (empty for a number)."""
        return tuple(name for name, _ in self.choices)

    def name_of(self, value: int) -> str:
        """The menu's name of `value`."""
        return next(name for name, choice in self.choices if choice == value)

    def top(self, hosted: bool) -> int:
        """The largest value allowed (hosted mode: its cap)."""
        return min(self.maximum, self.hosted_maximum or self.maximum) if hosted else self.maximum

    def read(self, value, hosted: bool = False) -> int:
        """`value` as this parameter: None (an empty box) is the default.

        A menu's value is its name (or the value itself, as a number).

        Raises:
            PromptError: not a whole number, or out of the range (hosted mode: its cap), the message
                naming the parameter and its range; for a menu, not one of its names.
        """
        if value is None or value == "":
            return self.default
        if self.choices:
            return self._choice(value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                or value != int(value):
            raise PromptError(f"{self.label} must be a whole number, not {value!r}.")
        top = self.top(hosted)
        if not self.minimum <= value <= top:
            where = " here (this app is shared)" if top < self.maximum else ""
            raise PromptError(f"{self.label} must be {self.minimum} to {top}{where}, not {int(value)}.")
        return int(value)

    def _choice(self, value) -> int:
        named = {name.lower(): choice for name, choice in self.choices}
        if isinstance(value, str) and value.strip().lower() in named:
            return named[value.strip().lower()]
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and value in named.values():
            return int(value)
        raise PromptError(f"{self.label} must be one of {', '.join(self.names)}, not {value!r}.")


def read_params(params: tuple[LabParam, ...], values: dict, hosted: bool = False) -> dict[str, int]:
    """Every parameter's value from `values` (by name; a missing one is its default).

    Raises:
        PromptError: a value that is not a whole number in its range.
    """
    return {param.name: param.read(values.get(param.name), hosted) for param in params}
