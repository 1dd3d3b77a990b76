"""Tokenizers for every checkpoint layout the runtime accepts, behind one small class.

`load_tokenizer(path)` is the single entry point: it picks the loader for the layout it
finds (HF `tokenizer.json` for now) and returns a `Tokenizer`.
"""

from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer, load_tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]
