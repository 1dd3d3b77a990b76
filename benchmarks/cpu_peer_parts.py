"""The parts of the CPU comparison against llama.cpp and their sizes, full and `--quick`.

Why: the whole matrix is sized to take under 20 minutes on a quiet 2-core box (artifacts
already compiled), while a change to one part, or a check that every part still runs on a
loaded box, needs minutes; so each part is selectable by name and has a quick variant of the
same code path with smaller sizes. The sizes live here only; cpu_peers.py runs them. The full
sizes: one timed repetition after the untimed one, two rounds for the small model and the
engine, one round for the 0.5B files and the 8k prompt (whose prefill alone takes minutes on
our side). The 1B and 3B parts add about 15 minutes (their F16 files, written once into the
cache, take 2.5 and 6.4 GB).

Parts:
  smollm2      runner level, the default model: decode and prefill 512 / 2,048
  prefill_8k   runner level, the default model: one 8,192-token prompt
  qwen_0_5b    runner level, the 0.5B model (cpu_peer_models.py) as F16, Q8_0 and Q4_K_M:
               decode and prefill 512 each
  llama_1b     runner level, the Llama-3.2-1B shape as F16, Q8_0 and Q4_K_M: the same tests
  llama_3b     runner level, the Llama-3.2-3B shape as Q4_K_M: decode (and a short prompt,
               since llama-bench times a prompt beside it; a 512-token one takes minutes)
  engine       16 requests of 128 in / 64 out at once: our engine against
               llama-batched-bench (cpu_peer_engine.py), the default model
  rss          peak RSS of one short generation (cpu_peer_rss.py), the default model and
               the 0.5B Q4_K_M
"""

from __future__ import annotations

from typing import Any

DEFAULT_MODEL = "smollm2"
"""Model key of the embedded default model (SmolLM2-135M-Instruct Q4_1)."""

RUNNER_PARTS = ("smollm2", "prefill_8k", "qwen_0_5b", "llama_1b", "llama_3b")
PARTS: dict[str, dict[str, dict[str, Any]]] = {
    "smollm2": {
        "full": {
            "models": (DEFAULT_MODEL,),
            "prompts": "512,2048",
            "decode": 64,
            "rounds": 2,
            "repetitions": 1,
            "warmup": True,
        },
        "quick": {
            "models": (DEFAULT_MODEL,),
            "prompts": "128",
            "decode": 16,
            "rounds": 1,
            "repetitions": 1,
            "warmup": True,
        },
    },
    "prefill_8k": {
        # llama-bench needs a decode test beside the prompt test: a short one. No untimed
        # run on either side: one 8k prefill takes minutes, a first-call cost is noise.
        "full": {
            "models": (DEFAULT_MODEL,),
            "prompts": "8192",
            "decode": 16,
            "rounds": 1,
            "repetitions": 1,
            "warmup": False,
        },
        # Quick: the same code path on a prompt short enough for a check run.
        "quick": {
            "models": (DEFAULT_MODEL,),
            "prompts": "1024",
            "decode": 4,
            "rounds": 1,
            "repetitions": 1,
            "warmup": False,
        },
    },
    "qwen_0_5b": {
        "full": {
            "models": ("F16", "Q8_0", "Q4_K_M"),
            "prompts": "512",
            "decode": 32,
            "rounds": 1,
            "repetitions": 1,
            "warmup": True,
        },
        "quick": {
            "models": ("F16", "Q8_0", "Q4_K_M"),
            "prompts": "64",
            "decode": 8,
            "rounds": 1,
            "repetitions": 1,
            "warmup": True,
        },
    },
    "llama_1b": {
        "full": {
            "models": ("llama-3.2-1b:F16", "llama-3.2-1b:Q8_0", "llama-3.2-1b:Q4_K_M"),
            "prompts": "512",
            "decode": 32,
            "rounds": 1,
            "repetitions": 1,
            "warmup": True,
        },
        "quick": {
            "models": ("llama-3.2-1b:Q4_K_M",),
            "prompts": "64",
            "decode": 8,
            "rounds": 1,
            "repetitions": 1,
            "warmup": True,
        },
    },
    "llama_3b": {
        "full": {
            "models": ("llama-3.2-3b:Q4_K_M",),
            "prompts": "64",
            "decode": 32,
            "rounds": 1,
            "repetitions": 1,
            "warmup": True,
        },
        "quick": {
            "models": ("llama-3.2-3b:Q4_K_M",),
            "prompts": "16",
            "decode": 8,
            "rounds": 1,
            "repetitions": 1,
            "warmup": True,
        },
    },
    "engine": {
        "full": {
            "models": (DEFAULT_MODEL,),
            "prompt": 128,
            "output": 64,
            "width": 16,
            "rounds": 2,
        },
        "quick": {"models": (DEFAULT_MODEL,), "prompt": 32, "output": 8, "width": 4, "rounds": 1},
    },
    "rss": {
        "full": {"models": (DEFAULT_MODEL, "Q4_K_M"), "tokens": 32, "context": 4096, "rounds": 2},
        "quick": {"models": (DEFAULT_MODEL,), "tokens": 8, "context": 1024, "rounds": 1},
    },
}
"""Part -> variant -> sizes. `models`: DEFAULT_MODEL or a model key of cpu_peer_models."""


def parse_tests(text: str) -> list[str]:
    """The parts named in a comma-separated list (`all`: every part), in the list's order,
    each once; ValueError naming an unknown part and the known ones."""
    names = list(PARTS) if text.strip() == "all" else [n.strip() for n in text.split(",")]
    unknown = [name for name in names if name not in PARTS]
    if unknown or not names:
        raise ValueError(f"unknown parts {unknown}; known: all, {', '.join(PARTS)}")
    return list(dict.fromkeys(names))


def part_sizes(part: str, quick: bool) -> dict[str, Any]:
    """The sizes of `part` in the quick or the full variant."""
    return PARTS[part]["quick" if quick else "full"]
