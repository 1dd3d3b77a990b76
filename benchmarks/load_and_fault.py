"""Load and faults against a real `vllm-tvm serve` on loopback: many concurrent streams, random
client disconnects, hostile bodies, then one SIGTERM with streams still running.

Why it exists: each fault has its own test; this runs them together, at a concurrency the
tests do not reach, and reports what a user would check: no 5xx, every stream that was not
dropped by its client ended with a finish_reason and `[DONE]`, the KV cache back to 0 % once
the load is over, the worst gap between two tokens of any stream, and how long the process
took from SIGTERM to its exit. Bounded (every phase has a timeout) and loopback only.

    python benchmarks/load_and_fault.py                  # 256 streams, the default model
    python benchmarks/load_and_fault.py --streams 32 --output /tmp/lf.json

Exit status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx2 as httpx

HOST = "127.0.0.1"
KV_USAGE = re.compile(r"^vllm:kv_cache_usage_perc(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.MULTILINE)
PREEMPTIONS = re.compile(r"^vllm:num_preemptions(?:_total)?(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)


@dataclass
class StreamResult:
    """One streamed chat completion as the client saw it."""

    status: int = 0
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    done: bool = False
    dropped: bool = False
    error: str | None = None

    @property
    def worst_gap(self) -> float:
        """The longest wait between two consecutive tokens, seconds."""
        times = self.token_times
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    @property
    def unfinished(self) -> bool:
        """Served (200) and not dropped by the client, yet no final event and [DONE]."""
        return self.status == 200 and not self.dropped and not (self.finish_reason and self.done)


def hostile_bodies(body_limit: int) -> list[tuple[str, bytes]]:
    """(name, raw body) pairs a server must refuse with a 4xx (or serve), never a 5xx; the
    last, a 2,000-token prompt, is served while the streams run (their gaps show its cost)."""
    chat = [{"role": "user", "content": "Hello"}]

    def encoded(body: dict[str, Any]) -> bytes:
        return json.dumps(body).encode()  # non-ASCII escaped: lone surrogates travel

    return [
        ("top_k 2**63", encoded({"messages": chat, "top_k": 2**63, "max_tokens": 2})),
        ("max_tokens 0", encoded({"messages": chat, "max_tokens": 0})),
        ("temperature string", encoded({"messages": chat, "temperature": "hot"})),
        ("n 10**6", encoded({"messages": chat, "n": 10**6})),
        ("lone surrogate", encoded({"messages": [{"role": "user", "content": "\ud800"}]})),
        ("non-UTF-8 bytes", b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}'),
        ("request template", encoded({"messages": chat, "chat_template": "{{ 1/0 }}"})),
        ("logit_bias 10**6 keys", encoded({"messages": chat, "logit_bias": dict.fromkeys(
            map(str, range(10**6)), 1.0)})),
        ("body over the limit", b'{"messages": [], "pad": "' + b"x" * (body_limit + 1) + b'"}'),
        ("not JSON", b"{" * 10_000),
        ("long prompt", encoded({"messages": [{"role": "user", "content": "word " * 2000}],
            "max_tokens": 2})),
    ]  # fmt: skip


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    max_tokens: int,
    drop_after: int | None,
    result: StreamResult | None = None,
) -> StreamResult:
    """Stream one chat completion into `result` (a new one when None); with `drop_after`,
    close the connection after that many tokens, as a client that goes away does."""
    result = result if result is not None else StreamResult()
    body = {
        "messages": [{"role": "user", "content": f"Count to {random.randint(3, 99)}."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as reply:
            result.status = reply.status_code
            async for line in reply.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    result.done = True
                    continue
                for choice in json.loads(line[6:]).get("choices", []):
                    if choice.get("delta", {}).get("content"):
                        result.token_times.append(time.perf_counter())
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
                if drop_after is not None and len(result.token_times) >= drop_after:
                    result.dropped = True
                    return result
    except (httpx.HTTPError, ValueError) as err:
        result.error = f"{type(err).__name__}: {err}"
    return result


async def post_raw(client: httpx.AsyncClient, url: str, body: bytes) -> int | str:
    """The status of one raw POST to the chat route, or how the connection failed (a server
    that refuses a body by its Content-Length answers and closes while it is being sent)."""
    headers = {"content-type": "application/json"}
    try:
        reply = await client.post(url + "/v1/chat/completions", content=body, headers=headers)
    except httpx.HTTPError as err:
        return f"connection closed while sending ({type(err).__name__})"
    return reply.status_code


async def metric(client: httpx.AsyncClient, url: str, pattern: re.Pattern[str]) -> float | None:
    """One value from the server's /metrics."""
    match = pattern.search((await client.get(url + "/metrics")).text)
    return float(match.group(1)) if match else None


async def kv_usage(client: httpx.AsyncClient, url: str) -> float | None:
    """The server's KV cache usage (0..1)."""
    return await metric(client, url, KV_USAGE)


async def load_phase(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every stream and hostile body at once; then wait for the KV cache to empty."""
    limits = httpx.Limits(max_connections=args.streams + 64)
    timeout = httpx.Timeout(args.phase_timeout)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        rng = random.Random(args.seed)
        drops = [
            rng.randint(1, args.max_tokens // 2) if rng.random() < args.drop_fraction else None
            for _ in range(args.streams)
        ]
        started = time.perf_counter()
        streams = [stream_chat(client, url, args.max_tokens, drop) for drop in drops]
        hostile = hostile_bodies(args.max_request_body_bytes)
        posts = [post_raw(client, url, body) for _, body in hostile]
        results = await asyncio.wait_for(asyncio.gather(*streams, *posts), args.phase_timeout)
        duration = time.perf_counter() - started
        stream_results: list[StreamResult] = results[: args.streams]
        hostile_statuses = dict(
            zip((name for name, _ in hostile), results[args.streams :], strict=True)
        )
        deadline = time.monotonic() + 60
        usage = await kv_usage(client, url)
        while usage != 0.0 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            usage = await kv_usage(client, url)
        preemptions = await metric(client, url, PREEMPTIONS)
    return {
        "duration_s": duration,
        "streams": summarize(stream_results),
        "hostile_statuses": hostile_statuses,
        "kv_usage_after": usage,
        "preemptions": preemptions,
    }


async def sigterm_phase(
    url: str, process: subprocess.Popen[bytes], args: argparse.Namespace
) -> dict[str, Any]:
    """Start `args.final_streams` long streams, SIGTERM the server once each has a token,
    and time its exit; every stream must still end with a final event and [DONE]."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(args.phase_timeout)) as client:
        live = [StreamResult() for _ in range(args.final_streams)]
        tasks = [
            asyncio.create_task(stream_chat(client, url, 10_000, None, result)) for result in live
        ]
        deadline = time.monotonic() + args.phase_timeout
        while time.monotonic() < deadline and not all(r.token_times or r.error for r in live):
            await asyncio.sleep(0.2)
        signalled = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        results = await asyncio.wait_for(asyncio.gather(*tasks), args.phase_timeout)
        exit_code = await asyncio.to_thread(process.wait, args.phase_timeout)
        shutdown = time.perf_counter() - signalled
    return {"shutdown_s": shutdown, "exit_code": exit_code, "streams": summarize(results)}


def summarize(results: list[StreamResult]) -> dict[str, Any]:
    """Counts, statuses and the worst inter-token gap of a set of streams (and of each
    stream's own worst gap, the median and 90th percentile)."""
    worst = sorted(r.worst_gap for r in results if len(r.token_times) > 1)
    statuses: dict[str, int] = {}
    for result in results:
        statuses[str(result.status)] = statuses.get(str(result.status), 0) + 1
    reasons: dict[str, int] = {}
    for result in results:
        reason = str(result.finish_reason)
        reasons[reason] = reasons.get(reason, 0) + 1
    return {
        "count": len(results),
        "statuses": statuses,
        "server_errors": sum(1 for r in results if r.status >= 500),
        "dropped_by_client": sum(1 for r in results if r.dropped),
        "unfinished": sum(1 for r in results if r.unfinished),
        "transport_errors": [r.error for r in results if r.error][:5],
        "finish_reasons": reasons,
        "tokens": sum(len(r.token_times) for r in results),
        "worst_inter_token_gap_s": max((r.worst_gap for r in results), default=0.0),
        "median_stream_worst_gap_s": statistics.median(worst) if worst else 0.0,
        "p90_stream_worst_gap_s": worst[int(0.9 * (len(worst) - 1))] if worst else 0.0,
    }


def start_server(args: argparse.Namespace, port: int, log: Path) -> subprocess.Popen[bytes]:
    """`vllm-tvm serve` on loopback, its output into `log`."""
    command = [sys.executable, "-m", "vllm_tvm.cli.main", "serve"]
    command += [*([args.model] if args.model else []), "--host", HOST, "--port", str(port)]
    command += ["--max-num-seqs", str(args.max_num_seqs), "--num-blocks", str(args.num_blocks)]
    command += ["--disable-log-requests"]
    command += ["--max-request-body-bytes", str(args.max_request_body_bytes)]
    with log.open("wb") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server was not healthy within {timeout} s")


def checks(report: dict[str, Any]) -> dict[str, bool]:
    """The pass/fail lines of a run."""
    load, final = report["load"], report["sigterm"]
    hostile = load["hostile_statuses"].values()
    return {
        "no 5xx": load["streams"]["server_errors"] == 0
        and final["streams"]["server_errors"] == 0
        and all(not isinstance(status, int) or status < 500 for status in hostile),
        "no unfinished stream": load["streams"]["unfinished"] == 0
        and final["streams"]["unfinished"] == 0,
        "KV usage back to 0": load["kv_usage_after"] == 0.0,
        "clean exit on SIGTERM": final["exit_code"] == 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="served model (default: the embedded one)")
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--drop-fraction", type=float, default=0.25)
    parser.add_argument("--final-streams", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--num-blocks", type=int, default=512, help="KV blocks of 32 tokens")
    parser.add_argument("--max-request-body-bytes", type=int, default=32 * 1024 * 1024)
    parser.add_argument("--phase-timeout", type=float, default=900.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=None, help="write the report as JSON")
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    url = f"http://{HOST}:{port}"
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"load_and_fault_{port}.log"
    process = start_server(args, port, log)
    try:
        started = time.perf_counter()
        wait_healthy(url, process, args.phase_timeout)
        start_s = time.perf_counter() - started
        load = asyncio.run(load_phase(url, args))
        final = asyncio.run(sigterm_phase(url, process, args))
    finally:
        if process.poll() is None:
            process.kill()
    server_log = log.read_text(errors="replace")
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "conditions": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "host_cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "server_start_to_healthy_s": start_s,
        "load": load,
        "sigterm": final,
        "tracebacks_in_server_log": server_log.count("Traceback"),
    }
    report["checks"] = checks(report)
    text = json.dumps(report, indent=2, default=lambda value: asdict(value))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
