"""The compile request: what one compile makes, shared by its export, build and write steps.

Kept apart from build.py (which validates user options into a request and runs the steps)
so that the step modules can name it without importing the module that imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vllm_tvm.compiler.backends import ATTENTION_TIR, GEMM_TIR
from vllm_tvm.compiler.targets import TargetSpec


@dataclass(frozen=True)
class CompileRequest:
    """What to compile: a checkpoint, for a target, in a dtype; `weight_formats` names the
    weights compiled quantized (parameter name -> format; see compiler/weight_plan.py)."""

    model_path: Path
    target: TargetSpec
    dtype: str
    weight_formats: Mapping[str, str] = field(default_factory=dict, hash=False)
    cuda_graph: bool = False
    gemm: str = GEMM_TIR
    attention: str = ATTENTION_TIR
    quantization: str | None = None
    """Group quantization of a float checkpoint's weights at load (checkpoints/
    group_quantization.py); None: weights load as the checkpoint stores them."""
    tensor_parallel_shards: int = 1
    """Ranks the network is split over (model_defs/tensor_parallel.py): one artifact serves
    every rank."""
    max_model_len: int | None = None
    """The context the engine will run (None: the checkpoint's). Only longrope reads it: past
    `original_max_position_embeddings` its long factors are compiled in (rope_scaling.py),
    which the parsed config, and so the artifact's cache key, carries."""
    speculative_role: str | None = None
    """What a speculative method needs built besides the plain model (artifacts/
    speculative_roles.py); None: the plain model."""
    aux_hidden_layers: tuple[int, ...] = ()
    """For a target built for an EAGLE-3 head, the layers whose inputs it exports
    (checkpoints/eagle3_config.py); empty for every other build."""
