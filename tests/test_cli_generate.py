"""`vllm-tvm generate`'s checks of its own flags, made before any model is loaded.

Specification: a `--max-tokens` below 1 is refused with vLLM's message naming the value, and
the model is never touched (a missing model directory is not what the error is about).
"""

from __future__ import annotations

import pytest

from vllm_tvm.cli.main import main


@pytest.mark.parametrize("max_tokens", ["0", "-1"])
def test_max_tokens_below_one_is_refused_before_the_model_loads(tmp_path, capsys, max_tokens):
    missing = tmp_path / "no-such-model"
    argv = ["generate", "--prompt", "hi", "--max-tokens", max_tokens, "--model", str(missing)]
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert f"max_tokens must be at least 1, got {max_tokens}" in error
    assert "no-such-model" not in error
