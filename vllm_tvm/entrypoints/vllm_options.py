"""vLLM engine options with nothing to act on here, accepted with no effect by `LLM(**kwargs)`
and, as flags, by `serve` and `generate` (cli/vllm_serve_flags.py), each with the reason.

Why one table: code and command lines written for vLLM pass these (`enforce_eager=True`,
`--enforce-eager`); refusing them would break a copied call for nothing, and accepting them
in one front end but not another would make the same call work in one place only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_EFFECT_SWITCHES = {
    "enforce_eager": "CUDA graphs are fixed when the artifact is compiled "
    "(VLLM_TVM_CUDA_GRAPH=0 at compile time turns them off)",
    "disable_log_stats": "the engine logs no periodic statistics (see the server's /metrics)",
    "disable_custom_all_reduce": "tensor-parallel ranks all-reduce through their CCL only",
    "enable_chunked_prefill": "long prompts are always prefilled in chunks",
}
"""vLLM switches accepted with no effect, and why their effect does not apply here."""

NO_EFFECT_VALUES = {
    "swap_space": "preempted sequences are recomputed, never swapped to host memory",
    "max_seq_len_to_capture": "CUDA graphs are fixed when the artifact is compiled",
}
"""vLLM options taking a value, accepted with no effect (the value is ignored), and why."""


def without_no_effect_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` less the vLLM options that have no effect here."""
    return {
        name: value
        for name, value in options.items()
        if name not in NO_EFFECT_SWITCHES and name not in NO_EFFECT_VALUES
    }
