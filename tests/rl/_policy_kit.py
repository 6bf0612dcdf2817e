"""Shared helpers of the policy tests (client, reference server, probe, key hygiene)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import numpy as np

from legato_gym.png import encode_png
from legato_rl.images import PngDataURL

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine on a fresh event loop."""
    return asyncio.run(coro)


def png_data_url(width: int, height: int, shade: int = 0) -> PngDataURL:
    """A real PNG of the given size (one colour), as a data URL."""
    pixels = np.empty((height, width, 3), np.uint8)
    pixels[...] = (shade % 256, 40, 90)
    return PngDataURL(encode_png(pixels))


def user(text: str, image: str | None = None) -> dict[str, Any]:
    """A user message with optional image."""
    content: list[dict[str, Any]] = []
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": image}})
    content.append({"type": "text", "text": text})
    return {"role": "user", "content": content}


LONG_TEXT = " ".join(f"token{i % 50}" for i in range(300))
