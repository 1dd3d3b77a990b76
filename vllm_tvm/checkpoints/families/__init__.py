"""The model families, one module each; `FAMILY_MODULES` is the one list that registers them.

A family module defines `FAMILIES`, a tuple of `FamilySpec` (checkpoints/family_spec.py):
its HF architecture names, the definition that runs them, the options its config implies
and its GGUF architectures. Adding a family is one module here and its name in this list;
the config parser, the GGUF reader and the registry find it through family_index.py.
"""

from __future__ import annotations

from vllm_tvm.checkpoints.families import (
    deepseek,
    gemma,
    gpt2,
    granite,
    llama,
    mixtral,
    olmo2,
    opt,
    phi3,
    qwen,
    qwen2_5_vl,
    qwen3_next,
    qwen_moe,
    refused,
)

FAMILY_MODULES = (
    llama,
    qwen,
    gemma,
    phi3,
    olmo2,
    granite,
    gpt2,
    mixtral,
    qwen_moe,
    deepseek,
    opt,
    qwen3_next,
    qwen2_5_vl,
    refused,
)
"""Every family module, in the order `supported:` lists their architectures."""
