"""`vllm-tvm tokenize` prints what the HF tokenizers library gives for the same file."""

from __future__ import annotations

import json

from tokenizers import Tokenizer

from vllm_tvm.cli.main import main as cli_main


def test_tokenize_prints_the_ids_of_each_line(tiny_model_dir, tmp_path, capsys) -> None:
    model = tiny_model_dir("llama")
    corpus = tmp_path / "corpus.txt"
    lines = ["Once upon a time", "Errors should never pass silently.", "0123 (ok) ?!"]
    corpus.write_text("\n".join(lines), encoding="utf-8")
    assert cli_main(["tokenize", str(model), str(corpus), "--per-line", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    oracle = Tokenizer.from_file(str(model / "tokenizer.json"))
    assert printed == [oracle.encode(line).ids for line in lines]


def test_tokenize_names_a_missing_corpus(tiny_model_dir, tmp_path, capsys) -> None:
    missing = tmp_path / "absent.txt"
    assert cli_main(["tokenize", str(tiny_model_dir("llama")), str(missing)]) == 1
    assert str(missing) in capsys.readouterr().err
