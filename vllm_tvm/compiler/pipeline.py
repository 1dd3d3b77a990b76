"""The Relax pass pipeline, as explicit ordered lists with a reason for each pass.

Two phases, both here so a reader sees every IR change in one screen and an A/B of one pass
is a one-line change:

1. `rewrite_pipeline`: what the library exports and calls. The exported model gains the
   device sampling functions and `_metadata`, and its matmuls may be routed to cuBLASLt.
   The compiler reads the module between the phases (which extensions it calls).
2. `lowering_pipeline`: Relax -> TIR kernels, schedules, VM-level code for the target.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax

from vllm_tvm.artifacts.backends import GEMM_CUBLASLT
from vllm_tvm.compiler.attention_softcap import softcap_attention_kernels
from vllm_tvm.compiler.fp8_gemm_dispatch import dispatch_fp8_gemms_pass
from vllm_tvm.compiler.gemm_dispatch import dispatch_gemms_pass
from vllm_tvm.compiler.int8_activations import int8_activations_pass
from vllm_tvm.compiler.library_metadata import AttachMetadata
from vllm_tvm.compiler.sampling_functions import AttachSamplingFunctions
from vllm_tvm.compiler.sliding_window_kernel import repair_sliding_window_prefill
from vllm_tvm.schedules.cpu_attention import replace_cpu_ragged_prefill
from vllm_tvm.schedules.cpu_decode_attention import replace_cpu_paged_decode
from vllm_tvm.schedules.cpu_paged_prefill_attention import replace_cpu_paged_prefill
from vllm_tvm.schedules.rules import schedule_passes


@dataclass(frozen=True)
class LibraryContents:
    """What the rewrite phase adds to an exported model beside the model's own functions."""

    vocab_size: int
    """Columns of the logits the sampling functions read."""
    gemm: str
    """`cublaslt`: run-time-row-count float matmuls call the extension; `tir`: none do."""
    metadata: str
    """The JSON `_metadata()` returns (library_metadata.py)."""
    sliding_window: bool = False
    """Some layer attends through a sliding window (its CPU prefill kernel is repaired)."""
    fp8_gemm: bool = False
    """FP8 weights with one scale per row meet FP8 tensor cores: their run-time-row-count
    products go to cuBLASLt's FP8 GEMM (fp8_gemm_dispatch.py)."""
    attn_logit_softcapping: float | None = None
    """Gemma 2's attention-score cap, added to the paged-attention kernels; None: no cap."""
    int8_isa: str | None = None
    """The CPU's integer dot instructions the Q8_0 / Q4_0 products use with activations
    quantized to int8 (int8_activations.py); None: those products stay on the float path."""


def _is_gpu(target: tvm.target.Target) -> bool:
    return target.kind.name != "llvm"


@tvm.transform.module_pass(opt_level=0, name="RepairSlidingWindowPrefill")
def _repair_sliding_window_pass(mod: tvm.IRModule, _context: object) -> tvm.IRModule:
    return repair_sliding_window_prefill(mod)


def _softcap_pass(cap: float, target: tvm.target.Target) -> tvm.transform.Pass:
    return tvm.transform.module_pass(
        lambda mod, _context: softcap_attention_kernels(mod, cap, _is_gpu(target)),
        opt_level=0,
        name="SoftcapAttentionKernels",
    )


def rewrite_pipeline(target: tvm.target.Target, contents: LibraryContents) -> tvm.transform.Pass:
    """Phase 1: the module pass that decides what an exported model's library contains."""
    passes: list[tvm.transform.Pass] = [
        # argmax/sample over the logits left on the device, so a step copies back one token
        # per row. Added here, not by the model definition: model definitions never import
        # kernels, and every model gets the same functions for its vocabulary.
        AttachSamplingFunctions(contents.vocab_size, _is_gpu(target)),
        # TVM's stock GPU matmul schedules use no tensor cores on Hopper: float matmuls with
        # a run-time row count call cuBLASLt instead. Before legalization, while they are
        # still recognisable `nt_matmul` call_tirs (gemm_dispatch.py).
        *([dispatch_gemms_pass] if contents.gemm == GEMM_CUBLASLT else []),
        # The same for FP8 weights on FP8 tensor cores, activations quantized per token.
        *([dispatch_fp8_gemms_pass] if contents.fp8_gemm else []),
        # Q8_0 / Q4_0 products on int8 activations and integer dot products, as llama.cpp's
        # (int8_activations.py); before legalization, while they are recognisable call_tirs.
        *([int8_activations_pass(contents.int8_isa)] if contents.int8_isa else []),
        # The library describes itself without its manifest.
        AttachMetadata(contents.metadata),
        # TVM 0.27's CPU sliding-window prefill kernel reads its softmax maximum before
        # writing it when a row's first cached key is outside the window (NaN rows).
        *([_repair_sliding_window_pass] if contents.sliding_window and not _is_gpu(target) else []),
        # TVM's paged-attention kernels take no attention-score cap (Gemma 2): their score
        # stores are rewritten (attention_softcap.py); uncapped models keep TVM's kernels.
        *(
            [_softcap_pass(contents.attn_logit_softcapping, target)]
            if contents.attn_logit_softcapping is not None
            else []
        ),
    ]
    return tvm.transform.Sequential(passes, name="vllm_tvm_rewrites")


def lowering_pipeline(
    target: tvm.target.Target, attn_logit_softcapping: float | None = None
) -> tvm.transform.Pass:
    """Phase 2: the module pass that lowers a model's library for `target` (its attention
    scores soft-capped at `attn_logit_softcapping` when set)."""
    passes: list[tvm.transform.Pass] = [
        # TVM's CPU kernels for a prompt attending to itself, for new rows over cached pages
        # and for decode run on one thread with scalar math: ours are parallel and vectorised
        # (cpu_attention.py, cpu_paged_prefill_attention.py, cpu_decode_attention.py).
        *(
            []
            if _is_gpu(target)
            else [
                replace_cpu_ragged_prefill(attn_logit_softcapping),
                replace_cpu_paged_prefill(attn_logit_softcapping),
                replace_cpu_paged_decode(attn_logit_softcapping),
            ]
        ),
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
        *([relax.transform.RewriteCUDAGraph()] if _is_gpu(target) else []),
        relax.transform.LowerAllocTensor(),
        relax.transform.KillAfterLastUse(),
        relax.transform.LowerRuntimeBuiltin(),
        relax.transform.ComputePrimValue(),
        relax.transform.VMShapeLower(),
        relax.transform.AttachGlobalSymbol(),
    ]
    sequence = tvm.transform.Sequential(passes)

    @tvm.transform.module_pass(opt_level=0, name="vllm_tvm_lowering")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        with target:
            return sequence(mod)

    return _pipeline
