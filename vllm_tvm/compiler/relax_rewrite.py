"""Run a call-rewriting Relax mutator over every function of a module.

Why apart: the GEMM dispatch passes (gemm_dispatch.py, fp8_gemm_dispatch.py) differ only in
which calls they rewrite; how a mutator is applied to a module, and how the kernels it left
unused are dropped so they are not compiled, is the same for both.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax


def rewrite_functions(mod: tvm.IRModule, rewriter: Any) -> tuple[tvm.IRModule, int]:
    """`mod` with `rewriter` (a PyExprMutator counting its rewrites in `rewritten`) applied
    to each Relax function, and the count; unused TIR functions are dropped if it rewrote."""
    for global_var, function in mod.functions_items():
        if isinstance(function, relax.Function):
            rewriter.builder_.update_func(global_var, rewriter.visit_expr(function))
    rewritten_mod = rewriter.builder_.get()
    if rewriter.rewritten:
        rewritten_mod = relax.transform.DeadCodeElimination()(rewritten_mod)
    return rewritten_mod, rewriter.rewritten
