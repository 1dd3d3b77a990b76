"""`vllm-tvm bench` and `run_benchmark`: one level per concurrency, exact token counts, a JSON
report that carries its conditions, PNG plots, and bad values refused by name."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

from vllm_tvm.benchmarking import BenchConfig, BenchReport, run_benchmark
from vllm_tvm.benchmarking.config import PRETOKENIZE_ENV, pretokenize_from_env
from vllm_tvm.benchmarking.plots import MissingPlotDependencyError, require_matplotlib, write_plot
from vllm_tvm.cli.main import main as cli_main

CONCURRENCY = (1, 3)
INPUT_LEN = 12
OUTPUT_LEN = 5
CONDITION_KEYS = {
    "model",
    "load_format",
    "device",
    "device_name",
    "dtype",
    "input_len",
    "output_len",
    "concurrency",
    "num_prompts",
    "pretokenize",
    "pretokenize_mode",
    "max_model_len",
    "max_num_batched_tokens",
    "num_blocks",
    "versions",
    "host",
}
LEVEL_KEYS = {
    "concurrency",
    "completed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
}


def small_config(model: Path, **overrides) -> BenchConfig:
    """A sweep small enough for a busy 2-core machine."""
    options = {
        "concurrency": CONCURRENCY,
        "input_len": INPUT_LEN,
        "output_len": OUTPUT_LEN,
        "show_progress": False,
    }
    return BenchConfig.from_options(model, **{**options, **overrides})


@pytest.fixture(scope="module")
def sweep(tiny_model_dir) -> BenchReport:
    """One default-mode sweep over the tiny Llama, shared by the tests that only read it."""
    return run_benchmark(small_config(tiny_model_dir("llama")))


def test_the_sweep_has_one_level_per_concurrency_in_order(sweep) -> None:
    assert [level.concurrency for level in sweep.levels] == list(CONCURRENCY)


def test_each_level_generates_exactly_num_prompts_times_output_len_tokens(sweep) -> None:
    for level in sweep.levels:
        num_prompts = 2 * level.concurrency  # the default: two waves
        assert level.completed == num_prompts
        assert level.total_output_tokens == num_prompts * OUTPUT_LEN
        assert level.total_input_tokens == num_prompts * INPUT_LEN


def test_each_level_reports_positive_rates_and_latencies(sweep) -> None:
    for level in sweep.levels:
        assert level.duration > 0
        assert level.output_throughput == pytest.approx(level.total_output_tokens / level.duration)
        assert 0 < level.median_ttft_ms <= level.p99_ttft_ms
        assert level.mean_tpot_ms is not None and level.mean_tpot_ms > 0
        assert level.mean_itl_ms is not None and level.mean_itl_ms > 0


def test_each_level_reports_its_worst_inter_token_gap(sweep) -> None:
    for level in sweep.levels:
        # The longest gap of any request is at least any request's mean gap (its TPOT).
        assert level.max_itl_ms is not None and level.max_itl_ms >= level.p99_tpot_ms > 0


def test_the_default_run_is_pretokenized_and_loads_no_tokenizer(sweep) -> None:
    assert sweep.conditions["pretokenize_mode"] == "pretokenized"
    assert sweep.conditions["tokenizer_loaded"] is False


def test_the_json_report_names_its_conditions_and_every_level_metric(
    tiny_model_dir, tmp_path, capsys
) -> None:
    report_path = tmp_path / "out" / "bench.json"
    argv = [
        "bench",
        "--model",
        str(tiny_model_dir("llama")),
        "--concurrency",
        "2",
        "4",
        "--num-prompts",
        "4",
        "--input-len",
        "8",
        "--output-len",
        "3",
        "--output-json",
        str(report_path),
    ]
    assert cli_main(argv) == 0
    assert str(report_path) in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert report["schema"] == "vllm-tvm-bench/1"
    datetime.fromisoformat(report["date"])
    assert CONDITION_KEYS <= set(report["conditions"])
    assert report["conditions"]["num_prompts"] == [4, 4]
    assert {"tvm", "vllm_tvm", "python"} <= set(report["conditions"]["versions"])
    assert [level["concurrency"] for level in report["levels"]] == [2, 4]
    for level in report["levels"]:
        assert LEVEL_KEYS <= set(level)
        assert level["completed"] == 4
        assert level["total_output_tokens"] == 4 * 3


def test_pretokenize_0_in_the_environment_rolls_back_to_timed_strings(
    tiny_model_dir, monkeypatch
) -> None:
    monkeypatch.setenv(PRETOKENIZE_ENV, "0")
    report = run_benchmark(small_config(tiny_model_dir("llama"), concurrency=(2,)))
    assert report.conditions["pretokenize_mode"] == "timed-string"
    assert report.conditions["tokenizer_loaded"] is True
    assert report.levels[0].total_output_tokens == 4 * OUTPUT_LEN


def test_sampling_at_a_temperature_still_generates_exactly_output_len(tiny_model_dir) -> None:
    report = run_benchmark(small_config(tiny_model_dir("llama"), concurrency=(2,), temperature=0.8))
    assert report.conditions["temperature"] == 0.8
    assert report.levels[0].total_output_tokens == 4 * OUTPUT_LEN


def test_pretokenize_is_on_unless_the_environment_says_0() -> None:
    assert pretokenize_from_env({}) is True
    assert pretokenize_from_env({PRETOKENIZE_ENV: "1"}) is True
    assert pretokenize_from_env({PRETOKENIZE_ENV: "0"}) is False


def test_a_bad_pretokenize_value_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=f"{PRETOKENIZE_ENV} must be 0 or 1, got 'yes'"):
        pretokenize_from_env({PRETOKENIZE_ENV: "yes"})


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed (pip install matplotlib); plots are optional",
)
def test_the_plot_is_a_png_file(sweep, tmp_path) -> None:
    path = write_plot(sweep, tmp_path / "plots" / "bench.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_matplotlib_fails_naming_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingPlotDependencyError, match="pip install matplotlib"):
        require_matplotlib()


def test_the_cli_checks_for_matplotlib_before_running(
    tiny_model_dir, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    argv = ["bench", "--model", str(tiny_model_dir("llama")), "--plot", str(tmp_path / "p.png")]
    assert cli_main(argv) == 1
    captured = capsys.readouterr()
    assert "pip install matplotlib" in captured.err
    assert "conc" not in captured.out  # no level ran


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"concurrency": (2, 0)}, "concurrency must be >= 1, got 0"),
        ({"concurrency": ()}, "concurrency needs at least one level"),
        ({"output_len": 0}, "output_len must be >= 1, got 0"),
        ({"num_prompts": 2, "concurrency": (4,)}, "num_prompts 2 is below concurrency 4"),
        ({"input_len": 600, "max_model_len": 512}, r"input_len 600 .* exceeds max_model_len 512"),
        ({"load_format": "npz"}, "unsupported load_format 'npz'; supported: auto, dummy"),
    ],
)
def test_bad_values_are_refused_before_loading(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        small_config(Path("/nonexistent"), **overrides).validate()


def test_a_prompt_longer_than_the_models_context_is_refused_naming_both(tiny_model_dir) -> None:
    # The tiny Llama's max_position_embeddings is 512.
    config = small_config(tiny_model_dir("llama"), concurrency=(1,), input_len=600)
    with pytest.raises(ValueError, match=r"input_len 600 .* exceeds max_model_len 512"):
        run_benchmark(config)


def test_the_cli_prints_a_bad_concurrency_as_one_error_line(tiny_model_dir, capsys) -> None:
    argv = ["bench", "--model", str(tiny_model_dir("llama")), "--concurrency", "0"]
    assert cli_main(argv) == 1
    assert "concurrency must be >= 1, got 0" in capsys.readouterr().err
