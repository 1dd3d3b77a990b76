"""How byte-level BPE vocabularies cut text into words before merging, keyed by the name that
GGUF files store in `tokenizer.ggml.pre`.

Why a table: a GGUF file carries the vocabulary and merges but not the pre-tokenizer, only a
name for it. The regexes below are the ones the original HF `tokenizer.json` files use (where
llama.cpp rewrote a regex for its own engine, the HF original is used, since HF `tokenizers`
runs Oniguruma like those files did). Each regex splits every piece left by the previous one
and keeps both matches and the text between them as separate pieces ("isolated"), which is
how llama.cpp applies its regex lists too. An unknown name is refused: guessing a
pre-tokenizer silently changes token ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN35_REGEX = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
_CASED_WORDS = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{suffix}"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{suffix}"
)
GPT4O_REGEX = (
    _CASED_WORDS.replace("{suffix}", "(?:" + _CONTRACTIONS + ")?")
    + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_REGEX = (
    _CASED_WORDS.replace("{suffix}", "")
    + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DEEPSEEK_V3_WORDS = (
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Letter ranges of DeepSeek-LLM's tokenizer.json, written as escapes so that no editor or
# Unicode normalization can alter them (they include look-alikes such as U+212A KELVIN SIGN).
_DEEPSEEK_LLM_LETTERS = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+"
)
_DEEPSEEK_LLM_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_CJK_HANGUL = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_BLOOM_WORDS = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"


@dataclass(frozen=True)
class PreTokenizerSpec:
    """One pre-tokenizer family: isolated regex splits, then the byte-level alphabet."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a word that is itself a vocabulary entry is not merged
    add_bos: bool = False  # llama.cpp's default when the GGUF has no add_bos_token key

    def build(self) -> pre_tokenizers.PreTokenizer:
        """The HF pre-tokenizer: every regex split in order, then bytes mapped to GPT-2 chars."""
        steps: list[pre_tokenizers.PreTokenizer] = [
            pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in self.regexes
        ]
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        return pre_tokenizers.Sequence(steps)


_DEFAULT = PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"))
_GPT2 = PreTokenizerSpec((GPT2_REGEX,))
_STARCODER = PreTokenizerSpec((r"\p{N}", GPT2_REGEX))
_LLAMA3 = PreTokenizerSpec((LLAMA3_REGEX,), ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizerSpec((QWEN2_REGEX,))
_DEEPSEEK3 = PreTokenizerSpec((r"\p{N}{1,3}", _CJK_KANA, _DEEPSEEK_V3_WORDS))

_FAMILIES: dict[str, PreTokenizerSpec] = {
    "default": _DEFAULT,
    **dict.fromkeys(
        (
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ),
        _LLAMA3,
    ),
    **dict.fromkeys(("dbrx", "smaug-bpe"), PreTokenizerSpec((LLAMA3_REGEX,))),
    "deepseek-llm": PreTokenizerSpec(
        (r"[\r\n]", _DEEPSEEK_LLM_LETTERS, _DEEPSEEK_LLM_PUNCT, r"\s+$", _CJK_HANGUL, r"\p{N}+")
    ),
    "deepseek-coder": PreTokenizerSpec(
        (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}")
    ),
    **dict.fromkeys(("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), _DEEPSEEK3),
    "falcon": PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|`]+", GPT2_REGEX, r"[0-9][0-9][0-9]")),
    **dict.fromkeys(
        (
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ),
        _STARCODER,
    ),
    **dict.fromkeys(
        (
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ),
        _GPT2,
    ),
    **dict.fromkeys(
        (
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "stablelm2",
            "hunyuan",
            "solar-open",
            "megrez",
            "grok-2",
        ),
        _QWEN2,
    ),
    "qwen35": PreTokenizerSpec((QWEN35_REGEX,)),
    **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), PreTokenizerSpec((_BLOOM_WORDS,))),
    "viking": PreTokenizerSpec((_BLOOM_WORDS, r"\p{N}")),
    "chatglm-bpe": PreTokenizerSpec((LLAMA3_REGEX,)),
    **dict.fromkeys(("glm4", "glm5"), PreTokenizerSpec((LLAMA3_REGEX,), ignore_merges=True)),
    "tekken": PreTokenizerSpec((TEKKEN_REGEX,), ignore_merges=True, add_bos=True),
    **dict.fromkeys(
        ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), PreTokenizerSpec((GPT4O_REGEX,))
    ),
    **dict.fromkeys(
        ("tiny_aya", "cohere2moe"),
        PreTokenizerSpec((r"\d{1,3}(?=(?:\d{3})*\b)", GPT4O_REGEX)),
    ),
    **dict.fromkeys(
        ("bailingmoe", "bailingmoe2", "llada-moe"),
        PreTokenizerSpec(
            (
                r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
                r"|\s*[\r\n]|\s+(?!\S)|\s+",
            )
        ),
    ),
    "seed-coder": PreTokenizerSpec(
        (
            _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
            r"|\s+(?!\S)|\s+",
        )
    ),
    "ufakzeka": PreTokenizerSpec(
        (r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",)
    ),
    "laguna": PreTokenizerSpec((r"[^\n]+|[\n]+", QWEN2_REGEX)),
    "exaone-moe": PreTokenizerSpec(
        (
            _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
        )
    ),
    "minicpm5": PreTokenizerSpec(
        (
            r"\p{N}{1,3}",
            _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+",
        ),
        ignore_merges=True,
    ),
    "chameleon": PreTokenizerSpec(
        (
            r"<sentinel:[0-9]+>",
            r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            r"([\t\n]|    |  )",
            r"\p{N}",
            r"[\p{P}!-/:-@\[-`{-~]",
            GPT2_REGEX,
        ),
        add_bos=True,
    ),
}

SUPPORTED_PRE_NAMES: tuple[str, ...] = tuple(sorted(_FAMILIES))


def pre_tokenizer_spec(name: str | None) -> PreTokenizerSpec:
    """The pre-tokenizer family of a GGUF `tokenizer.ggml.pre` name.

    A missing name means llama.cpp's "default" family (old conversions stored none).
    Raises `ValueError` naming the unknown value and every accepted one.
    """
    if name is None or name == "":
        return _DEFAULT
    spec = _FAMILIES.get(name)
    if spec is None:
        raise ValueError(
            f"unsupported GGUF tokenizer.ggml.pre {name!r}; "
            f"supported: {', '.join(SUPPORTED_PRE_NAMES)}"
        )
    return spec
