"""A deterministic toy tokenizer and chat template, so the reference server's token ids are real ids.

The tokenizer is not a model's tokenizer; it only has to be stable, cheap and faithful in shape:

* **Text** is split into pieces by ``\\s*\\w+|\\s*[^\\w\\s]|\\s+`` (a word or a punctuation mark with the
  whitespace before it, like byte-level BPE's ``Ġword``). A piece's id is
  ``FIRST_TEXT_ID + blake2b(piece) mod (VOCAB_SIZE - FIRST_TEXT_ID)``: the same text always gives the same
  ids, in every process.
* **Special tokens** follow Qwen's names: ``<|im_start|>`` (1), ``<|im_end|>`` (2), ``<|vision_start|>`` (3),
  ``<|vision_end|>`` (4), ``<|image_pad|>`` (5), ``<|endoftext|>`` (6).
* **Images** become ``<|vision_start|>``, N ``<|image_pad|>`` tokens and ``<|vision_end|>``, with N as
  Qwen3-VL counts it: one token per 32x32 pixel patch of the image (read from the PNG/JPEG header), at
  least 4; an image whose size cannot be read counts one token per 768 bytes. A 1920x1080 screenshot costs
  2040 tokens, as on Qwen3-VL.
* **Chat template** (ChatML, as Qwen's): per message ``<|im_start|>role\\n`` + content + ``<|im_end|>\\n``,
  then ``<|im_start|>assistant\\n`` to prompt the reply. A reply is its text's tokens then ``<|im_end|>``,
  so a multi-turn prompt that carries the previous reply repeats the same ids (and hits the prefix cache).

Every prompt token also has a *cache key*: its id, except that image-pad tokens are keyed by the image's
content hash, so two different screenshots of the same size do not share a cache block (vLLM keys
multimodal blocks by the media hash the same way).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from legato_gym.png import png_size

__all__ = [
    "FIRST_TEXT_ID",
    "IMAGE_PAD",
    "IM_END",
    "IM_START",
    "VISION_END",
    "VISION_START",
    "VOCAB_SIZE",
    "PromptTokens",
    "ToyTokenizer",
    "image_size",
]

VOCAB_SIZE = 151_643
FIRST_TEXT_ID = 64
IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, END_OF_TEXT = 1, 2, 3, 4, 5, 6
SPECIAL_TOKENS = {
    IM_START: "<|im_start|>",
    IM_END: "<|im_end|>",
    VISION_START: "<|vision_start|>",
    VISION_END: "<|vision_end|>",
    IMAGE_PAD: "<|image_pad|>",
    END_OF_TEXT: "<|endoftext|>",
}
_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")
_PATCH = 32


@dataclass(frozen=True)
class PromptTokens:
    """A tokenized prompt.

    Attributes:
        ids: the token ids (what ``prompt_token_ids`` returns).
        cache_keys: one hashable key per token, for prefix-cache accounting.
        image_tokens: how many of the ids are image placeholders.
    """

    ids: list[int]
    cache_keys: list[object]
    image_tokens: int


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a PNG or JPEG header, or ``None``."""
    if (size := png_size(data)) is not None:
        return size
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker = data[i + 1]
            length = struct.unpack(">H", data[i + 2 : i + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(width), int(height)
            i += 2 + length
    return None


class ToyTokenizer:
    """The deterministic toy tokenizer described in this module's docstring."""

    def piece_id(self, piece: str) -> int:
        """The id of one text piece."""
        digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
        return FIRST_TEXT_ID + int.from_bytes(digest, "big") % (VOCAB_SIZE - FIRST_TEXT_ID)

    def pieces(self, text: str) -> list[str]:
        """``text`` split into token pieces (their concatenation is ``text``)."""
        return _PIECE.findall(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return [self.piece_id(p) for p in self.pieces(text)]

    def image_tokens(self, url: str) -> tuple[int, str]:
        """How many placeholder tokens an image costs, and its content hash."""
        data = _image_bytes(url)
        digest = hashlib.blake2b(data or url.encode(), digest_size=12).hexdigest()
        size = image_size(data) if data else None
        if size is not None:
            width, height = size
            count = -(-width // _PATCH) * -(-height // _PATCH)
        else:
            count = len(data) // 768 if data else 256
        return max(4, count), digest

    def prompt(self, messages: Sequence[Mapping[str, Any]], tools: Any = None) -> PromptTokens:
        """Tokenize a chat prompt with the ChatML template, ending with the assistant generation prompt."""
        ids: list[int] = []
        keys: list[object] = []
        images = 0

        def text(t: str) -> None:
            new = self.encode(t)
            ids.extend(new)
            keys.extend(new)

        def special(token: int) -> None:
            ids.append(token)
            keys.append(token)

        if tools:
            special(IM_START)
            text("system\n# Tools\n" + _json_text(tools))
            special(IM_END)
            text("\n")
        for message in messages:
            special(IM_START)
            text(f"{message.get('role', 'user')}\n")
            content = message.get("content")
            if isinstance(content, str):
                text(content)
            elif isinstance(content, list):
                for part in content:
                    if not isinstance(part, Mapping):
                        continue
                    if part.get("type") == "text":
                        text(str(part.get("text", "")))
                    elif part.get("type") in ("image_url", "image"):
                        url = _image_url(part)
                        count, digest = self.image_tokens(url)
                        special(VISION_START)
                        ids.extend([IMAGE_PAD] * count)
                        keys.extend((digest, i) for i in range(count))
                        special(VISION_END)
                        images += count
            special(IM_END)
            text("\n")
        special(IM_START)
        text("assistant\n")
        return PromptTokens(ids=ids, cache_keys=keys, image_tokens=images)


def _json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _image_url(part: Mapping[str, Any]) -> str:
    value = part.get("image_url", part.get("image", ""))
    if isinstance(value, Mapping):
        value = value.get("url", "")
    return str(value)


def _image_bytes(url: str) -> bytes:
    if url.startswith("data:") and "," in url:
        header, _, payload = url.partition(",")
        if header.endswith(";base64"):
            try:
                return base64.b64decode(payload, validate=False)
            except ValueError:
                return b""
        return payload.encode()
    return b""
