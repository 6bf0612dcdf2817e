"""PNG encoding without Pillow (what desktop workers send instead of raw pixels)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from legato_gym.errors import ConfigError
from legato_gym.png import PNG_SIGNATURE, encode_png, png_size


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("shape", [(1, 1, 3), (2, 3, 3), (37, 53, 3), (240, 320, 3)])
@pytest.mark.parametrize("level", [0, 1, 9])
def test_png_decodes_to_the_same_pixels(shape: tuple[int, int, int], level: int) -> None:
    rng = np.random.default_rng(sum(shape) + level)
    image = rng.integers(0, 256, shape, dtype=np.uint8)
    image[: shape[0] // 2] = image[0]  # repeated rows: the Up filter's zero runs
    data = encode_png(image, level=level)
    assert data.startswith(PNG_SIGNATURE)
    assert png_size(data) == (shape[1], shape[0])
    np.testing.assert_array_equal(decode(data), image)


def test_flat_screens_compress_well() -> None:
    image = np.full((1080, 1920, 3), 200, np.uint8)
    image[500:520, 100:900] = (10, 20, 30)
    assert len(encode_png(image)) < 64 * 1024


def test_png_is_deterministic_and_refuses_other_arrays() -> None:
    image = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    assert encode_png(image) == encode_png(image.copy())
    np.testing.assert_array_equal(decode(encode_png(image[:, ::2])), image[:, ::2])  # a strided view
    with pytest.raises(ConfigError, match=r"\(H, W, 3\) uint8"):
        encode_png(image.astype(np.float32))
    with pytest.raises(ConfigError, match=r"\(H, W, 3\) uint8"):
        encode_png(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ConfigError, match="level"):
        encode_png(image, level=10)


def test_png_size_reads_only_png_headers() -> None:
    assert png_size(b"GIF89a" + bytes(30)) is None
    assert png_size(PNG_SIGNATURE) is None
    assert png_size(encode_png(np.zeros((3, 8, 3), np.uint8))) == (8, 3)
