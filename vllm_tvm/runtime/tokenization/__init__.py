"""Tokenizers for every checkpoint layout the runtime accepts, behind one small class.

`load_tokenizer(path)` is the single entry point: it picks the loader for the layout it
finds (HF `tokenizer.json`, SentencePiece `tokenizer.model`, `vocab.json` + `merges.txt`,
or a `.gguf` file's vocabulary) and returns a `Tokenizer`. `render_chat_template` renders a
checkpoint's Jinja chat template the way HF transformers does.
"""

from vllm_tvm.runtime.tokenization.chat_template import ChatTemplateError, render_chat_template
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer, load_tokenizer

__all__ = ["ChatTemplateError", "Tokenizer", "load_tokenizer", "render_chat_template"]
