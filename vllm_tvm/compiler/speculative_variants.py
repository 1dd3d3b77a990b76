"""The builds a speculative method asks for besides the plain model (artifacts/
speculative_roles.py): an EAGLE target that exports its hidden states, an EAGLE head.

Why here: the request's role changes which definition is built and what it exports, but
nothing else of the compile; export.py asks this module for the family, config and model
of a role, and the cache key gains the role only when there is one, so a plain build keeps
its key.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm_tvm.artifacts.speculative_roles import (
    EAGLE_HEAD_ARCHITECTURE,
    EAGLE_TARGET,
    SPECULATIVE_ROLES,
)
from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.eagle import EagleHead, eagle_weight_sources
from vllm_tvm.model_defs.registry import ModelFamily

EAGLE_FAMILIES = ("llama",)
"""Families an EAGLE head or target may be built from (Llama's decoder layer and norm)."""


def check_role(role: str | None) -> None:
    """Refuse an unknown role by name."""
    if role is not None and role not in SPECULATIVE_ROLES:
        raise ValueError(
            f"unknown speculative role {role!r}; known: " + ", ".join(SPECULATIVE_ROLES)
        )


def family_for_role(family: ModelFamily, config: Any, role: str | None) -> tuple[ModelFamily, Any]:
    """The family and parsed config a build of `role` uses (`family`/`config` when none)."""
    check_role(role)
    if role is None:
        return family, config
    if family.name not in EAGLE_FAMILIES:
        raise ValueError(
            f"EAGLE needs a Llama-family model; {config.architecture} is not supported ({role})"
        )
    if role == EAGLE_TARGET:
        return family, config
    head = replace(family, name="eagle", build_model=EagleHead, weight_sources=eagle_weight_sources)
    return head, replace(config, architecture=EAGLE_HEAD_ARCHITECTURE)


def model_for_role(model: PagedCausalLM, role: str | None) -> PagedCausalLM:
    """`model` with the functions `role` needs exported."""
    if role == EAGLE_TARGET:
        model.exports_hidden_states = True
    return model


def role_key(role: str | None) -> dict[str, str]:
    """The role's share of the artifact cache key: nothing for a plain build."""
    return {} if role is None else {"speculative_role": role}
