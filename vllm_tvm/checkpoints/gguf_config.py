"""HF-style model configuration from a GGUF file's metadata.

Why this exists: a GGUF file carries its model hyper-parameters as llama.cpp metadata keys
(``llama.block_count``, ``qwen2.attention.head_count`` ...) instead of a ``config.json``. The
rest of vllm-tvm (model definitions, compiler, runtime) speaks HF ``config.json``, so this
module translates one into the other, and it is also the gatekeeper: a file whose
architecture, quantization types or tensor names we cannot serve is refused here, from
metadata and tensor infos alone, before anything is compiled or any weight is read. What
differs per architecture (tensor names, metadata keys, converter quirks) is each family
module's (checkpoints/families/); names are read through gguf_tensor_names.py, the
rope-scaling recovery is in gguf_rope_scaling.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gguf import GGMLQuantizationType

from vllm_tvm.checkpoints.family_spec import GGUFArchitecture
from vllm_tvm.checkpoints.gguf_file import GGUFFile
from vllm_tvm.checkpoints.gguf_reader import MISSING, GGUFSource, metadata_field, open_gguf
from vllm_tvm.checkpoints.gguf_rope_scaling import rope_scaling_config
from vllm_tvm.checkpoints.gguf_tensor_names import (
    architecture_of,
    gguf_architecture,
    hf_tensor_index,
    hf_tensor_name,
    is_unread_tensor,
)

SUPPORTED_QUANT_TYPES: tuple[GGMLQuantizationType, ...] = (
    GGMLQuantizationType.F32,
    GGMLQuantizationType.F16,
    GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q5_1,
    GGMLQuantizationType.Q2_K,
    GGMLQuantizationType.Q3_K,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q5_K,
    GGMLQuantizationType.Q6_K,
)


def check_gguf_supported(source: GGUFSource) -> GGUFFile:
    """Refuse a GGUF file we cannot serve, using only its metadata and tensor infos.

    Checks, in order: not a split file, a supported ``general.architecture``, every tensor
    stored in a supported quantization type, and every tensor name known for the
    architecture. No tensor data is touched. Returns the opened reader for reuse.
    """
    reader = open_gguf(source)
    split_count = metadata_field(reader, "split.count", 1)
    if split_count != 1:
        raise ValueError(
            f"unsupported split GGUF file ({split_count} parts); supported: single-file GGUF "
            "(merge it with llama-gguf-split --merge)"
        )
    arch = architecture_of(reader)

    bad_types: dict[str, list[str]] = {}
    for tensor in reader.tensors:
        if tensor.tensor_type not in SUPPORTED_QUANT_TYPES:
            bad_types.setdefault(tensor.tensor_type.name, []).append(tensor.name)
    if bad_types:
        found = "; ".join(
            f"{qtype!r} (tensor {names[0]!r}"
            + (f" and {len(names) - 1} more)" if len(names) > 1 else ")")
            for qtype, names in bad_types.items()
        )
        raise ValueError(
            f"unsupported GGUF quant type {found}; "
            f"supported: {', '.join(t.name for t in SUPPORTED_QUANT_TYPES)}"
        )

    for tensor in reader.tensors:
        if is_unread_tensor(reader, tensor.name, arch):
            continue
        hf_tensor_name(tensor.name, arch)
    hf_tensor_index(reader, arch)
    return reader


def gguf_tensor_types(source: GGUFSource) -> dict[str, str]:
    """ggml type name (``Q4_1``, ``F32`` ...) of every weight tensor, by HF tensor name.

    Reads tensor infos only (RoPE factor tensors, not weights, are left out); a tensor read
    through a view (gguf_tensor_views.py) has the type the weight reader gives it.
    """
    from vllm_tvm.checkpoints.gguf_weights import GGUFWeights

    weights = GGUFWeights(open_gguf(source))
    return {name: weights.quant_type(name).name for name in weights.names()}


def hf_config_from_gguf(source: GGUFSource) -> dict[str, Any]:
    """Build an HF ``config.json`` dict for a GGUF checkpoint (after ``check_gguf_supported``).

    Float32 metadata values (epsilon, rope base, scaling factor) are given as the shortest
    decimal that round-trips through float32, i.e. the value the original config.json had.
    ``torch_dtype`` is the float type of the file's weight matrices (``float16`` when they
    are all block-quantized: ggml's block scales are float16). The only tensor data read
    are the small RoPE factor tensors (Llama 3.x's ``rope_freqs.weight``, Phi-3's
    ``rope_factors_long/short.weight``). Family-specific keys: each family's module
    (checkpoints/families/).
    """
    reader = check_gguf_supported(source)
    arch = architecture_of(reader)
    spec = gguf_architecture(arch)
    tensors = {t.name: t for t in reader.tensors}

    def key(name: str, default: Any = MISSING) -> Any:
        return metadata_field(reader, f"{arch}.{name}", default)

    if "token_embd.weight" not in tensors:
        raise ValueError("GGUF file lacks the tensor 'token_embd.weight'")
    vocab_size = int(tensors["token_embd.weight"].shape[-1])
    tie_word_embeddings = "output.weight" not in tensors
    if spec.config_body is not None:
        body = spec.config_body(key)
    else:
        body = _decoder_config(reader, spec, key, tensors)
    config: dict[str, Any] = {
        "architectures": [spec.hf_architecture],
        "model_type": arch,
        "vocab_size": vocab_size,
        "tie_word_embeddings": tie_word_embeddings,
        "torch_dtype": _torch_dtype(reader),
        **body,
    }
    return {**config, **_special_token_ids(reader)}


def _special_token_ids(reader: GGUFFile) -> dict[str, int]:
    """BOS / EOS / padding token ids the file names."""
    ids = {}
    for gguf_key, hf_key in (
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ):
        value = metadata_field(reader, gguf_key, None)
        if value is not None:
            ids[hf_key] = value
    return ids


def _decoder_config(
    reader: GGUFFile, spec: GGUFArchitecture, key: Callable[..., Any], tensors: dict[str, Any]
) -> dict[str, Any]:
    """The keys of a RoPE decoder with RMSNorm (the Llama-shaped families, their experts),
    then the family's own keys."""
    hidden_size = _uniform(key("embedding_length"), "embedding_length")
    num_heads = _uniform(key("attention.head_count"), "attention.head_count")
    num_kv_heads = _uniform(key("attention.head_count_kv", num_heads), "attention.head_count_kv")
    head_dim = _head_dim(reader, spec, hidden_size, num_heads)
    rope_theta = float(key("rope.freq_base", 10000.0))
    config: dict[str, Any] = {
        "hidden_size": hidden_size,
        "intermediate_size": _uniform(key("feed_forward_length"), "feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
        "rope_theta": rope_theta,
        "max_position_embeddings": key("context_length"),
        "attention_bias": "blk.0.attn_q.bias" in tensors,
    }
    rope_scaling = rope_scaling_config(reader, spec.name, head_dim, rope_theta)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    if spec.config_keys is not None:
        config.update(spec.config_keys(reader, key, config))
    return config


def _uniform(value: Any, name: str) -> int:
    """An integer hyper-parameter; a per-layer array is accepted only if all entries agree."""
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise ValueError(
                f"unsupported per-layer {name} {value}; supported: one value for all layers"
            )
        value = value[0]
    return int(value)


def _head_dim(reader: GGUFFile, spec: GGUFArchitecture, hidden_size: int, num_heads: int) -> int:
    """Attention head size: ``attention.key_length``, else the rotary size, else hidden/heads.

    Keys and values of different sizes are refused, and so is a rotary size smaller than
    the head (partial rotary) outside the architectures that have one (there the head size
    is ``attention.key_length`` or hidden/heads, as llama.cpp reads it).
    """
    arch = spec.name
    key_length = metadata_field(reader, f"{arch}.attention.key_length", None)
    value_length = metadata_field(reader, f"{arch}.attention.value_length", key_length)
    rope_dims = metadata_field(reader, f"{arch}.rope.dimension_count", None)
    if spec.partial_rotary:
        rope_dims = None
    head_dim = key_length or rope_dims or hidden_size // num_heads
    if value_length is not None and value_length != head_dim:
        raise ValueError(
            f"unsupported value head size {value_length}; supported: equal to the key head "
            f"size {head_dim}"
        )
    if rope_dims is not None and rope_dims != head_dim:
        raise ValueError(
            f"unsupported rope.dimension_count {rope_dims}; supported: the full head size "
            f"{head_dim}"
        )
    return int(head_dim)


_FLOAT_DTYPES: dict[GGMLQuantizationType, str] = {
    GGMLQuantizationType.BF16: "bfloat16",
    GGMLQuantizationType.F16: "float16",
    GGMLQuantizationType.F32: "float32",
}


def _torch_dtype(reader: GGUFFile) -> str:
    """The float type the weight matrices were converted in: bfloat16 if any matrix is BF16,
    else float16 if any is F16, else float32 if any is F32, else (all block-quantized)
    float16."""
    matrix_types = {t.tensor_type for t in reader.tensors if len(t.shape) >= 2}
    for qtype, name in _FLOAT_DTYPES.items():
        if qtype in matrix_types:
            return name
    return "float16"
