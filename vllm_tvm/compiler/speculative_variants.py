"""The builds a speculative method asks for besides the plain model (artifacts/
speculative_roles.py): a target that exports its hidden states, an EAGLE head, an MTP layer.

Why here: the request's role changes which definition is built and what it exports, but
nothing else of the compile; export.py asks this module for the family, config and model
of a role, and the cache key gains the role only when there is one, so a plain build keeps
its key.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm_tvm.artifacts.speculative_roles import (
    EAGLE_HEAD,
    EAGLE_HEAD_ARCHITECTURE,
    HIDDEN_STATES_TARGET,
    MTP_ARCHITECTURE,
    MTP_HEAD,
    SPECULATIVE_ROLES,
)
from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.deepseek_mtp import DeepseekMTP, mtp_weight_sources
from vllm_tvm.model_defs.eagle import EagleHead, eagle_weight_sources
from vllm_tvm.model_defs.registry import ModelFamily

ROLE_FAMILIES = {
    HIDDEN_STATES_TARGET: ("llama", "deepseek"),
    EAGLE_HEAD: ("llama",),
    MTP_HEAD: ("deepseek",),
}
"""The families each role may be built from: EAGLE heads are Llama layers and draft for
Llama-family targets, MTP layers are DeepSeek-V3's."""


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
    if family.name not in ROLE_FAMILIES[role]:
        raise ValueError(
            f"{config.architecture} cannot be built as {role}: supported for "
            + ", ".join(ROLE_FAMILIES[role])
            + " models"
        )
    if role == EAGLE_HEAD:
        head = replace(
            family, name="eagle", build_model=EagleHead, weight_sources=eagle_weight_sources
        )
        return head, replace(config, architecture=EAGLE_HEAD_ARCHITECTURE)
    if role == MTP_HEAD:
        mtp = replace(family, name="mtp", build_model=DeepseekMTP)
        mtp = replace(mtp, config_weight_sources=mtp_weight_sources)
        return mtp, replace(config, architecture=MTP_ARCHITECTURE)
    return family, config


def model_for_role(model: PagedCausalLM, role: str | None) -> PagedCausalLM:
    """`model` with the functions `role` needs exported."""
    if role == HIDDEN_STATES_TARGET:
        model.exports_hidden_states = True
    return model


def role_key(role: str | None) -> dict[str, str]:
    """The role's share of the artifact cache key: nothing for a plain build."""
    return {} if role is None else {"speculative_role": role}
