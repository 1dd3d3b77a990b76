"""On the GPU box: write an HF checkpoint with transformers' own random initialisation for a
config directory, so the engine and transformers read the very same weights from disk.

Why: real shapes (a Gemma 3 1B, a Qwen3-MoE layer stack) are gigabytes, too large to carry to
the device; they are made there. Saving through `save_pretrained` writes the layout a user's
download has (per-expert tensors included), which is what the engine's loader reads.

usage: python3 benchmarks/random_hf_checkpoint.py CONFIG_DIR OUT_DIR [--dtype float32] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = AutoConfig.from_pretrained(args.config)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, args.dtype))
    model.save_pretrained(args.out)
    print(f"wrote {args.out} ({sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params)")


if __name__ == "__main__":
    main()
