"""How a `ServerConfig` setting is given from outside: its flag names, help text, choices and
environment variable, written once beside the field they set.

Why it exists: a setting's default, its flag and its help used to be written twice (the
dataclass and the argparse call) and copied field by field from one to the other; a flag
added to one and not the other went unnoticed. Here the field carries everything, and the
command line (cli/serve_args.py) is built from the fields. This module knows no argparse:
it describes, the CLI builds.

A setting is given by its flag, else by its environment variable, else it keeps the field's
default. `parse` turns the text of either into the value (ValueError naming what is
accepted); `kind` says what the flag looks like: `value` takes text, `switch` sets True (its
`negations` set False), `boolean` has a `--no-` form too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

OPTION_KEY = "server_option"
"""The dataclass field metadata key that holds a field's `ServerOption`."""


@dataclass(frozen=True)
class ServerOption:
    """How one setting is given (see the module docstring). `help` may hold `{default}`."""

    flags: tuple[str, ...] = ()
    help: str = ""
    kind: Literal["value", "switch", "boolean"] = "value"
    parse: Callable[[str], Any] = str
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    env: str | None = None
    negations: tuple[str, ...] = ()
    nargs: str | None = None
    metavar: str | None = None

    def choice_list(self) -> list[str] | None:
        """The accepted values, when the setting has a fixed set."""
        choices = self.choices() if callable(self.choices) else self.choices
        return None if choices is None else list(choices)

    def from_env(self, text: str) -> Any:
        """The value the environment variable's `text` gives; ValueError naming it."""
        try:
            return self.parse(text.strip())
        except ValueError as err:
            raise ValueError(f"{self.env} {err}") from None


def option(**how: Any) -> dict[str, ServerOption]:
    """Dataclass field metadata that gives the field this `ServerOption`:
    `field(default=..., metadata=option(flags=(...), help=...))`."""
    return {OPTION_KEY: ServerOption(**how)}


def options_of(config_class: type) -> Iterator[tuple[dataclasses.Field[Any], ServerOption]]:
    """Each field of `config_class` that carries a `ServerOption`, in declaration order."""
    for item in dataclasses.fields(config_class):
        found = item.metadata.get(OPTION_KEY)
        if found is not None:
            yield item, found


def field_default(item: dataclasses.Field[Any]) -> Any:
    """The default value of a dataclass field (its factory's product, if it has one)."""
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


def whole_number(text: str) -> int:
    """A whole number of 0 or more."""
    if not text.strip().isdigit():
        raise ValueError(f"must be a whole number of 0 or more, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    """A finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise ValueError(f"must be a number of seconds, 0 or more, got {text!r}")
    return value
