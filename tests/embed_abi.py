"""ctypes declarations of include/vllm_tvm.h, so tests can drive libvllm_tvm directly, and the
texts its tokenizer is checked on."""

from __future__ import annotations

import ctypes
from pathlib import Path

OK, INVALID_ARGUMENT, BUNDLE, PROMPT_TOO_LONG, RUNTIME, NOT_FOUND, UNSUPPORTED = range(7)
FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_ABORT = range(4)


class ModelParams(ctypes.Structure):
    _fields_ = [
        ("model_path", ctypes.c_char_p),
        ("max_num_seqs", ctypes.c_int32),
        ("max_model_len", ctypes.c_int32),
    ]


class SamplingParams(ctypes.Structure):
    _fields_ = [
        ("max_tokens", ctypes.c_int32),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("seed", ctypes.c_int64),
        ("ignore_eos", ctypes.c_int32),
    ]


class Completion(ctypes.Structure):
    _fields_ = [
        ("text", ctypes.c_char_p),
        ("token_ids", ctypes.POINTER(ctypes.c_int32)),
        ("num_tokens", ctypes.c_size_t),
        ("prompt_tokens", ctypes.c_size_t),
        ("finish_reason", ctypes.c_int),
    ]

    def ids(self) -> list[int]:
        return [self.token_ids[i] for i in range(self.num_tokens)]


TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_char_p, ctypes.c_void_p)


def load_library(bundle: Path) -> ctypes.CDLL:
    """The bundle's libvllm_tvm.so with argument and result types declared."""
    lib = ctypes.CDLL(str(bundle / "lib" / "libvllm_tvm.so"))
    engine_p = ctypes.c_void_p
    lib.vllm_tvm_model_params_default.restype = ModelParams
    lib.vllm_tvm_sampling_params_default.restype = SamplingParams
    lib.vllm_tvm_engine_load.argtypes = [ctypes.POINTER(ModelParams), ctypes.POINTER(engine_p)]
    lib.vllm_tvm_engine_free.argtypes = [engine_p]
    completion_p = ctypes.POINTER(Completion)
    sampling_p = ctypes.POINTER(SamplingParams)
    lib.vllm_tvm_complete.argtypes = [engine_p, ctypes.c_char_p, sampling_p, completion_p]
    lib.vllm_tvm_complete_stream.argtypes = [
        engine_p,
        ctypes.c_char_p,
        sampling_p,
        TOKEN_CALLBACK,
        ctypes.c_void_p,
        completion_p,
    ]
    lib.vllm_tvm_submit.argtypes = [
        engine_p,
        ctypes.c_char_p,
        sampling_p,
        ctypes.POINTER(ctypes.c_uint64),
    ]
    lib.vllm_tvm_poll.argtypes = [
        engine_p,
        ctypes.c_uint64,
        ctypes.POINTER(ctypes.c_int),
        completion_p,
    ]
    lib.vllm_tvm_cancel.argtypes = [engine_p, ctypes.c_uint64]
    lib.vllm_tvm_tokenize.argtypes = [
        engine_p,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.vllm_tvm_detokenize.argtypes = [
        engine_p,
        ctypes.POINTER(ctypes.c_int32),
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    ]
    lib.vllm_tvm_completion_free.argtypes = [completion_p]
    lib.vllm_tvm_tokens_free.argtypes = [ctypes.POINTER(ctypes.c_int32)]
    lib.vllm_tvm_string_free.argtypes = [ctypes.c_void_p]
    lib.vllm_tvm_last_error.restype = ctypes.c_char_p
    lib.vllm_tvm_version.restype = ctypes.c_char_p
    lib.vllm_tvm_diagnostics.argtypes = [engine_p, ctypes.POINTER(ctypes.c_void_p)]
    return lib


def load_engine(lib: ctypes.CDLL, model_dir: Path) -> tuple[int, ctypes.c_void_p]:
    """(status, engine handle) of loading `model_dir`."""
    params = lib.vllm_tvm_model_params_default()
    params.model_path = str(model_dir).encode()
    engine = ctypes.c_void_p()
    return lib.vllm_tvm_engine_load(ctypes.byref(params), ctypes.byref(engine)), engine


def greedy(lib: ctypes.CDLL, max_tokens: int) -> SamplingParams:
    params = lib.vllm_tvm_sampling_params_default()
    params.temperature = 0.0
    params.max_tokens = max_tokens
    return params


def tokenize(lib: ctypes.CDLL, engine: ctypes.c_void_p, text: str) -> list[int]:
    """Token ids of `text` (special tokens added) from the C library."""
    ids_p, count = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
    assert lib.vllm_tvm_tokenize(engine, text.encode(), 1, ids_p, count) == OK
    ids = [ids_p[i] for i in range(count.value)]
    lib.vllm_tvm_tokens_free(ids_p)
    return ids


def detokenize(lib: ctypes.CDLL, engine: ctypes.c_void_p, ids: list[int]) -> str:
    """Text of `ids` from the C library."""
    text_p = ctypes.c_void_p()
    array = (ctypes.c_int32 * len(ids))(*ids)
    assert lib.vllm_tvm_detokenize(engine, array, len(ids), text_p) == OK
    text = ctypes.string_at(text_p.value).decode()
    lib.vllm_tvm_string_free(text_p)
    return text


TOKENIZER_TEXTS = [
    "Hello world",
    "  two  spaces   and\ttabs\n\nnew lines  ",
    "it's they're we've I'm you'll he'd",
    "0123456789 3.14159 x=42",
    "<s>special</s> tokens <s>",
    "\u00dcn\u00efc\u00f6d\u00e9 \u2014 \u6771\u4eac \u0663\u0664 emoji \U0001f642 \u00bd",
    "(ok) [yes] {no}. ?!",
]
"""Texts the C tokenizer must cut exactly as the Python one: specials, whitespace runs,
contractions, digits, non-Latin letters and numbers, emoji."""
