"""What the vision models' image processors share, written once, equal to the steps of
transformers' PIL backend (`PilBackend`, the one `AutoImageProcessor` picks where torchvision
is absent): resize with Pillow on the uint8 image (so the resized pixels are rounded to
uint8, as theirs are), rescale in float64 then cast to float32, normalise in float32,
channels first. Plus the reading of a `preprocessor_config.json`, where a null means the
processor's default and a step we do not implement is refused by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image


class UnsupportedPreprocessorConfigError(ValueError):
    """A checkpoint's preprocessor_config.json asks for something these processors do not do."""


@dataclass(frozen=True)
class ProcessedImages:
    """The vision encoder's input for a request's images, in their order. `pixel_values` is
    (images, 3, height, width) for fixed-size processors, (patches, patch_dim) for
    patching ones; `image_grid_thw` is (images, 3) int64 for the patching ones, else None."""

    pixel_values: np.ndarray
    image_grid_thw: np.ndarray | None = None


def resize(pixels: np.ndarray, height: int, width: int, resample: Image.Resampling) -> np.ndarray:
    """(H, W, 3) uint8 -> (height, width, 3) uint8 through Pillow's resampling filters."""
    return np.asarray(Image.fromarray(pixels).resize((width, height), resample=resample))


def rescale_and_normalize(
    pixels: np.ndarray,
    rescale_factor: float,
    image_mean: Sequence[float],
    image_std: Sequence[float],
) -> np.ndarray:
    """(H, W, 3) uint8 -> (3, H, W) float32: (pixel * rescale_factor - mean) / std, in the
    same precision at each step as transformers (float64 product, float32 after)."""
    channels_first = np.moveaxis(pixels, -1, 0)
    rescaled = (channels_first.astype(np.float64) * rescale_factor).astype(np.float32)
    mean = np.asarray(image_mean, dtype=np.float32)[:, None, None]
    std = np.asarray(image_std, dtype=np.float32)[:, None, None]
    return (rescaled - mean) / std


def config_value(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """A processor option: the checkpoint's value, or the default where it is absent or null."""
    value = config.get(key)
    return default if value is None else value


def resampling(config: Mapping[str, Any], default: Image.Resampling) -> Image.Resampling:
    """The `resample` option, an integer of PIL's resampling enum in the config."""
    value = config_value(config, "resample", default)
    try:
        return Image.Resampling(value)
    except ValueError:
        accepted = ", ".join(f"{member.value} ({member.name})" for member in Image.Resampling)
        raise UnsupportedPreprocessorConfigError(
            f"resample={value!r} is not a PIL resampling filter; accepted: {accepted}"
        ) from None


def refuse_unsupported_steps(config: Mapping[str, Any], processor: str) -> None:
    """Only the full pipeline is implemented: a config turning a step off is refused."""
    for step in ("do_convert_rgb", "do_resize", "do_rescale", "do_normalize"):
        if config.get(step) is False:
            raise UnsupportedPreprocessorConfigError(
                f"{processor}: {step}=false is not supported; only {step}=true is implemented"
            )


def channel_triple(config: Mapping[str, Any], key: str, default: Sequence[float]) -> tuple:
    """`image_mean` / `image_std`: three floats (a single float applies to every channel)."""
    value = config_value(config, key, default)
    triple = (float(value),) * 3 if isinstance(value, (int, float)) else tuple(map(float, value))
    if len(triple) != 3:
        raise UnsupportedPreprocessorConfigError(f"{key}={value!r}: expected 3 channel values")
    return triple
