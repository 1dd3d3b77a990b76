"""Native extensions an artifact can carry beside its TVM library (see cublaslt_gemm.cc).

An artifact lists its extensions in the manifest; the runtime loads each one before the
library, because the library's Relax programs call functions the extension registers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_tvm.extensions.cublaslt import EXTENSION_NAME as CUBLASLT_EXTENSION
from vllm_tvm.extensions.cublaslt import load_cublaslt_extension

_LOADERS = {CUBLASLT_EXTENSION: load_cublaslt_extension}


def load_artifact_extensions(artifact_dir: Path, names: list[str], device: Any) -> None:
    """Load the extensions `names` (files in `artifact_dir`) for `device`; unknown ones fail."""
    for name in names:
        loader = _LOADERS.get(name)
        if loader is None:
            raise ValueError(
                f"artifact extension '{name}' is not known to this vllm-tvm; known: "
                + ", ".join(sorted(_LOADERS))
            )
        loader(artifact_dir / name, device)
