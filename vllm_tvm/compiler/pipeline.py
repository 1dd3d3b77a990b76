"""The Relax pass pipeline, as an explicit ordered list with a reason for each pass.

Kept as data so a reader sees the whole lowering in one screen and an A/B of one pass is a
one-line change.
"""

from __future__ import annotations

import tvm
from tvm import relax

from vllm_tvm.schedules.rules import schedule_passes


def build_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    """The module pass that lowers an exported model for `target`."""
    is_gpu = target.kind.name != "llvm"
    passes: list[tvm.transform.Pass] = [
        # Sampling and sort/scan ops become target kernels (none are used by the model yet,
        # but they must dispatch before legalization if a later definition adds them).
        relax.backend.DispatchSampling(),
        relax.backend.DispatchSortScan(),
        # High-level ops -> TIR, then group elementwise tails into their producers.
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        # Thread/loop schedules (dlight on GPUs; see schedules/rules.py).
        *schedule_passes(target),
        # Dataflow -> VM-level code.
        relax.transform.RewriteDataflowReshape(),
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        relax.transform.CallTIRRewrite(),
        # Reuse intermediate buffers across the step instead of allocating per call.
        relax.transform.StaticPlanBlockMemory(),
        # Capture static-shape regions into CUDA graphs (no-op on CPU).
        *([relax.transform.RewriteCUDAGraph()] if is_gpu else []),
        relax.transform.LowerAllocTensor(),
        relax.transform.KillAfterLastUse(),
        relax.transform.LowerRuntimeBuiltin(),
        relax.transform.ComputePrimValue(),
        relax.transform.VMShapeLower(),
        relax.transform.AttachGlobalSymbol(),
    ]
    sequence = tvm.transform.Sequential(passes)

    @tvm.transform.module_pass(opt_level=0, name="vllm_tvm_pipeline")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        with target:
            return sequence(mod)

    return _pipeline
