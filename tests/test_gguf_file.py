"""checkpoints/gguf_file.py: the fast GGUF header reader sees what `gguf.GGUFReader` sees, and
one process parses a file's header once, whoever asks (config, weights, tokenizer metadata).

Oracle: the `gguf` package's own reader, over a random Llama-layout file of
benchmarks/peers/write_random_gguf.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from vllm_tvm.checkpoints import gguf_file
from vllm_tvm.checkpoints.default_model import DefaultModelMissingError, default_model_path
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.checkpoints.model_config import read_gguf_tensor_types, read_model_config
from vllm_tvm.runtime.tokenization import load_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

from llama31_8b import tiny_shape
from write_random_gguf import write_random_gguf


@pytest.fixture()
def tiny_gguf(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    write_random_gguf(path, tiny_shape(), seed=0)
    return path


def test_tensors_match_the_gguf_package_reader(tiny_gguf: Path) -> None:
    theirs = {t.name: t for t in gguf.GGUFReader(tiny_gguf).tensors}
    ours = {t.name: t for t in gguf_file.open_gguf(tiny_gguf).tensors}
    assert list(ours) == list(theirs)
    for name, tensor in ours.items():
        assert tensor.tensor_type == theirs[name].tensor_type, name
        assert tensor.shape == tuple(int(d) for d in theirs[name].shape), name
        assert tensor.data.dtype == theirs[name].data.dtype, name
        np.testing.assert_array_equal(tensor.data, theirs[name].data, err_msg=name)


def test_config_weights_and_tokenizer_metadata_share_one_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        model = default_model_path()
    except DefaultModelMissingError as err:
        pytest.skip(str(err))

    parses: list[str] = []
    real_parse = gguf_file._parse

    def counting_parse(data: np.ndarray, name: str) -> gguf_file.GGUFFile:
        parses.append(name)
        return real_parse(data, name)

    monkeypatch.setattr(gguf_file, "_parse", counting_parse)
    gguf_file._open_gguf.cache_clear()
    read_model_config(model)
    read_gguf_tensor_types(model)
    GGUFWeights(model)
    load_tokenizer(model)
    assert len(parses) == 1

    modified = tmp_path / "modified.gguf"
    modified.write_bytes(model.read_bytes())
    read_model_config(modified)
    os.utime(modified, ns=(0, 0))  # a changed file is parsed again
    read_model_config(modified)
    assert len(parses) == 3


def test_an_empty_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(gguf_file.GGUFFormatError, match=r"empty\.gguf is not a GGUF file"):
        gguf_file.open_gguf(path)
