"""Build, on a machine with nvcc and no GPU, what benchmarks/h200_gated_delta_check.py runs.

Why apart: the GPU box has only a runtime-only TVM (no compiler), so the Gated DeltaNet
kernels and the whole layer are compiled here for cuda:sm_90a (or llvm, for a dry run of the
check on this CPU) and exported as small shared libraries; weights are not in them (packed
parameters, made random on the GPU box), so each library is a few MiB.

Shapes: the linear-attention layers of real checkpoints, from their config.json —
Qwen3.6-27B / Qwen3.5-27B (`Qwen3_5ForConditionalGeneration`: hidden 5120, 16 key heads,
48 value heads, head dims 128, conv kernel 4; split projections, concatenated at load) and
Qwen3-Next-80B-A3B (hidden 2048, 16 key / 32 value heads, head dims 128; fused, per-key-head
grouped projections).

    PYTHONPATH=. python benchmarks/h200_gated_delta_build.py --out .device/gdn --target cuda:sm_90a

writes `<out>/manifest.json` (shapes, libraries, each layer's parameters in call order with
the transformers tensors they are concatenated from), `kernels_<family>.so` (the conv, the
chunked scan and the decode step as plain TIR functions) and `layer_<family>_<dtype>.so`
(the layer's `prefill` and `decode`, float32 and bfloat16).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import tvm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from gated_delta_layer_module import GatedDeltaNetModule

from vllm_tvm.compiler import cuda_build
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.compiler.recurrent_kernels import TargetRecurrentKernels
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.gated_delta_net import (
    GatedDeltaNetOptions,
    ProjectionLayout,
    split_projection_sources,
)

FAMILIES = {
    "qwen3_5": {
        "checkpoint": "Qwen/Qwen3.6-27B",
        "layout": ProjectionLayout.CONCATENATED,
        "config": {
            "hidden_size": 5120,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 48,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
        },
    },
    "qwen3_next": {
        "checkpoint": "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "layout": ProjectionLayout.GROUPED,
        "config": {
            "hidden_size": 2048,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
        },
    },
}
DTYPES = ("float32", "bfloat16")
KERNEL_NAMES = ("conv", "chunked", "step")
"""The global symbols of a kernels library."""


def _export(executable: tvm.runtime.Executable, path: Path, spec) -> int:
    cuda_build.export(executable, path, spec)
    return path.stat().st_size


def build_kernels(options: GatedDeltaNetOptions, spec, path: Path) -> int:
    """The three kernels at `options`' shape, one library."""
    kernels = TargetRecurrentKernels(spec.make_target())
    shape = (options.heads_k, options.heads_v, options.k_dim, options.v_dim)
    funcs = {
        "conv": kernels.causal_conv1d(options.conv_dim, options.conv_kernel_size),
        "chunked": kernels.delta_rule_chunked(*shape),
        "step": kernels.delta_rule_step(*shape),
    }
    module = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    with cuda_build.cuda_build_environment(spec) as target:
        executable = tvm.compile(module, target=target)
    return _export(executable, path, spec)


def build_layer(options: GatedDeltaNetOptions, spec, dtype: str, path: Path) -> list[dict]:
    """The layer's prefill and decode; returns its parameters in call order."""
    target = spec.make_target()
    module = GatedDeltaNetModule(options, target, dtype)
    mod, named_params = module.export_tvm(spec=module.export_spec())
    executable = cuda_build.build_relax_module(mod, spec, relax_pipeline=lowering_pipeline(target))
    _export(executable, path, spec)
    params = []
    for name, param in named_params:
        sources = (
            split_projection_sources(name)[0]
            if options.layout is ProjectionLayout.CONCATENATED
            else [name]
        )
        hf_names = [s.removeprefix("linear_attn.") for s in sources]
        params.append({"name": name, "shape": [int(d) for d in param.shape], "hf": hf_names})
    return params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--target", default="cuda:sm_90a")
    parser.add_argument("--families", nargs="+", default=sorted(FAMILIES))
    args = parser.parse_args(argv)
    spec = resolve_target(args.target)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"target": args.target, "families": {}}
    for family in args.families:
        info = FAMILIES[family]
        options = GatedDeltaNetOptions.from_hf_config(info["config"], info["layout"])
        entry = {
            "checkpoint": info["checkpoint"],
            "config": info["config"],
            "layout": info["layout"].value,
            "kernels": f"kernels_{family}.so",
            "layers": {},
            "build_seconds": {},
        }
        start = time.perf_counter()
        build_kernels(options, spec, args.out / entry["kernels"])
        entry["build_seconds"]["kernels"] = round(time.perf_counter() - start, 1)
        for dtype in DTYPES:
            start = time.perf_counter()
            lib = f"layer_{family}_{dtype}.so"
            params = build_layer(options, spec, dtype, args.out / lib)
            entry["layers"][dtype] = {"library": lib, "params": params}
            entry["build_seconds"][dtype] = round(time.perf_counter() - start, 1)
        manifest["families"][family] = entry
        print(json.dumps({family: entry["build_seconds"]}), flush=True)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
