"""A model family lives in one module: every name is owned once, and a module added to the
list is all that config parsing, GGUF reading and the registry need to serve a new family.

The names are checked against their owners outside the project: each HF architecture must
be a class transformers defines, each GGUF architecture one llama.cpp's gguf package
defines (and a GGUF refusal that says llama.cpp has no such architecture must be true).
"""

from __future__ import annotations

import re
import types
from collections import Counter
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf_synth import SynthTensor, write_gguf

from vllm_tvm.checkpoints import families
from vllm_tvm.checkpoints.families.llama import BLOCK_TENSORS
from vllm_tvm.checkpoints.family_index import gguf_architectures, served_architectures
from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture
from vllm_tvm.checkpoints.gguf_config import check_gguf_supported, hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.model_defs.architectures import (
    DEFINITIONS,
    UnsupportedArchitectureError,
    family_for,
)
from vllm_tvm.model_defs.config import parse_llama_family_config


def _transformers_classes() -> set[str]:
    """Every model class name transformers' auto classes know (read from its name tables,
    without importing the models)."""
    from transformers.models.auto import modeling_auto

    return {
        name
        for table_name, table in vars(modeling_auto).items()
        if table_name.endswith("_MAPPING_NAMES")
        for value in table.values()
        for name in (value if isinstance(value, (list, tuple)) else (value,))
    }


def _owners(names_of: Any) -> Counter[str]:
    """How many family modules name each name (`names_of(spec)` gives a spec's names)."""
    owners: Counter[str] = Counter()
    for module in families.FAMILY_MODULES:
        owners.update({name for spec in module.FAMILIES for name in names_of(spec)})
    return owners


def test_every_served_architecture_is_owned_by_exactly_one_family_module() -> None:
    owners = _owners(lambda spec: spec.architectures)
    assert {name: n for name, n in owners.items() if n != 1} == {}
    assert sorted(owners) == sorted(served_architectures())
    known = _transformers_classes()
    for name in owners:
        assert name in known, f"{name} is no transformers class"
        assert family_for({"architectures": [name]}) is not None


def test_every_family_names_a_model_definition_that_exists() -> None:
    definitions = {
        spec.definition for module in families.FAMILY_MODULES for spec in module.FAMILIES
    }
    assert definitions <= set(DEFINITIONS)


def test_every_gguf_architecture_maps_to_one_family_that_serves_its_hf_class() -> None:
    owners = _owners(lambda spec: [arch.name for arch in spec.gguf])
    assert {name: n for name, n in owners.items() if n != 1} == {}
    llama_cpp_names = set(gguf.MODEL_ARCH_NAMES.values())
    for module in families.FAMILY_MODULES:
        for spec in module.FAMILIES:
            for arch in spec.gguf:
                assert arch.name in llama_cpp_names, arch.name
                assert arch.hf_architecture in spec.architectures, arch.name
            for name in spec.refused_gguf:
                assert name not in owners
    assert "opt" not in llama_cpp_names  # what the refusal of `opt` files says


def test_refused_architectures_are_refused_by_name_with_their_reason() -> None:
    owners = _owners(lambda spec: spec.refused)
    assert {name: n for name, n in owners.items() if n != 1} == {}
    assert not set(owners) & set(served_architectures())
    reasons = {
        name: reason
        for module in families.FAMILY_MODULES
        for spec in module.FAMILIES
        for name, reason in spec.refused.items()
    }
    known = _transformers_classes()
    for name, reason in reasons.items():
        assert name in known, f"{name} is no transformers class"
        with pytest.raises(UnsupportedArchitectureError, match=re.escape(f"{name}: {reason}")):
            family_for({"architectures": [name]})


def test_an_opt_gguf_file_is_refused_with_its_reason(tmp_path: Path) -> None:
    table = np.zeros((8, 32), np.float32)
    path = write_gguf(
        tmp_path / "opt.gguf", "opt", {}, [SynthTensor("token_embd.weight", table, Q.F32)]
    )
    with pytest.raises(ValueError, match=r"'opt': llama\.cpp defines no OPT architecture"):
        check_gguf_supported(path)


FAKE = "FakeForCausalLM"


def _fake_options(config: dict[str, Any], rope_theta: float, local: float | None) -> dict[str, Any]:
    return {"embedding_scale": float(config["fake_scale"]), "qk_norm": True}


def _fake_gguf_keys(reader: Any, key: Any, config: dict[str, Any]) -> dict[str, Any]:
    return {"fake_scale": key("scale")}


_FAKE_MODULE = types.ModuleType("fake_family")
_FAKE_MODULE.FAMILIES = (  # type: ignore[attr-defined]
    FamilySpec(
        name="fake",
        architectures=(FAKE,),
        config_options=_fake_options,
        sliding_window_switch="fake_windowed",
        gguf=(
            GGUFArchitecture(
                "fakearch",
                FAKE,
                {"fake_mix.weight": "mlp.fake_proj.weight", **BLOCK_TENSORS},
                config_keys=_fake_gguf_keys,
            ),
        ),
    ),
)

_FAKE_CONFIG = {
    "architectures": [FAKE],
    "vocab_size": 8,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "sliding_window": 4,
    "fake_scale": 3.0,
}


def test_a_family_module_added_to_the_list_is_served_by_config_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(UnsupportedArchitectureError, match=f"unsupported architecture {FAKE}"):
        family_for(_FAKE_CONFIG)
    monkeypatch.setattr(families, "FAMILY_MODULES", (*families.FAMILY_MODULES, _FAKE_MODULE))
    assert family_for(_FAKE_CONFIG) is DEFINITIONS["llama"]
    parsed = parse_llama_family_config(_FAKE_CONFIG)
    assert (parsed.architecture, parsed.embedding_scale, parsed.qk_norm) == (FAKE, 3.0, True)
    assert parsed.sliding_window is None  # its switch is off
    windowed = parse_llama_family_config({**_FAKE_CONFIG, "fake_windowed": True})
    assert windowed.sliding_window == 4
    assert FAKE in served_architectures()


def test_a_family_module_added_to_the_list_is_served_by_the_gguf_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata = {
        "fakearch.block_count": 1,
        "fakearch.context_length": 64,
        "fakearch.embedding_length": 32,
        "fakearch.feed_forward_length": 64,
        "fakearch.attention.head_count": 2,
        "fakearch.attention.layer_norm_rms_epsilon": 1e-5,
        "fakearch.scale": 2.0,
    }
    tensors = [
        SynthTensor("token_embd.weight", np.zeros((8, 32), np.float32), Q.F32),
        SynthTensor("blk.0.fake_mix.weight", np.ones((4, 32), np.float32), Q.F32),
    ]
    path = write_gguf(tmp_path / "fake.gguf", "fakearch", metadata, tensors)
    with pytest.raises(ValueError, match="unsupported GGUF architecture 'fakearch'"):
        hf_config_from_gguf(path)
    monkeypatch.setattr(families, "FAMILY_MODULES", (*families.FAMILY_MODULES, _FAKE_MODULE))
    assert "fakearch" in gguf_architectures()
    config = hf_config_from_gguf(path)
    assert (config["architectures"], config["fake_scale"]) == ([FAKE], 2.0)
    assert parse_llama_family_config(config).embedding_scale == 2.0
    weights = GGUFWeights(path)
    np.testing.assert_array_equal(weights.get("model.layers.0.mlp.fake_proj.weight"), 1.0)
