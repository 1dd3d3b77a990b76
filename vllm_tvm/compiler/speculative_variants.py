"""The builds a speculative method asks for besides the plain model (artifacts/
speculative_roles.py): a target that exports its hidden states (the final ones, or the
inputs of the layers an EAGLE-3 head reads), an EAGLE or EAGLE-3 head, an MTP layer.

Why here: the request's role changes which definition is built and what it exports, but
nothing else of the compile; export.py asks this module for the family, config and model
of a role, and the cache key gains the role only when there is one, so a plain build keeps
its key (an EAGLE-3 target's layers are in its config, so in its key too).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm_tvm.artifacts.speculative_roles import (
    AUX_HIDDEN_STATES_TARGET,
    EAGLE3_HEAD,
    EAGLE3_HEAD_ARCHITECTURE,
    EAGLE_HEAD,
    EAGLE_HEAD_ARCHITECTURE,
    HIDDEN_STATES_TARGET,
    HYBRID_MTP_ARCHITECTURE,
    MTP_ARCHITECTURE,
    MTP_HEAD,
    SPECULATIVE_ROLES,
)
from vllm_tvm.checkpoints.eagle3_config import EAGLE3_CHECKPOINT_ARCHITECTURES
from vllm_tvm.checkpoints.families.qwen3_next import decoder_config
from vllm_tvm.model_defs.architectures import DEFINITIONS, ModelFamily, family_for
from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.deepseek_mtp import DeepseekMTP, mtp_weight_sources
from vllm_tvm.model_defs.eagle import EagleHead, eagle_weight_sources
from vllm_tvm.model_defs.eagle3 import Eagle3Head, eagle3_weight_sources, parse_eagle3_head_config
from vllm_tvm.model_defs.qwen3_next_config import HybridConfig
from vllm_tvm.model_defs.qwen3_next_mtp import (
    HybridMTP,
    check_one_mtp_layer,
    hybrid_mtp_weight_sources,
)

HYBRID_FAMILIES = ("hybrid", "hybrid-vl")
"""The Qwen3-Next / Qwen3.5 hybrids: text checkpoints and the multimodal ones (whose image
forward has a hidden-states twin too: model_defs/qwen3_5_vl.py)."""

ROLE_FAMILIES = {
    HIDDEN_STATES_TARGET: ("llama", "deepseek", *HYBRID_FAMILIES),
    AUX_HIDDEN_STATES_TARGET: ("llama",),
    EAGLE_HEAD: ("llama",),
    MTP_HEAD: ("deepseek", *HYBRID_FAMILIES),
}
"""The families each role may be built from: EAGLE heads are Llama layers and draft for
Llama-family targets, MTP layers are DeepSeek-V3's and the Qwen3-Next / Qwen3.5 hybrids';
EAGLE-3 heads (their own checkpoint architecture) draft for Llama-family targets."""

ROLE_ARCHITECTURES = {
    EAGLE_HEAD: EAGLE_HEAD_ARCHITECTURE,
    EAGLE3_HEAD: EAGLE3_HEAD_ARCHITECTURE,
    MTP_HEAD: MTP_ARCHITECTURE,
}
"""The manifest architecture of each head role's build."""

_EAGLE3_FAMILY = ModelFamily(
    name="eagle3",
    parse_config=parse_eagle3_head_config,
    build_model=Eagle3Head,
    weight_sources=eagle3_weight_sources,
)


def check_role(role: str | None) -> None:
    """Refuse an unknown role by name."""
    if role is not None and role not in SPECULATIVE_ROLES:
        raise ValueError(
            f"unknown speculative role {role!r}; known: " + ", ".join(SPECULATIVE_ROLES)
        )


def family_for_role(config: dict[str, Any], role: str | None) -> ModelFamily:
    """The family a build of `role` (None: the plain model) uses for the checkpoint config
    `config`: an EAGLE-3 head checkpoint is built as a head and only as one."""
    check_role(role)
    architecture = (config.get("architectures") or ["?"])[0]
    if (role == EAGLE3_HEAD) != (architecture in EAGLE3_CHECKPOINT_ARCHITECTURES):
        if role == EAGLE3_HEAD:
            raise ValueError(
                f"{architecture} is not an EAGLE-3 head; EAGLE-3 heads are "
                + ", ".join(EAGLE3_CHECKPOINT_ARCHITECTURES)
            )
        raise ValueError(
            f"{architecture} is an EAGLE-3 draft head: it runs next to its target, "
            '--speculative-config \'{"method": "eagle3", "model": HEAD, ...}\''
        )
    if role == EAGLE3_HEAD:
        return _EAGLE3_FAMILY
    family = family_for(config)
    if role is None:
        return family
    if family.name not in ROLE_FAMILIES[role]:
        raise ValueError(
            f"{architecture} cannot be built as {role}: supported for "
            + ", ".join(ROLE_FAMILIES[role])
            + " models"
        )
    if role == EAGLE_HEAD:
        return replace(
            family, name="eagle", build_model=EagleHead, weight_sources=eagle_weight_sources
        )
    if role == MTP_HEAD and family.name in HYBRID_FAMILIES:  # full attention only: no state
        check_one_mtp_layer(decoder_config(config))
        text = DEFINITIONS["hybrid"]  # the layer reads the decoder's config, never the tower's
        mtp = replace(text, name="hybrid-mtp", build_model=HybridMTP, recurrent=False)
        return replace(mtp, config_weight_sources=hybrid_mtp_weight_sources)
    if role == MTP_HEAD:
        mtp = replace(family, name="mtp", build_model=DeepseekMTP)
        return replace(mtp, config_weight_sources=mtp_weight_sources)
    return family


def config_for_role(config: Any, role: str | None, aux_hidden_layers: tuple[int, ...]) -> Any:
    """The parsed `config` of a build of `role`: a head's architecture renamed, an EAGLE-3
    target's `aux_hidden_layers` set (which only that role takes)."""
    if bool(aux_hidden_layers) != (role == AUX_HIDDEN_STATES_TARGET):
        raise ValueError(
            f"aux hidden layers {list(aux_hidden_layers)} go with the role "
            f"{AUX_HIDDEN_STATES_TARGET!r} alone (got role {role!r})"
        )
    if role == MTP_HEAD and isinstance(config, HybridConfig):
        return replace(config, architecture=HYBRID_MTP_ARCHITECTURE)
    if role in ROLE_ARCHITECTURES:
        return replace(config, architecture=ROLE_ARCHITECTURES[role])
    if role == AUX_HIDDEN_STATES_TARGET:
        layers = config.num_hidden_layers
        if not all(0 <= layer < layers for layer in aux_hidden_layers):
            raise ValueError(
                f"aux hidden layers {list(aux_hidden_layers)} are not layers of the "
                f"target's {layers}"
            )
        return replace(config, aux_hidden_layers=tuple(sorted(set(aux_hidden_layers))))
    return config


def model_for_role(model: PagedCausalLM, role: str | None) -> PagedCausalLM:
    """`model` with the functions `role` needs exported."""
    if role in (HIDDEN_STATES_TARGET, AUX_HIDDEN_STATES_TARGET):
        model.exports_hidden_states = True
    return model
