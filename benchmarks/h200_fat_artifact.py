"""A fat CUDA artifact (`compile --target cuda:all`) on a real GPU: the driver picks its cubin,
and greedy tokens equal transformers' on the same random weights.

Why this exists: the build tests prove a fat library holds a cubin per SM and PTX, but only
a GPU shows that TVM loads such a library and that the kernels generated for the oldest SM
(sm_80) compute the right thing on another. This runs there with prebuilt artifacts and a
runtime-only TVM (it never compiles):

    PYTHONPATH=<tvm bundle>:. python3 benchmarks/h200_fat_artifact.py \
        --model <tiny HF dir> --artifact <fat artifact> [--artifact ...] --out r.json

It records the GPU's compute capability, the cubins and PTX the library embeds (read with the
machine's cuobjdump), whether the registry's fit logic accepts the artifact on this GPU, and
then h200_engine_check's sequential/batched greedy runs against transformers (fp32).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from h200_engine_check import check_artifact, oracle_tokens, prompts

from vllm_tvm.artifact_registry.index import ArtifactEntry
from vllm_tvm.artifact_registry.machine import this_machine, why_not
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.cli.publish_cmd import target_features
from vllm_tvm.compiler.cuda_binaries import embedded_cuda_archs, embedded_ptx_archs


def fit_report(artifact: Path) -> dict:
    """What the library embeds and whether the registry would hand it to this GPU."""
    manifest = read_manifest(artifact)
    library = artifact / "model.so"
    machine = this_machine("cuda")
    entry = ArtifactEntry(
        target=manifest.target,
        target_kind=manifest.target_kind,
        features=target_features(manifest.target),
        dtype=manifest.dtype,
        weight_format="native",
        tvm_version=manifest.tvm_version,
        config_hash=manifest.config_hash,
        architecture=manifest.architecture,
        artifact_files=[],
        checkpoint_name=artifact.name,
        checkpoint_files=[],
    )
    return {
        "target": manifest.target,
        "gpu_arch": machine.features.get("arch"),
        "cubins": embedded_cuda_archs(library, tool="cuobjdump"),
        "ptx": embedded_ptx_archs(library, tool="cuobjdump"),
        "registry_fit": why_not(entry, machine, "auto", "native") or "fits",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="tiny HF checkpoint dir")
    parser.add_argument("--artifact", type=Path, action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    config = json.loads((args.model / "config.json").read_text())
    oracle = oracle_tokens(args.model, prompts(int(config["vocab_size"])), "cuda")
    results = []
    for artifact in args.artifact:
        result = {**fit_report(artifact), **check_artifact(args.model, artifact, "cuda", oracle)}
        result["transformers_tokens"] = oracle[0]
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if "tokens" not in k}))
    import torch
    import transformers

    report = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
