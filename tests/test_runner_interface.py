"""The runner interface: one ABC with two implementations (one device, tensor-parallel
ranks) that share nothing but it, and one ragged-forward path in the one-device runner.

Why structural tests: the tensor-parallel runner once subclassed ModelRunner without its
constructor and inherited methods that use a VM it does not have; the forwards themselves
are checked against transformers by the engine and tensor-parallel tests.
"""

from __future__ import annotations

import ast
import inspect

from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.model.tensor_parallel_runner import TensorParallelRunner
from vllm_tvm.runtime.speculative.head_runner import HeadRunner


def _methods_calling(cls: type, attribute: str) -> set[str]:
    """The methods defined in `cls`'s own source that read `self.<...>.<attribute>`."""
    tree = ast.parse(inspect.getsource(cls))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute) and inner.attr == attribute:
                    found.add(node.name)
    return found


def test_both_runners_implement_the_whole_interface() -> None:
    assert Runner.__abstractmethods__  # the interface is abstract
    for implementation in (ModelRunner, TensorParallelRunner):
        assert issubclass(implementation, Runner)
        assert not implementation.__abstractmethods__, implementation


def test_the_tensor_parallel_runner_inherits_nothing_of_the_one_device_runner() -> None:
    assert not issubclass(TensorParallelRunner, ModelRunner)
    assert not hasattr(TensorParallelRunner, "vm")
    assert not _methods_calling(TensorParallelRunner, "vm")


def test_every_ragged_forward_of_a_runner_goes_through_one_path() -> None:
    """Only `run_ragged` begins a ragged forward (a head's prefill included); the others
    are a batch of single tokens (`decode_logits`, a head's `decode_head`). Over owned KV
    pages the forward begins in `_owned_prefill` / `_owned_decode`, which only those two
    call."""
    assert _methods_calling(ModelRunner, "begin_forward") == {
        "run_ragged",
        "decode_logits",
        "_owned_prefill",
        "_owned_decode",
    }
    assert _methods_calling(ModelRunner, "_owned_prefill") == {"run_ragged"}
    assert _methods_calling(ModelRunner, "_owned_decode") == {"decode_logits"}
    assert _methods_calling(HeadRunner, "begin_forward") == {"decode_head"}
