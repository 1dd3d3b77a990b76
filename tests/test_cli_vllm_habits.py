"""What a vLLM user types reaches the right place or is answered by name: the default model
by the name `/v1/models` lists, vLLM's no-effect options on `generate` and `LLM`, a file that
is not a checkpoint, a prompt file that is not UTF-8, `--stream --json`, and a `--max-tokens`
the context cuts short."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_tvm.checkpoints.default_model import (
    DEFAULT_MODEL_NAME,
    DefaultModelMissingError,
    default_model_path,
)
from vllm_tvm.cli.main import build_parser, main
from vllm_tvm.entrypoints import resolve
from vllm_tvm.runtime.engine.args import EngineArgs


class Resolved(Exception):
    """The resolve step found the checkpoint; nothing is compiled or loaded."""


@pytest.fixture
def found_checkpoints(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The checkpoint each resolution found, stopping it there."""
    found: list[str] = []

    def stop(args: EngineArgs) -> EngineArgs:
        found.append(str(args.model))
        raise Resolved

    monkeypatch.setattr(resolve, "with_draft_artifact", stop)
    return found


def test_the_default_model_is_found_by_its_served_name(found_checkpoints) -> None:
    from vllm_tvm.entrypoints.llm import LLM

    try:
        installed = default_model_path()
    except DefaultModelMissingError as missing:
        pytest.skip(str(missing))
    with pytest.raises(Resolved):
        LLM(DEFAULT_MODEL_NAME, show_progress=False)
    with pytest.raises(Resolved):
        main(["generate", "--model", DEFAULT_MODEL_NAME, "--prompt", "hi", "--json"])
    assert found_checkpoints == [str(installed)] * 2


def test_vllm_no_effect_options_are_accepted_by_llm_and_generate(found_checkpoints) -> None:
    from vllm_tvm.entrypoints.llm import LLM

    with pytest.raises(Resolved):
        LLM(".", enforce_eager=True, swap_space=4, enable_chunked_prefill=True)
    flags = ["--enforce-eager", "--swap-space", "4", "--max-seq-len-to-capture", "8192"]
    parsed = build_parser().parse_args(["generate", "--model", "m", "--prompt", "hi", *flags])
    from vllm_tvm.cli.engine_args import engine_args_from_cli

    assert engine_args_from_cli(parsed) == EngineArgs(model="m")
    with pytest.raises(TypeError, match=r"unknown engine option.*'enforce_eagerly'"):
        LLM(".", enforce_eagerly=True)


def test_a_file_that_is_no_checkpoint_is_not_called_a_directory(tmp_path: Path, capsys) -> None:
    model = tmp_path / "notes.txt"
    model.write_text("not a model")
    assert main(["generate", "--model", str(model), "--prompt", "hi"]) == 1
    err = capsys.readouterr().err
    assert f"model file {model} is not a GGUF file" in err and "directory" not in err.split(";")[0]


def test_a_prompt_file_that_is_not_utf8_is_named_with_its_flag(tmp_path: Path, capsys) -> None:
    prompt = tmp_path / "latin1.txt"
    prompt.write_bytes("café".encode("latin-1"))
    assert main(["generate", "--model", "m", "--prompt-file", str(prompt)]) == 1
    assert f"--prompt-file {prompt}: not UTF-8 text (byte 0xe9 at offset 3)" in (
        capsys.readouterr().err
    )


def test_stream_with_json_is_refused_by_name(capsys) -> None:
    assert main(["generate", "--model", "m", "--prompt", "hi", "--stream", "--json"]) == 1
    assert "--stream and --json do not combine" in capsys.readouterr().err


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_generate_says_where_the_context_cut_its_max_tokens(
    stream: bool, tiny_model_dir, capsys
) -> None:
    context = 24
    command = ["generate", "--model", str(tiny_model_dir("llama")), "--prompt", "hello world"]
    command += ["--max-model-len", str(context), "--max-tokens", "100"]
    assert main(["generate", *command[1:], "--stream" if stream else "--json"]) == 0
    captured = capsys.readouterr()
    if not stream:
        result = json.loads(captured.out.strip().splitlines()[-1])
        prompt, generated = len(result["prompt_token_ids"]), len(result["token_ids"])
        assert prompt + generated == context and result["finish_reason"] == "length"
        assert (
            f"stopped after {generated} of --max-tokens 100 tokens: the prompt's {prompt} "
            f"tokens and {generated} generated fill the context of {context} tokens"
        ) in captured.err
    else:
        assert "of --max-tokens 100 tokens" in captured.err
        assert f"fill the context of {context} tokens" in captured.err
