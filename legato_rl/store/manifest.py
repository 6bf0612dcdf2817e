"""The run manifest (``DIR/run.json``, ``legato.run/v0``): the arguments that define a batch, checked on resume.

:func:`open_run` creates a run or checks that a resumed one is given the same batch: the same tasks in the
same order with the same contents (:class:`TaskDigest`), and the same settings that decide what an attempt
is and how it is scored (:attr:`RunManifest.COMPARED`). Anything else (desktops, timeouts of a call, the
policy's URLs, ...) may change on resume. A resume never rewrites ``run.json``: it stays as the run's first
command wrote it. :func:`read_progress` reads what an interrupted run had done, for the scheduler to pick up
from.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from legato_gym import Task
from legato_gym.errors import ConfigError
from legato_rl.store.errors import RecordError, storage
from legato_rl.store.fields import build, clip
from legato_rl.store.files import MANIFEST_FILE, ROLLOUTS_FILE, write_json_atomic
from legato_rl.store.reader import read_records
from legato_rl.store.schema import Status

__all__ = [
    "MANIFEST_SCHEMA",
    "RunManifest",
    "RunProgress",
    "TaskDigest",
    "check_manifest",
    "compare_tasks",
    "open_run",
    "read_manifest",
    "read_progress",
    "task_digests",
    "tasks_sha256",
    "write_manifest",
]

#: The schema of ``run.json``.
MANIFEST_SCHEMA = "legato.run/v0"


@dataclass(frozen=True)
class TaskDigest:
    """One task of a run as its manifest keeps it: its id, its domain and a digest of each of its parts.

    Attributes:
        task_id: the task's id.
        domain: its domain, or ``None``.
        parts: a short sha256 (16 hex digits) of each part of the task: ``instruction``, ``domain``, and each
            key of its config as ``config.<key>`` (``config.evaluator``, ``config.config`` (the setup), ...).
            Where the task was read from is not a part.
    """

    task_id: str
    domain: str | None
    parts: Mapping[str, str]

    @classmethod
    def of(cls, task: Task) -> TaskDigest:
        parts = {"instruction": _short_sha(task.instruction), "domain": _short_sha(task.domain)}
        for key, value in task.config.items():
            parts[f"config.{key}"] = _short_sha(value)
        return cls(task.task_id, task.domain, parts)

    @property
    def label(self) -> str:
        """``domain/task_id``, or the id alone."""
        return self.task_id if self.domain is None else f"{self.domain}/{self.task_id}"

    def changed(self, other: TaskDigest) -> list[str]:
        """The parts that differ in ``other`` (``config.x added`` / ``removed`` for a key only one has)."""
        names = list(self.parts) + [name for name in other.parts if name not in self.parts]
        out = []
        for name in names:
            old, new = self.parts.get(name), other.parts.get(name)
            if old != new:
                out.append(
                    name if old is not None and new is not None else f"{name} {'added' if old is None else 'removed'}"
                )
        return out

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "domain": self.domain, "parts": dict(self.parts)}

    @classmethod
    def from_json(cls, data: Any) -> TaskDigest:
        if not isinstance(data, Mapping) or not isinstance(data.get("parts"), Mapping):
            raise RecordError(f"run manifest: a task entry must be {{task_id, domain, parts}}, got {clip(data)}")
        digest: TaskDigest = build(cls, data, "run manifest task")
        return digest


def _short_sha(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def task_digests(tasks: Iterable[Task]) -> tuple[TaskDigest, ...]:
    """The :class:`TaskDigest` of each task, in order: what a resume compares, task by task."""
    return tuple(TaskDigest.of(task) for task in tasks)


@dataclass(frozen=True)
class RunManifest:
    """The arguments that define a batch. A resumed run must be given the same ones.

    Attributes:
        tasks_sha256: :func:`tasks_sha256` of the task list (order ignored; kept for runs without ``tasks``).
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
        tasks: every task in order (:class:`TaskDigest`): a resume names the task and the part that changed,
            and refuses another order (group ids hold a task's position).
        grader: the grader that scores the attempts (``osworld``, ``local``, ``fake``, a backend's own name);
            every graded record names it too.
        rollout_timeout: ``--rollout-timeout`` (``None``: no cap).
        screen: the desktops' screen size ``[width, height]`` (``DesktopConfig.screen``).
        extra_body: the request fields sent as they are (``Sampling.extra_body``).
        desktop: the backend's settings that change what an attempt sees or does
            (:attr:`legato_gym.backends.Backend.run_settings`: the local backend's ``session`` and
            ``pyautogui_pause``, the osworld backend's ``provider``); ``None``: it declares none.
        follow: a continuous run's task stream (``{"order", "seed"}``, :mod:`legato_rl.follow`); ``None`` for a
            batch.
        absent: the compared fields that the stored ``run.json`` does not have (it was written before they
            were recorded): a resume accepts any value for them. Not written.

    A field in :attr:`LENIENT` is also not compared when either side is ``None``.
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
    tasks: tuple[TaskDigest, ...] | None = None
    grader: str | None = None
    rollout_timeout: float | None = None
    screen: tuple[int, int] | None = None
    extra_body: Mapping[str, Any] | None = None
    follow: Mapping[str, Any] | None = None
    desktop: Mapping[str, Any] | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    #: The fields a resume compares, with the option that sets each (the tasks are compared task by task).
    COMPARED: ClassVar[dict[str, str]] = {
        "tasks_sha256": "--tasks (the task list)",
        "n_tasks": "--tasks (the number of tasks)",
        "group": "--group",
        "oversample": "--oversample",
        "policy_model": "--model",
        "policy_version": "--version",
        "max_steps": "--max-steps",
        "rollout_timeout": "--rollout-timeout",
        "backend": "--backend",
        "grader": "--grader",
        "harness": "the harness",
        "image_max": "--image-max",
        "screen": "the screen size (DesktopConfig.screen)",
        "temperature": "--temperature",
        "top_p": "--top-p",
        "max_tokens": "--max-tokens",
        "extra_body": "the extra request fields (Sampling.extra_body)",
        "follow": "--follow and its --order and --seed",
        "desktop": "the desktops' settings (--session, --pyautogui-pause, --provider)",
    }
    #: Compared fields that a caller may leave ``None`` (and that older manifests hold as ``None``): compared only
    #: when both sides have a value.
    LENIENT: ClassVar[frozenset[str]] = frozenset({"temperature", "top_p", "max_tokens"})

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "absent"}
        data["tasks"] = None if self.tasks is None else [task.to_json() for task in self.tasks]
        data["screen"] = None if self.screen is None else list(self.screen)
        data["extra_body"] = None if self.extra_body is None else dict(self.extra_body)
        data["follow"] = None if self.follow is None else dict(self.follow)
        data["desktop"] = None if self.desktop is None else dict(self.desktop)
        return {"schema": MANIFEST_SCHEMA, **data}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunManifest:
        if data.get("schema") != MANIFEST_SCHEMA:
            raise RecordError(f"run manifest schema {data.get('schema')!r} is not {MANIFEST_SCHEMA!r}")
        values = {k: v for k, v in data.items() if k not in ("schema", "absent")}
        tasks = values.get("tasks")
        if tasks is not None:
            if not isinstance(tasks, list):
                raise RecordError(f"run manifest: tasks must be a list, got {clip(tasks)}")
            values["tasks"] = tuple(TaskDigest.from_json(task) for task in tasks)
        if values.get("screen") is not None:
            values["screen"] = tuple(values["screen"])
        values["absent"] = frozenset(name for name in cls.COMPARED if name not in data)
        manifest: RunManifest = build(cls, values, "run manifest")
        return manifest


def tasks_sha256(tasks: Iterable[Task]) -> str:
    """A digest of a task list that ignores order and where the tasks were read from.

    Runs made before :attr:`RunManifest.tasks` was recorded are compared by it alone; the order is then
    checked against the records' group ids (:meth:`legato_rl.groups.GroupBook.restore`).
    """
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


#: Differences listed in a refusal before the rest are only counted.
_MAX_LISTED = 8


def check_manifest(existing: RunManifest, wanted: RunManifest, *, run_dir: str | os.PathLike[str] = "") -> None:
    """Refuse to resume a run with arguments that change the batch's meaning.

    Raises:
        ConfigError: naming every argument that differs, with both values and the run's own, and for the
            tasks each task that differs, by position and ``domain/task_id``, with the part that changed.
    """
    diffs: list[str] = []
    by_task = existing.tasks is not None and wanted.tasks is not None
    if by_task:
        assert existing.tasks is not None and wanted.tasks is not None
        diffs += [f"--tasks: {problem}" for problem in compare_tasks(existing.tasks, wanted.tasks)]
    tasks_differ, values_differ = bool(diffs), False
    for name, option in RunManifest.COMPARED.items():
        if by_task and name in ("tasks_sha256", "n_tasks"):
            continue
        old, new = _plain(getattr(existing, name)), _plain(getattr(wanted, name))
        if name in existing.absent or name in wanted.absent:
            continue
        if name in RunManifest.LENIENT and (old is None or new is None):
            continue
        if name == "grader" and existing.backend != wanted.backend:
            continue  # another backend grades with its own: the backend's line says it
        if old != new:
            tasks_differ = tasks_differ or option.startswith("--tasks")
            values_differ = values_differ or not option.startswith("--tasks")
            fix = _fix(option, old) if name != "grader" or existing.backend == "local" else ""
            diffs.append(f"{option}: the run has {_shown(old)}, this command gives {_shown(new)}{fix}")
    if diffs:
        where = f" at {run_dir}" if str(run_dir) else ""
        listed = diffs[:_MAX_LISTED] + ([f"and {len(diffs) - _MAX_LISTED} more"] if len(diffs) > _MAX_LISTED else [])
        fixes = ["the run's tasks as they were (the same tasks, in the same order)"] if tasks_differ else []
        if values_differ:
            fixes.append("the run's own values above")
        raise ConfigError(
            f"cannot resume the run{where} with different arguments ("
            + "; ".join(listed)
            + f"). To resume, give {' and '.join(fixes)}; or give another --out for a new batch."
        )


def compare_tasks(old: Sequence[TaskDigest], new: Sequence[TaskDigest]) -> list[str]:
    """What differs between a run's tasks and the ones given to resume it, one line each.

    A task is named by its position and ``domain/task_id``; the same tasks in another order, tasks
    missing or added, and a task whose parts changed (``config.evaluator changed``) each say so.
    """
    problems: list[str] = []
    old_ids = [task.task_id for task in old]
    new_ids = [task.task_id for task in new]
    if old_ids != new_ids:
        if sorted(old_ids) == sorted(new_ids):
            moved = [(i, a, b) for i, (a, b) in enumerate(zip(old, new, strict=True)) if a.task_id != b.task_id]
            problems.append(
                f"the same {len(old)} tasks in another order ({len(moved)} moved: "
                + ", ".join(f"task {i} was {a.label}, now {b.label}" for i, a, b in moved[:3])
                + (", ..." if len(moved) > 3 else "")
                + "); group ids hold each task's position"
            )
        else:
            known = set(new_ids)
            problems += [f"task {i} ({t.label}) is missing" for i, t in enumerate(old) if t.task_id not in known]
            known = set(old_ids)
            problems += [f"task {i} ({t.label}) is not in the run" for i, t in enumerate(new) if t.task_id not in known]
    given = {task.task_id: (i, task) for i, task in enumerate(new)}
    for i, task in enumerate(old):
        if task.task_id not in given:
            continue
        j, other = given[task.task_id]
        changed = task.changed(other)
        if changed:
            where = f"task {i}" if i == j else f"task {i} (now {j})"
            problems.append(f"{where} ({task.label}): {', '.join(changed)} changed")
    return problems


def _plain(value: Any) -> Any:
    """``value`` as its JSON reads back (tuples as lists): a value compares equal to itself read from run.json."""
    return json.loads(json.dumps(value, default=str)) if isinstance(value, (tuple, list, Mapping)) else value


def _shown(value: Any) -> str:
    return clip(repr(value))


def _fix(option: str, old: Any) -> str:
    """How to give the run's value again, for an option of the command line."""
    if not option.startswith("--") or option.startswith("--tasks"):
        return ""
    flag = option.split()[0]
    return f" (resume without {flag})" if old is None else f" (resume with {flag} {old})"


def open_run(run_dir: str | os.PathLike[str], manifest: RunManifest) -> bool:
    """Create a run's manifest, or check it against an existing one (a resume never rewrites it).

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
        manifest = replace(manifest, created_at=time.time())
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
