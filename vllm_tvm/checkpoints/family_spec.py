"""What one model family is, as its checkpoints spell it: the record each module under
`checkpoints/families/` fills in.

Why a record: a family used to be spread over the config parser's architecture branches,
the GGUF tables (architectures, tensor names, metadata keys, converter quirks) and the
registry's architecture table, so adding one touched files in four packages. Now each
family states here, once, its HF architecture names, the model definition that runs them,
the `LlamaFamilyConfig` options its HF config implies, and its GGUF architectures; the
config parser, the GGUF reader and the registry read these records (family_index.py) and
name no family. The records live in `checkpoints`, the bottom layer, because the runtime
reads GGUF files too and must not import the model definitions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_tvm.checkpoints.gguf_file import GGUFFile
    from vllm_tvm.checkpoints.gguf_tensor_views import TensorView

SLIDING_ATTENTION = "sliding_attention"
FULL_ATTENTION = "full_attention"


class ModelConfigError(ValueError):
    """A checkpoint config the model definition cannot run exactly."""


ConfigOptions = Callable[[dict[str, Any], float, float | None], dict[str, Any]]
"""(the decoder's HF config, its RoPE base, the sliding layers' RoPE base or None) ->
the `LlamaFamilyConfig` fields the family sets beyond what every llama-shaped config says."""

SlidingRope = Callable[[dict[str, Any]], tuple[dict[str, Any], float | None]]
"""HF config -> (the config with the full-attention layers' RoPE only, the sliding layers'
RoPE base or None)."""

GGUFKey = Callable[..., Any]
"""`key(name, default=MISSING)`: the metadata value `{arch}.{name}` (gguf_config.py)."""

GGUFConfigKeys = Callable[["GGUFFile", GGUFKey, dict[str, Any]], dict[str, Any]]
"""(reader, key, the HF config built so far) -> HF config keys to add or replace."""

GGUFConfigBody = Callable[[GGUFKey], dict[str, Any]]
"""key -> the HF config keys of a family whose metadata is not llama-shaped at all."""

GGUFTensorViews = Callable[[dict[str, Any], "list[str]"], "dict[str, TensorView]"]
"""(the file's HF config, the HF names of its tensors) -> the HF tensors that are read
through a view of others (gguf_tensor_views.py), by HF name."""

LLAMA_GLOBAL_TENSORS: Mapping[str, str] = MappingProxyType(
    {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
)
"""llama.cpp's whole-model tensors and their HF names (every llama-shaped family)."""


@dataclass(frozen=True)
class GGUFArchitecture:
    """One llama.cpp `general.architecture`: its tensor names and what the converter did."""

    name: str
    hf_architecture: str
    """The HF class a file of this architecture becomes (the config keys may replace it)."""
    block_tensors: Mapping[str, str]
    """Per-block tensors (suffix after `blk.N.`) -> HF suffix after the block prefix."""
    global_tensors: Mapping[str, str] = field(default_factory=lambda: LLAMA_GLOBAL_TENSORS)
    block_prefix: str = "model.layers"
    config_tensors: tuple[str, ...] = ()
    """Tensors that hold configuration (RoPE factors), not weights."""
    mtp_blocks_key: str | None = None
    """Metadata key (after `{arch}.`) counting the MTP blocks the converter stores after
    the decoder's; their tensors are not read (no MTP speculation for the family yet)."""
    transposed_tensors: tuple[str, ...] = ()
    """Block tensors stored transposed against their HF layout."""
    permuted_qk: bool = False
    """The converter reordered Q/K rows for llama.cpp's interleaved rotary embedding."""
    norm_weight_offset: float = 0.0
    """The file stores RMSNorm weights as HF's w + offset (Gemma: 1)."""
    offset_free_norms: tuple[str, ...] = ()
    """HF suffixes of norm weights the converter stored as they are despite the offset."""
    partial_rotary: bool = False
    """`rope.dimension_count` may be smaller than the head (the first channels rotate)."""
    config_keys: GGUFConfigKeys | None = None
    """Family keys added to the llama-shaped HF config (after its RoPE scaling)."""
    config_body: GGUFConfigBody | None = None
    """When set, the whole HF config body instead of the llama-shaped one."""
    tensor_views: GGUFTensorViews | None = None
    """HF tensors the converter joined, reordered or re-encoded, read through views."""


@dataclass(frozen=True)
class FamilySpec:
    """A set of HF architectures that one model definition runs with the same options."""

    name: str
    architectures: tuple[str, ...]
    """HF `architectures[0]` names the family serves."""
    definition: str = "llama"
    """Which model definition runs them (model_defs/architectures.py's DEFINITIONS)."""
    config_options: ConfigOptions | None = None
    """Llama-shaped families: the options its HF config implies (None: Llama's numerics)."""
    text_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """The decoder's config of a checkpoint that nests it (a multimodal checkpoint)."""
    sliding_rope: SlidingRope | None = None
    """Families whose sliding layers have a RoPE base of their own."""
    sliding_window_switch: str | None = None
    """A config key that must be true for `sliding_window` to apply (Qwen's
    `use_sliding_window`); None: a `sliding_window` always applies."""
    tensor_parallel: bool = False
    """Whether the tensor-parallel plan can split it (model_defs/tensor_parallel.py)."""
    gguf: tuple[GGUFArchitecture, ...] = ()
    refused: Mapping[str, str] = field(default_factory=dict)
    """HF architectures refused by name -> the missing part (no definition serves them)."""
    refused_gguf: Mapping[str, str] = field(default_factory=dict)
    """GGUF architectures refused by name -> the reason."""
