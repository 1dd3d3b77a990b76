"""`CompileOptions`: everything a user chooses that decides which artifact a model runs as,
and `artifact_key`, the one key an artifact is found by.

Why one value: the compiler (compiler/build.py), the cache of built artifacts, the memo of
resolutions (resolution_memo.py), the registry (artifact_registry/pull.py) and every front end
(`LLM`, `generate`, `serve`, `bench`, `compile`) all speak of the same choices; held in one
frozen value, an option added here reaches each of them, and is checked once, by name,
before anything slow. Why here, below the compiler and the runtime: the runtime's
`EngineArgs` builds one, and a serving machine without TVM's compiler must read it.

Each keyed place names the model its own way (the compiler by the parsed config's
fingerprint, the memo by the checkpoint's files, the registry by its model id) and adds what
else its answer depends on, but all of them key the options through `key_fields`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from vllm_tvm.artifacts.backends import (
    ATTENTION_BACKENDS,
    ATTENTION_FLASHINFER,
    ATTENTION_TIR,
    GEMM_BACKENDS,
    GEMM_CUBLASLT,
)
from vllm_tvm.checkpoints.group_quantization import check_quantization
from vllm_tvm.checkpoints.weight_formats import NATIVE, check_weight_format_mode

GEMM_AUTO = "auto"
GEMM_CHOICES = (GEMM_AUTO, *GEMM_BACKENDS)
"""`--gemm` values: `auto` is cuBLASLt where it applies (compiler/build.py), else TIR."""

INT8_AUTO, INT8_ON, INT8_OFF = "auto", "on", "off"
CPU_INT8_ACTIVATION_CHOICES = (INT8_AUTO, INT8_ON, INT8_OFF)
"""`--cpu-int8-activations` values: `on` multiplies the Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1
weights of a CPU build by activations quantized to int8 per block of 32 (its Q4_K / Q5_K /
Q6_K weights: per block of 256, llama.cpp's Q8_K) with the CPU's integer dot products (as
llama.cpp does; other numerics than the float path), `off` keeps the float path, `auto` is
`on` where the target has the instructions (AVX-512 VNNI, AVX-VNNI
or AVX2) and the model such weights, else `off` (compiler/int8_activations.py). The default
is `off` until the path is measured faster than the float one on a quiet machine
(benchmarks/cpu_peers.py)."""

KEY_LENGTH = 24
"""Hex digits of an artifact key (the cache directory's name)."""


@dataclass(frozen=True)
class CompileOptions:
    """What to build a model as, as the user asked (nothing resolved yet).

    `target` names a TVM target (compiler/targets.py: `llvm` is this CPU, `cuda` the default
    GPU architecture, `llvm:aarch64` another machine's). `dtype` `auto` is the checkpoint's.
    `weight_format`: `native` keeps supported GGUF quant types quantized on the device,
    `dequantized` stores every weight as floats. `gemm`: `cublaslt`, `tir` or `auto`;
    `attention`: `tir` or `flashinfer` (compiler/attention.py). `quantization`: a
    group-quantization method for a float checkpoint's weights (None: as stored).
    `tensor_parallel_size` > 1: the network split over that many ranks. `max_model_len`: the
    engine's context (None: the model's; it picks longrope's factor set).
    `speculative_role`: a build a speculative method needs (speculative_roles.py), and for
    an EAGLE-3 target `aux_hidden_layers`, the layers whose inputs it exports.
    `cpu_int8_activations`: one of CPU_INT8_ACTIVATION_CHOICES (resolved by the compiler to
    `on` or `off`). `owned_kv`: the model also exports forwards over KV pages the runtime
    owns (model_defs/owned_kv.py), which the runtime then runs in place of TVM's cache
    (refused by name for a model they do not serve); beside `attention` `flashinfer` a
    prefill's own-chunk product is FlashInfer's ragged kernel, the rest TIR. Off by
    default: with TIR prefill attention TTFT at 1,024 tokens was near 100 ms where the
    FlashInfer cache path takes under 30 (measured on the H200, docs/BENCHMARKS.md).
    """

    model: str | Path
    target: str = "llvm"
    dtype: str = "auto"
    weight_format: str = NATIVE
    gemm: str = GEMM_AUTO
    attention: str = ATTENTION_TIR
    quantization: str | None = None
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    speculative_role: str | None = None
    aux_hidden_layers: tuple[int, ...] = ()
    cpu_int8_activations: str = INT8_OFF
    owned_kv: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "aux_hidden_layers", tuple(self.aux_hidden_layers))
        check_weight_format_mode(self.weight_format)
        check_quantization(self.quantization)
        check_gemm(self.gemm)
        check_attention(self.attention)
        check_cpu_int8_activations(self.cpu_int8_activations)
        if self.cpu_int8_activations == INT8_ON and self.target_kind != "llvm":
            raise ValueError(
                f"cpu_int8_activations 'on' needs a CPU (llvm) target; got target "
                f"'{self.target}' (use 'off' or 'auto')"
            )
        for name, backend in (("gemm", GEMM_CUBLASLT), ("attention", ATTENTION_FLASHINFER)):
            if getattr(self, name) == backend and not self._sixteen_bit_cuda:
                raise ValueError(
                    f"{name} '{backend}' needs a cuda target and dtype float16 or bfloat16; "
                    f"got target '{self.target}' and dtype '{self.dtype}'"
                )
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")

    @property
    def target_kind(self) -> str:
        """The kind of machine the target runs on: `llvm` or `cuda`."""
        return self.target.strip().lower().partition(":")[0]

    @property
    def _sixteen_bit_cuda(self) -> bool:
        """Whether the build may be a 16-bit float one for CUDA (`auto` dtype: the compiler
        decides once it reads the checkpoint)."""
        return self.target_kind == "cuda" and self.dtype in ("auto", "float16", "bfloat16")

    def key_fields(self) -> dict[str, object]:
        """The options but the model that differ from their defaults, by name: what tells
        this build from the model's plain one (so adding an option keeps every key made
        without it)."""
        return {
            item.name: list(value) if isinstance(value, tuple) else value
            for item in fields(self)
            if item.name != "model" and (value := getattr(self, item.name)) != item.default
        }


def artifact_key(model: object, options: CompileOptions, depends_on: Mapping[str, object]) -> str:
    """The key of `options`' artifact of `model` (however the caller identifies the model),
    given what else the answer `depends_on` (the compiler's version and source, the machine)."""
    parts = {"model": model, "options": options.key_fields(), "depends_on": dict(depends_on)}
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:KEY_LENGTH]


def check_gemm(gemm: str) -> str:
    """`gemm` if it is a `--gemm` choice, else ValueError naming it and the choices."""
    if gemm not in GEMM_CHOICES:
        raise ValueError(f"unsupported gemm '{gemm}'; supported: " + ", ".join(GEMM_CHOICES))
    return gemm


def check_attention(attention: str) -> str:
    """`attention` if it is an attention backend, else ValueError naming it and the choices."""
    if attention not in ATTENTION_BACKENDS:
        raise ValueError(
            f"unsupported attention '{attention}'; supported: " + ", ".join(ATTENTION_BACKENDS)
        )
    return attention


def check_cpu_int8_activations(choice: str) -> str:
    """`choice` if it is a `--cpu-int8-activations` value, else ValueError naming it."""
    if choice not in CPU_INT8_ACTIVATION_CHOICES:
        raise ValueError(
            f"unsupported cpu_int8_activations '{choice}'; supported: "
            + ", ".join(CPU_INT8_ACTIVATION_CHOICES)
        )
    return choice


def option_default(name: str) -> object:
    """The default of compile option `name` (EngineArgs and the flags read it from here)."""
    return next(item.default for item in fields(CompileOptions) if item.name == name)
