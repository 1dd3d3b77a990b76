"""The images of a request: preprocessed as the checkpoint's image processor does, their
placeholders expanded into soft tokens, and where those sit in the prompt.

Why here: the intake refuses what can never run before a request is queued; a prompt's
images decide its length (each image is `tokens_per_image` prompt tokens, counted against
the context), so they are settled with its tokens. A text prompt is expanded as text,
exactly as transformers' Gemma 3 processor does (each begin-of-image token becomes
"\\n\\n<boi>" + the soft tokens + "<eoi>\\n\\n", then the whole text is tokenized); a prompt
of token ids keeps its ids and gets the soft tokens and end-of-image token after each
begin-of-image id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vllm_tvm.artifacts.runtime_spec import VisionSpec
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.multimodal.image_processors import (
    ImageProcessor,
    image_processor_from_config,
)
from vllm_tvm.runtime.requests.prompt_images import PromptImages
from vllm_tvm.runtime.tokenization import Tokenizer

PREPROCESSOR_CONFIG = "preprocessor_config.json"


def pixel_digest(pixels: np.ndarray, grid: tuple[int, ...] = ()) -> str:
    """sha256 of one image's pixel values, their shape and its patch `grid` (what tells two
    images apart: two grids can hold equal bytes)."""
    digest = hashlib.sha256(repr((pixels.shape, tuple(int(n) for n in grid))).encode())
    digest.update(np.ascontiguousarray(pixels).tobytes())
    return digest.hexdigest()


class ImageIntake:
    """Turns a prompt and its images into prompt ids and `PromptImages`."""

    def __init__(
        self,
        vision: VisionSpec,
        processor: ImageProcessor | None,
        tokenizer: Tokenizer | None,
        max_image_prefill: int,
        unavailable: str = "",
    ) -> None:
        """`max_image_prefill`: the most tokens one prefill chunk may take (an image
        prompt's first chunk runs through its last image). `processor` None: images are
        refused, saying `unavailable`."""
        self.vision = vision
        self.processor = processor
        self.unavailable = unavailable
        self.tokenizer = tokenizer
        self.max_image_prefill = max_image_prefill

    @classmethod
    def from_checkpoint(
        cls, model_path: Path, vision: VisionSpec, tokenizer: Tokenizer | None, budget: int
    ) -> ImageIntake:
        """The intake of `model_path`'s image processor; a checkpoint without its
        preprocessor config serves text only (images refused naming the file)."""
        config_path = Path(model_path) / PREPROCESSOR_CONFIG
        if not config_path.is_file():
            return cls(
                vision, None, tokenizer, budget, f"{model_path} has no {PREPROCESSOR_CONFIG}"
            )
        processor = image_processor_from_config(json.loads(config_path.read_text()))
        return cls(vision, processor, tokenizer, budget)

    @property
    def placeholder(self) -> str | None:
        """The text a chat's image part becomes (the begin-of-image token); None without a
        tokenizer or an image processor (images are then refused)."""
        if self.tokenizer is None or self.processor is None:
            return None
        return self._token(self.vision.begin_image_token_id)

    def expand_text(self, text: str, images: Sequence[DecodedImage]) -> str:
        """`text` with each begin-of-image token expanded as Gemma 3's processor does."""
        assert self.tokenizer is not None  # a text prompt is refused without one
        begin = self._token(self.vision.begin_image_token_id)
        found = text.count(begin)
        self._check_count(found, len(images), begin)
        soft = self._token(self.vision.image_token_id) * self.vision.tokens_per_image
        block = f"\n\n{begin}{soft}{self._token(self.vision.end_image_token_id)}\n\n"
        return text.replace(begin, block)

    def expand_ids(self, prompt_ids: list[int], images: Sequence[DecodedImage]) -> list[int]:
        """Token ids with the soft tokens and end-of-image id after each begin-of-image id
        (one already followed by its soft tokens, as an expanded text tokenizes, is kept)."""
        vision = self.vision
        begin = vision.begin_image_token_id
        self._check_count(prompt_ids.count(begin), len(images), f"token id {begin}")
        soft = [vision.image_token_id] * vision.tokens_per_image
        expanded: list[int] = []
        for index, token in enumerate(prompt_ids):
            expanded.append(token)
            following = prompt_ids[index + 1 : index + 1 + len(soft)]
            if token == begin and following != soft:
                expanded.extend([*soft, vision.end_image_token_id])
        return expanded

    def prompt_images(self, prompt_ids: list[int], images: Sequence[DecodedImage]) -> PromptImages:
        """Where each image's soft tokens start in the expanded `prompt_ids`, and its pixel
        values; refuses a prompt whose images cannot be prefilled in one chunk."""
        vision = self.vision
        starts = tuple(
            index + 1
            for index, token in enumerate(prompt_ids)
            if token == vision.begin_image_token_id
        )
        span = vision.tokens_per_image
        for start in starts:
            if prompt_ids[start : start + span] != [vision.image_token_id] * span:
                raise ValueError(
                    f"the begin-of-image token at position {start - 1} is not followed by "
                    f"{span} image tokens (id {vision.image_token_id})"
                )
        self._check_prefill_floor(starts[-1] + span)
        pixels = self._processor().preprocess(list(images)).pixel_values
        expected = (3, *vision.image_size)
        if tuple(pixels.shape[1:]) != expected:
            raise ValueError(
                f"the image processor made pixel values {tuple(pixels.shape[1:])}; the vision "
                f"tower takes {expected}"
            )
        digests = tuple(pixel_digest(p) for p in pixels)
        return PromptImages(starts, (span,) * len(starts), pixels.astype(np.float32), digests)

    def _check_prefill_floor(self, floor: int) -> None:
        """Refuses images that end past what one prefill chunk may take."""
        if floor > self.max_image_prefill:
            raise ValueError(
                f"the prompt's images end at token {floor}, past the {self.max_image_prefill} "
                "tokens one prefill chunk may take (max_num_batched_tokens): a prompt is "
                "prefilled through its last image in one chunk"
            )

    def _processor(self) -> ImageProcessor:
        """The image processor; refuses images when the checkpoint has none."""
        if self.processor is None:
            raise ValueError(f"image input is unavailable: {self.unavailable}")
        return self.processor

    def _token(self, token_id: int) -> str:
        assert self.tokenizer is not None
        token = self.tokenizer.id_to_token(token_id)
        if token is None:
            raise ValueError(f"the tokenizer has no token for image token id {token_id}")
        return token

    @staticmethod
    def _check_count(found: int, images: int, placeholder: str) -> None:
        if found != images:
            raise ValueError(
                f"the prompt has {found} image placeholders ({placeholder}) for {images} "
                "images: each image needs one"
            )
