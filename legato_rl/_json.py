"""Compact JSON for the hot paths (request bodies, stored messages, records).

orjson (a dependency) is several times faster than the stdlib on bodies that carry screenshots; the
stdlib takes over for what orjson refuses (an integer beyond 64 bits, a foreign type). Both write the
same compact UTF-8 text for plain JSON values, so a message hashes the same either way.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; an environment may still lack it
    orjson = None  # type: ignore[assignment]

__all__ = ["dumps", "loads"]


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON bytes (no spaces, UTF-8 kept as is). orjson writes a ``NaN`` as ``null``."""
    if orjson is not None:
        try:
            return orjson.dumps(value)  # type: ignore[no-any-return]
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def loads(data: bytes | str) -> Any:
    """Parse JSON (orjson when installed; the stdlib for what orjson refuses, e.g. ``NaN``)."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)
