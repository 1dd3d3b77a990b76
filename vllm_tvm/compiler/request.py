"""The compile request: what one compile makes, shared by its export, build and write steps.

Kept apart from build.py (which validates user options into a request and runs the steps)
so that the step modules can name it without importing the module that imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.compiler.targets import TargetSpec


@dataclass(frozen=True)
class CompileRequest:
    """What to compile: `options` resolved (the target by its canonical name, the dtype, gemm
    and attention backends as chosen for it), the target's preset, `weight_formats` naming
    the weights compiled quantized (parameter name -> format; see compiler/weight_plan.py),
    and whether CUDA graphs are captured."""

    options: CompileOptions
    target: TargetSpec
    weight_formats: Mapping[str, str] = field(default_factory=dict, hash=False)
    cuda_graph: bool = False

    @property
    def model_path(self) -> Path:
        return Path(self.options.model)

    @property
    def dtype(self) -> str:
        return self.options.dtype

    @property
    def gemm(self) -> str:
        return self.options.gemm

    @property
    def attention(self) -> str:
        return self.options.attention

    @property
    def quantization(self) -> str | None:
        """Group quantization of a float checkpoint's weights at load (checkpoints/
        group_quantization.py); None: weights load as the checkpoint stores them."""
        return self.options.quantization

    @property
    def tensor_parallel_shards(self) -> int:
        """Ranks the network is split over (model_defs/tensor_parallel.py): one artifact
        serves every rank."""
        return self.options.tensor_parallel_size

    @property
    def max_model_len(self) -> int | None:
        """The context the engine will run (None: the checkpoint's). Only longrope reads it:
        past `original_max_position_embeddings` its long factors are compiled in
        (rope_scaling.py), which the parsed config, and so the artifact's cache key, carries."""
        return self.options.max_model_len

    @property
    def speculative_role(self) -> str | None:
        """What a speculative method needs built besides the plain model (artifacts/
        speculative_roles.py); None: the plain model."""
        return self.options.speculative_role

    @property
    def aux_hidden_layers(self) -> tuple[int, ...]:
        """For a target built for an EAGLE-3 head, the layers whose inputs it exports
        (checkpoints/eagle3_config.py); empty for every other build."""
        return self.options.aux_hidden_layers
