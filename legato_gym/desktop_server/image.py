"""legato's one PNG writer and one X framebuffer (XWD) reader, standard library only.

The in-desktop server encodes ``/screenshot`` with them inside the sandbox, where only the standard
library is sure to be there; :mod:`legato_gym.png` writes its numpy-filtered rows through
:func:`png_from_rows`, and the host's display (``legato_gym.backends.local.display``) maps the pixels
where :func:`read_xwd_header` says they start.

Example:
    >>> png = png_from_rows(2, 1, b"\\x00" + bytes(6))  # one unfiltered row of two black pixels
    >>> png_size(png)
    (2, 1)
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import NamedTuple

from .pointer import Pointer, paste_pointer

__all__ = ["PNG_SIGNATURE", "Framebuffer", "XwdHeader", "png_chunk", "png_from_rows", "png_size", "read_xwd_header"]

#: The eight bytes every PNG file starts with.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

_IHDR = struct.Struct(">IIBBBBB")
_LENGTH = struct.Struct(">I")
_XWD_HEADER = struct.Struct(">25I")


def png_chunk(kind: bytes, data: bytes | bytearray | memoryview) -> bytes:
    """One PNG chunk: length, type, data and the CRC of type and data."""
    return _LENGTH.pack(len(data)) + kind + bytes(data) + _LENGTH.pack(zlib.crc32(data, zlib.crc32(kind)))


def png_from_rows(width: int, height: int, rows: bytes | bytearray | memoryview, level: int = 1) -> bytes:
    """PNG bytes (8-bit RGB, no interlace) of an image given as its filtered scanlines.

    Args:
        width: pixels per row.
        height: rows.
        rows: ``height`` scanlines of ``1 + 3 * width`` bytes each: a PNG filter type, then the filtered
            RGB bytes (type 0, *None*: the pixels themselves).
        level: zlib compression level, 0..9.
    """
    return b"".join(
        (
            PNG_SIGNATURE,
            png_chunk(b"IHDR", _IHDR.pack(width, height, 8, 2, 0, 0, 0)),
            png_chunk(b"IDAT", zlib.compress(rows, level)),
            png_chunk(b"IEND", b""),
        )
    )


def png_size(data: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """``(width, height)`` from a PNG's header, or ``None`` when ``data`` does not start like a PNG."""
    head = bytes(data[:24])
    if len(head) < 24 or not head.startswith(PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


class XwdHeader(NamedTuple):
    """Where the pixels of an XWD file (Xvfb's ``-fbdir`` screen) are, and their layout.

    Attributes:
        width: pixels per row.
        height: rows.
        bits_per_pixel: 32 for Xvfb's depth 24 (blue, green, red, unused), which is all legato reads.
        bytes_per_line: the row stride (at least ``4 * width``).
        offset: where the first row starts in the file (after the header and the colour map).
    """

    width: int
    height: int
    bits_per_pixel: int
    bytes_per_line: int
    offset: int


def read_xwd_header(path: str | os.PathLike[str]) -> XwdHeader:
    """The header of the XWD file at ``path`` (the fields legato needs of its 25 big-endian words)."""
    with open(path, "rb") as f:
        header = _XWD_HEADER.unpack(f.read(_XWD_HEADER.size))
    header_size, ncolors = header[0], header[19]
    return XwdHeader(header[4], header[5], header[11], header[12], header_size + 12 * ncolors)


class Framebuffer:
    """The X screen as Xvfb's ``-fbdir`` XWD file (memory-mapped by Xvfb, so reads are live).

    Args:
        path: the file.

    Raises:
        ValueError: the screen's pixels are not 32-bit.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.header = read_xwd_header(path)
        self.width, self.height = self.header.width, self.header.height
        if self.header.bits_per_pixel != 32:
            bpp = self.header.bits_per_pixel
            raise ValueError(f"framebuffer {path}: {bpp} bits per pixel; start Xvfb with depth 24")

    def bgrx(self) -> bytes:
        """The screen's rows as they are in the file (4 bytes a pixel: blue, green, red, unused)."""
        with open(self.path, "rb") as f:
            f.seek(self.header.offset)
            return f.read(self.header.bytes_per_line * self.height)

    def png(self, level: int = 1, pointer: Pointer | None = None) -> bytes:
        """The screen as PNG bytes (unfiltered rows; zlib at ``level``), ``pointer`` pasted in (:mod:`.pointer`)."""
        raw, stride_in = self.bgrx(), self.header.bytes_per_line
        w, h = self.width, self.height
        if stride_in != 4 * w:
            raw = b"".join(raw[y * stride_in : y * stride_in + 4 * w] for y in range(h))
        rgb = bytearray(3 * w * h)
        rgb[0::3] = raw[2::4]
        rgb[1::3] = raw[1::4]
        rgb[2::3] = raw[0::4]
        if pointer is not None:
            paste_pointer(rgb, w, h, pointer)
        stride = 3 * w
        rows = bytearray((stride + 1) * h)  # each row's filter byte stays 0 (None)
        for y in range(h):
            start = y * (stride + 1) + 1
            rows[start : start + stride] = rgb[y * stride : (y + 1) * stride]
        return png_from_rows(w, h, rows, level)
