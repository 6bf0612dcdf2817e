"""Record values to JSON and back: flat dataclasses as dicts, and the checks that name the field at fault."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from legato_rl.store.errors import RecordError

__all__ = ["build", "clip", "plain", "require", "shallow", "tuple_or_none"]


def tuple_or_none(value: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def shallow(value: Any) -> dict[str, Any]:
    """A flat dataclass as a dict, in field order. Unlike ``dataclasses.asdict`` it deep-copies nothing:
    the values are immutable (numbers, strings, tuples of them)."""
    cls = type(value)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(value))
    return {name: getattr(value, name) for name in names}


def plain(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its tuples as lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def clip(value: Any, limit: int = 120) -> str:
    """``value`` for an error message, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def require(data: Mapping[str, Any], keys: Sequence[str], what: str) -> None:
    """Check that ``data`` is a JSON object holding ``keys``.

    Raises:
        RecordError: naming ``what`` and the missing fields.
    """
    if not isinstance(data, Mapping):
        raise RecordError(f"{what} must be a JSON object, got {clip(data)}")
    missing = [key for key in keys if key not in data]
    if missing:
        raise RecordError(f"{what} misses the field(s) {', '.join(missing)}")


def build(cls: Any, data: Any, what: str) -> Any:
    """The dataclass ``cls`` from a JSON object with its fields.

    Raises:
        RecordError: ``data`` is not an object, has unknown fields or lacks a required one.
    """
    if not isinstance(data, Mapping):
        raise RecordError(f"{what} must be a JSON object, got {clip(data)}")
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise RecordError(f"{what} has unknown field(s) {', '.join(sorted(unknown))}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise RecordError(f"{what}: {exc}") from exc
