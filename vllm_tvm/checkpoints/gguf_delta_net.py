"""llama.cpp's `qwen3next`, `qwen35` and `qwen35moe` files: their config keys, tensor names,
and what the converter did to the Gated DeltaNet tensors (undone through views).

Sources: the `gguf` package's MODEL_TENSORS / tensor_mapping for the three architectures,
and llama.cpp's converter (conversion/qwen.py: Qwen3NextModel, the value-head reordering
base of Qwen3_5TextModel / Qwen3_5MoeTextModel) and loader (src/models/qwen3next.cpp).
What the converter does, and what is read back here:

- every RMSNorm weight but the Gated DeltaNet output norm (`linear_attn.norm`) is stored
  as HF's weight + 1 (llama.cpp's norms are plain): `norm_weight_offset`;
- `A_log` is stored as `-exp(A_log)` (`ssm_a`), `dt_bias` renamed `ssm_dt.bias`, the conv
  weight [channels, 1, K] squeezed to [channels, K];
- Qwen3-Next: `in_proj_qkvz` (rows grouped per key head: q, k, v, z of each) split into
  `attn_qkv` (all q, all k, all v) and `attn_gate` (all z), joined back here; older files
  hold it whole as `ssm_in`. `in_proj_ba` is `ssm_ba` as it is;
- Qwen3.5: with fewer key than value heads, the value heads are stored tiled (value head
  i of key head g at i * key_heads + g) instead of grouped (g * per_key + i): the v rows of
  `attn_qkv` and of the conv weight, the rows of `attn_gate`, `ssm_beta`, `ssm_alpha`, the
  entries of `ssm_a` / `ssm_dt`, and the columns of `ssm_out`, all put back in HF order.

Qwen3.5 files may carry the MTP layer as blocks after the decoder's (`nextn_predict_layers`
of them): left unread, as the checkpoints' `mtp.*` tensors are. The files have no
`layer_types`: the layer pattern is `full_attention_interval`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from vllm_tvm.checkpoints.families.llama import BLOCK_TENSORS, DENSE_FFN, QK_NORM
from vllm_tvm.checkpoints.family_spec import GGUFArchitecture, GGUFKey, GGUFTensorViews
from vllm_tvm.checkpoints.gguf_expert_config import per_model_count
from vllm_tvm.checkpoints.gguf_expert_tensors import (
    PROJECTIONS,
    routed_tensors,
    shared_expert_tensors,
)
from vllm_tvm.checkpoints.gguf_tensor_views import TensorView

MTP_BLOCKS = "nextn_predict_layers"
"""Qwen3.5 files count here the MTP blocks stored after the decoder's (`blk.N.nextn.*` and
that block's layer); they are not read."""
OFFSET_FREE_NORMS = ("linear_attn.norm.weight",)
"""The one norm the converter stores without llama.cpp's + 1 (the gated output norm)."""
_LAYER = re.compile(r"(model\.layers\.\d+\.linear_attn\.)A_log")

_COMMON = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    **{k: BLOCK_TENSORS[k] for k in ("attn_q.weight", "attn_k.weight", "attn_v.weight")},
    "attn_output.weight": "self_attn.o_proj.weight",
    **QK_NORM,
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
    "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_a": "linear_attn.A_log",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
}
_EXPERTS = {
    **routed_tensors("mlp", PROJECTIONS),
    **shared_expert_tensors("mlp.shared_expert"),
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
}
QWEN35_TENSORS = {
    **_COMMON,
    "ssm_beta.weight": "linear_attn.in_proj_b.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
}
QWEN3NEXT_TENSORS = {
    **_COMMON,
    **_EXPERTS,
    "ssm_in.weight": "linear_attn.in_proj_qkvz.weight",
    "ssm_ba.weight": "linear_attn.in_proj_ba.weight",
}


def _config_body(hf_architecture: str, experts: bool):
    """The HF text config of a file of `hf_architecture` from its metadata keys."""

    def body(key: GGUFKey) -> dict[str, Any]:
        head_dim = per_model_count(key("attention.key_length"), "attention.key_length")
        value_heads = per_model_count(key("ssm.time_step_rank"), "ssm.time_step_rank")
        rotary = per_model_count(key("rope.dimension_count", head_dim), "rope.dimension_count")
        config: dict[str, Any] = {
            "architectures": [hf_architecture],
            "hidden_size": key("embedding_length"),
            "intermediate_size": per_model_count(
                key("feed_forward_length", 0), "feed_forward_length"
            ),
            "num_hidden_layers": key("block_count") - key(MTP_BLOCKS, 0),
            "full_attention_interval": key("full_attention_interval", 4),
            "num_attention_heads": per_model_count(
                key("attention.head_count"), "attention.head_count"
            ),
            "num_key_value_heads": per_model_count(
                key("attention.head_count_kv"), "attention.head_count_kv"
            ),
            "head_dim": head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
            "max_position_embeddings": key("context_length"),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": float(key("rope.freq_base", 10000.0)),
                "partial_rotary_factor": rotary / head_dim,
            },
            "linear_conv_kernel_dim": key("ssm.conv_kernel"),
            "linear_key_head_dim": key("ssm.state_size"),
            "linear_num_key_heads": key("ssm.group_count"),
            "linear_num_value_heads": value_heads,
            "linear_value_head_dim": key("ssm.inner_size") // value_heads,
        }
        if experts:
            config.update(
                num_experts=per_model_count(key("expert_count"), "expert_count"),
                num_experts_per_tok=per_model_count(key("expert_used_count"), "expert_used_count"),
                moe_intermediate_size=per_model_count(
                    key("expert_feed_forward_length"), "expert_feed_forward_length"
                ),
                shared_expert_intermediate_size=per_model_count(
                    key("expert_shared_feed_forward_length"),
                    "expert_shared_feed_forward_length",
                ),
                norm_topk_prob=bool(key("expert_weights_norm", True)),
                decoder_sparse_step=1,
                mlp_only_layers=[],
            )
        return config

    return body


def _a_log(stored: np.ndarray) -> np.ndarray:
    """HF's A_log from the file's -exp(A_log)."""
    return np.log(-stored)


def _grouped_heads(config: dict[str, Any], width: int) -> np.ndarray:
    """Row order putting value heads stored tiled back in HF's grouped order, `width` rows
    a head: HF head g * per_key + i is stored head i * key_heads + g."""
    key_heads = config["linear_num_key_heads"]
    per_key = config["linear_num_value_heads"] // key_heads
    groups, index = np.meshgrid(np.arange(key_heads), np.arange(per_key), indexing="ij")
    stored = (index * key_heads + groups).reshape(-1)
    return (stored[:, None] * width + np.arange(width)).reshape(-1)


def _shapes(config: dict[str, Any]) -> tuple[int, int, int]:
    """(key_dim, value_dim, conv kernel) of a Gated DeltaNet layer."""
    key_dim = config["linear_num_key_heads"] * config["linear_key_head_dim"]
    value_dim = config["linear_num_value_heads"] * config["linear_value_head_dim"]
    return key_dim, value_dim, config["linear_conv_kernel_dim"]


def _common_views(
    config: dict[str, Any], layer: str, conv_rows: np.ndarray | None
) -> dict[str, TensorView]:
    key_dim, value_dim, kernel = _shapes(config)
    conv = f"{layer}conv1d.weight"
    return {
        f"{layer}A_log": TensorView((f"{layer}A_log",), decode=_a_log),
        conv: TensorView((conv,), rows=conv_rows, shape=(2 * key_dim + value_dim, 1, kernel)),
    }


def qwen35_views(config: dict[str, Any], names: list[str]) -> dict[str, TensorView]:
    """Qwen3.5's Gated DeltaNet tensors back in HF layout (module docstring)."""
    key_dim = _shapes(config)[0]
    reordered = config["linear_num_key_heads"] != config["linear_num_value_heads"]
    v_dim = config["linear_value_head_dim"]
    views: dict[str, TensorView] = {}
    for name in names:
        match = _LAYER.fullmatch(name)
        if match is None:
            continue
        layer = match.group(1)
        if not reordered:
            views.update(_common_views(config, layer, None))
            continue
        heads, value_rows = _grouped_heads(config, 1), _grouped_heads(config, v_dim)
        qkv_rows = np.concatenate([np.arange(2 * key_dim), 2 * key_dim + value_rows])
        views.update(_common_views(config, layer, qkv_rows))
        views[f"{layer}A_log"] = TensorView((f"{layer}A_log",), rows=heads, decode=_a_log)
        row_orders = {
            "in_proj_qkv.weight": qkv_rows,
            "in_proj_z.weight": value_rows,
            "in_proj_b.weight": heads,
            "in_proj_a.weight": heads,
            "dt_bias": heads,
        }
        for suffix, rows in row_orders.items():
            views[layer + suffix] = TensorView((layer + suffix,), rows=rows)
        out = f"{layer}out_proj.weight"
        views[out] = TensorView((out,), column_segment=v_dim, columns=heads)
    return views


def qwen3next_views(config: dict[str, Any], names: list[str]) -> dict[str, TensorView]:
    """Qwen3-Next's Gated DeltaNet tensors back in HF layout (module docstring)."""
    key_dim, value_dim, _ = _shapes(config)
    key_heads, k_dim = config["linear_num_key_heads"], config["linear_key_head_dim"]
    group_v = value_dim // key_heads
    present = set(names)
    views: dict[str, TensorView] = {}
    for name in names:
        match = _LAYER.fullmatch(name)
        if match is None:
            continue
        layer = match.group(1)
        views.update(_common_views(config, layer, None))
        qkv, z = f"{layer}in_proj_qkv.weight", f"{layer}in_proj_z.weight"
        if qkv not in present:
            continue  # an older file's whole `ssm_in`
        # HF rows per key head g: q_g, k_g, v_g (group_v rows), z_g; joined rows: all q,
        # all k, all v, then all z.
        rows = np.concatenate(
            [
                np.concatenate(
                    [
                        g * k_dim + np.arange(k_dim),
                        key_dim + g * k_dim + np.arange(k_dim),
                        2 * key_dim + g * group_v + np.arange(group_v),
                        2 * key_dim + value_dim + g * group_v + np.arange(group_v),
                    ]
                )
                for g in range(key_heads)
            ]
        )
        views[f"{layer}in_proj_qkvz.weight"] = TensorView((qkv, z), rows=rows)
    return views


def _delta_net_architecture(
    gguf_name: str,
    hf_architecture: str,
    tensors: Mapping[str, str],
    *,
    experts: bool,
    views: GGUFTensorViews,
    mtp_blocks_key: str | None,
) -> GGUFArchitecture:
    """One of the three: every norm but OFFSET_FREE_NORMS stored with llama.cpp's + 1."""
    return GGUFArchitecture(
        gguf_name,
        hf_architecture,
        tensors,
        config_body=_config_body(hf_architecture, experts=experts),
        tensor_views=views,
        mtp_blocks_key=mtp_blocks_key,
        norm_weight_offset=1.0,
        offset_free_norms=OFFSET_FREE_NORMS,
    )


def delta_net_architectures(
    qwen3_next: str, qwen3_5: str, qwen3_5_moe: str
) -> tuple[GGUFArchitecture, ...]:
    """The three GGUF architectures, as the HF classes they become."""
    dense = {k: BLOCK_TENSORS[k] for k in DENSE_FFN}
    return (
        _delta_net_architecture(
            "qwen3next",
            qwen3_next,
            QWEN3NEXT_TENSORS,
            experts=True,
            views=qwen3next_views,
            mtp_blocks_key=None,
        ),
        _delta_net_architecture(
            "qwen35",
            qwen3_5,
            {**QWEN35_TENSORS, **dense},
            experts=False,
            views=qwen35_views,
            mtp_blocks_key=MTP_BLOCKS,
        ),
        _delta_net_architecture(
            "qwen35moe",
            qwen3_5_moe,
            {**QWEN35_TENSORS, **_EXPERTS},
            experts=True,
            views=qwen35_views,
            mtp_blocks_key=MTP_BLOCKS,
        ),
    )
