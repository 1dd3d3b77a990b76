"""The benchmark's prompts: random ids of exact length, dataset files read and tokenized
before timing (lengths checked against the HF tokenizers library on the same file)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.benchmarking.config import BenchConfig
from vllm_tvm.benchmarking.workload import build_workload, random_prompt_ids, read_dataset_texts
from vllm_tvm.runtime.tokenization import load_tokenizer

TEXTS = [
    "Once upon a time there was a little compiler that turned models into fast code.",
    "Paged attention keeps keys and values in blocks.",
    "ok",
]


def test_random_prompts_have_exactly_input_len_ids_inside_the_vocabulary() -> None:
    prompts = random_prompt_ids(count=5, input_len=17, vocab_size=300, seed=3)
    assert [len(p) for p in prompts] == [17] * 5
    assert all(0 <= token < 300 for prompt in prompts for token in prompt)


def test_random_prompts_are_reproducible_from_the_seed() -> None:
    assert random_prompt_ids(3, 8, 1000, seed=1) == random_prompt_ids(3, 8, 1000, seed=1)
    assert random_prompt_ids(3, 8, 1000, seed=1) != random_prompt_ids(3, 8, 1000, seed=2)


def test_a_jsonl_dataset_gives_each_lines_prompt_or_text(tmp_path) -> None:
    path = tmp_path / "prompts.jsonl"
    lines = [json.dumps({"prompt": TEXTS[0]}), "", json.dumps({"text": TEXTS[1]})]
    path.write_text("\n".join([*lines, json.dumps(TEXTS[2])]) + "\n")
    assert read_dataset_texts(path) == TEXTS


def test_a_text_dataset_gives_one_prompt_per_non_blank_line(tmp_path) -> None:
    path = tmp_path / "prompts.txt"
    path.write_text(f"{TEXTS[0]}\n\n{TEXTS[1]}\n")
    assert read_dataset_texts(path) == TEXTS[:2]


def test_a_jsonl_line_without_a_prompt_is_refused_with_its_line_number(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "fine"}) + "\n\n" + json.dumps({"question": "x"}))
    with pytest.raises(ValueError, match="line 3 holds no prompt"):
        read_dataset_texts(path)


def test_dataset_prompts_are_tokenized_and_cut_to_input_len(tiny_model_dir, tmp_path) -> None:
    model = tiny_model_dir("llama")
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(TEXTS))
    config = BenchConfig.from_options(model, dataset_path=path, input_len=10)
    workload = build_workload(config, count=4, vocab_size=512, tokenizer=load_tokenizer(model))
    oracle = HFTokenizer.from_file(str(model / "tokenizer.json"))
    expected = [oracle.encode(text).ids[:10] for text in [*TEXTS, TEXTS[0]]]  # cycles
    assert workload.prompts == expected
    assert workload.prompt_lens == [len(ids) for ids in expected]


def test_timed_string_prompts_are_text_of_input_len_tokens(tiny_model_dir) -> None:
    model = tiny_model_dir("llama")
    config = BenchConfig.from_options(model, input_len=24, pretokenize=False)
    workload = build_workload(config, count=6, vocab_size=512, tokenizer=load_tokenizer(model))
    oracle = HFTokenizer.from_file(str(model / "tokenizer.json"))
    assert all(isinstance(prompt, str) for prompt in workload.prompts)
    lengths = [len(oracle.encode(prompt).ids) for prompt in workload.prompts]
    assert workload.prompt_lens == lengths
    assert all(20 <= length <= 24 for length in lengths)


def test_a_workload_that_needs_a_tokenizer_is_refused_without_one(tmp_path) -> None:
    config = BenchConfig.from_options(tmp_path, pretokenize=False)
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        build_workload(config, count=1, vocab_size=512, tokenizer=None)
