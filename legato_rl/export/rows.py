"""One export row per policy step: its columns, the first pass the advantages need, and the screenshots.

The columns are the record fields that declare one (``column=Column(...)`` in their metadata,
:mod:`legato_rl.store.schema`) and the four computed here for each step (:data:`DERIVED`): the prompt's
messages and whole token ids, the rollout's group advantage and the policy version the step was asked with.
:data:`COLUMNS` puts them in the order of ``legato.export/v0`` (:data:`_ORDER`); a column a record field
declares later follows those.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from legato_rl.store import (
    IMAGE_SCHEME,
    IMAGES_DIR,
    ROLLOUTS_FILE,
    Column,
    RecordError,
    RolloutRecord,
    StepRecord,
    load_request,
    read_record_dicts,
    record_columns,
)

__all__ = ["COLUMNS", "DERIVED", "EXPORT_FIELDS", "IMAGES_FIELD", "image_list", "outcomes", "step_row"]

#: The columns no record field fills, computed for each step by :func:`step_row`. ``json`` is a value written
#: as JSON text (a Parquet ``string`` column whose field metadata says ``encoding: json``).
DERIVED: dict[str, Column] = {
    column.name: column
    for column in (
        Column("messages", "json", nullable=False),
        Column("prompt_token_ids", "list<int32>"),
        Column("advantage", "float64", nullable=False),
        Column("policy_version", "string"),
    )
}
#: The order of the columns of ``legato.export/v0``. A column a record field declares and this does not name
#: comes after these, in field order: a new column is added at the end and the others keep their places.
_ORDER = (
    "rollout_id",
    "task_id",
    "group_id",
    "step_index",
    "status",
    "messages",
    "prompt_token_ids",
    "prompt_continues",
    "response_text",
    "response_reasoning",
    "response_token_ids",
    "response_logprobs",
    "response_tokens",
    "finish_reason",
    "reward",
    "advantage",
    "policy_version",
    "weight_version",
    "grader",
    "reset_kind",
)


def _getter(level: str, path: tuple[str, ...]) -> Callable[[RolloutRecord, StepRecord], Any]:
    """The value of a record field's column in a step's row (``None`` under a ``None``; tuples as lists)."""

    def get(record: RolloutRecord, step: StepRecord) -> Any:
        value: Any = record if level == "record" else step
        for name in path:
            value = getattr(value, name)
            if value is None:
                return None
        return list(value) if isinstance(value, tuple) else value

    return get


def _columns() -> tuple[tuple[Column, Callable[[RolloutRecord, StepRecord], Any] | None], ...]:
    declared = {
        column.name: (column, _getter(level, path)) for column, level, path in record_columns(RolloutRecord, "steps")
    }
    both = sorted(set(declared) & set(DERIVED))
    unknown = [name for name in _ORDER if name not in declared and name not in DERIVED]
    if both or unknown:
        raise TypeError(f"export columns declared twice {both} or not at all {unknown}")
    found: dict[str, tuple[Column, Callable[[RolloutRecord, StepRecord], Any] | None]] = {
        **{name: (column, None) for name, column in DERIVED.items()},
        **declared,
    }
    return tuple(found[name] for name in [*_ORDER, *(name for name in declared if name not in _ORDER)])


_PLAN = _columns()
#: Every column of a row, in order.
COLUMNS: tuple[Column, ...] = tuple(column for column, _ in _PLAN)
#: Every field of a row, in order: the names of :data:`COLUMNS`.
EXPORT_FIELDS = tuple(column.name for column in COLUMNS)
#: The column ``image_column=True`` adds after :data:`EXPORT_FIELDS`.
IMAGES_FIELD = "images"

_INT32 = np.iinfo(np.int32)


def outcomes(root: Path) -> Iterator[dict[str, Any]]:
    """The first pass: only what the advantages need, one small dict at a time."""
    for data in read_record_dicts(root):
        missing = [key for key in ("rollout_id", "group_id", "status", "reward") if key not in data]
        if missing:
            raise RecordError(f"a record of {root / ROLLOUTS_FILE} misses the field(s) {', '.join(missing)}")
        yield {key: data[key] for key in ("rollout_id", "group_id", "status", "reward")}


def step_row(
    root: Path,
    record: RolloutRecord,
    step: StepRecord,
    advantage: float,
    inline: bool,
    images_seen: set[str],
    prompt_ids: list[int] | None,
) -> dict[str, Any]:
    """The row of one step of a completed record, ``messages`` as the list the prompt sent.

    Args:
        root: the run directory.
        record: the step's rollout (``ok`` or ``truncated``).
        step: the step.
        advantage: the rollout's group advantage.
        inline: screenshots as their data URLs, not ``legato-image://<sha>`` references.
        images_seen: shas already checked to exist in this rollout (updated).
        prompt_ids: the step's full prompt token ids (:func:`legato_rl.store.expand_prompt_ids`), or ``None``.

    Raises:
        RecordError: a message or screenshot file is missing, or a token id does not fit ``int32``.
    """
    where = f"rollout {record.rollout_id} step {step.index}"
    try:
        body = load_request(root, step.request, inline_images=inline)
    except RecordError as exc:
        raise RecordError(f"cannot export {where}: {exc}") from exc
    messages = body["messages"]
    if not inline:
        _check_images(root, messages, images_seen, where)
    assert record.reward is not None  # completed records have one (checked by group_advantages)
    derived = {
        "messages": messages,
        "prompt_token_ids": prompt_ids,
        "advantage": advantage,
        "policy_version": step.model.policy_version or record.policy.version,
    }
    row = {column.name: derived[column.name] if get is None else get(record, step) for column, get in _PLAN}
    for column in COLUMNS:
        if column.type == "list<int32>":
            _ids32(row[column.name], where, column.name.removesuffix("_token_ids"))
    return row


def _ids32(ids: list[int] | None, where: str, what: str) -> list[int] | None:
    """``ids``, checked to fit an ``int32`` column (in C: a prompt holds tens of thousands)."""
    if not ids:
        return ids
    if min(ids) < _INT32.min or max(ids) > _INT32.max:
        bad = next(i for i in ids if not _INT32.min <= i <= _INT32.max)
        raise RecordError(
            f"cannot export {where}: its {what} token id {bad} does not fit int32 (vocabularies do); the "
            "server's reply was not a real token id, so the record cannot be trained on as it is"
        )
    return ids


def image_list(root: Path, step: StepRecord, messages: list[Any] | None) -> list[dict[str, Any]]:
    """The step's screenshots as ``datasets`` Image values, in the order its messages reference them.

    ``messages`` are the step's messages with image references (``None``: read them again).
    """
    images = []
    if messages is None:
        messages = load_request(root, step.request, inline_images=False)["messages"]
    for url in _image_refs(messages):
        name = f"{IMAGES_DIR}/{url[len(IMAGE_SCHEME) :]}.png"
        try:
            data = (root / name).read_bytes()
        except OSError as exc:
            raise RecordError(f"cannot export step {step.index}: cannot read {root / name} ({exc})") from exc
        images.append({"bytes": data, "path": name})
    return images


def _image_refs(messages: list[Any]) -> Iterator[str]:
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str) and url.startswith(IMAGE_SCHEME):
                yield url


def _check_images(root: Path, messages: list[Any], seen: set[str], where: str) -> None:
    """Referenced screenshots must exist beside the export's references (a stat, not a hash check)."""
    for url in _image_refs(messages):
        sha = url[len(IMAGE_SCHEME) :]
        if sha in seen:
            continue
        image_path = root / IMAGES_DIR / f"{sha}.png"
        if not image_path.is_file():
            raise RecordError(
                f"cannot export {where}: image file {image_path} is missing: the run directory is incomplete"
            )
        seen.add(sha)
