"""`vllm-tvm serve`: its flags and defaults.

Specification: flags carry vLLM's names and the reference server's defaults; an unknown
flag fails at startup and a vLLM flag vllm-tvm does not implement is refused by name; with
no model the embedded default model is served. Each setting's flag, help and environment
variable are written once, on its ServerConfig field: a setting left alone keeps the field's
default, every flag sets its field, and a variable fills what its flag left unset. (A real
server process's shutdown: test_server_shutdown.py.)
"""

from __future__ import annotations

import argparse

import pytest

from vllm_tvm.cli.main import build_parser
from vllm_tvm.cli.serve_cmd import config_from_args
from vllm_tvm.cli.vllm_serve_flags import (
    NO_EFFECT_OPTIONS,
    NO_EFFECT_SWITCHES,
    NOT_IMPLEMENTED,
)
from vllm_tvm.runtime.multimodal.media_limits import parse_limit_mm_per_prompt
from vllm_tvm.server.config import ServerConfig
from vllm_tvm.server.options import options_of


def parse(*argv: str):
    return config_from_args(build_parser().parse_args(["serve", *argv]))


def test_defaults_are_the_reference_servers():
    config = parse("--model", "/models/tiny")
    assert (config.host, config.port) == ("0.0.0.0", 8000)
    engine = config.engine
    assert (engine.block_size, engine.num_blocks, engine.max_num_seqs) == (32, 256, 32)
    assert engine.max_model_len is None and engine.max_num_batched_tokens is None
    assert engine.enable_prefix_caching and engine.scheduling_policy == "fcfs"
    assert (config.tool_call_parser, config.reasoning_parser) == ("hermes", None)
    assert config.enable_log_requests and not config.enable_log_outputs
    assert config.max_log_len == 256 and config.enable_metrics
    assert config.enable_thinking is None and config.api_key is None
    assert config.model_name == "tiny"


def test_flags_set_their_fields():
    config = parse(
        "/models/m.gguf",
        "--served-model-name", "a", "b",
        "--api-key", "k",
        "--max-model-len", "1024",
        "--no-enable-prefix-caching",
        "--reasoning-parser", "qwen3",
        "--enable-thinking",
        "--disable-log-requests",
        "--disable-metrics",
    )  # fmt: skip
    assert config.engine.model == "/models/m.gguf" and config.model_names == ["a", "b"]
    assert config.api_key == "k" and config.engine.max_model_len == 1024
    assert not config.engine.enable_prefix_caching and config.reasoning_parser == "qwen3"
    assert config.enable_thinking is True
    assert not config.enable_log_requests and not config.enable_metrics


def test_memory_sizing_leaves_num_blocks_unset():
    assert parse("--model", "m", "--kv-cache-memory-bytes", "1000000").engine.num_blocks is None


def test_unknown_flag_fails_at_startup(capsys):
    with pytest.raises(SystemExit) as caught:
        parse("--model", "m", "--no-such-flag")
    assert caught.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize("flag", NOT_IMPLEMENTED[:4])
def test_unimplemented_vllm_flag_is_refused_by_name(capsys, flag):
    with pytest.raises(SystemExit):
        parse("--model", "m", flag, "1")
    assert f"{flag} is not supported" in capsys.readouterr().err


@pytest.mark.parametrize("flag", NOT_IMPLEMENTED)
def test_every_unimplemented_vllm_flag_is_refused_by_name(capsys, flag):
    for argv in ((flag,), (flag, "1")):
        with pytest.raises(SystemExit):
            parse("--model", "m", *argv)
        error = capsys.readouterr().err
        assert f"{flag} is not supported by vllm-tvm serve" in error
        assert "unrecognized arguments" not in error


def test_vllm_flags_with_nothing_to_act_on_are_accepted_as_no_ops():
    options = [arg for flag in NO_EFFECT_OPTIONS for arg in (flag, "4")]
    config = parse("--model", "m", *NO_EFFECT_SWITCHES, *options)
    assert config == parse("--model", "m")


def test_no_op_flags_say_so_in_the_help(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for flag in (*NO_EFFECT_SWITCHES, *NO_EFFECT_OPTIONS):
        assert flag in help_text
    assert help_text.count("no effect:") == len(NO_EFFECT_SWITCHES) + len(NO_EFFECT_OPTIONS)


REFERENCE_SERVER_FLAGS = (
    "--model", "--host", "--port", "--served-model-name", "--tokenizer-config", "--block-size",
    "--num-blocks", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens",
    "--enable-prefix-caching", "--no-enable-prefix-caching", "--scheduling-policy",
    "--enable-radix-attention", "--disable-radix-attention", "--enable-jump-forward",
    "--enable-force-include-usage", "--tool-call-parser", "--reasoning-parser",
    "--kv-transfer-config", "--speculative-config", "--enable-log-requests",
    "--disable-log-requests", "--enable-log-outputs", "--max-log-len", "--enable-metrics",
    "--disable-metrics", "--enable-thinking", "--no-enable-thinking", "--verbose",
    "--cuda-profile-graph-replays", "--cuda-profile-graph-batch", "--video-dit",
)  # fmt: skip
"""Every flag of the reference server's table."""


def test_every_reference_server_flag_is_known():
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    known = {flag for a in commands.choices["serve"]._actions for flag in a.option_strings}
    assert set(REFERENCE_SERVER_FLAGS) - known == set()


def test_body_limit_and_access_log_flags_set_their_fields():
    config = parse("--model", "m", "--max-request-body-bytes", "1000")
    assert config.max_request_body_bytes == 1000 and not config.disable_uvicorn_access_log
    assert parse("--model", "m", "--disable-uvicorn-access-log").disable_uvicorn_access_log


def test_unknown_parser_name_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse("--model", "m", "--tool-call-parser", "nope")
    assert "hermes" in capsys.readouterr().err


def test_no_model_serves_the_embedded_default():
    from vllm_tvm.checkpoints.default_model import (
        DEFAULT_MODEL_NAME,
        DefaultModelMissingError,
        default_model_path,
    )

    try:
        path = default_model_path()
    except DefaultModelMissingError:
        pytest.skip("the default model package is not installed")
    config = parse()
    assert config.engine.model == str(path)
    assert config.model_names == [DEFAULT_MODEL_NAME]


def test_admission_flags_set_their_fields_and_default_to_256_and_1024():
    config = parse("--model", "m")
    assert (config.max_sequences_per_request, config.max_waiting_requests) == (256, 1024)
    config = parse("--model", "m", "--max-sequences-per-request", "8")
    limits = parse("--model", "m", "--max-waiting-requests", "3").admission_limits
    assert (config.admission_limits.max_sequences_per_request, limits.max_waiting_requests) == (
        8,
        3,
    )


def test_request_template_timeout_and_structured_output_flags_set_their_fields():
    default = parse("--model", "m")
    assert not default.trust_request_chat_template and default.disable_additional_properties
    options = '{"backend": "guidance", "disable_additional_properties": false}'
    config = parse(
        "--model", "m", "--trust-request-chat-template", "--request-read-timeout", "2.5",
        "--structured-outputs-config", options,
    )  # fmt: skip
    assert config.trust_request_chat_template and config.request_read_timeout == 2.5
    assert not config.disable_additional_properties


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ('{"backend": "xgrammar"}', "xgrammar"),
        ('{"disable_any_whitespace": true}', "disable_any_whitespace"),
        ('{"disable_additional_properties": "no"}', "true or false"),
        ("[]", "JSON object"),
    ],
)
def test_structured_outputs_config_refuses_what_does_not_apply(capsys, value, named):
    with pytest.raises(SystemExit):
        parse("--model", "m", "--structured-outputs-config", value)
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--max-sequences-per-request", "--max-waiting-requests"])
def test_admission_limits_below_one_are_refused_before_anything_loads(flag):
    with pytest.raises(ValueError, match=r"must be at least 1, got 0"):
        parse("--model", "m", flag, "0")


# ------------------------------------------- settings defined once, on their ServerConfig field

OPTION_FIELDS = list(options_of(ServerConfig))


@pytest.fixture
def no_server_env(monkeypatch):
    for _, how in OPTION_FIELDS:
        if how.env is not None:
            monkeypatch.delenv(how.env, raising=False)


def test_every_setting_left_alone_keeps_its_field_default(no_server_env):
    config = parse("--model", "m")
    defaults = ServerConfig(engine=config.engine)
    for item, _ in OPTION_FIELDS:
        assert getattr(config, item.name) == getattr(defaults, item.name), item.name


def _sample(how) -> tuple[str, object]:
    """A value for a setting's flag, and what the field should hold after it."""
    choices = how.choice_list()
    samples = {int: "7", float: "2.5", parse_limit_mm_per_prompt: '{"image": 2}'}
    text = choices[-1] if choices else samples.get(how.parse, "x")
    return text, how.parse(text)


@pytest.mark.parametrize(("item", "how"), OPTION_FIELDS, ids=[i.name for i, _ in OPTION_FIELDS])
def test_every_flag_sets_its_field(no_server_env, item, how):
    if not how.flags:
        pytest.skip(f"{item.name} is set by ${how.env} only")
    [flag, *_] = how.flags
    if how.kind in ("switch", "boolean"):
        assert getattr(parse("--model", "m", flag), item.name) is True
        for negation in how.negations:
            assert getattr(parse("--model", "m", negation), item.name) is False
        return
    text, value = _sample(how)
    expected = [value] if how.nargs == "+" else value
    assert getattr(parse("--model", "m", flag, text), item.name) == expected


def test_an_environment_variable_fills_a_setting_its_flag_left_unset(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert parse("--model", "m").api_key == "from-env"
    assert parse("--model", "m", "--api-key", "from-flag").api_key == "from-flag"


def test_media_flags_and_the_fetch_timeout_variable_set_the_media_sources(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "1.5")
    config = parse(
        "--model", "m", "--allowed-local-media-path", str(tmp_path),
        "--limit-mm-per-prompt", '{"image": 3}',
    )  # fmt: skip
    assert config.limit_mm_per_prompt == {"image": 3}
    assert config.media_sources.fetch_timeout == 1.5
    assert config.media_sources.allowed_local_media_path == tmp_path
    defaults = parse("--model", "m")
    assert (
        defaults.limit_mm_per_prompt == {}
        and defaults.media_sources.allowed_local_media_path is None
    )


@pytest.mark.parametrize("value", ["{image: 2}", '{"image": -1}', '{"picture": 1}'])
def test_a_bad_limit_mm_per_prompt_is_refused_naming_the_value(capsys, value):
    with pytest.raises(SystemExit):
        parse("--model", "m", "--limit-mm-per-prompt", value)
    err = capsys.readouterr().err
    assert "--limit-mm-per-prompt" in err and value in err
