"""Real chat templates of the families beyond Hermes, Llama, Mistral, Qwen3-Coder and DeepSeek
V3, rendering assistant turns with known calls for the tool-parser round trips.

Each ``Case`` names the template, the parser that reads it, the assistant header its
generation prompt ends with and the end-of-turn text. Where a template renders content after
the calls (Gemma 4) or not at all (MiniMax-M1), the case has no content: parsers keep the
text before the calls only. ``AUTO_ONLY`` lists templates that cannot render a call turn here
(their own Jinja fails, or they render calls only inside the content) but whose markers
``auto`` must still recognise.
"""

from __future__ import annotations

from dataclasses import replace

from tool_parser_cases import CONTENT, FILE, IM, RICH, WEATHER, Case

DEEPSEEK_EOS = "<｜end▁of▁sentence｜>"  # noqa: RUF001
DSML_HEADER = "<｜Assistant｜></think>"  # noqa: RUF001
LAGUNA = ("<assistant>", "</assistant>\n")
GIGACHAT = ("assistant<|role_sep|>\n", "<|message_sep|>\n\n")

_RENDERINGS = [
    Case("GLM-4.6", "glm45", "<|assistant|>", "", (RICH, FILE), CONTENT, reasoning_parser="qwen3"),
    Case(
        "GLM-4.7-Flash",
        "glm47",
        "<|assistant|>",
        "",
        (FILE, RICH),
        CONTENT,
        reasoning_parser="deepseek_r1",
        detected="glm45",
    ),
    Case(
        "Spark2.5",
        "glm47",
        "<|Bot|>",
        DEEPSEEK_EOS,
        (RICH, WEATHER),
        CONTENT,
        reasoning_parser="deepseek_r1",
        detected="glm45",
    ),
    Case(
        "poolside-Laguna-S-2.1",
        "poolside_v1",
        *LAGUNA,
        (RICH, FILE),
        CONTENT,
        reasoning_parser="qwen3",
        detected="glm45",
    ),
    Case(
        "poolside-Laguna-XS-2.1",
        "poolside_v1",
        *LAGUNA,
        (FILE, RICH),
        CONTENT,
        reasoning_parser="deepseek_r1",
        detected="glm45",
    ),
    Case(
        "poolside-Laguna-XS.2",
        "poolside_v1",
        *LAGUNA,
        (RICH,),
        reasoning_parser="deepseek_r1",
        detected="glm45",
    ),
    Case(
        "inclusionai-ling-3.0-flash",
        "glm45",
        "<role>ASSISTANT</role>",
        "<|role_end|>",
        (RICH, FILE),
        CONTENT,
        reasoning_parser="qwen3",
    ),
    Case(
        "tencent-Hy3",
        "hy_v3",
        "<｜hy_Assistant:opensource｜><think:opensource></think:opensource>",  # noqa: RUF001
        "<｜hy_eos:opensource｜>",  # noqa: RUF001
        (RICH, FILE),
        CONTENT,
    ),
    Case("MiniMax-M2", "minimax_m2", "]~b]ai\n", "[e~[\n", (RICH, FILE), CONTENT),
    Case(
        "deepseek-ai-DeepSeek-V3.2",
        "deepseek_v32",
        DSML_HEADER,
        DEEPSEEK_EOS,
        (RICH, FILE),
        CONTENT,
    ),
    Case(
        "deepseek-ai-DeepSeek-V4", "deepseek_v4", DSML_HEADER, DEEPSEEK_EOS, (FILE, RICH), CONTENT
    ),
    Case(
        "deepseek-ai-DeepSeek-V4-Flash-0731",
        "deepseek_v4",
        DSML_HEADER,
        DEEPSEEK_EOS,
        (RICH,),
    ),
    Case(
        "ByteDance-Seed-OSS",
        "seed_oss",
        "<seed:bos>assistant\n",
        "<seed:eos>",
        (RICH, FILE),
        CONTENT,
    ),
    Case("openbmb-MiniCPM5-1B", "minicpm5", *IM, (RICH, FILE), CONTENT),
    Case("google-gemma-4-31B-it", "gemma4", "<|turn>model\n", "<|tool_response>", (RICH, FILE)),
    Case(
        "google-gemma-4-31B-it-interleaved",
        "gemma4",
        "<|turn>model\n",
        "<turn|>\n",
        (FILE, WEATHER),
    ),
    Case("Apertus-8B-Instruct", "apertus", "<|assistant_start|>", "", (RICH, FILE), CONTENT),
    Case("GigaChat3-10B-A1.8B", "gigachat3", *GIGACHAT, (RICH,), CONTENT),
    Case("GigaChat3.1-10B-A1.8B", "gigachat3", *GIGACHAT, (FILE,), CONTENT),
    Case(
        "Apriel-1.6-15b-Thinker-fixed",
        "jamba",
        "<|begin_assistant|>\n",
        "",
        (RICH, FILE),
        CONTENT,
    ),
    Case(
        "unsloth-Apriel-1.5",
        "jamba",
        "<|assistant|>\n",
        "\n<|end|>\n</s>",
        (FILE, RICH),
        CONTENT,
        variables={"eos_token": "</s>"},
    ),
    Case(
        "MiniMax-M1",
        "hunyuan_a13b",
        "<beginning_of_sentence>ai name=assistant\n",
        "<end_of_sentence>\n",
        (RICH, FILE),
        detected="jamba",
    ),
    Case(
        "moonshotai-Kimi-K2",
        "kimi_k2",
        "<|im_assistant|>assistant<|im_middle|>",
        "<|im_end|>",
        (RICH, FILE),
        CONTENT,
    ),
]

# The prefix test cuts these every 5th character, not every 2nd, to keep its time: the
# renderings are long and many, and the random stream splits still cut at every offset.
FAMILY_CASES = [replace(case, prefix_stride=5) for case in _RENDERINGS]

AUTO_ONLY = {
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "fireworks-ai-llama-3-firefunction-v2": "phi4_mini_json",
    "Kimi-K2-Instruct": "kimi_k2",
    "Kimi-K2-Thinking": "kimi_k2",
    "muse-glimmer": "muse_glimmer",
}
