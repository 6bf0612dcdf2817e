"""legato's one PNG module: screenshots encoded and decoded with the standard library and numpy.

Desktop workers encode each screenshot here when the backend does not hand over PNG bytes of its own
(OSWorld's server returns PNG from ``/screenshot``; see :attr:`legato_gym.contract.Observation.png`), so the
driver process never spends its CPU on compression. Worker processes may run under another interpreter,
hence no dependency beyond numpy.

The encoding is chosen for speed: every row uses PNG's *Up* filter (a vectorised subtraction of the row
above) and zlib runs at level 1. On a 1920x1080 fake desktop that gives 32 KiB in about 8 ms, where
Pillow's default adaptive filtering at level 1 gives the same size in about 20-30 ms; without a filter the
output is ~15% larger for no gain in speed. Screens of text and flat colours repeat vertically, which is
what the Up filter turns into runs of zeros. The chunks are written by the one stdlib PNG writer that the
in-desktop server uses too (:func:`legato_gym.desktop_server.image.png_from_rows`).

Decoding (:func:`decode_png`) is the inverse: PNGs whose rows all use the *None* or *Up* filter (legato's
own, and the in-desktop server's) are read with zlib and numpy; any other PNG (OSWorld's server writes its
screenshots with Pillow) through Pillow, imported only then. A screenshot from a desktop legato does not
control (a VM's server) is checked by :func:`check_screenshot` before anything decodes it.

Example:
    >>> import numpy as np
    >>> data = encode_png(np.zeros((2, 3, 3), np.uint8))
    >>> png_size(data)
    (3, 2)
    >>> decode_png(data).shape
    (2, 3, 3)
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import numpy.typing as npt

from legato_gym.bounds import ReadCaps
from legato_gym.desktop_server.image import PNG_SIGNATURE, png_from_rows, png_size
from legato_gym.errors import ConfigError, DesktopCrashed, ReplyTooLarge

__all__ = ["PNG_SIGNATURE", "check_screenshot", "decode_png", "encode_png", "png_size"]

_FILTER_NONE = 0
_FILTER_UP = 2
#: IHDR after width and height: 8 bits a sample, RGB, deflate, the standard filters, no interlace.
_RGB8 = bytes([8, 2, 0, 0, 0])


def encode_png(image: npt.NDArray[np.uint8], *, level: int = 1) -> bytes:
    """Encode an ``(H, W, 3)`` ``uint8`` RGB array as PNG bytes (8-bit RGB, no interlace).

    Args:
        image: the screenshot.
        level: zlib compression level, 0..9; 1 is the fast default.

    Raises:
        ConfigError: the array is not ``(H, W, 3)`` ``uint8``, or ``level`` is out of range.
    """
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8 or 0 in array.shape:
        raise ConfigError(
            f"a screenshot must be a non-empty (H, W, 3) uint8 array, got shape {array.shape} dtype {array.dtype}"
        )
    if not 0 <= level <= 9:
        raise ConfigError(f"PNG compression level={level!r} must be between 0 and 9")
    height, width, _ = array.shape
    flat = array.reshape(height, width * 3)
    rows = np.empty((height, width * 3 + 1), dtype=np.uint8)
    rows[:, 0] = _FILTER_UP
    rows[0, 1:] = flat[0]  # the row above the first one counts as zeros
    np.subtract(flat[1:], flat[:-1], out=rows[1:, 1:])  # uint8 arithmetic wraps modulo 256, as PNG wants
    return png_from_rows(width, height, rows.data, level)


def check_screenshot(png: bytes, screen: tuple[int, int], caps: ReadCaps = ReadCaps.DEFAULT) -> bytes:
    """``png`` if it is a PNG of at most ``caps.screenshot_bytes`` and no larger than ``screen``, read from its
    header before anything decodes it (a small PNG can claim a huge image).

    Raises:
        ReplyTooLarge: the bytes or the dimensions are over their caps.
        DesktopCrashed: it is not a PNG.
    """
    if len(png) > caps.screenshot_bytes:
        raise ReplyTooLarge(f"a screenshot of {len(png)} bytes is over the cap of {caps.screenshot_bytes} bytes")
    size = png_size(png)
    if size is None:
        raise DesktopCrashed(f"the desktop's screenshot is not a PNG (it starts {png[:16]!r})")
    if size[0] > screen[0] or size[1] > screen[1]:
        raise ReplyTooLarge(f"a screenshot of {size[0]}x{size[1]} is larger than the screen, {screen[0]}x{screen[1]}")
    return png


def decode_png(
    data: bytes | bytearray | memoryview,
    shape: tuple[int, ...] | None = None,
    out: npt.NDArray[np.uint8] | None = None,
) -> npt.NDArray[np.uint8]:
    """The ``(H, W, 3)`` ``uint8`` RGB pixels of a PNG.

    Args:
        data: the PNG bytes.
        shape: the ``(H, W, 3)`` the image must have (``None``: whatever its header says).
        out: a writable ``uint8`` array of ``H * W * 3`` elements to decode into (then ``shape`` is required), so
            that the pixels are written once; it is returned reshaped.

    Raises:
        ValueError: the image is not of ``shape``, or ``out`` does not fit it.
    """
    data = bytes(data)
    size = png_size(data)
    if size is not None and data[24:29] == _RGB8:
        width, height = size
        if shape is not None and tuple(shape) != (height, width, 3):
            raise ValueError(f"PNG screenshot is {[height, width, 3]}, expected shape {list(shape)}")
        rows = _idat_rows(data, height, width * 3)
        if rows is not None:
            pixels = _target(out, (height, width, 3))
            flat = pixels.reshape(height, width * 3)
            filters = rows[:, 0]
            if bool(np.all(filters == _FILTER_UP)):  # each row adds the one above (a row loop beats cumsum 20x)
                flat[0] = rows[0, 1:]
                for y in range(1, height):
                    np.add(flat[y - 1], rows[y, 1:], out=flat[y])
                return pixels
            if bool(np.all(filters == _FILTER_NONE)):
                flat[:] = rows[:, 1:]
                return pixels
    from PIL import Image

    with Image.open(io.BytesIO(data)) as opened:
        image = np.asarray(opened.convert("RGB"), dtype=np.uint8)
    if shape is not None and image.shape != tuple(shape):
        raise ValueError(f"PNG screenshot is {list(image.shape)}, expected shape {list(shape)}")
    if out is None:
        return image
    pixels = _target(out, image.shape)
    pixels[:] = image
    return pixels


def _idat_rows(data: bytes, height: int, stride: int) -> npt.NDArray[np.uint8] | None:
    """The filtered scanlines (a filter byte, then ``stride`` bytes) of an 8-bit RGB PNG, or ``None`` when its
    image data does not hold ``height`` of them."""
    chunks, pos = [], len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            chunks.append(data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    rows = np.frombuffer(zlib.decompress(b"".join(chunks)), dtype=np.uint8)
    if rows.size != height * (stride + 1):
        return None
    return rows.reshape(height, stride + 1)


def _target(out: npt.NDArray[np.uint8] | None, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
    if out is None:
        return np.empty(shape, dtype=np.uint8)
    if out.size != int(np.prod(shape)) or out.dtype != np.uint8:
        raise ValueError(f"a buffer of {out.size} {out.dtype} cannot hold a screenshot of shape {list(shape)}")
    return out.reshape(shape)
