"""Whether a loaded artifact can run here, and the serving length it allows.

Why a module of its own: every runner (one device, tensor-parallel ranks, draft models and
heads) loads an artifact, and each must refuse the same things by name before anything
reaches the device: a library built for another device kind, state the runtime cannot
run yet, a `max_model_len` past the model's context limit (with the compiler's reason).
"""

from __future__ import annotations

from pathlib import Path

from vllm_tvm.artifacts.manifest import ArtifactError, Manifest
from vllm_tvm.artifacts.runtime_spec import RuntimeSpec
from vllm_tvm.runtime.devices import target_kind_for


def check_runs_on(
    manifest: Manifest, artifact_dir: Path, device: str, runs_recurrent_state: bool = True
) -> None:
    """Refuse an artifact built for another device kind than `device`, or one whose model
    keeps recurrent state when the runner cannot hand its forwards the state pool
    (`runs_recurrent_state` False: the tensor-parallel runner's)."""
    if manifest.target_kind != target_kind_for(device):
        raise ArtifactError(
            f"artifact {artifact_dir} was built for target '{manifest.target}', "
            f"which cannot run on device '{device}'"
        )
    kinds = sorted({state.kind for state in manifest.runtime.recurrent_state})
    if kinds and not runs_recurrent_state:
        raise ArtifactError(
            f"artifact {artifact_dir} keeps recurrent state ({', '.join(kinds)}); the "
            "tensor-parallel runner does not hand its forwards the recurrent-state pool"
        )


def fit_context_limit(spec: RuntimeSpec, max_model_len: int | None) -> int:
    """`max_model_len`, or the model's context limit when None; a longer one is refused."""
    limit = spec.context_limit
    if max_model_len is not None and max_model_len > limit:
        reason = f" ({spec.context_limit_reason})" if spec.context_limit_reason else ""
        raise ValueError(
            f"max_model_len {max_model_len} exceeds the model's context limit {limit}{reason}"
        )
    return max_model_len or limit
