"""Engine options, one source: `EngineArgs` holds every option and its default, every
engine-running command (serve, generate, bench) exposes the same flags for them, and the
Python entry points refuse an option that does not exist, by name."""

from __future__ import annotations

import argparse

import pytest

from vllm_tvm.benchmarking.config import BenchConfig
from vllm_tvm.cli.engine_args import NOT_FLAGS, engine_args_from_cli
from vllm_tvm.cli.main import build_parser
from vllm_tvm.runtime.devices import DEVICES
from vllm_tvm.runtime.engine.args import EngineArgs, option_names

REQUIRED = {"serve": [], "generate": ["--prompt", "hi"], "bench": []}
"""What each engine command needs besides its engine flags."""


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


def _engine_flags(command: str) -> dict[str, tuple[str, ...]]:
    """Option strings of the command's flags that set an engine option, by option."""
    flags: dict[str, tuple[str, ...]] = {}
    for action in _subparser(command)._actions:
        if action.dest in ("model", *option_names()):
            flags[action.dest] = flags.get(action.dest, ()) + tuple(action.option_strings)
    return flags


def _parse(command: str, *argv: str) -> argparse.Namespace:
    return build_parser().parse_args([command, *REQUIRED[command], *argv])


def test_every_engine_command_has_the_same_engine_flags() -> None:
    serve, generate, bench = (_engine_flags(c) for c in ("serve", "generate", "bench"))
    assert serve == generate == bench


def test_every_engine_option_but_the_commands_own_has_a_flag() -> None:
    assert set(_engine_flags("serve")) == {"model", *option_names()} - set(NOT_FLAGS)


@pytest.mark.parametrize("command", sorted(REQUIRED))
def test_unset_flags_give_the_engine_args_defaults(command: str) -> None:
    assert engine_args_from_cli(_parse(command, "--model", "/m")) == EngineArgs(model="/m")


@pytest.mark.parametrize("command", sorted(REQUIRED))
def test_given_flags_set_their_options(command: str) -> None:
    namespace = _parse(
        command, "--model", "/m", "--device", "cuda", "--max-num-seqs", "4",
        "--kv-cache-memory-bytes", "1000", "--no-enable-prefix-caching",
        "--logprobs-mode", "processed_logits", "--load-format", "dummy", "--seed", "7",
    )  # fmt: skip
    args = engine_args_from_cli(namespace)
    assert (args.device, args.max_num_seqs, args.kv_cache_memory) == ("cuda", 4, 1000)
    assert not args.enable_prefix_caching and args.logprobs_mode == "processed_logits"
    assert (args.load_format, args.seed) == ("dummy", 7)


@pytest.mark.parametrize("command", sorted(REQUIRED))
def test_zero_length_limits_mean_unset(command: str) -> None:
    namespace = _parse(
        command, "--model", "/m", "--max-model-len", "0", "--max-num-batched-tokens", "0"
    )
    args = engine_args_from_cli(namespace)
    assert args.max_model_len is None and args.max_num_batched_tokens is None


def test_a_commands_own_defaults_fill_only_unset_options() -> None:
    unset = engine_args_from_cli(_parse("bench", "--model", "/m"), max_num_seqs=16, seed=0)
    given = _parse("bench", "--model", "/m", "--max-num-seqs", "2", "--seed", "5")
    assert (unset.max_num_seqs, unset.seed) == (16, 0)
    assert engine_args_from_cli(given, max_num_seqs=16, seed=0).max_num_seqs == 2


def test_the_device_choices_are_the_engines_devices(capsys) -> None:
    with pytest.raises(SystemExit):
        _parse("generate", "--device", "tpu")
    refusal = capsys.readouterr().err
    assert all(f"'{device}'" in refusal for device in DEVICES)
    with pytest.raises(ValueError, match="unsupported device 'tpu'; supported: cpu, cuda"):
        EngineArgs(model="/m", device="tpu")


def test_an_unknown_option_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="'max_num_seq'"):
        EngineArgs.from_options("/m", max_num_seq=4)


def test_llm_refuses_an_unknown_option_by_name_before_loading() -> None:
    from vllm_tvm.entrypoints.llm import LLM

    with pytest.raises(TypeError, match="'enable_prefix_cache'"):
        LLM("/nonexistent", enable_prefix_cache=False)


def test_a_benchmark_splits_its_options_and_refuses_unknown_ones() -> None:
    config = BenchConfig.from_options("/m", concurrency=(2, 8), input_len=5, num_blocks=9)
    assert (config.input_len, config.engine.num_blocks) == (5, 9)
    assert (config.engine.max_num_seqs, config.engine.seed) == (8, 0)
    with pytest.raises(TypeError, match="'input_length'"):
        BenchConfig.from_options("/m", input_length=5)
