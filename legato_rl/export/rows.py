"""One export row per policy step: its fields, the first pass the advantages need, and the screenshots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from legato_rl.store import (
    IMAGE_SCHEME,
    IMAGES_DIR,
    ROLLOUTS_FILE,
    RecordError,
    RolloutRecord,
    StepRecord,
    load_request,
    read_record_dicts,
)

__all__ = ["EXPORT_FIELDS", "IMAGES_FIELD", "image_list", "outcomes", "step_row"]

#: Every field of a row, in order.
EXPORT_FIELDS = (
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
)
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
    response = step.response
    assert record.reward is not None  # completed records have one (checked by group_advantages)
    return {
        "rollout_id": record.rollout_id,
        "task_id": record.task_id,
        "group_id": record.group_id,
        "step_index": step.index,
        "status": record.status,
        "messages": messages,
        "prompt_token_ids": _ids32(prompt_ids, where, "prompt"),
        "prompt_continues": None if step.prompt_ids is None else step.prompt_ids.prefix,
        "response_text": response.content,
        "response_reasoning": response.reasoning,
        "response_token_ids": _ids32(_list(response.token_ids), where, "response"),
        "response_logprobs": _list(response.logprobs),
        "response_tokens": _list(response.tokens),
        "finish_reason": response.finish_reason,
        "reward": record.reward,
        "advantage": advantage,
        "policy_version": step.model.policy_version or record.policy.version,
        "weight_version": step.model.weight_version,
        "grader": record.grader,
    }


def _ids32(ids: list[int] | None, where: str, what: str) -> list[int] | None:
    """``ids``, checked to fit the ``int32`` column (in C: a prompt holds tens of thousands)."""
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


def _list(values: tuple[Any, ...] | None) -> list[Any] | None:
    return None if values is None else list(values)
