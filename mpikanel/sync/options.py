"""A sync model's settings, declared once where the model lives: the config field (and TOML key),
its ``--flag``, type, default, help and what values are valid. ``mpikanel.config`` builds the
CLI flags and the TrainConfig fields and checks from these declarations."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError

ON_OFF = ("on", "off")


def one_of(choices: tuple[str, ...]) -> str:
    """The valid values as an error names them: "on or off", "auto, on or off", "one of a, b, c, d"."""
    if len(choices) <= 3:
        return ", ".join(choices[:-1]) + " or " + choices[-1]
    return "one of " + ", ".join(choices)


@dataclass(frozen=True)
class Bound:
    """A numeric option's lower limit: value >= low, or value > low when strict (NaN never passes)."""

    low: float
    strict: bool = False
    note: str = ""          # shown after the rule in the error, e.g. "(or inf)"

    def holds(self, value: float) -> bool:
        """Whether `value` is within the limit."""
        return value > self.low if self.strict else value >= self.low

    def __str__(self) -> str:
        return f"{'>' if self.strict else '>='} {self.low:g}" + (f" {self.note}" if self.note else "")


@dataclass(frozen=True)
class Option:
    """One setting of a sync model: TrainConfig field `name`, flag ``--name-with-dashes``."""

    name: str
    kind: type                          # float, int or str
    default: Any
    help: str
    choices: tuple[str, ...] = ()       # the valid values of a str option
    bound: Bound | None = None          # the valid range of a numeric option

    @property
    def flag(self) -> str:
        """The command-line flag."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> None:
        """InputError (one line, naming the flag) unless `value` is valid."""
        if self.choices and value not in self.choices:
            raise InputError(f"{self.flag} must be {one_of(self.choices)}, got '{value}'")
        if self.bound is not None and not self.bound.holds(value):
            raise InputError(f"{self.flag} must be {self.bound}, got {value}")
