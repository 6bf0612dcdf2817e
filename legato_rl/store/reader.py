"""Reading a run back: its records (typed or as the JSON written), and the exact request body of a step.

A record line is committed by its final newline: a line cut short (the process was killed mid-write) is
ignored by :func:`read_records` and cut off by the next :class:`~legato_rl.store.RolloutStore` that opens the
run, so a resumed run appends after the last whole record. :func:`load_request` rebuilds the exact JSON body
that was sent: the message bytes, the image data URLs and the top-level key order are all restored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from legato_rl import _json
from legato_rl.images import PngDataURL
from legato_rl.store.errors import RecordError, RunInProgressError
from legato_rl.store.fields import clip
from legato_rl.store.files import IMAGES_DIR, LOCK_FILE, MANIFEST_FILE, MESSAGES_DIR, ROLLOUTS_FILE, is_being_written
from legato_rl.store.schema import IMAGE_SCHEME, SCHEMA, SHA256_HEX, RequestRef, RolloutRecord

__all__ = ["check_run_dir", "is_run_dir", "load_request", "read_record_dicts", "read_records"]

log = logging.getLogger(__name__)


def load_request(
    run_dir: str | os.PathLike[str],
    request: RequestRef | Mapping[str, Any],
    *,
    inline_images: bool = True,
) -> dict[str, Any]:
    """Rebuild the JSON body a step sent, from its ``request`` field.

    Args:
        run_dir: the run directory.
        request: ``step["request"]`` from a record (or a :class:`RequestRef`).
        inline_images: put each image back as its original data URL (a :class:`~legato_rl.images.PngDataURL`,
            which also holds the PNG bytes); ``False`` keeps the ``legato-image://<sha>`` references (what
            ``legato rl export`` writes by default).

    Returns:
        The body as sent: ``json.dumps`` of it gives the same text as ``json.dumps`` of the original.

    Raises:
        RecordError: a message or image file is missing or altered, or a reference is not a plain sha256 hash.

    Example:
        >>> import json
        >>> from legato_rl import load_request
        >>> for line in open("runs/step-41/rollouts.jsonl"):                 # doctest: +SKIP
        ...     body = load_request("runs/step-41", json.loads(line)["steps"][0]["request"])
    """
    ref = request if isinstance(request, RequestRef) else RequestRef.from_json(request)
    root = Path(run_dir)
    images: dict[str, PngDataURL] = {}
    messages = [_load_message(root, sha, inline_images, images) for sha in ref.messages]
    parts: dict[str, Any] = {}
    if ref.model is not None:
        parts["model"] = ref.model
    parts["messages"] = messages
    parts.update(ref.sampling)
    parts.update(ref.extras)
    if ref.order is None:
        return parts
    missing = set(ref.order) ^ set(parts)
    if missing:
        raise RecordError(f"request.order names keys {sorted(missing)} that the request does not hold")
    return {key: parts[key] for key in ref.order}


def _load_message(root: Path, sha: str, inline: bool, images: dict[str, PngDataURL]) -> Any:
    if not SHA256_HEX.fullmatch(sha):
        raise RecordError(f"message reference {sha!r} is not a sha256 hex hash; refusing to read it")
    message = _json.loads(_read_addressed(root / MESSAGES_DIR / f"{sha}.json", sha, "message"))
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        message["content"] = [_restore_part(root, part, inline, images) for part in content]
    return message


def _restore_part(root: Path, part: Any, inline: bool, images: dict[str, PngDataURL]) -> Any:
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return part
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url.startswith(IMAGE_SCHEME):
        return part
    sha = url[len(IMAGE_SCHEME) :]
    if not SHA256_HEX.fullmatch(sha):
        raise RecordError(f"image reference {clip(url)!r} is not {IMAGE_SCHEME}<sha256 hex>; refusing to read it")
    if not inline:
        return part
    if sha not in images:
        data = _read_addressed(root / IMAGES_DIR / f"{sha}.png", sha, "image")
        images[sha] = PngDataURL(data, sha256=sha)  # checked against its name just now
    restored = images[sha]
    part["image_url"] = {**image, "url": restored} if isinstance(image, dict) else restored
    return part


def _read_addressed(path: Path, sha: str, what: str) -> bytes:
    """The bytes of a content-addressed file, checked against ``sha``.

    Raises:
        RecordError: the file is missing, or its bytes do not hash to ``sha``.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"{what} file {path} is missing: the run directory is incomplete") from None
    if hashlib.sha256(data).hexdigest() != sha:
        raise RecordError(f"{what} file {path} does not match its hash: it was altered or damaged")
    return data


def is_run_dir(run_dir: str | os.PathLike[str]) -> bool:
    """True when ``run_dir`` holds a run (its manifest or its records file)."""
    root = Path(run_dir)
    return (root / MANIFEST_FILE).is_file() or (root / ROLLOUTS_FILE).is_file()


def check_run_dir(run_dir: str | os.PathLike[str], *, allow_in_progress: bool = False) -> Path:
    """Check that ``run_dir`` is a run with records that can be read now, and return it as a path.

    Args:
        run_dir: the ``--out`` directory of a ``legato rl collect`` run.
        allow_in_progress: accept a run that a collect is still writing (its records so far are read).

    Raises:
        RecordError: ``run_dir`` does not exist, is not a directory, or holds no run or no records yet.
        RunInProgressError: a collect still holds the run open and ``allow_in_progress`` is False.
    """
    root = Path(run_dir)
    hint = "give the directory a legato rl collect run wrote (its --out)"
    if not root.exists():
        raise RecordError(f"{root} does not exist; {hint}")
    if not root.is_dir():
        raise RecordError(f"{root} is not a directory; {hint}")
    if not (root / ROLLOUTS_FILE).is_file():
        if (root / MANIFEST_FILE).is_file():
            raise RecordError(f"{root} is a run with no records yet (no {ROLLOUTS_FILE}); let its collect run first")
        raise RecordError(f"{root} is not a legato run: it has neither {MANIFEST_FILE} nor {ROLLOUTS_FILE}; {hint}")
    if not allow_in_progress and is_being_written(root):
        raise RunInProgressError(
            f"{root} is still being written by a legato rl collect (it holds {root / LOCK_FILE}); "
            "wait for the collect to finish, or stop it (run it again later to resume), then retry"
        )
    return root


def read_records(run_dir: str | os.PathLike[str]) -> Iterator[RolloutRecord]:
    """Stream the records of a run, in the order they were written.

    A last line without its newline (a writer killed mid-line) is skipped with a warning.

    Raises:
        RecordError: ``run_dir`` is not a run, or a complete line is not a valid record (with its line number).
    """
    for _, data in _read_lines(Path(run_dir)):
        yield RolloutRecord.from_json(data)


def read_record_dicts(run_dir: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Like :func:`read_records`, as the JSON objects written (for streaming exports)."""
    for _, data in _read_lines(Path(run_dir)):
        yield data


def _read_lines(root: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    path = root / ROLLOUTS_FILE
    if not path.is_file():
        if not root.is_dir():
            raise RecordError(f"{root} is not a directory; give the --out directory of a legato rl collect run")
        raise RecordError(f"{root} is not a legato run: it has no {ROLLOUTS_FILE}")
    with open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            if not line.endswith(b"\n"):
                log.warning(
                    "%s: ignoring a torn last line (%d bytes): its writer was killed mid-record", path, len(line)
                )
                return
            if not line.strip():
                continue
            try:
                data = _json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RecordError(f"{path}:{number}: not a JSON record ({exc}); the file was damaged") from exc
            if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                raise RecordError(f"{path}:{number}: not a {SCHEMA} record")
            yield number, data
