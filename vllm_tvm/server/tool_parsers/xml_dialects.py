"""The XML-style dialects by family: each names its tags (``XmlCallFormat``) and nothing else.

The spellings are those the families' chat templates render for an assistant's calls (and
vLLM's parsers of the same names read). Where one vLLM name covers a family's several
releases (``glm45``/``glm47``, ``qwen3_coder``/``qwen3_xml``/``step3p5``), the format is
written once and whitespace between tags is free, which covers both.
"""

from __future__ import annotations

from dataclasses import replace

from vllm_tvm.server.tool_parsers.schema_values import json_unless_string, typed_by_attribute
from vllm_tvm.server.tool_parsers.xml_calls import XmlCallFormat, XmlCallReader

# Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, Step 3.5: values typed by the schema (the template
# renders scalars with Python's str, containers as JSON).
QWEN3_CODER = XmlCallFormat(
    wrap_open="<tool_call>",
    wrap_close="</tool_call>",
    call_open="<function=",
    name_end=">",
    param_open="<parameter=",
    key_end=">",
    value_close="</parameter>",
    call_close="</function>",
    bare_calls=True,
    padded_values=True,
)
# Qwen3 and MiMo models write either Hermes JSON or Qwen3-Coder tags inside <tool_call>.
QWEN3 = replace(QWEN3_CODER, json_bodies=True)
SEED_OSS = replace(
    QWEN3_CODER,
    wrap_open="<seed:tool_call>",
    wrap_close="</seed:tool_call>",
    bare_calls=False,
    padded_values=False,
)
# GLM-4.5/4.6 put a newline after the name and between tags; GLM-4.7 and Poolside's Laguna
# write them back to back.
GLM = XmlCallFormat(
    call_open="<tool_call>",
    name_end="\n",
    param_open="<arg_key>",
    key_end="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
    call_close="</tool_call>",
    open_names=True,
    read_value=json_unless_string,
)
_HY = ":opensource"
HY_V3 = XmlCallFormat(
    block_open=f"<tool_calls{_HY}>",
    block_close=f"</tool_calls{_HY}>",
    call_open=f"<tool_call{_HY}>",
    name_end=f"<tool_sep{_HY}>",
    param_open=f"<arg_key{_HY}>",
    key_end=f"</arg_key{_HY}>",
    value_open=f"<arg_value{_HY}>",
    value_close=f"</arg_value{_HY}>",
    call_close=f"</tool_call{_HY}>",
    read_value=json_unless_string,
)


def invoke_format(prefix: str, block: str) -> XmlCallFormat:
    """The ``<invoke name="..."><parameter name="...">`` shape in a ``block``, its tags
    prefixed with ``prefix``."""
    return XmlCallFormat(
        block_open=f"<{prefix}{block}>",
        block_close=f"</{prefix}{block}>",
        call_open=f'<{prefix}invoke name="',
        name_end='">',
        param_open=f'<{prefix}parameter name="',
        key_end='">',
        value_close=f"</{prefix}parameter>",
        call_close=f"</{prefix}invoke>",
        read_value=json_unless_string,
    )


MINIMAX_M2 = invoke_format("", "minimax:tool_call")
_DSML = "｜DSML｜"  # noqa: RUF001
# DSML marks each parameter string="true|false" after its name.
DEEPSEEK_V32 = replace(
    invoke_format(_DSML, "function_calls"),
    key_end='"',
    attributes_end=">",
    read_value=typed_by_attribute,
)
DEEPSEEK_V4 = replace(
    DEEPSEEK_V32, block_open=f"<{_DSML}tool_calls>", block_close=f"</{_DSML}tool_calls>"
)
MUSE_GLIMMER = invoke_format("atem:", "function_calls")
STEP3 = replace(
    invoke_format("steptml:", ""),
    block_open="<｜tool_calls_begin｜>",  # noqa: RUF001
    block_close="<｜tool_calls_end｜>",  # noqa: RUF001
    wrap_open="<｜tool_call_begin｜>",  # noqa: RUF001
    wrap_close="<｜tool_call_end｜>",  # noqa: RUF001
    wrap_prefix="function<｜tool_sep｜>",  # noqa: RUF001
)
# MiniCPM5: bare <function name="..."> calls; text with <, & or newlines in a CDATA section.
MINICPM5 = XmlCallFormat(
    call_open='<function name="',
    name_end='">',
    param_open='<param name="',
    key_end='">',
    value_close="</param>",
    call_close="</function>",
)


class Qwen3CoderReader(XmlCallReader):
    """``qwen3_coder``, ``qwen3_xml``, ``step3p5``: ``<function=NAME><parameter=KEY>``."""

    FORMAT = QWEN3_CODER


class Qwen3Reader(XmlCallReader):
    """``qwen3``, ``mimo``: ``<tool_call>`` holding Hermes JSON or Qwen3-Coder tags."""

    FORMAT = QWEN3


class SeedOssReader(XmlCallReader):
    """``seed_oss``: Qwen3-Coder tags in ``<seed:tool_call>``."""

    FORMAT = SEED_OSS


class GlmReader(XmlCallReader):
    """``glm45``, ``glm47``, ``poolside_v1``: ``<tool_call>NAME<arg_key>..<arg_value>``."""

    FORMAT = GLM


class HyV3Reader(XmlCallReader):
    """``hy_v3``: GLM's tags with Tencent Hy3's ``:opensource`` suffix, in one block."""

    FORMAT = HY_V3


class MiniMaxM2Reader(XmlCallReader):
    """``minimax_m2``: ``<invoke>`` calls in a ``<minimax:tool_call>`` block."""

    FORMAT = MINIMAX_M2


class DeepSeekV32Reader(XmlCallReader):
    """``deepseek_v32``: DSML ``<invoke>`` calls in a ``function_calls`` block."""

    FORMAT = DEEPSEEK_V32


class DeepSeekV4Reader(XmlCallReader):
    """``deepseek_v4``: DSML ``<invoke>`` calls in a ``tool_calls`` block."""

    FORMAT = DEEPSEEK_V4


class Step3Reader(XmlCallReader):
    """``step3``: ``<steptml:invoke>`` calls between Step 3's call tokens."""

    FORMAT = STEP3


class MiniCpm5Reader(XmlCallReader):
    """``minicpm5``: bare ``<function name="...">`` calls."""

    FORMAT = MINICPM5
