"""vllm-tvm: LLM inference with models compiled ahead of time by Apache TVM.

The Python API mirrors vLLM's: `from vllm_tvm import LLM, SamplingParams`.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package (e.g. for the CLI's --help) must not load TVM.
    if name == "LLM":
        from vllm_tvm.entrypoints.llm import LLM

        return LLM
    if name == "SamplingParams":
        from vllm_tvm.runtime.sampling.params import SamplingParams

        return SamplingParams
    raise AttributeError(name)
