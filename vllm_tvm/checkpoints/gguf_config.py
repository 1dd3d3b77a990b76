"""HF-style model configuration from a GGUF file's metadata.

Why this exists: a GGUF file carries its model hyper-parameters as llama.cpp metadata keys
(``llama.block_count``, ``qwen2.attention.head_count`` ...) instead of a ``config.json``. The
rest of vllm-tvm (model definitions, compiler, runtime) speaks HF ``config.json``, so this
module translates one into the other, and it is also the gatekeeper: a file whose
architecture, quantization types or tensor names we cannot serve is refused here, from
metadata and tensor infos alone, before anything is compiled or any weight is read.

It also owns the GGUF -> HF tensor-name table, because deciding whether a file is supported
needs it as much as the weight reader does.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

GGUFSource = str | os.PathLike[str] | GGUFReader

SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}

SUPPORTED_QUANT_TYPES: tuple[GGMLQuantizationType, ...] = (
    GGMLQuantizationType.F32,
    GGMLQuantizationType.F16,
    GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q5_K,
    GGMLQuantizationType.Q6_K,
)

# The tensor that llama.cpp's converter writes for Llama 3.x "llama3" rope scaling: one
# divisor per rotary frequency. It is folded into ``rope_scaling`` and is not a model weight.
ROPE_FREQS_TENSOR = "rope_freqs.weight"

_GLOBAL_TENSORS: dict[str, str] = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

_BLOCK_TENSORS: dict[str, str] = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

_QKV_BIAS: dict[str, str] = {
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
}

# Per architecture, the per-block tensors it may hold (suffix after ``blk.N.``).
_ARCH_BLOCK_TENSORS: dict[str, dict[str, str]] = {
    "llama": {**_BLOCK_TENSORS, **_QKV_BIAS, "attn_output.bias": "self_attn.o_proj.bias"},
    "qwen2": {**_BLOCK_TENSORS, **_QKV_BIAS},
    "qwen3": {
        **_BLOCK_TENSORS,
        "attn_q_norm.weight": "self_attn.q_norm.weight",
        "attn_k_norm.weight": "self_attn.k_norm.weight",
    },
}


class _Missing:
    """Sentinel type: a metadata key with no default must be present."""


_MISSING: Any = _Missing()


_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(.+)")

_ROPE_SCALING_TYPES = ("none", "linear", "yarn")


def open_gguf(source: GGUFSource) -> GGUFReader:
    """Return a ``GGUFReader`` for ``source`` (a path), or ``source`` itself if it is one.

    Opening parses every metadata field (tokenizer vocabularies included), which takes
    seconds for real models, so callers that need both the config and the weights should
    open once and pass the reader to both.
    """
    if isinstance(source, GGUFReader):
        return source
    return GGUFReader(source, "r")


def architecture_of(reader: GGUFReader) -> str:
    """The file's ``general.architecture``, refused unless it is one we support."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return arch


def hf_tensor_name(gguf_name: str, arch: str) -> str:
    """Map one GGUF tensor name of architecture ``arch`` to its HF transformers name.

    Raises ``ValueError`` naming the tensor when the architecture has no such tensor.
    """
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    match = _BLOCK_NAME.fullmatch(gguf_name)
    block_tensors = _ARCH_BLOCK_TENSORS[arch]
    if match is None or match.group(2) not in block_tensors:
        allowed = [*_GLOBAL_TENSORS, *(f"blk.N.{s}" for s in block_tensors)]
        raise ValueError(
            f"unsupported GGUF tensor {gguf_name!r} for architecture {arch!r}; "
            f"supported: {', '.join(allowed)}"
        )
    return f"model.layers.{int(match.group(1))}.{block_tensors[match.group(2)]}"


def check_gguf_supported(source: GGUFSource) -> GGUFReader:
    """Refuse a GGUF file we cannot serve, using only its metadata and tensor infos.

    Checks, in order: not a split file, a supported ``general.architecture``, every tensor
    stored in a supported quantization type, and every tensor name known for the
    architecture. No tensor data is touched. Returns the opened reader for reuse.
    """
    reader = open_gguf(source)
    split_count = _field(reader, "split.count", 1)
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
        if tensor.name == ROPE_FREQS_TENSOR and arch == "llama":
            continue
        hf_tensor_name(tensor.name, arch)
    return reader


def gguf_tensor_types(source: GGUFSource) -> dict[str, str]:
    """ggml type name (``Q4_1``, ``F32`` ...) of every weight tensor, by HF tensor name.

    Reads tensor infos only (``rope_freqs.weight``, not a weight, is left out).
    """
    reader = open_gguf(source)
    arch = architecture_of(reader)
    return {
        hf_tensor_name(t.name, arch): GGMLQuantizationType(t.tensor_type).name
        for t in reader.tensors
        if t.name != ROPE_FREQS_TENSOR
    }


def hf_config_from_gguf(source: GGUFSource) -> dict[str, Any]:
    """Build an HF ``config.json`` dict for a GGUF checkpoint (after ``check_gguf_supported``).

    Float32 metadata values (epsilon, rope base, scaling factor) are given as the shortest
    decimal that round-trips through float32, i.e. the value the original config.json had.
    ``torch_dtype`` is the float type of the file's weight matrices (``float16`` when they
    are all block-quantized: ggml's block scales are float16). The only tensor data read
    is the small ``rope_freqs.weight`` of Llama 3.x files.
    """
    reader = check_gguf_supported(source)
    arch = architecture_of(reader)
    tensors = {t.name: t for t in reader.tensors}

    def key(name: str, default: Any = _MISSING) -> Any:
        return _field(reader, f"{arch}.{name}", default)

    hidden_size = _uniform(key("embedding_length"), "embedding_length")
    num_heads = _uniform(key("attention.head_count"), "attention.head_count")
    num_kv_heads = _uniform(key("attention.head_count_kv", num_heads), "attention.head_count_kv")
    head_dim = _head_dim(reader, arch, hidden_size, num_heads)
    rope_theta = float(key("rope.freq_base", 10000.0))
    if "token_embd.weight" not in tensors:
        raise ValueError("GGUF file lacks the tensor 'token_embd.weight'")
    vocab_size = int(tensors["token_embd.weight"].shape[-1])

    config: dict[str, Any] = {
        "architectures": [SUPPORTED_ARCHITECTURES[arch]],
        "model_type": arch,
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
        "vocab_size": vocab_size,
        "tie_word_embeddings": "output.weight" not in tensors,
        "attention_bias": "blk.0.attn_q.bias" in tensors,
        "torch_dtype": _torch_dtype(reader),
    }
    rope_scaling = _rope_scaling(reader, arch, head_dim, rope_theta)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    for gguf_key, hf_key in (
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ):
        value = _field(reader, gguf_key, None)
        if value is not None:
            config[hf_key] = value
    return config


def _field(reader: GGUFReader, name: str, default: Any = _MISSING) -> Any:
    """The decoded value of metadata key ``name`` (``default`` when absent, if given)."""
    field = reader.get_field(name)
    if field is None:
        if isinstance(default, _Missing):
            raise ValueError(f"GGUF file lacks the metadata key {name!r}")
        return default
    value = field.contents()
    if field.types and field.types[0] == GGUFValueType.FLOAT32:
        return _f32(value)
    return value


def _f32(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as ``value`` (1e-05, not 9.99e-06)."""
    return float(np.format_float_scientific(np.float32(value), unique=True))


def _uniform(value: Any, name: str) -> int:
    """An integer hyper-parameter; a per-layer array is accepted only if all entries agree."""
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise ValueError(
                f"unsupported per-layer {name} {value}; supported: one value for all layers"
            )
        value = value[0]
    return int(value)


def _head_dim(reader: GGUFReader, arch: str, hidden_size: int, num_heads: int) -> int:
    """Attention head size: ``attention.key_length``, else the rotary size, else hidden/heads.

    The model definitions rotate the whole head, so a rotary size smaller than the head
    (partial rotary) or keys and values of different sizes are refused.
    """
    key_length = _field(reader, f"{arch}.attention.key_length", None)
    value_length = _field(reader, f"{arch}.attention.value_length", key_length)
    rope_dims = _field(reader, f"{arch}.rope.dimension_count", None)
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


def _torch_dtype(reader: GGUFReader) -> str:
    """The float type the weight matrices were converted in: bfloat16 if any matrix is BF16,
    else float16 if any is F16, else float32 if any is F32, else (all block-quantized)
    float16."""
    matrix_types = {t.tensor_type for t in reader.tensors if len(t.shape) >= 2}
    for qtype, name in _FLOAT_DTYPES.items():
        if qtype in matrix_types:
            return name
    return "float16"


def _rope_scaling(
    reader: GGUFReader, arch: str, head_dim: int, rope_theta: float
) -> dict[str, Any] | None:
    """HF ``rope_scaling`` from ``{arch}.rope.scaling.*`` keys or a ``rope_freqs`` tensor."""
    prefix = f"{arch}.rope.scaling."
    scaling_type = _field(reader, prefix + "type", "none")
    rope_freqs = next((t for t in reader.tensors if t.name == ROPE_FREQS_TENSOR), None)
    if rope_freqs is not None:
        if scaling_type != "none":
            raise ValueError(
                f"unsupported rope scaling: both {prefix}type {scaling_type!r} and a "
                f"{ROPE_FREQS_TENSOR} tensor; supported: one of them"
            )
        return _llama3_rope_scaling(np.asarray(rope_freqs.data, np.float64), head_dim, rope_theta)
    if scaling_type not in _ROPE_SCALING_TYPES:
        raise ValueError(
            f"unsupported rope scaling type {scaling_type!r}; "
            f"supported: {', '.join(_ROPE_SCALING_TYPES)}, llama3 ({ROPE_FREQS_TENSOR})"
        )
    if scaling_type == "none":
        return None
    # llama.cpp's attention-scale knobs have no HF yarn/linear counterpart with the same
    # meaning; refuse rather than silently change the model.
    for knob in ("attn_factor", "yarn_log_multiplier", "yarn_ext_factor", "yarn_attn_factor"):
        if _field(reader, prefix + knob, None) is not None:
            raise ValueError(
                f"unsupported GGUF key {prefix + knob!r}; supported rope scaling keys: "
                f"{prefix}type, factor, original_context_length, yarn_beta_fast, yarn_beta_slow"
            )
    scaling: dict[str, Any] = {
        "rope_type": scaling_type,
        "factor": _field(reader, prefix + "factor"),
    }
    if scaling_type == "yarn":
        scaling["original_max_position_embeddings"] = _field(
            reader, prefix + "original_context_length"
        )
        for knob in ("beta_fast", "beta_slow"):
            value = _field(reader, f"{prefix}yarn_{knob}", None)
            if value is not None:
                scaling[knob] = value
    return scaling


def _llama3_frequency_divisors(
    inv_freq: np.ndarray, factor: float, low: float, high: float, context: float
) -> np.ndarray:
    """Per-frequency divisors of Llama 3 rope scaling (the same rule HF and llama.cpp use)."""
    wavelen = 2 * math.pi / inv_freq
    smooth = (context / wavelen - low) / (high - low)
    medium = 1.0 / ((1.0 - smooth) / factor + smooth)
    divisors = np.where(wavelen < context / high, 1.0, medium)
    return np.where(wavelen > context / low, factor, divisors)


def _llama3_rope_scaling(
    divisors: np.ndarray, head_dim: int, rope_theta: float
) -> dict[str, Any] | None:
    """Recover HF ``llama3`` rope parameters from llama.cpp's per-frequency divisors.

    The divisors are 1 for high frequencies, ``factor`` for low ones and, in between,
    ``1 / ((1 - s) / factor + s)`` with ``s`` linear in the frequency. That line fixes
    ``original_max_position_embeddings / (high - low)`` and ``low / (high - low)`` only, so
    ``low_freq_factor`` is pinned to 1 (its value in every Llama 3.x release) and the other
    two solved for; every solution yields the same rotary frequencies. The recovered
    parameters are checked by recomputing the divisors.
    """
    inv_freq = rope_theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if divisors.shape != inv_freq.shape:
        raise ValueError(
            f"unsupported {ROPE_FREQS_TENSOR} of {divisors.size} values; supported: "
            f"head_dim / 2 = {inv_freq.size} values"
        )
    if np.allclose(divisors, 1.0):
        return None
    factor = float(divisors.max())
    medium = (divisors > 1.0 + 1e-6) & (divisors < factor * (1.0 - 1e-6))
    if medium.sum() < 2:
        raise ValueError(
            f"unsupported {ROPE_FREQS_TENSOR} {divisors.tolist()}; supported: llama3 rope "
            "scaling with at least two smoothed frequencies"
        )
    smooth = (1.0 / divisors[medium] - 1.0 / factor) / (1.0 - 1.0 / factor)
    slope, intercept = np.polyfit(inv_freq[medium] / (2 * math.pi), smooth, 1)
    high = 1.0 - 1.0 / intercept
    context = round(float(slope * (high - 1.0)))
    scaling = {
        "rope_type": "llama3",
        "factor": _f32(factor),
        "low_freq_factor": 1.0,
        "high_freq_factor": round(float(high), 4),
        "original_max_position_embeddings": context,
    }
    recomputed = _llama3_frequency_divisors(
        inv_freq, scaling["factor"], 1.0, scaling["high_freq_factor"], context
    )
    if not np.allclose(recomputed, divisors, rtol=1e-4):
        raise ValueError(
            f"unsupported {ROPE_FREQS_TENSOR} {divisors.tolist()}; supported: llama3 rope "
            "scaling divisors"
        )
    return scaling
