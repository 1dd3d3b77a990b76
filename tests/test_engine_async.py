"""The async engine: concurrent streams equal batch generation, and aborts end streams and
free blocks."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from engine_helpers import GREEDY, prompts_of_lengths, token_ids

from vllm_tvm.runtime.engine.async_engine import AsyncEngine
from vllm_tvm.runtime.engine.intake import PromptTooLongError
from vllm_tvm.runtime.sampling.params import SamplingParams

LONG = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)


async def _collect(engine: AsyncEngine, prompt: list[int], params: SamplingParams) -> list[int]:
    tokens: list[int] = []
    async for output in engine.generate(prompt, params):
        tokens.extend(output.outputs[0].token_ids)
    return tokens


async def _until_idle(engine: AsyncEngine) -> None:
    """Let the loop thread run every posted command and hand out pending outputs."""
    while await engine.has_unfinished():
        await asyncio.sleep(0.01)


@contextlib.contextmanager
def _async_engine(llm):
    engine = AsyncEngine(llm.engine)
    try:
        yield engine
    finally:
        engine.shutdown()


def test_concurrent_streams_equal_batch_generation(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [11, 25, 6])
    expected = token_ids(llm.generate(prompts, GREEDY))

    async def run(engine: AsyncEngine) -> list[list[int]]:
        return list(await asyncio.gather(*(_collect(engine, p, GREEDY) for p in prompts)))

    with _async_engine(llm) as engine:
        assert asyncio.run(run(engine)) == expected


def test_abort_ends_the_stream_with_abort_and_frees_blocks(make_llm) -> None:
    llm = make_llm()
    prompt = prompts_of_lengths(llm, [12])[0]

    async def run(engine: AsyncEngine) -> str | None:
        last = None
        async for output in engine.generate(prompt, LONG, request_id="victim"):
            if last is None:
                await engine.abort("victim")
            last = output
        await _until_idle(engine)
        return last.outputs[0].finish_reason if last else None

    with _async_engine(llm) as engine:
        assert asyncio.run(run(engine)) == "abort"


def test_leaving_a_stream_early_aborts_its_request(make_llm) -> None:
    llm = make_llm()
    prompt = prompts_of_lengths(llm, [12])[0]

    async def run(engine: AsyncEngine) -> int:
        async with contextlib.aclosing(engine.generate(prompt, LONG)) as stream:
            async for _ in stream:
                break
        await _until_idle(engine)
        return llm.engine.block_manager.num_used_blocks

    with _async_engine(llm) as engine:
        assert asyncio.run(run(engine)) == 0


def test_too_long_prompt_raises_in_the_caller(make_llm) -> None:
    llm = make_llm(max_model_len=16)
    prompt = prompts_of_lengths(llm, [20])[0]

    async def run(engine: AsyncEngine) -> None:
        async for _ in engine.generate(prompt, GREEDY):
            pass

    with _async_engine(llm) as engine, pytest.raises(PromptTooLongError, match="length 20"):
        asyncio.run(run(engine))
