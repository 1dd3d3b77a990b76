"""Live servers for the OpenAI-server tests: one tiny checkpoint with a chat template, one
engine for the whole run, and any number of uvicorn servers over it on 127.0.0.1.

The checkpoint's embedding is padded past its tokenizer (vocab 544 for 512 tokens), so every
test also runs the padded-vocabulary path; its context is long enough (2048) for real tool
templates' system prompts. Servers differ only in their `ServerConfig` (parsers, API key,
...) and share the engine and its structured-output hook, so starting one costs
milliseconds; each runs uvicorn in a thread and is stopped at the end of the session.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import uvicorn
from openai import OpenAI
from tiny_models import TinyModelSpec, make_tiny_model

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.entrypoints.resolve import resolve_artifact
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.async_engine import AsyncEngine
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.runtime.structured_output.logits_hook import GrammarConstraints
from vllm_tvm.server.app import build_app
from vllm_tvm.server.config import ServerConfig
from vllm_tvm.server.connections import uvicorn_options
from vllm_tvm.server.serving import ServingContext

SERVER_MODEL = TinyModelSpec(
    "llama_server", "LlamaConfig", {"max_position_embeddings": 2048, "vocab_size": 544}
)
MODEL_NAME = "tiny-chat"

# ChatML, written out: every message as <|im_start|>role\ncontent<|im_end|>\n.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def make_server_model(path: Path) -> Path:
    """The tiny checkpoint the server tests serve, with a ChatML chat template."""
    make_tiny_model(SERVER_MODEL, path)
    config = {"chat_template": CHATML, "bos_token": "<s>", "eos_token": "</s>"}
    (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


class LiveServer:
    """A uvicorn server for one app, in a thread, on a free loopback port."""

    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(ctx), log_level="warning", lifespan="off", **uvicorn_options(ctx.config)
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        """The server's root URL."""
        return f"http://127.0.0.1:{self.port}"

    def client(self, api_key: str = "unused", **kwargs: Any) -> OpenAI:
        """A real OpenAI client pointed at this server."""
        return OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0, **kwargs)

    def stop(self) -> None:
        """Shut the server down and wait for its thread."""
        self._server.should_exit = True
        self._thread.join(timeout=30)


@contextmanager
def live_server(path: Path, model_name: str, **config: Any) -> Iterator[LiveServer]:
    """A server of its own engine over the checkpoint at `path` (compiled, or found in the
    artifact cache), served as `model_name` with the `ServerConfig` options `config`."""
    artifact = resolve_artifact(CompileOptions(path), show_progress=False)
    args = EngineArgs(model=str(path), artifact=artifact, show_progress=False, seed=0)
    engine = AsyncEngine(LLMEngine.from_args(args))
    server_config = ServerConfig(
        engine=EngineArgs(model=str(path)),
        served_model_name=[model_name],
        enable_log_requests=False,
        **config,
    )
    live = LiveServer(ServingContext(engine, server_config))
    try:
        yield live
    finally:
        live.stop()
        engine.shutdown()


@dataclass
class ServerFarm:
    """One engine and the servers started over it, by configuration."""

    model_dir: Path
    engine: AsyncEngine
    constraints: GrammarConstraints
    servers: dict[str, LiveServer] = field(default_factory=dict)

    def base_config(self) -> ServerConfig:
        return ServerConfig(
            engine=EngineArgs(model=str(self.model_dir)),
            served_model_name=[MODEL_NAME],
            enable_log_requests=False,
        )

    def server(self, **overrides: Any) -> LiveServer:
        """The server for these ServerConfig overrides (started on first use)."""
        key = json.dumps(overrides, sort_keys=True, default=str)
        if key not in self.servers:
            config = replace(self.base_config(), **overrides)
            ctx = ServingContext(self.engine, config, constraints=self.constraints)
            self.servers[key] = LiveServer(ctx)
        return self.servers[key]

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.engine.shutdown()


def start_farm(model_dir: Path, **engine_overrides: Any) -> ServerFarm:
    """Compile (cached) and load the tiny chat checkpoint; an engine with no server yet.
    `engine_overrides` are EngineArgs fields (default: 64 KV blocks)."""
    artifact = resolve_artifact(CompileOptions(model_dir), show_progress=False)
    options = {"num_blocks": 64, "show_progress": False, "seed": 0, **engine_overrides}
    llm = LLMEngine.from_args(EngineArgs(model=str(model_dir), artifact=artifact, **options))
    constraints = GrammarConstraints(llm.tokenizer, llm.runner.vocab_size, llm.eos_token_ids)
    llm.logits_hooks.append(constraints)
    return ServerFarm(model_dir, AsyncEngine(llm), constraints)


def wait_until(condition: Any, timeout: float = 30.0) -> bool:
    """Poll `condition()` until it is true or `timeout` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return bool(value)
        time.sleep(0.02)


def error_body(response: Any, status: int) -> dict:
    """The OpenAI-shaped error object of `response`, after checking its status and code."""
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert error["code"] == status
    return error
