"""legato_gym.png: encoding without Pillow (what desktop workers send instead of raw pixels), decoding, checks."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from legato_gym.bounds import ReadCaps
from legato_gym.desktop_server.image import png_from_rows
from legato_gym.errors import ConfigError, DesktopCrashed, ReplyTooLarge
from legato_gym.png import PNG_SIGNATURE, check_screenshot, decode_png, encode_png, png_size


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


def _pillow_png(image: np.ndarray, **kwargs: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG", **kwargs)
    return out.getvalue()


def test_decode_png_reads_legato_pngs_and_any_other_png_to_the_same_pixels() -> None:
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (31, 45, 3), dtype=np.uint8)
    image[:10] = image[0]
    unfiltered = png_from_rows(45, 31, np.hstack([np.zeros((31, 1), np.uint8), image.reshape(31, -1)]).tobytes())
    rgba = np.dstack([image, np.full(image.shape[:2], 255, np.uint8)])
    for data in (encode_png(image), unfiltered, _pillow_png(image, optimize=True), _pillow_png(rgba)):
        decoded = decode_png(data)
        assert decoded.dtype == np.uint8
        np.testing.assert_array_equal(decoded, image)
        np.testing.assert_array_equal(decode_png(data, (31, 45, 3)), image)
        buffer = bytearray(image.size + 5)  # the pixels are written into a caller's buffer, in place
        pixels = np.frombuffer(buffer, np.uint8, count=image.size)
        decode_png(data, image.shape, pixels)
        np.testing.assert_array_equal(pixels.reshape(image.shape), image)
        with pytest.raises(ValueError, match=r"expected shape \[45, 31, 3\]"):
            decode_png(data, (45, 31, 3))
    with pytest.raises(ValueError, match="cannot hold"):
        decode_png(encode_png(image), image.shape, np.zeros(10, np.uint8))


def test_check_screenshot_reads_the_header_before_anything_decodes() -> None:
    caps = ReadCaps(screenshot_bytes=4096)
    small = encode_png(np.zeros((8, 8, 3), np.uint8))
    assert check_screenshot(small, (8, 8), caps) == small
    with pytest.raises(ReplyTooLarge, match="larger than the screen"):
        check_screenshot(small, (4, 8), caps)
    with pytest.raises(ReplyTooLarge, match="over the cap"):
        check_screenshot(small + bytes(4096), (8, 8), caps)
    with pytest.raises(DesktopCrashed, match="not a PNG"):
        check_screenshot(b"GIF89a" + bytes(30), (8, 8), caps)
