"""POST /tokenize and /detokenize (vLLM's), and GET /tokenizer_info (vLLM's, registered only
with --enable-tokenizer-info-endpoint, as there).

Why /tokenizer_info: evaluation harnesses (lm-eval's `tokenizer_backend=remote`) tokenize
through the server instead of downloading the tokenizer from a hub, and read the special
tokens and the chat template from this route. Its shape is vLLM's: the checkpoint's
tokenizer_config.json (less its file paths) with `tokenizer_class`, and the chat template
the server renders with; the special tokens are the loaded tokenizer's, as plain strings,
whichever layout (HF directory or GGUF) they came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter

from vllm_tvm.server.errors import APIError
from vllm_tvm.server.protocol import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from vllm_tvm.server.serving import ServingContext, off_loop

FILE_PATH_KEYS = ("vocab_file", "merges_file", "tokenizer_file")
"""tokenizer_config.json keys that name files on the server, left out of /tokenizer_info."""

DEFAULT_TOKENIZER_CLASS = "PreTrainedTokenizerFast"
"""The transformers class of a tokenizer.json tokenizer, when the checkpoint names none."""


def _checkpoint_tokenizer_config(model: Path) -> dict[str, Any]:
    path = model / "tokenizer_config.json"
    if not path.is_file():
        return {}
    config = json.loads(path.read_text(encoding="utf-8"))
    return config if isinstance(config, dict) else {}


def tokenizer_info(ctx: ServingContext) -> dict[str, Any]:
    """The body of /tokenizer_info (see the module docstring)."""
    tokenizer = ctx.tokenizer
    info = {
        key: value
        for key, value in _checkpoint_tokenizer_config(Path(ctx.config.engine.model)).items()
        if key not in FILE_PATH_KEYS and key != "chat_template"
    }
    info.setdefault("tokenizer_class", DEFAULT_TOKENIZER_CLASS)
    info["bos_token"] = tokenizer.bos_token
    info["eos_token"] = tokenizer.eos_token
    info["add_bos_token"] = tokenizer.add_bos_token
    template = ctx.chat_template
    template = tokenizer.named_chat_templates.get(template, template) if template else None
    template = template or tokenizer.chat_template
    if template:
        info["chat_template"] = template
    return info


def _tokenized(
    ctx: ServingContext, body: TokenizeCompletionRequest | TokenizeChatRequest
) -> dict[str, Any]:
    """The answer of /tokenize (run off the event loop)."""
    if isinstance(body, TokenizeChatRequest):
        text = ctx.render_chat(
            body.messages,
            tools=body.tools,
            add_generation_prompt=body.add_generation_prompt,
            continue_final_message=body.continue_final_message,
            chat_template=body.chat_template,
            template_kwargs=ctx.template_kwargs(body.chat_template_kwargs),
        )
    else:
        text = body.prompt
    ids = ctx.encode(text, body.add_special_tokens)
    result: dict[str, Any] = {"count": len(ids), "max_model_len": ctx.max_model_len, "tokens": ids}
    if body.return_token_strs:
        result["token_strs"] = [ctx.tokenizer.id_to_token(i) for i in ids]
    return result


def tokenization_routes(ctx: ServingContext) -> APIRouter:
    """The tokenizer routes over `ctx`."""
    router = APIRouter()

    @router.post("/tokenize")
    async def tokenize(body: TokenizeCompletionRequest | TokenizeChatRequest) -> dict[str, Any]:
        ctx.check_model(body.model)
        return await off_loop(_tokenized, ctx, body)

    @router.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, str]:
        ctx.check_model(body.model)
        bad = [t for t in body.tokens if not 0 <= t < ctx.tokenizer.vocab_size]
        if bad:
            raise APIError(
                f"token ids {bad[:8]} are outside the vocabulary [0, {ctx.tokenizer.vocab_size})",
                param="tokens",
            )
        text = await off_loop(ctx.tokenizer.decode, body.tokens, skip_special_tokens=False)
        return {"prompt": text}

    if ctx.config.enable_tokenizer_info_endpoint:
        info = tokenizer_info(ctx)

        @router.get("/tokenizer_info")
        async def get_tokenizer_info() -> dict[str, Any]:
            return info

    return router
