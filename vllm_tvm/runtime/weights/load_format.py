"""The weight-loading modes an engine accepts (vLLM's `--load-format` names).

A module of its own so that the command line can offer the choices without importing the
runtime (which loads TVM): `auto` reads the checkpoint's weights, `dummy` makes random ones
of the artifact's shapes on the device (runtime/weights/dummy_weights.py).
"""

from __future__ import annotations

AUTO = "auto"
DUMMY = "dummy"
LOAD_FORMATS = (AUTO, DUMMY)


def check_load_format(load_format: str) -> None:
    """Refuse a load format other than `LOAD_FORMATS`, naming it."""
    if load_format not in LOAD_FORMATS:
        raise ValueError(
            f"unsupported load_format '{load_format}'; supported: " + ", ".join(LOAD_FORMATS)
        )
