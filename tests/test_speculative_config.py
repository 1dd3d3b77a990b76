"""`--speculative-config`: vLLM's JSON keys into one `SpeculativeConfig`, taken by every
engine command and by `LLM(speculative_config=...)`; unknown methods and keys, methods not
built and values that cannot work are refused by name before anything loads."""

from __future__ import annotations

import pytest

from vllm_tvm.cli.engine_args import engine_args_from_cli
from vllm_tvm.cli.main import build_parser
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.speculative.config import SpeculativeConfig

NGRAM_JSON = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'


def test_vllm_json_becomes_the_config_with_vllm_defaults() -> None:
    config = SpeculativeConfig.from_json(NGRAM_JSON)
    assert config == SpeculativeConfig("ngram", 3, prompt_lookup_min=4, prompt_lookup_max=4)
    both_unset = SpeculativeConfig.from_json({"method": "ngram", "num_speculative_tokens": 2})
    assert (both_unset.prompt_lookup_min, both_unset.prompt_lookup_max) == (5, 5)
    only_min = SpeculativeConfig.from_json(
        {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2}
    )
    assert (only_min.prompt_lookup_min, only_min.prompt_lookup_max) == (2, 2)


def test_a_model_without_a_method_is_a_draft_model() -> None:
    config = SpeculativeConfig.from_json({"model": "/draft", "num_speculative_tokens": 2})
    assert config == SpeculativeConfig("draft_model", 2, model="/draft")
    assert config.draft_artifact is None  # resolved by the entry point, never from JSON
    with pytest.raises(ValueError, match="'draft_artifact' are not supported"):
        SpeculativeConfig.from_json(
            {"model": "/d", "num_speculative_tokens": 2, "draft_artifact": "a"}
        )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"method": "medusa", "num_speculative_tokens": 2}, "unknown speculative method 'medusa'"),
        ({"method": "eagle", "num_speculative_tokens": 2}, "needs the EAGLE head's 'model'"),
        ({"method": "suffix", "num_speculative_tokens": 2}, "'suffix' is not implemented"),
        ({"method": "eagle3", "num_speculative_tokens": 2}, "needs the EAGLE-3 head's 'model'"),
        ({"method": "draft_model", "num_speculative_tokens": 2}, "needs the draft's 'model'"),
        ({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1},
         "'draft_tensor_parallel_size' are not supported"),
        ({"method": "ngram"}, "num_speculative_tokens must be an integer >= 1, got None"),
        ({"num_speculative_tokens": 2}, "needs a 'method'"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens must be"),
        ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
          "prompt_lookup_max": 2}, "prompt_lookup_min 4 exceeds prompt_lookup_max 2"),
        ({"method": "ngram", "num_speculative_tokens": 2, "model": "m"}, "takes no draft model"),
        ("[1, 2]", "must be a JSON object"),
        ("{method: ngram}", "not valid JSON"),
    ],
)  # fmt: skip
def test_what_cannot_run_is_refused_by_name(value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig.from_json(value)


@pytest.mark.parametrize("command", ["serve", "generate", "bench"])
def test_every_engine_command_takes_the_flag(command: str) -> None:
    required = ["--prompt", "hi"] if command == "generate" else []
    argv = [command, *required, "--model", "/m", "--speculative-config", NGRAM_JSON]
    args = engine_args_from_cli(build_parser().parse_args(argv))
    assert args.speculative_config == SpeculativeConfig.from_json(NGRAM_JSON)


def test_the_flag_refuses_a_method_not_built(capsys) -> None:
    config = '{"method": "suffix", "num_speculative_tokens": 1}'
    argv = ["generate", "--prompt", "hi", "--speculative-config", config]
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert "speculative method 'suffix' is not implemented" in capsys.readouterr().err


def test_engine_options_take_json_text_a_dict_or_the_config() -> None:
    config = SpeculativeConfig.from_json(NGRAM_JSON)
    assert EngineArgs.from_options("/m", speculative_config=NGRAM_JSON).speculative_config == config
    as_dict = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    assert EngineArgs("/m", speculative_config=as_dict).speculative_config == config
    assert EngineArgs("/m", speculative_config=config).speculative_config is config
    assert EngineArgs("/m").speculative_config is None


def test_llm_refuses_an_unknown_method_before_loading() -> None:
    from vllm_tvm.entrypoints.llm import LLM

    with pytest.raises(ValueError, match="unknown speculative method 'lookahead'"):
        LLM("/nonexistent", speculative_config={"method": "lookahead"})


def test_mtp_reads_its_layers_from_the_target_unless_a_model_is_named() -> None:
    config = SpeculativeConfig.from_json({"method": "mtp", "num_speculative_tokens": 1})
    assert config == SpeculativeConfig("mtp", 1, model=None)


def test_eagle3_takes_its_head() -> None:
    config = SpeculativeConfig.from_json(
        {"method": "eagle3", "model": "/head", "num_speculative_tokens": 3}
    )
    assert config == SpeculativeConfig("eagle3", 3, model="/head")
