"""Weights of a GGUF checkpoint, by HF tensor name and in HF layout.

Why this exists: the runtime and compiler consume weights the way a transformers checkpoint
holds them (``model.layers.N.self_attn.q_proj.weight``, ``[out, in]``). A GGUF file stores
them under llama.cpp names, in ggml's reversed shape order, block-quantized, and, for some
architectures (`permuted_qk` in their family module), with the rows of Q and K reordered by
llama.cpp's converter for its interleaved rotary embedding. This class hides all of that: it
maps names, dequantizes one tensor at a time on demand with the ``gguf`` package (straight
from the file's memory map, never copying the file) and puts Q/K rows back in HF order. An
expert model's stacked expert tensor is offered as one HF tensor per expert (each a slice of
the stack), and DeepSeek's `kv_b_proj`, which llama.cpp splits in two, is joined back
(gguf_expert_tensors.py). ``raw`` exposes the still quantized blocks (rows in HF order too)
for kernels that dequantize on the fly. Norm weights that the converter offset (Gemma's:
llama.cpp adds 1) come back as HF stores them, and transposed weights (GPT-2's ``Conv1D``)
in HF's layout. Tensors the converter joined, reordered or re-encoded (the Gated DeltaNet
layers of `qwen3next` / `qwen35`) are read through their family's views
(gguf_tensor_views.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from vllm_tvm.checkpoints.gguf_config import hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_expert_tensors import ROW_VECTORS, join_kv_b, kv_b_part_shape
from vllm_tvm.checkpoints.gguf_file import GGUFFile, GGUFTensor
from vllm_tvm.checkpoints.gguf_reader import GGUFSource, open_gguf
from vllm_tvm.checkpoints.gguf_tensor_names import (
    TensorSlot,
    architecture_of,
    gguf_architecture,
    hf_tensor_index,
    hf_tensor_name,
    is_transposed,
)
from vllm_tvm.checkpoints.gguf_tensor_views import TensorView, stored_as_one


@dataclass(frozen=True)
class RawTensor:
    """A tensor exactly as stored, rows in HF order.

    ``data`` is uint8 of shape ``shape[:-1] + (bytes per row,)``: each row holds the ggml
    blocks (or plain F32/F16/BF16 values) of one HF row. ``shape`` is the logical HF shape.
    """

    data: npt.NDArray[np.uint8]
    quant_type: GGMLQuantizationType
    shape: tuple[int, ...]


class GGUFWeights:
    """Read-only, lazily dequantizing view of a supported GGUF file's weights.

    Construction refuses unsupported files (see ``check_gguf_supported``) without reading
    tensor data. ``config`` is the file's HF config dict. With tied embeddings the file has
    no ``lm_head.weight`` and neither does ``names()``, exactly like an HF checkpoint.
    """

    def __init__(self, source: GGUFSource) -> None:
        """Open ``source`` (a path or an already opened ``GGUFFile``)."""
        reader = open_gguf(source)
        self.path: Path | None = None if isinstance(source, GGUFFile) else Path(source)
        self.config: dict[str, Any] = hf_config_from_gguf(reader)
        arch = architecture_of(reader)
        self._tensors: dict[str, TensorSlot] = hf_tensor_index(reader, arch)
        self._transposed = {
            hf_tensor_name(t.name, arch) for t in reader.tensors if is_transposed(t.name, arch)
        }
        spec = gguf_architecture(arch)
        self._norm_offset = spec.norm_weight_offset
        self._offset_free_norms = spec.offset_free_norms
        self._views: dict[str, TensorView] = {}
        if spec.tensor_views is not None:
            self._views = spec.tensor_views(self.config, list(self._tensors))
        self._viewed = {part for view in self._views.values() for part in view.parts}
        self._heads: dict[str, int] = {}
        if spec.permuted_qk:
            self._heads = {
                "q_proj": self.config["num_attention_heads"],
                "k_proj": self.config["num_key_value_heads"],
            }

    def names(self) -> list[str]:
        """HF names of all tensors in the file, in file order (those read through a view
        last)."""
        return [name for name in self._tensors if name not in self._viewed] + list(self._views)

    def shape(self, name: str) -> tuple[int, ...]:
        """Logical HF shape of tensor ``name`` (``[out, in]`` for linear weights)."""
        view = self._views.get(name)
        if view is not None:
            return view.hf_shape([self._file_shape(part) for part in view.parts])
        return self._file_shape(name)

    def _file_shape(self, name: str) -> tuple[int, ...]:
        """Logical HF shape of index tensor ``name``, before any view."""
        stored = self._stored_shape(name)
        return tuple(reversed(stored)) if name in self._transposed else stored

    def _stored_shape(self, name: str) -> tuple[int, ...]:
        """Shape of tensor ``name`` as the file holds it, in row-major (torch) order."""
        slot = self._tensor(name)
        if slot.value_half is not None:
            return kv_b_part_shape(_hf_shape(slot.tensor), _hf_shape(slot.value_half))
        shape = _hf_shape(slot.tensor)
        if len(shape) == 1 and name.endswith(ROW_VECTORS):
            return (1, *shape)
        return shape if slot.expert is None else shape[1:]

    def quant_type(self, name: str) -> GGMLQuantizationType:
        """The ggml type tensor ``name`` is stored in (reads no tensor data); a joined
        `kv_b_proj`, and a view whose parts differ in type or whose reordering splits
        blocks, count as F32: they exist only dequantized."""
        view = self._views.get(name)
        if view is None:
            return self._tensor(name).quant_type
        stored = stored_as_one([self._tensor(part).quant_type for part in view.parts])
        if stored is None or view.block_columns(stored) is None:
            return GGMLQuantizationType.F32
        return stored

    def get(self, name: str, dtype: npt.DTypeLike = "float32") -> np.ndarray:
        """Tensor ``name`` dequantized to ``dtype``, in HF layout, as a fresh array."""
        view = self._views.get(name)
        if view is not None:
            values = view.values([self._file_values(part) for part in view.parts])
            return np.array(values, dtype=dtype)
        return np.array(self._file_values(name), dtype=dtype)

    def _file_values(self, name: str) -> np.ndarray:
        """Index tensor ``name`` dequantized (float32), in HF layout, before any view."""
        slot = self._tensor(name)
        if slot.value_half is not None:
            return join_kv_b(_dequantized(slot.tensor), _dequantized(slot.value_half))
        data = slot.tensor.data if slot.expert is None else slot.tensor.data[slot.expert]
        values = dequantize(data, slot.tensor.tensor_type).reshape(self._stored_shape(name))
        if name in self._transposed:
            values = values.T
        order = self._hf_row_order(name)
        if order is not None:
            values = values[order]
        offset_free = name.endswith(self._offset_free_norms)
        if self._norm_offset and name.endswith("norm.weight") and not offset_free:
            values = values - np.float32(self._norm_offset)
        return values

    def raw(self, name: str) -> RawTensor:
        """Tensor ``name`` still quantized: its block bytes, quant type and HF shape.

        Without a row reordering this is a view of the file's memory map; permuted Q/K
        weights (``llama`` and ``granite`` files) are gathered into HF row order (a copy of
        that tensor only). A tensor stored transposed against HF (GPT-2's ``Conv1D``) has no
        block rows in HF order and is refused: it is read dequantized (``get``). A joined
        `kv_b_proj` has no blocks of its own either, nor has a view that exists only
        dequantized (``quant_type`` F32 over other types): ``ValueError``.
        """
        view = self._views.get(name)
        if view is None:
            return self._file_raw(name)
        quant_type = self.quant_type(name)
        parts = [self._file_raw(part) for part in view.parts]
        segment_bytes = view.block_columns(quant_type)
        if segment_bytes is None or any(p.quant_type != quant_type for p in parts):
            raise ValueError(f"{name} is rearranged across ggml blocks; it is read dequantized")
        data = view.blocks([p.data for p in parts], segment_bytes)
        return RawTensor(data, quant_type, self.shape(name))

    def _file_raw(self, name: str) -> RawTensor:
        """Index tensor ``name`` still quantized, before any view."""
        if name in self._transposed:
            raise ValueError(
                f"{name} is stored transposed against its HF layout; its blocks cannot be "
                "kept quantized (it is read dequantized)"
            )
        slot = self._tensor(name)
        if slot.value_half is not None:
            raise ValueError(f"{name} is joined from two GGUF tensors and has no blocks")
        tensor = slot.tensor
        shape = self._file_shape(name)
        data = tensor.data if slot.expert is None else tensor.data[slot.expert]
        data = data.view(np.uint8)
        data = data.reshape(*shape[:-1], data.size // max(1, int(np.prod(shape[:-1]))))
        order = self._hf_row_order(name)
        if order is not None:
            data = data[order]
        return RawTensor(data, GGMLQuantizationType(tensor.tensor_type), shape)

    def _tensor(self, name: str) -> TensorSlot:
        """Where HF tensor ``name`` lives; ``KeyError`` listing what exists."""
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(
                f"no tensor {name!r} in this GGUF file; it has: {', '.join(self._tensors)}"
            ) from None

    def _hf_row_order(self, name: str) -> np.ndarray | None:
        """Row gather indices undoing llama.cpp's Q/K permutation, or None if not permuted.

        The converter stores, per head, the rotary pairs interleaved (row ``2j + t`` holds HF
        row ``t * head_dim / 2 + j``); the inverse regroups each head's halves.
        """
        parts = name.split(".")
        if len(parts) < 2 or parts[-2] not in self._heads:
            return None
        heads = self._heads[parts[-2]]
        rows = self._file_shape(name)[0]
        half = rows // heads // 2
        return np.arange(rows).reshape(heads, half, 2).transpose(0, 2, 1).reshape(rows)


def _hf_shape(tensor: GGUFTensor) -> tuple[int, ...]:
    """A GGUF tensor's shape in HF (numpy) order."""
    return tuple(int(d) for d in reversed(tensor.shape))


def _dequantized(tensor: GGUFTensor) -> np.ndarray:
    """A whole GGUF tensor as float32, in HF (numpy) order."""
    return dequantize(tensor.data, tensor.tensor_type).reshape(_hf_shape(tensor))
