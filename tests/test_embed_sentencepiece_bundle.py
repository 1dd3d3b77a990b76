"""A SentencePiece-style tokenizer ("▁" for spaces, <0xNN> byte fallback) inside an embedding
bundle: bin/vllm-tvm-cli must give the Python engine's greedy ids, and the text HF tokenizers
decodes from them, also where a random model emits byte pieces that are not valid UTF-8."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from tiny_models import CORPUS, TOKENIZER_VOCAB

from vllm_tvm import SamplingParams

PROMPTS = ["Once upon a time", "naïve café 🙂 the fox"]  # the second needs byte fallback


def _sentencepiece_tokenizer_json() -> str:
    """A SentencePiece-style vocabulary of exactly TOKENIZER_VOCAB pieces built from the tiny
    models' corpus: specials, the 256 byte pieces, its characters, then "▁"-word prefixes."""
    from vllm_tvm.runtime.tokenization.sentencepiece_bpe import (
        SPACE_MARK,
        PieceType,
        build_sentencepiece_bpe,
    )

    pieces = ["<s>", "</s>", "<unk>"]
    types = [PieceType.CONTROL, PieceType.CONTROL, PieceType.UNKNOWN]
    pieces += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [PieceType.BYTE] * 256
    words = [SPACE_MARK + word for line in CORPUS for word in line.split()]
    candidates = sorted({char for word in words for char in word})
    candidates += [word[:end] for word in words for end in range(2, len(word) + 1)]
    for piece in dict.fromkeys(candidates):
        if len(pieces) == TOKENIZER_VOCAB:
            break
        pieces.append(piece)
        types.append(PieceType.NORMAL)
    assert len(pieces) == TOKENIZER_VOCAB
    scores = [-float(index) for index in range(len(pieces))]
    return build_sentencepiece_bpe(pieces, scores, types).to_str()


@pytest.fixture(scope="module")
def sentencepiece_model(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama's weights with the SentencePiece-style tokenizer."""
    model = tmp_path_factory.mktemp("sentencepiece") / "llama"
    shutil.copytree(tiny_model_dir("llama"), model)
    (model / "tokenizer.json").write_text(_sentencepiece_tokenizer_json(), encoding="utf-8")
    return model


def test_cli_gives_the_engines_ids_with_a_sentencepiece_tokenizer(sentencepiece_model, tmp_path):
    from vllm_tvm.entrypoints.llm import LLM
    from vllm_tvm.native_bundle.bundle import write_embedding_bundle
    from vllm_tvm.runtime.tokenization.tokenizer import load_tokenizer

    bundle = write_embedding_bundle(tmp_path / "bundle", sentencepiece_model).path
    llm = LLM(sentencepiece_model, device="cpu", show_progress=False)
    tokenizer = load_tokenizer(sentencepiece_model)
    expected = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=24))
    byte_pieces = 0
    for prompt, reference in zip(PROMPTS, expected, strict=True):
        command = [str(bundle / "bin" / "vllm-tvm-cli"), "--prompt", prompt, "--temperature", "0"]
        command += ["--max-tokens", "24", "--json"]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        result = json.loads(done.stdout)
        ids = list(reference.outputs[0].token_ids)
        assert result["token_ids"] == ids
        assert result["text"] == tokenizer.decode(ids)
        byte_pieces += sum(3 <= token < 3 + 256 for token in ids)
    assert tokenizer.encode(PROMPTS[1], add_special_tokens=False).count(3 + 0xF0) == 1
    assert byte_pieces > 0  # the generated ids went through byte fallback decoding too
