"""A registry model id where a model is expected: `LLM(model="SmolLM2-135M-Instruct")`,
`generate/serve/bench --model ...`.

Why here: every front end names its model the same way, so one rule decides what a name
that is not a local path means. When a registry is configured (`--registry` or
$VLLM_TVM_REGISTRY) and holds the id, the entry that fits this machine is pulled (artifact
and checkpoint); when none fits, only its checkpoint is pulled and the model is compiled
locally; with no registry, or offline, a previously pulled entry is used. One line on stderr
says which happened (entrypoints/resolve.py). A name that is a local path, or that no
registry holds, is left to the checkpoint resolver (local path, Hugging Face cache).

The registry reads the request as `CompileOptions` (artifacts/compile_options.py), below
the runtime: an entry fits when it was built as those options ask (artifact_registry/pull.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_tvm.artifact_registry.index import MODEL_ID, RegistryError
from vllm_tvm.artifacts.compile_options import CompileOptions

if TYPE_CHECKING:
    from vllm_tvm.artifact_registry.pull import SignedIndex

REGISTRY_ENV = "VLLM_TVM_REGISTRY"
OFFLINE_ENV = "VLLM_TVM_OFFLINE"
ALLOW_UNSIGNED_ENV = "VLLM_TVM_ALLOW_UNSIGNED"
TIMEOUT_ENV = "VLLM_TVM_REGISTRY_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0
"""Seconds without a byte from the registry before a download gives up."""


@dataclass(frozen=True)
class RegistrySettings:
    """Which registry to use and how far to trust it."""

    registry: str | None = None
    trusted_keys: tuple[Path, ...] = ()
    allow_unsigned: bool = False
    offline: bool = False
    timeout: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_env(
        cls,
        registry: str | None = None,
        trusted_keys: tuple[Path, ...] = (),
        allow_unsigned: bool = False,
        offline: bool = False,
    ) -> RegistrySettings:
        """The given settings, each unset one from the environment ($VLLM_TVM_REGISTRY,
        $VLLM_TVM_ALLOW_UNSIGNED=1, $VLLM_TVM_OFFLINE=1, $VLLM_TVM_REGISTRY_TIMEOUT seconds;
        trusted keys are also read from $VLLM_TVM_TRUSTED_KEYS when verifying)."""
        return cls(
            registry=registry or os.environ.get(REGISTRY_ENV) or None,
            trusted_keys=tuple(trusted_keys),
            allow_unsigned=allow_unsigned or os.environ.get(ALLOW_UNSIGNED_ENV) == "1",
            offline=offline or os.environ.get(OFFLINE_ENV) == "1",
            timeout=float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)),
        )


@dataclass(frozen=True)
class RegistryModel:
    """What a registry id resolved to: the checkpoint, and the artifact unless none fits."""

    checkpoint: Path
    artifact: Path | None
    note: str


def signed_index(settings: RegistrySettings) -> SignedIndex:
    """The configured registry's index, its signature judged by the settings' trust."""
    from vllm_tvm.artifact_registry.pull import TrustPolicy, read_index
    from vllm_tvm.artifact_registry.sources import open_source

    if settings.registry is None:
        raise RegistryError(f"no registry: pass --registry URL_OR_DIR or set ${REGISTRY_ENV}")
    policy = TrustPolicy(settings.trusted_keys, settings.allow_unsigned)
    return read_index(open_source(settings.registry, settings.timeout), policy)


def resolve_registry_model(
    options: CompileOptions, settings: RegistrySettings, show_progress: bool = True
) -> RegistryModel | None:
    """The registry's answer for `options.model`: the pulled checkpoint, and the artifact
    of the entry that fits `options` on this machine (artifact_registry/pull.py) if one does; None
    when the model is a local path or no registry (configured, or pulled before) holds it."""
    model = str(options.model)
    if Path(model).expanduser().exists() or not MODEL_ID.fullmatch(model):
        return None
    from vllm_tvm.artifact_registry.machine import this_machine
    from vllm_tvm.artifact_registry.pull import choose_entry, pull_entry, pulled_fit, tqdm_progress
    from vllm_tvm.artifact_registry.store import pulled_models

    machine = this_machine(options.target_kind)
    if settings.registry is None or settings.offline:
        why_local = "offline" if settings.offline else "no registry configured"
        found, _ = pulled_fit(model, machine, options)
        if found is not None:
            return RegistryModel(
                found.checkpoint_path,
                found.artifact_dir,
                f"using the pulled prebuilt artifact in {found.path} ({why_local})",
            )
        pulled = pulled_models(model)
        if pulled:
            return RegistryModel(
                pulled[0].checkpoint_path,
                None,
                "no pulled prebuilt artifact fits this machine; compiling locally",
            )
        return None
    signed = signed_index(settings)
    if model not in signed.index.models:
        return None
    progress = tqdm_progress(show_progress)
    try:
        entry = choose_entry(signed, model, machine, options)
    except RegistryError as no_fit:
        fallback = signed.index.entries_of(model)[-1]
        pulled = pull_entry(signed, model, fallback, progress, with_artifact=False)
        return RegistryModel(pulled.checkpoint_path, None, f"{no_fit}\ncompiling locally")
    pulled = pull_entry(signed, model, entry, progress)
    note = f"pulled prebuilt artifact ({entry.describe()}) from {settings.registry}, {signed.trust}"
    return RegistryModel(pulled.checkpoint_path, pulled.artifact_dir, note)
