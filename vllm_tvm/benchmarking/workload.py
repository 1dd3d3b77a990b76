"""The prompts a benchmark sends, made before any timing starts.

Why it exists: a throughput number is only comparable when the work is the same. Random
prompts are exactly `input_len` ids drawn from a seeded RNG over the whole vocabulary (no
tokenizer needed, so a config.json-only model directory works); dataset prompts are read and
tokenized here, never inside the timed loop. In the timed-string mode (the rollback,
`VLLM_TVM_BENCH_PRETOKENIZE=0`) the prompts are strings instead: random text of
`input_len` tokens, or the dataset's lines, which the engine tokenizes while the clock runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vllm_tvm.benchmarking.config import BenchConfig
from vllm_tvm.runtime.tokenization import Tokenizer

DATASET_TEXT_KEYS = ("prompt", "text")
"""Keys of a JSONL object that hold its prompt, tried in order."""

_TEXT_ROUNDS = 8
"""Batches of random ids decoded at most, looking for enough text for one prompt."""
REPLACEMENT_CHAR = "\ufffd"


@dataclass(frozen=True)
class Workload:
    """Prompts in the order they are sent, and their lengths in tokens.

    `prompts` are token-id lists (pretokenized) or strings (timed-string mode); `prompt_lens`
    are measured with the model's tokenizer either way.
    """

    prompts: list[list[int]] | list[str]
    prompt_lens: list[int]
    source: str
    """`random` or the dataset path."""

    @property
    def max_prompt_len(self) -> int:
        """The longest prompt, in tokens."""
        return max(self.prompt_lens)


def random_prompt_ids(count: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    """`count` prompts of exactly `input_len` ids, uniform over [0, vocab_size)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab_size, size=(count, input_len)).tolist()


def random_text(
    tokenizer: Tokenizer, length: int, vocab_size: int, rng: np.random.Generator
) -> str:
    """Random text that encodes to `length` tokens (or the nearest fewer).

    Decoded random ids do not re-encode to themselves (BPE merges across the joins, stray
    bytes become U+FFFD), so the text of random ids is made first and then cut, by binary
    search over its characters, to the longest prefix of at most `length` tokens. U+FFFD is
    dropped first: it takes several tokens, so a cut next to it would miss by more.
    """
    text = ""
    for _ in range(_TEXT_ROUNDS):
        if len(tokenizer.encode(text)) >= length:
            break
        ids = rng.integers(0, vocab_size, 2 * length).tolist()
        text += tokenizer.decode(ids, skip_special_tokens=True).replace(REPLACEMENT_CHAR, "")
    else:
        raise ValueError(
            f"random ids of this vocabulary decode to too little text for {length} tokens"
        )
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if len(tokenizer.encode(text[:middle])) <= length:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def read_dataset_texts(path: str | Path) -> list[str]:
    """The prompts of a dataset file: JSONL (`.jsonl`: one JSON string, or object with a
    "prompt" or "text" string, per line) or plain text (one prompt per line); blank lines
    are skipped."""
    path = Path(path)
    numbered = [
        (number, line)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip()
    ]
    if path.suffix == ".jsonl":
        texts = [_jsonl_text(path, number, line) for number, line in numbered]
    else:
        texts = [line for _, line in numbered]
    if not texts:
        raise ValueError(f"dataset {path} holds no prompt")
    return texts


def _jsonl_text(path: Path, number: int, line: str) -> str:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} line {number} is not JSON: {err}") from err
    if isinstance(item, dict):
        item = next((item[key] for key in DATASET_TEXT_KEYS if key in item), None)
    if not isinstance(item, str) or not item:
        raise ValueError(
            f"{path} line {number} holds no prompt: expected a JSON string or an object with "
            f"a non-empty string under one of {', '.join(DATASET_TEXT_KEYS)}"
        )
    return item


def build_workload(
    config: BenchConfig, count: int, vocab_size: int, tokenizer: Tokenizer | None
) -> Workload:
    """`count` prompts for `config` (`tokenizer` is needed when `config.needs_tokenizer`)."""
    if config.needs_tokenizer and tokenizer is None:
        raise ValueError(
            "this workload needs the model's tokenizer (a dataset, or timed-string mode), "
            "but none was loaded"
        )
    if config.dataset_path is None:
        if config.pretokenize:
            ids = random_prompt_ids(count, config.input_len, vocab_size, config.seed)
            return Workload(ids, [len(p) for p in ids], "random")
        assert tokenizer is not None
        # Ids the tokenizer can decode (a model's vocabulary may be padded past it).
        vocab = min(vocab_size, tokenizer.vocab_size)
        rng = np.random.default_rng(config.seed)
        texts = [random_text(tokenizer, config.input_len, vocab, rng) for _ in range(count)]
        return Workload(texts, [len(tokenizer.encode(t)) for t in texts], "random")
    assert tokenizer is not None
    source = str(config.dataset_path)
    texts = read_dataset_texts(config.dataset_path)
    chosen = [texts[index % len(texts)] for index in range(count)]
    full = [tokenizer.encode(text) for text in chosen]
    encoded = [ids[: config.input_len] for ids in full]
    if config.pretokenize:
        return Workload(encoded, [len(p) for p in encoded], source)
    # A prompt longer than input_len is sent as the text of its first input_len tokens.
    cut = [
        text if len(ids) <= config.input_len else tokenizer.decode(ids[: config.input_len])
        for text, ids in zip(chosen, full, strict=True)
    ]
    return Workload(cut, [len(tokenizer.encode(text)) for text in cut], source)
