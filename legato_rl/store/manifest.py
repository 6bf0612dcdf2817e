"""The run manifest (``DIR/run.json``, ``legato.run/v0``): the arguments that define a batch, checked on resume.

:func:`open_run` creates a run or checks that a resumed one is given the same arguments;
:func:`read_progress` reads what an interrupted run had done, for the scheduler to pick up from.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from legato_gym import Task
from legato_gym.errors import ConfigError
from legato_rl.store._fields import build
from legato_rl.store.errors import RecordError, storage
from legato_rl.store.files import MANIFEST_FILE, ROLLOUTS_FILE, write_json_atomic
from legato_rl.store.reader import read_records
from legato_rl.store.schema import Status

__all__ = [
    "MANIFEST_SCHEMA",
    "RunManifest",
    "RunProgress",
    "check_manifest",
    "open_run",
    "read_manifest",
    "read_progress",
    "tasks_sha256",
    "write_manifest",
]

#: The schema of ``run.json``.
MANIFEST_SCHEMA = "legato.run/v0"


@dataclass(frozen=True)
class RunManifest:
    """The arguments that define a batch. A resumed run must be given the same ones.

    Attributes:
        tasks_sha256: :func:`tasks_sha256` of the task list.
        n_tasks: how many tasks.
        group: ``--group``.
        oversample: ``--oversample``.
        policy_model: ``--model``.
        policy_version: ``--version``.
        max_steps: ``--max-steps``.
        backend: ``--backend``.
        harness: the harness's name (the prompt format).
        image_max: ``--image-max``.
        created_at: Unix time the run was created (not compared).
        temperature: ``--temperature``; ``None`` in runs made before it was recorded.
        top_p: ``--top-p``; ``None`` in runs made before it was recorded.
        max_tokens: ``--max-tokens``; ``None`` in runs made before it was recorded.

    A field in :attr:`LENIENT` is compared only when both manifests have a value: a run whose manifest
    predates the field resumes with any value.
    """

    tasks_sha256: str
    n_tasks: int
    group: int
    oversample: float
    policy_model: str
    policy_version: str | None
    max_steps: int
    backend: str
    harness: str = "qwen3vl"
    image_max: int = 20
    created_at: float | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None

    #: The fields a resume compares, with the option that sets each.
    COMPARED: ClassVar[dict[str, str]] = {
        "tasks_sha256": "--tasks (the task list)",
        "n_tasks": "--tasks (the number of tasks)",
        "group": "--group",
        "oversample": "--oversample",
        "policy_model": "--model",
        "policy_version": "--version",
        "max_steps": "--max-steps",
        "backend": "--backend",
        "harness": "the harness",
        "image_max": "--image-max",
        "temperature": "--temperature",
        "top_p": "--top-p",
        "max_tokens": "--max-tokens",
    }
    #: Compared fields that older manifests lack (``None``): compared only when both runs have a value.
    LENIENT: ClassVar[frozenset[str]] = frozenset({"temperature", "top_p", "max_tokens"})

    def to_json(self) -> dict[str, Any]:
        return {"schema": MANIFEST_SCHEMA, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunManifest:
        if data.get("schema") != MANIFEST_SCHEMA:
            raise RecordError(f"run manifest schema {data.get('schema')!r} is not {MANIFEST_SCHEMA!r}")
        manifest: RunManifest = build(cls, {k: v for k, v in data.items() if k != "schema"}, "run manifest")
        return manifest


def tasks_sha256(tasks: Iterable[Task]) -> str:
    """A digest of a task list that ignores order and where the tasks were read from."""
    items = []
    for task in tasks:
        data = task.to_json()
        data.pop("source", None)
        items.append(json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str))
    return hashlib.sha256("\n".join(sorted(items)).encode("utf-8")).hexdigest()


def read_manifest(run_dir: str | os.PathLike[str]) -> RunManifest | None:
    """The run's manifest, or ``None`` when there is none yet.

    Raises:
        RecordError: ``run.json`` exists but cannot be read.
    """
    path = Path(run_dir) / MANIFEST_FILE
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path} is not JSON ({exc}); it was damaged") from exc
    if not isinstance(data, dict):
        raise RecordError(f"{path} is not a run manifest")
    return RunManifest.from_json(data)


def write_manifest(run_dir: str | os.PathLike[str], manifest: RunManifest) -> None:
    """Write ``run.json`` atomically."""
    write_json_atomic(Path(run_dir) / MANIFEST_FILE, manifest.to_json())


def check_manifest(existing: RunManifest, wanted: RunManifest, *, run_dir: str | os.PathLike[str] = "") -> None:
    """Refuse to resume a run with arguments that change the batch's meaning.

    Raises:
        ConfigError: naming every argument that differs, with both values.
    """
    diffs = []
    for name, option in RunManifest.COMPARED.items():
        old, new = getattr(existing, name), getattr(wanted, name)
        if name in RunManifest.LENIENT and (old is None or new is None):
            continue
        if old != new:
            diffs.append(f"{option}: the run has {old!r}, this command gives {new!r}")
    if diffs:
        where = f" at {run_dir}" if str(run_dir) else ""
        raise ConfigError(
            f"cannot resume the run{where} with different arguments ("
            + "; ".join(diffs)
            + "). Give the same arguments to resume, or another --out for a new batch."
        )


def open_run(run_dir: str | os.PathLike[str], manifest: RunManifest) -> bool:
    """Create a run's manifest, or check it against an existing one.

    Returns:
        True when the run existed (a resume), False when it was created.

    Raises:
        ConfigError: ``run_dir`` is a file, or the existing run was collected with other arguments (see
            :func:`check_manifest`).
        StorageError: the manifest cannot be read or written (a read-only folder, a full disk).
    """
    root = Path(run_dir)
    if root.exists() and not root.is_dir():
        raise ConfigError(
            f"--out {root} is a file, not a folder; give a folder for the run (a new one for a new batch)"
        )
    with storage(root / MANIFEST_FILE, "read"):
        existing = read_manifest(root)
    if existing is not None:
        check_manifest(existing, manifest, run_dir=root)
        return True
    if (root / ROLLOUTS_FILE).is_file():
        raise ConfigError(f"{root} holds records but no {MANIFEST_FILE}; give another --out for a new batch")
    with storage(root):
        root.mkdir(parents=True, exist_ok=True)
    if manifest.created_at is None:
        manifest = type(manifest)(**{**asdict(manifest), "created_at": time.time()})
    write_manifest(root, manifest)
    return False


@dataclass(frozen=True)
class RunProgress:
    """What an interrupted run had done, read from its records by :func:`read_progress`.

    Attributes:
        ended: ``(group_id, attempt, status)`` of every record that ends its attempt, in the order written.
        tries: ``(group_id, attempt)`` of every ``retried`` record (a try that runs again).
        status_counts: records per status.
    """

    ended: tuple[tuple[str, int, Status], ...] = ()
    tries: tuple[tuple[str, int], ...] = ()
    status_counts: Counter[str] = field(default_factory=Counter)


def read_progress(run_dir: str | os.PathLike[str]) -> RunProgress:
    """Read the records of a run to resume it (:meth:`legato_rl.groups.GroupBook.restore` takes the result).

    Raises:
        RecordError: a complete line is not a valid record.
    """
    ended: list[tuple[str, int, Status]] = []
    tries: list[tuple[str, int]] = []
    counts: Counter[str] = Counter()
    for record in read_records(run_dir):
        status = Status(record.status)
        if status is Status.RETRIED:
            tries.append((record.group_id, record.attempt))
        else:
            ended.append((record.group_id, record.attempt, status))
        counts[status.value] += 1
    return RunProgress(tuple(ended), tuple(tries), counts)
