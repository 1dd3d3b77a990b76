"""On a GPU: the Gated DeltaNet kernels and layer (sm_90a builds) against independent oracles.

Why this exists: the CPU suite proves the TIR kernels and the layer against a float64
recurrence and transformers; on CUDA the same TIR runs as thread blocks with the chunk
matrices in shared memory, which only a GPU run can check. This runs with a runtime-only TVM
and the libraries benchmarks/h200_gated_delta_build.py made (it builds nothing):

    PYTHONPATH=<tvm bundle>:.:benchmarks python3 benchmarks/h200_gated_delta_check.py \
        --root .device/gdn --out r.json --fla-path <site dir with the fla-core wheel>

Per family (the real linear-layer shapes of Qwen3.6-27B and Qwen3-Next-80B-A3B):
- kernels: the conv, the chunked scan and the decode step on a ragged batch of three
  sequences in a four-slot pool (several chunks, an exact chunk, a tail, one token; two
  prefill calls with the states carried, then decode steps) against a float64 torch
  token-by-token recurrence; the idle slot must come back bit for bit;
- layer: our `prefill` (two chunks, states carried) and `decode` steps against transformers'
  `Qwen3_5GatedDeltaNet` / `Qwen3NextGatedDeltaNet` on the same random weights, fp32 and bf16
  (bf16 also beside transformers' own bf16 error, both against transformers in fp32);
- timings (h200_gated_delta_timing.py): prefill of 4k tokens and a decode step, ours against
  transformers' torch path and flash-linear-attention's kernels when `fla` imports.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import platform
import traceback
from pathlib import Path
from typing import Any

import torch
import tvm

from vllm_tvm.runtime.tvm_runtime import load_runtime_only

KERNEL_FIRST = [200, 64, 17]
KERNEL_SECOND = [70, 1, 130]
KERNEL_DECODE_STEPS = 4
POOL_SLOTS, SLOTS, IDLE_SLOT = 4, [2, 0, 3], 1
LAYER_CHUNKS = [300, 100]
LAYER_DECODE_STEPS = 4
TOLERANCE = {"float32": 1e-4}
"""Largest error relative to the reference's largest magnitude that passes (fp32 only; bf16
is reported beside transformers' own bf16 error)."""


def errors(got: torch.Tensor, want: torch.Tensor) -> dict[str, float]:
    """max |got - want| and that over max |want|."""
    diff = (got.double() - want.double()).abs().max().item()
    return {"max_abs": diff, "max_rel": diff / max(want.double().abs().max().item(), 1e-30)}


def worst(reports: list[dict[str, float]]) -> dict[str, float]:
    return {key: max(r[key] for r in reports) for key in ("max_abs", "max_rel")}


def tvm_tensor(t: torch.Tensor) -> Any:
    return tvm.runtime.from_dlpack(t.contiguous())


def reference_delta_rule(q, k, v, g, beta, state):
    """float64, token by token: q, k [n, hk, dk], v [n, hv, dv], g, beta [n, hv],
    state [hv, dk, dv] -> (out [n, hv, dv], state)."""
    group = v.shape[1] // q.shape[1]
    q, k = (x.double().repeat_interleave(group, dim=1) for x in (q, k))
    v, g, beta, state = v.double(), g.double(), beta.double(), state.double().clone()
    out = torch.empty_like(v)
    for t in range(q.shape[0]):
        state *= g[t].exp()[:, None, None]
        delta = (v[t] - torch.einsum("hk,hkv->hv", k[t], state)) * beta[t][:, None]
        state += k[t][:, :, None] * delta[:, None, :]
        out[t] = torch.einsum("hk,hkv->hv", q[t], state)
    return out, state


def reference_conv(x, weight, state):
    """float64: x [n, c], weight [c, K], state [K - 1, c] -> (silu(conv(x)), new state)."""
    padded = torch.cat([state, x]).double()
    taps = weight.shape[1]
    windows = padded.unfold(0, taps, 1)  # [n, c, K]
    conv = (windows * weight.double()).sum(-1)
    return conv * torch.sigmoid(conv), padded[padded.shape[0] - (taps - 1) :]


def kernel_inputs(config: dict, n: int, gen: torch.Generator, device: str) -> list[torch.Tensor]:
    """q, k L2-normalised (q scaled by k_dim^-0.5), v, g <= 0, beta in (0, 1); fp32."""
    hk, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)

    q = torch.nn.functional.normalize(randn(n, hk, dk), dim=-1) * dk**-0.5
    k = torch.nn.functional.normalize(randn(n, hk, dk), dim=-1)
    g = -torch.nn.functional.softplus(randn(n, hv)) * 0.3
    return [q, k, randn(n, hv, dv), g, torch.sigmoid(randn(n, hv))]


def check_kernels(lib: Any, config: dict, device: str) -> dict[str, Any]:
    """Conv and delta rule (two prefill calls, then decode steps) against float64."""
    gen = torch.Generator(device=device).manual_seed(0)
    hv, dk, dv = (
        config[f"linear_{n}"] for n in ("num_value_heads", "key_head_dim", "value_head_dim")
    )
    taps = config["linear_conv_kernel_dim"] - 1
    channels = 2 * config["linear_num_key_heads"] * dk + hv * dv
    weight = torch.randn(channels, taps + 1, generator=gen, device=device) * 0.5
    rec = torch.randn(POOL_SLOTS, hv, dk, dv, generator=gen, device=device) * 0.1
    conv = torch.randn(POOL_SLOTS, taps, channels, generator=gen, device=device)
    idle = rec[IDLE_SLOT].clone(), conv[IDLE_SLOT].clone()
    want_rec = {s: rec[s].double() for s in SLOTS}
    want_conv = {s: conv[s].double() for s in SLOTS}
    slots = torch.tensor(SLOTS, dtype=torch.int32, device=device)
    report: dict[str, list] = {"chunked": [], "chunked_state": [], "conv": [], "conv_state": []}
    report.update(step=[], step_state=[])
    calls = [("chunked", KERNEL_FIRST), ("chunked", KERNEL_SECOND)]
    calls += [("step", [1] * len(SLOTS))] * KERNEL_DECODE_STEPS
    for kind, lengths in calls:
        starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        starts = starts.to(device)
        n = sum(lengths)
        x = torch.randn(n, channels, generator=gen, device=device)
        y = torch.empty_like(x)
        lib["conv"](*map(tvm_tensor, (x, weight, starts, slots)), tvm_tensor(conv), tvm_tensor(y))
        tokens = kernel_inputs(config, n, gen, device)
        out = torch.empty(n, hv, dv, device=device)
        index = [tvm_tensor(starts)] if kind == "chunked" else []
        args = [*map(tvm_tensor, tokens), *index, tvm_tensor(slots), tvm_tensor(rec)]
        lib[kind](*args, tvm_tensor(out))
        torch.cuda.synchronize() if device == "cuda" else None
        for b, slot in enumerate(SLOTS):
            rows = slice(int(starts[b]), int(starts[b + 1]))
            want_y, want_conv[slot] = reference_conv(x[rows], weight, want_conv[slot])
            report["conv"].append(errors(y[rows], want_y))
            report["conv_state"].append(errors(conv[slot], want_conv[slot]))
            seq = [t[rows] for t in tokens]
            want_out, want_rec[slot] = reference_delta_rule(*seq, want_rec[slot])
            report[kind].append(errors(out[rows], want_out))
            report[f"{kind}_state"].append(errors(rec[slot], want_rec[slot]))
    summary: dict[str, Any] = {key: worst(value) for key, value in report.items()}
    summary["idle_slot_unchanged"] = bool(
        torch.equal(rec[IDLE_SLOT], idle[0]) and torch.equal(conv[IDLE_SLOT], idle[1])
    )
    summary["passed"] = summary["idle_slot_unchanged"] and all(
        v["max_rel"] <= TOLERANCE["float32"] for k, v in summary.items() if isinstance(v, dict)
    )
    return summary


def hf_modeling(family: str) -> Any:
    """transformers' modeling module of `family`."""
    if family == "qwen3_next":
        from transformers.models.qwen3_next import modeling_qwen3_next as modeling
    else:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling
    return modeling


def hf_layer(family: str, config: dict, device: str) -> tuple[torch.nn.Module, Any]:
    """transformers' layer at `config`, random bf16-exact weights, fp32, on `device`."""
    shape = {**config, "num_hidden_layers": 1, "layer_types": ["linear_attention"]}
    modeling = hf_modeling(family)
    if family == "qwen3_next":
        from transformers import Qwen3NextConfig

        hf_config = Qwen3NextConfig(**shape)
        layer = modeling.Qwen3NextGatedDeltaNet(hf_config, 0)
    else:
        from transformers import Qwen3_5TextConfig

        hf_config = Qwen3_5TextConfig(**shape)
        layer = modeling.Qwen3_5GatedDeltaNet(hf_config, 0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            fan_in = param.shape[-1] if param.ndim == 2 else 1
            scale = 0.5 if name.startswith("conv1d") else fan_in**-0.5
            param.copy_(torch.randn(param.shape, generator=gen) * scale)
        layer.A_log.copy_(torch.log(torch.rand(layer.A_log.shape, generator=gen) * 15 + 1))
        layer.norm.weight.copy_(1 + 0.1 * torch.randn(layer.norm.weight.shape, generator=gen))
        for param in layer.parameters():
            param.copy_(param.to(torch.bfloat16).float())
    return layer.to(device).float().eval(), hf_config


def hf_runner(layer: torch.nn.Module, hf_config: Any):
    """A callable (hidden [1, n, H]) -> output that carries a transformers cache."""
    from transformers import DynamicCache

    module = inspect.getmodule(type(layer))
    cache_class = next(
        (
            getattr(module, n)
            for n in dir(module)
            if n.endswith("DynamicCache") and n != "DynamicCache"
        ),
        None,
    )
    try:
        cache = DynamicCache(config=hf_config)
    except (TypeError, ValueError):
        cache = cache_class(hf_config)
    params = inspect.signature(layer.forward).parameters
    keyword = "cache" if "cache" in params else "cache_params"

    def run(hidden: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return layer(hidden, **{keyword: cache})

    return run


class OurLayer:
    """Our compiled layer with transformers' weights, its state pools of one slot."""

    def __init__(self, lib_path: Path, entry: dict, layer: torch.nn.Module, dtype, device: str):
        self.vm = tvm.runtime.vm.VirtualMachine(
            tvm.runtime.load_module(str(lib_path)), tvm_device(device)
        )
        hf = dict(layer.state_dict())
        self.weights = [
            torch.cat([hf[name] for name in p["hf"]]).reshape(p["shape"]).to(dtype).contiguous()
            for p in entry["params"]
        ]
        self.params = [tvm_tensor(w) for w in self.weights]
        config, self.dtype, self.device = entry["config"], dtype, device
        hv, dk, dv = (
            config[f"linear_{n}"] for n in ("num_value_heads", "key_head_dim", "value_head_dim")
        )
        taps = config["linear_conv_kernel_dim"] - 1
        channels = 2 * config["linear_num_key_heads"] * dk + hv * dv
        self.conv = torch.zeros(1, taps, channels, device=device)
        self.rec = torch.zeros(1, hv, dk, dv, device=device)
        self.slots = torch.zeros(1, dtype=torch.int32, device=device)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [1, n, H]: prefill when n > 1, else a decode step."""
        pools = [tvm_tensor(self.conv), tvm_tensor(self.rec)]
        x = tvm_tensor(hidden.to(self.dtype))
        if hidden.shape[1] > 1:
            starts = torch.tensor([0, hidden.shape[1]], dtype=torch.int32, device=self.device)
            out = self.vm["prefill"](
                x, tvm_tensor(starts), tvm_tensor(self.slots), *pools, self.params
            )
        else:
            out = self.vm["decode"](x, tvm_tensor(self.slots), *pools, self.params)
        self.conv.copy_(torch.from_dlpack(out[1]))
        self.rec.copy_(torch.from_dlpack(out[2]))
        return torch.from_dlpack(out[0])


def tvm_device(device: str) -> Any:
    return tvm.cuda(0) if device == "cuda" else tvm.cpu(0)


def check_layer(root: Path, family: str, entry: dict, device: str) -> dict[str, Any]:
    """Ours (fp32, bf16) and transformers (fp32, bf16) over the same chunks and steps."""
    layer, hf_config = hf_layer(family, entry["config"], device)
    gen = torch.Generator(device=device).manual_seed(2)
    hidden = [
        torch.randn(1, n, entry["config"]["hidden_size"], generator=gen, device=device)
        for n in LAYER_CHUNKS + [1] * LAYER_DECODE_STEPS
    ]
    hidden = [h.to(torch.bfloat16).float() for h in hidden]
    want = [out.float() for out in map(hf_runner(layer, hf_config), hidden)]
    layer_bf16 = hf_layer(family, entry["config"], device)[0].to(torch.bfloat16)
    hf_bf16 = hf_runner(layer_bf16, hf_config)
    report: dict[str, Any] = {
        "hf_bf16_vs_hf_fp32": [
            errors(hf_bf16(h.to(torch.bfloat16)), w) for h, w in zip(hidden, want, strict=True)
        ]
    }
    for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        spec = {**entry["layers"][dtype_name], "config": entry["config"]}
        ours = OurLayer(root / spec["library"], spec, layer, dtype, device)
        report[f"ours_{dtype_name}_vs_hf_fp32"] = [
            errors(ours(h), w) for h, w in zip(hidden, want, strict=True)
        ]
    steps = ["prefill_chunk_1", "prefill_chunk_2"] + [
        f"decode_{i}" for i in range(LAYER_DECODE_STEPS)
    ]
    summary: dict[str, Any] = {"steps": steps}
    for key, per_step in report.items():
        summary[key] = {"worst": worst(per_step), "per_step": per_step}
    summary["passed"] = (
        summary["ours_float32_vs_hf_fp32"]["worst"]["max_rel"] <= TOLERANCE["float32"]
    )
    summary["fused_libraries_importable"] = fused_libraries_importable()
    return summary


def fused_libraries_importable() -> dict[str, bool]:
    """Whether transformers could reach fused kernels (else its layer runs its torch path)."""
    return {name: importlib.util.find_spec(name) is not None for name in ("fla", "causal_conv1d")}


def environment() -> dict[str, Any]:
    import transformers

    info = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "tvm": getattr(tvm, "__version__", "?"),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def guarded(run: Any) -> Any:
    """`run()`, or the traceback of its failure (one failing part must not hide the rest)."""
    try:
        return run()
    except Exception:  # the traceback is the result
        return {"error": traceback.format_exc()}


def check_families(args: argparse.Namespace, families: dict, results: dict) -> None:
    """Kernels and layer of every family, then the timings, into `results` (written to
    `--out` after each part, so a run cut short keeps what it measured); fla (`--fla-path`)
    joins the path only in the last phase, so transformers' layer runs its torch path."""
    from h200_gated_delta_timing import time_kernels, time_layer  # it imports this module

    def record(family: str, part: str, run: Any) -> None:
        results[family][part] = guarded(run)
        args.out.write_text(json.dumps(results, indent=1))
        print(json.dumps({family: {part: short(results[family][part])}}), flush=True)

    for family, entry in families.items():
        lib = args.root / entry["kernels"]
        results[family] = {"checkpoint": entry["checkpoint"], "config": entry["config"]}
        parts = {
            "kernels": lambda: check_kernels(load_library(lib), entry["config"], args.device),  # noqa: B023
            "layer": lambda: check_layer(args.root, family, entry, args.device),  # noqa: B023
        }
        for part, run in parts.items():
            record(family, part, run)
    for phase, timer in (("layer_timing", time_layer), ("kernel_timing", time_kernels)):
        for family, entry in families.items():
            if not args.no_timing:
                record(family, phase, lambda: timer(args, family, entry))  # noqa: B023


def load_library(path: Path) -> Any:
    return tvm.runtime.load_module(str(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run on llvm builds")
    parser.add_argument("--prefill-tokens", type=int, default=4096)
    parser.add_argument("--fla-path", help="a site dir with fla, added after transformers loads")
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args(argv)
    load_runtime_only(require_cuda=args.device == "cuda")
    manifest = json.loads((args.root / "manifest.json").read_text())
    results: dict[str, Any] = {
        "environment": environment(),
        "manifest_target": manifest["target"],
        "timing_conditions": {
            "prefill_tokens": args.prefill_tokens,
            "batch": 1,
            "layer_dtype": "bfloat16",
            "kernel_dtype": "float32 (fla: bf16 q/k/v/beta)",
        },
    }
    check_families(args, manifest["families"], results)
    results["all_passed"] = all(
        results[f][p].get("passed", False)
        for f in manifest["families"]
        for p in ("kernels", "layer")
    )
    args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps({"all_passed": results["all_passed"]}))
    return 0 if results["all_passed"] else 1


def short(part: Any) -> Any:
    """A console line's view of a result: worst errors and passes, no per-step lists."""
    if not isinstance(part, dict):
        return part
    return {k: (v["worst"] if isinstance(v, dict) and "worst" in v else v) for k, v in part.items()}


if __name__ == "__main__":
    raise SystemExit(main())
