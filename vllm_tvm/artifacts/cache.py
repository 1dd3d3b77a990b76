"""Content-addressed cache of compiled artifacts (`~/.cache/vllm_tvm/artifacts/<key>`).

`generate`/`serve` without `--artifact` compile on first use; the key (compile_options.py's
`artifact_key`, as compiler/build.py's `cache_key_for` fills it) covers everything that
changes the library (normalised model config, the compile options, the target, TVM version,
and a digest of the source of the code that builds it, compiler/source_digest.py) so a second
run reuses it and a code change never reuses a stale one.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE_ENV = "VLLM_TVM_CACHE_DIR"


def cache_root() -> Path:
    """The cache directory: $VLLM_TVM_CACHE_DIR, else ~/.cache/vllm_tvm."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "vllm_tvm"


def artifact_dir_for(key: str) -> Path:
    """Where the artifact with this key lives in the cache."""
    return cache_root() / "artifacts" / key


@contextmanager
def entry_lock(entry: Path) -> Iterator[None]:
    """Hold an exclusive lock on `entry` (a file `<entry>.lock` beside it) for the block.

    Why: processes sharing one cache (two `generate` runs, a `serve` and a `compile`) would
    otherwise each compile the same missing entry; under the lock the first one compiles and
    the others find its finished entry. The lock is released when the process exits, however
    it exits, so a crashed compile never wedges the cache.
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_name(f"{entry.name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
