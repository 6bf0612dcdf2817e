"""Shared helpers of the policy tests (client, reference server, probe, key hygiene)."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine on a fresh event loop."""
    return asyncio.run(coro)


def png_data_url(width: int, height: int, shade: int = 0) -> str:
    """A real PNG of the given size (one colour), as a data URL."""
    row = b"\x00" + bytes((shade % 256, 40, 90)) * width
    raw = row * height

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(png).decode()


def user(text: str, image: str | None = None) -> dict[str, Any]:
    """A user message with optional image."""
    content: list[dict[str, Any]] = []
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": image}})
    content.append({"type": "text", "text": text})
    return {"role": "user", "content": content}


LONG_TEXT = " ".join(f"token{i % 50}" for i in range(300))
