"""The server's own flags of `vllm-tvm serve`, built from the `ServerConfig` fields that
carry a `ServerOption` (server/options.py), and the settings they give.

Why it exists: a setting's flag, help, choices, environment variable and default are
written once, on its field; this module only turns them into argparse arguments and back.
As with the engine flags (engine_args.py), every flag parses to None when it is not given,
so a setting the command line leaves alone falls to its environment variable, then to the
field's default, and no default is written here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from vllm_tvm.server.config import ServerConfig
from vllm_tvm.server.options import ServerOption, field_default, options_of


def _help(how: ServerOption, default: Any) -> str:
    return how.help.format(default=default) if how.help else ""


def _flag_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` for argparse: its ValueError's own message (which names the value) becomes the
    flag's error, not argparse's generic "invalid <function> value"; builtins stay as they are."""
    if parse in (int, float, str):
        return parse

    def flag_value(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return flag_value


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """A flag (and its negations) for every ServerConfig setting that has one."""
    for item, how in options_of(ServerConfig):
        if not how.flags:
            continue
        text = _help(how, field_default(item))
        if how.kind == "switch":
            parser.add_argument(
                *how.flags, dest=item.name, action="store_const", const=True, help=text
            )
            for negation in how.negations:
                parser.add_argument(negation, dest=item.name, action="store_const", const=False)
        elif how.kind == "boolean":
            parser.add_argument(
                *how.flags, dest=item.name, action=argparse.BooleanOptionalAction, help=text
            )
        else:
            parser.add_argument(
                *how.flags,
                dest=item.name,
                type=_flag_type(how.parse),
                choices=how.choice_list(),
                nargs=how.nargs,
                metavar=how.metavar,
                help=text,
            )
    parser.set_defaults(**{item.name: None for item, how in options_of(ServerConfig)})
    parser.epilog = "environment: " + "; ".join(
        f"${how.env}: {_help(how, field_default(item))}"
        for item, how in options_of(ServerConfig)
        if how.env is not None and not how.flags
    )


def server_settings_from_cli(
    namespace: argparse.Namespace, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The ServerConfig settings the flags give, their environment variables filling the
    ones the flags left unset; ValueError naming a variable whose value is not accepted."""
    settings: dict[str, Any] = {}
    for item, how in options_of(ServerConfig):
        given = getattr(namespace, item.name, None)
        if given is not None:
            settings[item.name] = given
        elif how.env is not None and environ.get(how.env, "").strip():
            settings[item.name] = how.from_env(environ[how.env])
    return settings
