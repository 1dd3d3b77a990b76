"""The CPU comparison matrix's parsing and refusals (benchmarks/cpu_peer_*.py,
benchmarks/cpu_profile_shares.py): part selection, the engine part's like-with-like figures,
GNU time's report, the generate commands' equal KV capacity, the 0.5B file's layout and the
profile's categories. No tool is run.

Oracles: a real `llama-batched-bench --output-format jsonl` output
(tests/data/peers_batched_bench_cpu.jsonl), a real `/usr/bin/time -v` report
(benchmarks/results/cpu_2026-12-02/cached_generate_rss.time.txt), our bench report built by
the benchmarking package's own code, Qwen2.5-0.5B's published size (0.49B parameters) and
kernel names from a recorded decode profile.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.benchmarking.metrics import RequestTiming, summarize_level
from vllm_tvm.benchmarking.report import BenchReport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import cpu_peer_engine
import cpu_peer_parts
import cpu_peer_rss
from cpu_peer_models import (
    LLAMA32_1B_SHAPE,
    LLAMA32_3B_SHAPE,
    QWEN25_05B_SHAPE,
    matrix_formats,
    model_path,
    split_model_key,
)
from cpu_profile_shares import category, category_shares
from write_random_gguf import tensor_shapes

ROOT = Path(__file__).resolve().parents[1]
BATCHED = (Path(__file__).parent / "data" / "peers_batched_bench_cpu.jsonl").read_text()
TIME_REPORT = ROOT / "benchmarks/results/cpu_2026-12-02/cached_generate_rss.time.txt"


def test_tests_selects_named_parts_in_order_once_and_all_means_every_part() -> None:
    assert cpu_peer_parts.parse_tests("rss, engine,rss") == ["rss", "engine"]
    assert cpu_peer_parts.parse_tests("all") == list(cpu_peer_parts.PARTS)
    with pytest.raises(ValueError, match=r"unknown parts \['prefill_4k'\]; known: all, smollm2"):
        cpu_peer_parts.parse_tests("smollm2,prefill_4k")


@pytest.mark.parametrize("part", list(cpu_peer_parts.PARTS))
def test_quick_variant_is_never_larger_than_the_full_one(part: str) -> None:
    quick = cpu_peer_parts.part_sizes(part, quick=True)
    full = cpu_peer_parts.part_sizes(part, quick=False)
    assert quick.keys() == full.keys()
    assert set(quick["models"]) <= set(full["models"])
    for key, value in full.items():
        if key == "prompts":
            assert max(map(int, quick[key].split(","))) <= max(map(int, value.split(",")))
        elif isinstance(value, int) and not isinstance(value, bool):
            assert quick[key] <= value, key


def test_full_matrix_has_the_required_sizes() -> None:
    assert "8192" in cpu_peer_parts.part_sizes("prefill_8k", quick=False)["prompts"].split(",")
    engine = cpu_peer_parts.part_sizes("engine", quick=False)
    assert (engine["prompt"], engine["output"], engine["width"]) == (128, 64, 16)
    assert cpu_peer_parts.part_sizes("qwen_0_5b", quick=False)["models"] == (
        "F16",
        "Q8_0",
        "Q4_K_M",
    )


def test_engine_ratio_refuses_unlike_figures() -> None:
    with pytest.raises(ValueError, match="output_throughput / speed_tg divides unlike figures"):
        cpu_peer_engine.engine_ratio("output_throughput", "speed_tg", 10.0, 20.0)
    with pytest.raises(ValueError, match="unlike"):
        cpu_peer_engine.engine_ratio("total_token_throughput", "aggregate", 10.0, 20.0)
    assert cpu_peer_engine.engine_ratio("output_throughput", "aggregate", 10.0, 20.0) == 0.5


def _our_report(prompt: int, output: int, width: int, duration: float) -> dict:
    timings = [RequestTiming(prompt, output, 0.0, 0.1, duration) for _ in range(width)]
    level = summarize_level(width, timings, duration)
    return BenchReport(conditions={"model": "m.gguf"}, levels=[level]).to_dict()


def test_engine_figures_compare_whole_run_rates_of_both_sides() -> None:
    peer = cpu_peer_engine.peer_engine_figures(BATCHED, width=4)
    ours = cpu_peer_engine.our_engine_figures(_our_report(32, 16, 4, duration=0.25))
    ratios = cpu_peer_engine.compare(ours, peer)
    # batched-bench's pl=4 row: 4 x 16 generated tokens in t_pp + t_tg seconds.
    generated_per_s = 4 * 16 / (0.054469 + 0.420721)
    assert peer["output_tok_s"] == pytest.approx(generated_per_s)
    assert peer["decode_only_speed_tg"] == pytest.approx(152.119812)
    assert ours["output_tok_s"] == pytest.approx(4 * 16 / 0.25)
    assert ratios == {"output_tok_s": pytest.approx(256 / generated_per_s)}


def test_engine_figures_refuse_a_width_batched_bench_did_not_print() -> None:
    with pytest.raises(ValueError, match="no row for 16 sequences"):
        cpu_peer_engine.peer_engine_figures(BATCHED, width=16)


def test_both_engine_commands_run_the_same_lengths_and_width(tmp_path: Path) -> None:
    peer = cpu_peer_engine.batched_bench_command(tmp_path, Path("m.gguf"), 128, 64, 16)
    ours = cpu_peer_engine.our_bench_command(Path("m.gguf"), 128, 64, 16, tmp_path / "r.json")

    def flag(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    assert (flag(peer, "-npp"), flag(peer, "-ntg"), flag(peer, "-npl")) == ("128", "64", "16,16")
    assert int(flag(peer, "-c")) >= 16 * (128 + 64)
    assert flag(peer, "-b") == flag(ours, "--max-num-batched-tokens") == "2048"
    assert (flag(ours, "--input-len"), flag(ours, "--output-len")) == ("128", "64")
    assert flag(ours, "--concurrency") == flag(ours, "--num-prompts") == "16"


def test_time_v_report_gives_peak_rss_and_refuses_failures() -> None:
    report = TIME_REPORT.read_text()
    figures = cpu_peer_rss.parse_time_v(report)
    assert figures["max_rss_kb"] == 316548
    assert figures["elapsed_s"] == pytest.approx(1.96)
    assert (figures["user_s"], figures["system_s"]) == (2.30, 0.47)
    with pytest.raises(ValueError, match="not GNU time's -v report"):
        cpu_peer_rss.parse_time_v("Killed\n")
    with pytest.raises(ValueError, match="exited 1"):
        cpu_peer_rss.parse_time_v(report.replace("Exit status: 0", "Exit status: 1"))


def test_generate_commands_hold_the_same_kv_capacity(tmp_path: Path) -> None:
    ours = cpu_peer_rss.our_generate_command(Path("m.gguf"), 32, 4096)
    peer = cpu_peer_rss.peer_generate_command(tmp_path, Path("m.gguf"), 32, 4096)
    blocks = int(ours[ours.index("--num-blocks") + 1])
    assert blocks * cpu_peer_rss.BLOCK_TOKENS == int(peer[peer.index("-c") + 1]) == 4096
    assert ours[ours.index("--max-tokens") + 1] == peer[peer.index("-n") + 1] == "32"
    with pytest.raises(ValueError, match="not a multiple of 32-token blocks"):
        cpu_peer_rss.our_generate_command(Path("m.gguf"), 32, 1000)


def test_our_commands_carry_the_compile_flags_the_cli_reads(tmp_path: Path) -> None:
    from vllm_tvm.cli.main import build_parser

    flags = ["--cpu-int8-activations", "on"]
    bench = cpu_peer_engine.our_bench_command(
        Path("m.gguf"), 128, 64, 16, tmp_path / "r.json", compile_flags=flags
    )
    generate = cpu_peer_rss.our_generate_command(Path("m.gguf"), 32, 4096, compile_flags=flags)
    for command in (bench, generate):
        assert command[1:3] == ["-m", "vllm_tvm.cli.main"]
        assert build_parser().parse_args(command[3:]).cpu_int8_activations == "on"


def test_half_b_file_has_qwen25_05b_size_with_tied_embeddings_and_plain_rope() -> None:
    shapes = tensor_shapes(QWEN25_05B_SHAPE, tied_embeddings=True, rope_freqs=False)
    assert "output.weight" not in shapes and "rope_freqs.weight" not in shapes
    parameters = sum(math.prod(s) for s in shapes.values())
    assert parameters == pytest.approx(0.494e9, rel=0.005)  # published: 0.49B (biases aside)
    assert shapes["blk.23.attn_k.weight"] == (2 * 64, 896)


@pytest.mark.parametrize(
    ("shape", "published", "k_rows"),
    [(LLAMA32_1B_SHAPE, 1.236e9, 8 * 64), (LLAMA32_3B_SHAPE, 3.213e9, 8 * 128)],
)
def test_llama_files_have_the_published_sizes(shape, published: float, k_rows: int) -> None:
    shapes = tensor_shapes(shape, tied_embeddings=True, rope_freqs=True)
    assert "output.weight" not in shapes and shapes["rope_freqs.weight"] == (shape.head_dim // 2,)
    parameters = sum(math.prod(s) for s in shapes.values() if len(s) == 2)
    assert parameters == pytest.approx(published, rel=0.005)  # Llama-3.2-1B / 3B as published
    assert shapes["blk.0.attn_k.weight"] == (k_rows, shape.hidden_size)


def test_model_keys_name_a_shape_and_a_type_the_0_5b_shape_by_type_alone(tmp_path: Path) -> None:
    assert split_model_key("Q4_K_M") == ("qwen2.5-0.5b", "Q4_K_M")
    assert split_model_key("llama-3.2-3b:Q8_0") == ("llama-3.2-3b", "Q8_0")
    for bad in ("llama-3.2-8b:F16", "llama-3.2-1b:Q3_K_S"):
        with pytest.raises(ValueError, match=r"unknown model.*known shapes: qwen2\.5-0\.5b"):
            split_model_key(bad)
    # The 0.5B files keep the names earlier runs cached them under.
    assert model_path(tmp_path, "F16").name == "random-qwen2.5-0.5b-shape-f16.gguf"
    assert (
        model_path(tmp_path, "Q8_0", "llama-3.2-1b").name == "random-llama-3.2-1b-shape-q8_0.gguf"
    )
    every = {
        m for part in cpu_peer_parts.PARTS.values() for v in part.values() for m in v["models"]
    }
    for key in every - {cpu_peer_parts.DEFAULT_MODEL}:
        split_model_key(key)


def test_matrix_formats_name_each_role_once_with_its_formats() -> None:
    def param(name: str, shape: list[int], fmt: str = "float", plane: str | None = None):
        return ParamEntry(name, shape, "float32", [name], format=fmt, plane=plane)

    params = [param("model.layers.0.input_layernorm.weight", [896])]
    for layer, down in ((0, "q4_k"), (1, "q6_k")):
        params.append(param(f"model.layers.{layer}.self_attn.qkv_proj.weight", [1152, 896]))
        for plane in ("qs", "d"):
            name = f"model.layers.{layer}.mlp.down_proj.weight.{plane}"
            params.append(param(name, [896, 19], down, plane))
    params.append(param("model.embed_tokens.weight.qs", [151936, 896], "q8_0", "qs"))
    assert matrix_formats(params) == {
        "mlp.down_proj.weight": ["q4_k", "q6_k"],
        "model.embed_tokens.weight": ["q8_0"],
        "self_attn.qkv_proj.weight": ["float"],
    }


def test_profile_categories_of_recorded_kernel_names() -> None:
    assert category("fused_nt_matmul_q4_111_add1") == "matmul"
    assert category("nt_matmul_q8_02") == "matmul"
    assert category("vm.builtin.attention_kv_cache_attention_with_fused_qkv") == "attention"
    assert category("rms_norm1") == category("vm.builtin.alloc_tensor") == "rest"
    split = category_shares(
        {
            "nt_matmul_q4_110": {"cpu_ms": 6.0},
            "vm.builtin.attention_kv_cache_attention_with_fused_qkv": {"cpu_ms": 3.0},
            "rms_norm1": {"cpu_ms": 1.0},
        }
    )
    assert [split[c]["share"] for c in ("matmul", "attention", "rest")] == [0.6, 0.3, 0.1]
    assert split["rest"]["symbols"] == ["rms_norm1"]
