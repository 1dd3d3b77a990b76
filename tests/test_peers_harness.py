"""The measuring code of benchmarks/peers/run_vllm.py and run_hf.py, without a GPU.

vLLM's harness runs against a fake engine on a fake clock whose cost model is known, so the
definitions (decode-only by subtraction, aggregate over the whole call, TTFT) are checked
against the formulas. HF's harness runs the real transformers `generate` on a tiny random
model on the CPU (only that it completes and reports every key: no timing assertions).
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

import run_vllm

OVERHEAD, PREFILL_PER_TOKEN, STEP = 0.001, 2e-6, 0.005


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeLLM:
    """Costs OVERHEAD per call, PREFILL_PER_TOKEN per prompt token, STEP per decode step."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[int, int, int]] = []

    def generate(self, prompts, params, use_tqdm=False):
        tokens = sum(len(p["prompt_token_ids"]) for p in prompts)
        self.calls.append((len(prompts), len(prompts[0]["prompt_token_ids"]), params.max_tokens))
        self.clock.now += OVERHEAD + PREFILL_PER_TOKEN * tokens + STEP * (params.max_tokens - 1)
        output = types.SimpleNamespace(token_ids=list(range(params.max_tokens)))
        return [types.SimpleNamespace(outputs=[output]) for _ in prompts]


@pytest.fixture
def vllm_report(monkeypatch: pytest.MonkeyPatch) -> tuple[dict, FakeLLM, list[int]]:
    fake_vllm = types.ModuleType("vllm")
    fake_vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    clock = FakeClock()
    monkeypatch.setattr(run_vllm, "clock", clock)
    llm, saves, report = FakeLLM(clock), [], {"raw": {}}
    run_vllm.measure(llm, [32, 64], 2, report, lambda: saves.append(1))
    return report, llm, saves


def test_vllm_b1_decode_is_the_decode_step_rate(vllm_report) -> None:
    report, _, _ = vllm_report
    assert report["decode_b1_tok_s"] == pytest.approx(1 / STEP)


def test_vllm_ttft_is_one_call_with_a_1024_token_prompt(vllm_report) -> None:
    report, _, _ = vllm_report
    expected_s = OVERHEAD + 1024 * PREFILL_PER_TOKEN
    assert report["ttft_1024_ms_median"] == pytest.approx(expected_s * 1e3)


def test_vllm_aggregate_counts_output_tokens_over_the_whole_call(vllm_report) -> None:
    report, _, _ = vllm_report
    for b in (32, 64):
        call = OVERHEAD + PREFILL_PER_TOKEN * 1024 * b + STEP * 255
        assert report[f"aggregate_b{b}_tok_s"] == pytest.approx(b * 256 / call)
        assert report[f"decode_b{b}_tok_s"] == pytest.approx(b / STEP)


def test_vllm_prompts_are_never_reused(vllm_report) -> None:
    _, llm, _ = vllm_report
    assert (32, 1024, 256) in llm.calls and (1, 128, 257) in llm.calls
    assert len(llm.calls) >= 2 + 10 + 9 + 2 * 4


def test_vllm_report_is_saved_after_each_measurement(vllm_report) -> None:
    _, _, saves = vllm_report
    assert len(saves) == 2 + 2  # b1, TTFT, one per batch size


def test_vllm_short_output_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_vllm = types.ModuleType("vllm")
    fake_vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)

    class Stops(FakeLLM):
        def generate(self, prompts, params, use_tqdm=False):
            out = super().generate(prompts, params)
            out[0].outputs[0].token_ids = [1]
            return out

    with pytest.raises(RuntimeError, match="outputs of 5 tokens"):
        run_vllm.timed_generate(Stops(FakeClock()), [{"prompt_token_ids": [1, 2]}], 5)


def test_hf_harness_reports_decode_and_ttft_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import run_hf
    from llama31_8b import tiny_shape

    monkeypatch.setattr(run_hf, "B1_PROMPT", 8)
    monkeypatch.setattr(run_hf, "B1_OUT", 5)
    monkeypatch.setattr(run_hf, "TTFT_PROMPT", 16)
    model = run_hf.build_random_model(tiny_shape(), "cpu")
    report, saves = {"raw": {}}, []
    run_hf.measure(model, report, lambda: saves.append(1))
    # decode_b1_tok_s divides by a difference of two noisy medians of a tiny model: on a busy
    # machine it can come out negative, so only that it was computed is checked.
    assert math.isfinite(report["decode_b1_tok_s"]) and report["ttft_16_ms_median"] > 0
    assert len(report["raw"]["b1_out1_s"]) == 5 and len(saves) == 2
    assert report["metric_conditions"] == {
        "decode_b1_tok_s": {"input_len": 8, "output_len": 5, "batch": 1},
        "ttft_16_ms_median": {"input_len": 16, "output_len": 1, "batch": 1},
    }


def test_vllm_runs_each_batch_untimed_before_timing_it(vllm_report) -> None:
    _, llm, _ = vllm_report
    for b in (32, 64):
        calls = [call for call in llm.calls if call[0] == b]
        # One warm-up of each call (256 out, 1 out) before the two timed repeats of each.
        assert calls == [(b, 1024, 256), (b, 1024, 1)] + [(b, 1024, 256)] * 2 + [(b, 1024, 1)] * 2


def test_vllm_records_the_workload_of_every_number(vllm_report) -> None:
    report, _, _ = vllm_report
    per_metric = report["metric_conditions"]
    assert per_metric["decode_b1_tok_s"] == {"input_len": 128, "output_len": 257, "batch": 1}
    assert per_metric["ttft_1024_ms_median"] == {"input_len": 1024, "output_len": 1, "batch": 1}
    for b in (32, 64):
        for kind in ("aggregate", "decode"):
            expected = {"input_len": 1024, "output_len": 256, "batch": b}
            assert per_metric[f"{kind}_b{b}_tok_s"] == expected
