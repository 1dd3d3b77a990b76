"""Where `vllm-tvm generate` takes its model and prompt from: a Hugging Face id in the local
hub cache, `--prompt-file FILE` and `--prompt -` (standard input), end to end as a user runs
it; and `serve` names a model given by id after the id.

Oracle: the checkpoint's own tokenizer (the prompt ids must be the file's / stdin's text
encoded) and the direct `--prompt` run of the same text (same completion).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hf_cache_layout import add_to_hf_cache
from huggingface_hub import constants

from vllm_tvm.cli.main import build_parser
from vllm_tvm.cli.serve_cmd import checked_config
from vllm_tvm.runtime.tokenization import load_tokenizer

MODEL_ID = "tiny-org/tiny-llama"
PROMPT = "Once upon a time\nthere was"


def generate_json(hub_cache: Path, *arguments: str, stdin: str = "") -> dict:
    command = [sys.executable, "-m", "vllm_tvm.cli.main", "generate", *arguments]
    command += ["--max-tokens", "3", "--json"]
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root, "HF_HUB_CACHE": str(hub_cache)}
    result = subprocess.run(command, input=stdin, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def hub_cache(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("hub")
    add_to_hf_cache(cache, MODEL_ID, tiny_model_dir("llama"))
    return cache


def test_prompt_file_and_stdin_run_the_cached_model_id(hub_cache: Path, tmp_path: Path) -> None:
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(PROMPT, encoding="utf-8")
    from_file = generate_json(hub_cache, "--model", MODEL_ID, "--prompt-file", str(prompt_file))
    from_stdin = generate_json(hub_cache, "--model", MODEL_ID, "--prompt", "-", stdin=PROMPT)
    snapshot = next((hub_cache / "models--tiny-org--tiny-llama" / "snapshots").iterdir())
    expected_ids = load_tokenizer(snapshot).encode(PROMPT)
    assert from_file["prompt_token_ids"] == expected_ids
    assert from_stdin["prompt_token_ids"] == expected_ids
    assert from_file["token_ids"] == from_stdin["token_ids"] and len(from_file["token_ids"]) > 0


def test_serve_by_model_id_serves_the_snapshot_under_the_id(
    hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    args = build_parser().parse_args(["serve", MODEL_ID, "--host", "127.0.0.1", "--port", "0"])
    config = checked_config(args)
    assert Path(config.engine.model).parent.parent.name == "models--tiny-org--tiny-llama"
    assert config.model_name == MODEL_ID
    named = checked_config(
        build_parser().parse_args(["serve", MODEL_ID, "--port", "0", "--served-model-name", "x"])
    )
    assert named.model_name == "x"
