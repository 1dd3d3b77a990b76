"""`vllm-tvm embed` on the tiny Llama: the C library and bin/vllm-tvm-cli give the Python
engine's greedy tokens with no Python, batch concurrent requests without changing them, and
answer bad inputs with status codes."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from embed_abi import (
    BUNDLE,
    FINISH_ABORT,
    INVALID_ARGUMENT,
    NOT_FOUND,
    OK,
    PROMPT_TOO_LONG,
    TOKEN_CALLBACK,
    TOKENIZER_TEXTS,
    Completion,
    detokenize,
    greedy,
    load_engine,
    load_library,
    tokenize,
)

from vllm_tvm import SamplingParams

PROMPTS = [
    "Once upon a time",
    "The quick brown fox",
    "Paged attention keeps keys",
    "0123456789 + - * /",
    "Beautiful is better than ugly.",
    "a scheduler batches requests",
    "Explicit is better than implicit.",
    "Now is better than never.",
]


@pytest.fixture(scope="module")
def bundle(embed_bundle: Path) -> Path:
    return embed_bundle


@pytest.fixture(scope="module")
def lib(bundle: Path) -> ctypes.CDLL:
    return load_library(bundle)


@pytest.fixture(scope="module")
def engine(lib: ctypes.CDLL, bundle: Path):
    status, handle = load_engine(lib, bundle / "model")
    assert status == OK, lib.vllm_tvm_last_error()
    yield handle
    lib.vllm_tvm_engine_free(handle)


def _cli(bundle: Path, prompt: str, *flags: str, env: dict[str, str] | None = None) -> str:
    """stdout of the bundle's bin/vllm-tvm-cli for `prompt` (greedy unless `flags` say)."""
    command = [str(bundle / "bin" / "vllm-tvm-cli"), "--prompt", prompt, "--temperature", "0"]
    done = subprocess.run([*command, *flags], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def _complete(lib: ctypes.CDLL, engine, prompt: str, max_tokens: int) -> list[int]:
    out = Completion()
    params = greedy(lib, max_tokens)
    status = lib.vllm_tvm_complete(engine, prompt.encode(), ctypes.byref(params), ctypes.byref(out))
    assert status == OK, lib.vllm_tvm_last_error()
    ids = out.ids()
    lib.vllm_tvm_completion_free(ctypes.byref(out))
    return ids


def test_cli_without_python_gives_the_engines_greedy_tokens(bundle, make_llm, tmp_path):
    llm = make_llm("llama")
    expected = llm.generate(PROMPTS[:3], SamplingParams(temperature=0, max_tokens=12))
    for prompt, reference in zip(PROMPTS[:3], expected, strict=True):
        # PATH is an empty folder: no Python to be found.
        output = _cli(bundle, prompt, "--max-tokens", "12", "--json", env={"PATH": str(tmp_path)})
        result = json.loads(output)
        assert result["token_ids"] == list(reference.outputs[0].token_ids)
        assert result["text"] == reference.outputs[0].text


def test_eight_concurrent_requests_equal_one_at_a_time(lib, engine):
    alone = [_complete(lib, engine, prompt, 10) for prompt in PROMPTS]
    params = greedy(lib, 10)
    ids = []
    for prompt in PROMPTS:
        request = ctypes.c_uint64()
        assert lib.vllm_tvm_submit(engine, prompt.encode(), ctypes.byref(params), request) == OK
        ids.append(request.value)
    together: dict[int, list[int]] = {}
    while len(together) < len(ids):
        for request in ids:
            if request in together:
                continue
            finished, out = ctypes.c_int(), Completion()
            assert lib.vllm_tvm_poll(engine, request, finished, ctypes.byref(out)) == OK
            if finished.value:
                together[request] = out.ids()
                lib.vllm_tvm_completion_free(ctypes.byref(out))
    assert [together[request] for request in ids] == alone


def test_a_stream_callback_stops_generation(lib, engine):
    seen: list[int] = []

    @TOKEN_CALLBACK
    def on_token(token_id, _text, _user):
        seen.append(token_id)
        return 1 if len(seen) == 3 else 0

    out, params = Completion(), greedy(lib, 20)
    status = lib.vllm_tvm_complete_stream(
        engine, PROMPTS[0].encode(), ctypes.byref(params), on_token, None, ctypes.byref(out)
    )
    assert status == OK
    assert out.finish_reason == FINISH_ABORT
    assert out.ids()[:3] == seen[:3] == _complete(lib, engine, PROMPTS[0], 3)
    lib.vllm_tvm_completion_free(ctypes.byref(out))


def test_diagnostics_describe_the_loaded_model(lib, engine):
    from vllm_tvm import __version__

    assert lib.vllm_tvm_version().decode() == __version__
    assert lib.vllm_tvm_abi_version() == 1
    text_p = ctypes.c_void_p()
    assert lib.vllm_tvm_diagnostics(engine, text_p) == OK
    diagnostics = json.loads(ctypes.string_at(text_p.value).decode())
    lib.vllm_tvm_string_free(text_p)
    assert diagnostics["architecture"] == "LlamaForCausalLM"
    assert diagnostics["target"] == "llvm"
    assert diagnostics["abi_version"] == 1
    assert diagnostics["max_num_seqs"] == 8


def test_tokenizer_matches_the_python_tokenizer(lib, engine, tiny_model_dir):
    from vllm_tvm.runtime.tokenization.tokenizer import load_tokenizer

    reference = load_tokenizer(tiny_model_dir("llama"))
    for text in TOKENIZER_TEXTS:
        ids = tokenize(lib, engine, text)
        assert ids == reference.encode(text), text
        assert detokenize(lib, engine, ids) == reference.decode(ids), text


def test_seeded_sampling_repeats_and_seeds_differ(lib, engine):
    def sample(seed: int) -> list[int]:
        out, params = Completion(), lib.vllm_tvm_sampling_params_default()
        params.max_tokens, params.temperature, params.seed = 16, 0.9, seed
        params.top_k, params.top_p, params.min_p = 50, 0.95, 0.01
        prompt = PROMPTS[1].encode()
        assert lib.vllm_tvm_complete(engine, prompt, ctypes.byref(params), ctypes.byref(out)) == OK
        ids = out.ids()
        lib.vllm_tvm_completion_free(ctypes.byref(out))
        return ids

    first = sample(1234)
    assert first == sample(1234)
    assert first != sample(99)
    assert first != _complete(lib, engine, PROMPTS[1], 16)  # not greedy


def test_bad_inputs_are_status_codes(lib, engine, bundle, tmp_path):
    out, params = Completion(), greedy(lib, 4)
    assert lib.vllm_tvm_complete(None, b"x", ctypes.byref(params), ctypes.byref(out)) == (
        INVALID_ARGUMENT
    )
    assert b"NULL" in lib.vllm_tvm_last_error()
    assert lib.vllm_tvm_complete(engine, None, ctypes.byref(params), ctypes.byref(out)) == (
        INVALID_ARGUMENT
    )
    for field, value in [("temperature", -1.0), ("top_p", 0.0), ("max_tokens", 0)]:
        bad = greedy(lib, 4)
        setattr(bad, field, value)
        status = lib.vllm_tvm_complete(engine, b"x", ctypes.byref(bad), ctypes.byref(out))
        assert status == INVALID_ARGUMENT, field
        assert field.encode() in lib.vllm_tvm_last_error()
    long_prompt = ("Once upon a time " * 400).encode()
    status = lib.vllm_tvm_complete(engine, long_prompt, ctypes.byref(params), ctypes.byref(out))
    assert status == PROMPT_TOO_LONG
    finished = ctypes.c_int()
    assert lib.vllm_tvm_poll(engine, 987654, finished, ctypes.byref(out)) == NOT_FOUND
    text_p = ctypes.c_void_p()
    assert lib.vllm_tvm_detokenize(engine, (ctypes.c_int32 * 1)(10**6), 1, text_p) == (
        INVALID_ARGUMENT
    )
    assert load_engine(lib, tmp_path / "missing")[0] == BUNDLE
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle / "model", tampered)
    data = bytearray((tampered / "params.bin").read_bytes())
    data[100] ^= 0xFF
    (tampered / "params.bin").write_bytes(data)
    assert load_engine(lib, tampered)[0] == BUNDLE
    assert b"sha256" in lib.vllm_tvm_last_error()
    assert lib.vllm_tvm_last_error() != b""
    assert _complete(lib, engine, "x", 1)  # a good call clears the last error
    assert lib.vllm_tvm_last_error() == b""


def test_the_example_builds_with_the_bundles_cmakelists(bundle, tmp_path):
    expected = _cli(bundle, "The capital of France is", "--max-tokens", "16")
    for linkage in ("OFF", "ON"):
        build = tmp_path / f"build-static-{linkage}"
        configure = ["cmake", "-S", str(bundle), "-B", str(build), f"-DVLLM_TVM_STATIC={linkage}"]
        subprocess.run(configure, check=True, capture_output=True)
        subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
        done = subprocess.run([str(build / "complete")], capture_output=True, text=True, check=True)
        assert done.stdout == expected, linkage


@pytest.mark.slow  # a second build of the library, instrumented
def test_the_library_is_clean_under_address_sanitizer(bundle, tmp_path):
    """The example, linked with an ASan build of libvllm_tvm, on good and bad inputs."""
    from vllm_tvm.native_bundle.native_build import build_native

    asan_bundle = tmp_path / "bundle"
    shutil.copytree(bundle, asan_bundle)
    shutil.copy2(build_native(sanitize="address").shared_library, asan_bundle / "lib")
    build = tmp_path / "build"
    configure = ["cmake", "-S", str(asan_bundle), "-B", str(build), "-DVLLM_TVM_SANITIZE=address"]
    subprocess.run(configure, check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle / "model", tampered)
    (tampered / "model.so").write_bytes(b"not a library")
    model = str(asan_bundle / "model")
    cases = {
        "good": ([], 0, ""),
        "missing bundle": ([str(tmp_path / "missing")], 1, "cannot open"),
        "tampered bundle": ([str(tampered)], 1, "sha256"),
        "over-long prompt": ([model, "Once upon a time " * 400], 0, "leaves no room"),
        "empty prompt": ([model, ""], 0, "no tokens"),
    }
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "PATH": "/usr/bin:/bin"}
    for name, (arguments, code, message) in cases.items():
        done = subprocess.run(
            [str(build / "complete"), *arguments], env=env, capture_output=True, text=True
        )
        assert "Sanitizer" not in done.stderr, (name, done.stderr)
        assert done.returncode == code, (name, done.stderr)
        assert message in done.stderr, (name, done.stderr)


@pytest.mark.parametrize("target", ["android-arm64", "ios-arm64"])
def test_phone_presets_fail_naming_their_toolchain(target, tmp_path, capsys):
    from vllm_tvm.cli.main import main as cli_main
    from vllm_tvm.native_bundle.bundle import write_embedding_bundle
    from vllm_tvm.native_bundle.targets import MISSING_TOOLCHAINS

    with pytest.raises(NotImplementedError, match=target) as refused:
        write_embedding_bundle(tmp_path / "b", tmp_path, target)
    assert MISSING_TOOLCHAINS[target] in str(refused.value)
    arguments = ["embed", str(tmp_path / "b"), "--model", str(tmp_path), "--target", target]
    assert cli_main(arguments) == 1
    error = capsys.readouterr().err
    assert error.startswith("vllm-tvm embed: error:") and MISSING_TOOLCHAINS[target] in error
