"""From the engine options a front end was given to options the engine can load: the one
resolve step every front end (`LLM`, `generate`, `serve`, `bench`) calls, once.

Why one step: a model name becomes a loadable engine through a chain whose order matters —
a registry id is pulled before it is looked for locally, the checkpoint is found before its
artifact is keyed, a remembered artifact is known before TVM is imported (so a command may
load TVM's runtime alone), and a draft model's artifact takes the target's dtype. Written
once here, each front end gets the same answer for the same options.

The compiler is imported only when an artifact must be built, so a runtime-only install
still serves prebuilt artifacts; nothing here imports TVM.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from vllm_tvm.artifact_registry.resolve import RegistrySettings, resolve_registry_model
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.artifacts.resolution_memo import remember_artifact, remembered_artifact
from vllm_tvm.artifacts.speculative_roles import (
    AUX_HIDDEN_STATES_TARGET,
    HEAD_ROLES,
    TARGET_ROLES,
)
from vllm_tvm.checkpoints.default_model import DEFAULT_MODEL_NAME, default_model_path
from vllm_tvm.checkpoints.eagle3_config import eagle3_aux_layers
from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.checkpoints.model_reference import resolve_model
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.speculative.config import MODEL_METHODS

BeforeLoad = Callable[[EngineArgs], None]
"""Called with the options once the checkpoint and any remembered or pulled artifact are
known, before anything may import TVM (the command line's start-up preparation)."""


def resolve_engine(
    args: EngineArgs,
    registry: RegistrySettings | None = None,
    before_load: BeforeLoad | None = None,
) -> EngineArgs:
    """`args` with the model on a local checkpoint and every artifact resolved: a registry
    model id pulled (`registry`, default: from the environment), the checkpoint found
    (`local_checkpoint`; else refused by name), a remembered
    artifact taken (no compiler import), then `before_load`, then a draft's artifact, then
    the target's (compiled on first use)."""
    if args.artifact is None:
        args = _registry_checkpoint(args, registry or RegistrySettings.from_env())
    args = replace(args, model=str(local_checkpoint(args.model)))
    if args.artifact is None:
        args = replace(args, artifact=remembered_artifact(target_options(args)))
    if before_load is not None:
        before_load(args)
    args = with_draft_artifact(args)
    return replace(args, artifact=artifact_for(args))


def local_checkpoint(model: str | Path) -> Path:
    """The checkpoint `model` names here: a path, the embedded default model by the name it
    is served under (`SmolLM2-135M-Instruct`, unless a path of that name exists), or a
    Hugging Face id in the local cache (checkpoints/model_reference.py)."""
    if str(model) == DEFAULT_MODEL_NAME and not Path(model).exists():
        return default_model_path()
    return resolve_model(model)


def resolve_artifact(options: CompileOptions, show_progress: bool = True) -> Path:
    """The cached artifact of `options`, compiled if absent; a resolution remembered
    unchanged (artifacts/resolution_memo.py) needs no compiler import."""
    remembered = remembered_artifact(options)
    if remembered is not None:
        return remembered
    from vllm_tvm.compiler.build import compile_cached, make_request

    artifact = compile_cached(make_request(options), show_progress)
    remember_artifact(options, artifact)
    return artifact


def artifact_for(args: EngineArgs) -> Path:
    """The artifact of `args`: the given one, else the cached build of `target_options`."""
    if args.artifact is not None:
        return Path(args.artifact)
    return resolve_artifact(target_options(args), args.show_progress)


def target_options(args: EngineArgs) -> CompileOptions:
    """The compile options of `args`' target: its own, with the speculative method's role
    (its hidden states for EAGLE and MTP, for EAGLE-3 the inputs of the layers the head
    reads, from the head's config.json and the target's depth)."""
    spec = args.speculative_config
    role = TARGET_ROLES.get(spec.method) if spec is not None else None
    options = replace(args.compile_options, speculative_role=role)
    if role != AUX_HIDDEN_STATES_TARGET:
        return options
    assert spec is not None and spec.model is not None  # SpeculativeConfig requires it
    target_layers = int(read_model_config(local_checkpoint(args.model))["num_hidden_layers"])
    head_config = read_model_config(local_checkpoint(spec.model))
    return replace(options, aux_hidden_layers=eagle3_aux_layers(head_config, target_layers))


def with_draft_artifact(args: EngineArgs) -> EngineArgs:
    """`args` with a draft model's, EAGLE or EAGLE-3 head's or MTP layer's artifact resolved
    as the target's is (same target, weight format, kernels and quantization, the target
    artifact's dtype; compiled on first use) when the speculative method is `draft_model`,
    `eagle`, `eagle3` or `mtp` (whose layer is read from the target's checkpoint unless
    `model` names another), the target's artifact then resolved too (its dtype is the
    draft's); else `args` unchanged."""
    spec = args.speculative_config
    if spec is None or spec.method not in MODEL_METHODS or spec.draft_artifact is not None:
        return args
    draft_model = local_checkpoint(spec.model or args.model)
    target = artifact_for(args)
    # "auto" takes the target's dtype, not the draft's own config: a GGUF target computes in
    # float32 on the CPU while a head's config.json may say float16.
    dtype = read_manifest(target, verify=False).dtype if args.dtype == "auto" else args.dtype
    draft_options = replace(
        args.compile_options,
        model=draft_model,
        dtype=dtype,
        tensor_parallel_size=1,
        max_model_len=None,
        speculative_role=HEAD_ROLES.get(spec.method),
    )
    draft = resolve_artifact(draft_options, args.show_progress)
    draft_spec = replace(spec, model=str(draft_model), draft_artifact=str(draft))
    return replace(args, artifact=target, speculative_config=draft_spec)


def _registry_checkpoint(args: EngineArgs, settings: RegistrySettings) -> EngineArgs:
    """`args` on the pulled checkpoint (and artifact, when one fits its compile options) if
    `args.model` is a registry model id (artifact_registry/resolve.py); otherwise unchanged."""
    resolved = resolve_registry_model(args.compile_options, settings, args.show_progress)
    if resolved is None:
        return args
    print(f"vllm-tvm: {args.model}: {resolved.note}", file=sys.stderr, flush=True)
    return replace(args, model=str(resolved.checkpoint), artifact=resolved.artifact)
