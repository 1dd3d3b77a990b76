"""GET /tokenizer_info, and lm-eval scoring a multiple-choice task through the server's own
tokenizer, on a live server.

Specification (vLLM's): /tokenizer_info exists only with --enable-tokenizer-info-endpoint;
it gives the checkpoint's tokenizer_config.json (less file paths) with `tokenizer_class`,
the special tokens as strings and the chat template the server renders with. With it,
lm-eval's `local-completions` model with `tokenizer_backend=remote` runs offline: it
tokenizes through /tokenize, reads the special tokens from /tokenizer_info and scores each
choice with `echo` logprobs; each choice's loglikelihood must be what transformers computes
on the same checkpoint.
"""

from __future__ import annotations

import json
import math

import httpx2 as httpx
import pytest
import torch
from server_helpers import CHATML, MODEL_NAME
from tiny_models import load_oracle

from vllm_tvm.cli.main import build_parser
from vllm_tvm.cli.serve_cmd import config_from_args

OTHER_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def info_server(server_farm):
    return server_farm.server(enable_tokenizer_info_endpoint=True)


def test_the_route_is_absent_without_the_flag(server) -> None:
    assert httpx.get(server.url + "/tokenizer_info").status_code == 404


def test_it_gives_the_checkpoints_tokens_and_template(info_server) -> None:
    response = httpx.get(info_server.url + "/tokenizer_info")
    assert response.status_code == 200
    info = response.json()
    assert info["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (info["bos_token"], info["eos_token"]) == ("<s>", "</s>")
    assert info["chat_template"] == CHATML
    assert not {"vocab_file", "merges_file", "tokenizer_file"} & set(info)


def test_it_gives_the_template_the_server_renders_with(server_farm) -> None:
    server = server_farm.server(enable_tokenizer_info_endpoint=True, chat_template=OTHER_TEMPLATE)
    assert httpx.get(server.url + "/tokenizer_info").json()["chat_template"] == OTHER_TEMPLATE


def test_the_flag_sets_its_field() -> None:
    parser = build_parser()
    assert not config_from_args(parser.parse_args(["serve", "/m"])).enable_tokenizer_info_endpoint
    args = parser.parse_args(["serve", "/m", "--enable-tokenizer-info-endpoint"])
    assert config_from_args(args).enable_tokenizer_info_endpoint


DOCS = [
    {"question": "The cat sat on the", "choices": [" mat", " moon", " idea"], "answer": 0},
    {"question": "Once upon a", "choices": [" time", " table"], "answer": 0},
]
TASK = """\
task: tiny_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""


def _loglikelihood(oracle, server, context: str, continuation: str) -> float:
    """transformers' log P(continuation | context), the pair split as lm-eval splits it."""
    whole = server.ctx.tokenizer.encode(context + continuation, add_special_tokens=False)
    prefix = server.ctx.tokenizer.encode(context, add_special_tokens=False)
    with torch.no_grad():
        logits = oracle(torch.tensor([whole])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return sum(float(logprobs[i - 1, whole[i]]) for i in range(len(prefix), len(whole)))


def test_lm_eval_local_completions_with_the_remote_tokenizer(
    info_server, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    data = tmp_path / "tiny_choice.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS), encoding="utf-8")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tiny_choice.yaml").write_text(TASK.format(data=data), encoding="utf-8")
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args={
            "model": MODEL_NAME,
            "base_url": info_server.url + "/v1/completions",
            "tokenizer_backend": "remote",
            "num_concurrent": 1,
            "max_retries": 1,
        },
        tasks=["tiny_choice"],
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        limit=len(DOCS),
        log_samples=True,
    )
    oracle = load_oracle(info_server.ctx.config.engine.model)
    samples = results["samples"]["tiny_choice"]
    assert len(samples) == len(DOCS)
    for sample in samples:
        for (context, continuation), [(loglikelihood, _greedy)] in zip(
            sample["arguments"], sample["resps"], strict=True
        ):
            expected = _loglikelihood(oracle, info_server, context, continuation)
            assert math.isclose(loglikelihood, expected, abs_tol=5e-3), (continuation, expected)
    assert 0.0 <= results["results"]["tiny_choice"]["acc,none"] <= 1.0
