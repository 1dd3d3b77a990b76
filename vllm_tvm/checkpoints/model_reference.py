"""What `--model` / `LLM(model=...)` names: a local path, or a Hugging Face model id found in
the local Hugging Face cache.

Why: vLLM users write `serve Qwen/Qwen3-0.6B`. vllm-tvm never downloads, but a model that
`huggingface-cli download` (or transformers, or vLLM) already put in the cache
(`$HF_HUB_CACHE`, by default `$HF_HOME/hub`: models--org--name/snapshots/<rev>/, with
refs/main naming the revision) is found by its id through `huggingface_hub`'s offline lookup.
A snapshot holding one `.gguf` file and no config.json is that file. Everything else is
refused here with the value named, before any slow import or compile.
"""

from __future__ import annotations

import re
from pathlib import Path

from vllm_tvm.checkpoints.model_config import CheckpointError

HF_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""`org/name`, as the Hub spells repository ids."""


def resolve_model(model: str | Path) -> Path:
    """The local checkpoint `model` names: the path itself when it exists, else the cached
    snapshot of the Hugging Face model id `model`; CheckpointError when neither."""
    path = Path(model).expanduser()
    if path.exists():
        return path
    if not is_hf_model_id(str(model)):
        raise CheckpointError(f"model path {model} does not exist")
    snapshot = _cached_snapshot(str(model))
    if snapshot is None:
        raise CheckpointError(
            f"model {model!r} is neither a local path nor in the local Hugging Face cache "
            f"({_hub_cache()}); vllm-tvm does not download: fetch it first with "
            f"`huggingface-cli download {model}`, or pass a local path"
        )
    return _checkpoint_in(snapshot)


def is_hf_model_id(model: str) -> bool:
    """True when `model` is shaped like a Hub repository id (`org/name`)."""
    return HF_MODEL_ID.fullmatch(model) is not None


def _cached_snapshot(model_id: str) -> Path | None:
    """The cached snapshot directory of `model_id` (refs/main), or None; never the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(model_id, local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def _checkpoint_in(snapshot: Path) -> Path:
    """The snapshot directory, or its single `.gguf` file when it has no config.json."""
    ggufs = sorted(snapshot.glob("*.gguf"))
    if not (snapshot / "config.json").is_file() and len(ggufs) == 1:
        return ggufs[0]
    return snapshot


def _hub_cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE
