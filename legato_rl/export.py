"""Training samples out of a run: one row per policy step of every completed rollout (``legato rl export``).

Each row holds exactly these fields, in this order (JSONL value; Parquet type):

* ``rollout_id``, ``task_id``, ``group_id``: strings (``string`` not null); the identity a trainer joins on.
* ``step_index``: the step's 0-based index in its rollout (``int32`` not null).
* ``status``: the rollout's status, ``ok`` or ``truncated`` (``string`` not null).
* ``messages``: the prompt as sent, a list of chat messages (``string`` not null: the same list as JSON text).
* ``prompt_token_ids``: the prompt's token ids exactly as the server returned them (vLLM
  ``prompt_token_ids``, SGLang ``choices[0].prompt_token_ids``), or null (``list<int32>``).
* ``prompt_continues``: whether the prompt continues the previous step's prompt and response token for
  token (:class:`~legato_rl.store.PromptIds`), or null without prompt ids (``bool``).
* ``response_text``: the reply's content (``string`` not null).
* ``response_reasoning``: the reasoning the server split off, or null (``string``).
* ``response_token_ids``: the reply's token ids, or null when the server gave none (``list<int32>``).
* ``response_logprobs``: one logprob per token, or null (``list<float32>``: vLLM computes them in float32).
* ``response_tokens``: the tokens as text, only when there are no token ids, else null (``list<string>``).
* ``finish_reason``: ``stop``, ``length``, ... as the server said, or null (``string``).
* ``reward``: the rollout's reward (``double`` not null).
* ``advantage``: the rollout's group advantage (``double`` not null).
* ``policy_version``: the version stamped on the rollout (``--version``), or null (``string``).
* ``weight_version``: the weight version the server reported for this reply, or null (``string``).

With ``image_column`` (Parquet only) a last column ``images`` holds the step's screenshots in the order
``messages`` references them, as a Hugging Face ``datasets`` ``List(Image())`` column
(``list<struct<bytes: binary, path: string>>``, ``path`` being ``images/<sha>.png``); the file's
``huggingface`` metadata says so, so ``datasets.load_dataset("parquet", ...)`` decodes them as PIL images.
Every row carries its whole prompt's screenshots: that file grows with the steps squared, as the prompts do.

Token ids are ``int32`` and logprobs ``float32`` in Parquet (JSONL keeps the recorded numbers as they are); an
id outside the ``int32`` range fails the export with :class:`~legato_rl.store.RecordError`.

``messages`` is the prompt exactly as it was sent (:func:`legato_rl.store.load_request`), each image as its
``legato-image://<sha>`` reference (the PNG is ``RUN/images/<sha>.png``) or, with ``inline_images``, as its
original ``data:image/png;base64,...`` URL. In Parquet it is a JSON string column: chat messages mix string
and list contents and carry optional keys, so no struct type holds them without adding nulls or changing
them; a JSON string is read back by pyarrow and by Hugging Face ``datasets`` byte for byte
(``json.loads(row["messages"])``).

Rows come from the ``ok`` and ``truncated`` records only (``surplus``, ``cancelled``, ``skipped``,
``retried`` and ``error`` records are counted in :attr:`ExportStats.excluded`). ``advantage`` is the GRPO
group advantage (:func:`legato_rl.groups.group_advantages`): ``(reward - mean) / std`` over the
completed attempts of the rollout's group, with the **population** standard deviation (ddof 0), and 0 for
every member when all their rewards are equal. All steps of a rollout share its reward and advantage.

The export streams: a first pass reads only each record's outcome (for the advantages: one float per
completed rollout is kept), a second pass writes one row per step; Parquet rows are written in row groups
of bounded size. Memory holds one row (JSONL) or one row group (Parquet) at a time, plus an id and a float
per completed rollout: it does not grow with the rollouts' prompts, screenshots or tokens. The output is written to a
temporary file beside the target and renamed over it when complete, so a failed export never leaves a
half-written file in place of a good one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from legato_gym.errors import ConfigError, MissingDependencyError
from legato_rl.groups import group_advantages
from legato_rl.store import (
    COMPLETED_STATUSES,
    IMAGE_SCHEME,
    IMAGES_DIR,
    MANIFEST_FILE,
    MESSAGES_DIR,
    ROLLOUTS_FILE,
    SUMMARY_FILE,
    RecordError,
    RolloutRecord,
    StepRecord,
    StorageError,
    check_run_dir,
    expand_prompt_ids,
    load_request,
    read_record_dicts,
    read_records,
    storage_error,
    torn_tail_bytes,
)

__all__ = [
    "DATASETS_EXTRA",
    "EXPORT_FIELDS",
    "EXPORT_SCHEMA",
    "FORMATS",
    "IMAGES_FIELD",
    "ExportStats",
    "export_steps",
    "parquet_schema",
]

log = logging.getLogger(__name__)

#: Written in the Parquet file's metadata (key ``legato.schema``).
EXPORT_SCHEMA = "legato.export/v0"
#: The output formats and the file suffixes that select them.
FORMATS: Mapping[str, tuple[str, ...]] = {"jsonl": (".jsonl",), "parquet": (".parquet", ".pq")}
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
)
#: The column ``image_column=True`` adds after :data:`EXPORT_FIELDS`.
IMAGES_FIELD = "images"
#: The extra that installs Hugging Face ``datasets`` (for ``image_column``).
DATASETS_EXTRA = "export"

_INT32 = np.iinfo(np.int32)

# A Parquet row group is written when it holds this many rows, or this many characters of messages
# (inline screenshots make a row megabytes large), whichever comes first.
_BATCH_ROWS = 512
_BATCH_CHARS = 64 * 2**20


@dataclass(frozen=True)
class ExportStats:
    """What :func:`export_steps` wrote.

    Attributes:
        path: the file written.
        format: ``jsonl`` or ``parquet``.
        rows: rows written (one per policy step).
        rollouts: completed (``ok`` / ``truncated``) records exported.
        groups: groups they belong to.
        excluded: records not exported, by status.
        bytes: size of the file written.
        torn_tail_bytes: bytes of a torn last record in ``rollouts.jsonl`` that were left out (a collect was
            killed mid-write; resuming it re-runs that attempt), 0 normally.
        seconds: wall time of the export.
    """

    path: Path
    format: str
    rows: int
    rollouts: int
    groups: int
    excluded: Mapping[str, int] = field(default_factory=dict)
    bytes: int = 0
    torn_tail_bytes: int = 0
    seconds: float = 0.0


def parquet_schema(*, image_column: bool = False) -> Any:
    """The ``pyarrow.Schema`` of a Parquet export (see the module docstring).

    Args:
        image_column: add the ``images`` column and the ``huggingface`` metadata that makes it a
            ``datasets`` ``List(Image())`` (needs Hugging Face ``datasets``).

    Raises:
        MissingDependencyError: ``image_column`` and ``datasets`` is not installed.
    """
    pa = _pyarrow()
    fields = [
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("step_index", pa.int32(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("messages", pa.string(), nullable=False, metadata={"encoding": "json"}),
        pa.field("prompt_token_ids", _list_of(pa, pa.int32())),
        pa.field("prompt_continues", pa.bool_()),
        pa.field("response_text", pa.string(), nullable=False),
        pa.field("response_reasoning", pa.string()),
        pa.field("response_token_ids", _list_of(pa, pa.int32())),
        pa.field("response_logprobs", _list_of(pa, pa.float32())),
        pa.field("response_tokens", _list_of(pa, pa.string())),
        pa.field("finish_reason", pa.string()),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("advantage", pa.float64(), nullable=False),
        pa.field("policy_version", pa.string()),
        pa.field("weight_version", pa.string()),
    ]
    metadata = {"legato.schema": EXPORT_SCHEMA}
    if image_column:
        image = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
        fields.append(pa.field(IMAGES_FIELD, _list_of(pa, image)))
        metadata["huggingface"] = _hf_metadata(pa.schema(fields))
    return pa.schema(fields, metadata=metadata)


def _hf_metadata(schema: Any) -> str:
    """The ``huggingface`` schema metadata ``datasets`` reads its features from (``images``: ``List(Image())``)."""
    datasets = _datasets()
    features = datasets.Features.from_arrow_schema(schema.remove(schema.get_field_index(IMAGES_FIELD)))
    features[IMAGES_FIELD] = datasets.List(datasets.Image()) if hasattr(datasets, "List") else [datasets.Image()]
    return json.dumps({"info": {"features": features.to_dict()}})


def _list_of(pa: Any, item: Any) -> Any:
    # Parquet names a list's items "element": name them so here too, so the schema reads back unchanged.
    return pa.list_(pa.field("element", item))


def export_steps(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    inline_images: bool = False,
    format: str | None = None,
    image_column: bool = False,
) -> ExportStats:
    """Write one training sample per policy step of every ``ok`` or ``truncated`` rollout of a run.

    Args:
        run_dir: the run directory (``legato rl collect --out``).
        out: the file to write; replaced atomically when the export succeeds.
        inline_images: put each screenshot in ``messages`` as its ``data:image/png;base64`` URL instead of
            its ``legato-image://<sha>`` reference.
        format: ``jsonl`` or ``parquet``; ``None`` picks it from ``out``'s suffix (``.jsonl``, ``.parquet``).
        image_column: (Parquet only) add an ``images`` column holding each step's screenshots as a Hugging
            Face ``datasets`` ``List(Image())`` (see the module docstring).

    Returns:
        What was written.

    Raises:
        RecordError: ``run_dir`` is not a run, a record is damaged, or a message or image file is missing.
        RunInProgressError: a collect is still writing the run.
        ConfigError: ``format`` or ``out``'s suffix is not a known format, ``out`` is a directory or a
            file of the run itself, or ``image_column`` was asked for with JSONL.
        MissingDependencyError: Parquet was asked for and pyarrow is not installed, or ``image_column`` and
            Hugging Face ``datasets`` is not (``pip install 'legatolabs[export]'``).
        StorageError: ``out`` cannot be written (a full disk, a read-only folder, a file in its path); the
            file that was there is left as it was and no temporary file remains.

    Example:
        >>> from legato.rl import export_steps
        >>> stats = export_steps("runs/step-41", "runs/step-41/train.parquet")  # doctest: +SKIP
        >>> stats.rows                                                           # doctest: +SKIP
        412
    """
    started = time.monotonic()
    root = check_run_dir(run_dir)
    path = Path(out)
    fmt = _format(path, format)
    if image_column and fmt != "parquet":
        raise ConfigError(
            f"the images column is a Parquet column (a datasets Image list); export to {path.with_suffix('.parquet')} "
            "or drop --image-column (JSONL rows reference the screenshots by legato-image://<sha>, or inline them "
            "with --inline-images)"
        )
    _check_out(root, path)
    torn = torn_tail_bytes(root)
    if torn:
        log.warning(
            "%s ends in a torn record (%d bytes): a collect was killed while writing it; it is left out of the "
            "export. Run the same collect again to resume and finish the run.",
            root / ROLLOUTS_FILE,
            torn,
        )
    advantages = group_advantages(_outcomes(root))
    writer = _ParquetRows(path, image_column=image_column) if fmt == "parquet" else _JsonlRows(path)
    rows = rollouts = 0
    groups: set[str] = set()
    excluded: Counter[str] = Counter()
    with _atomic(path) as tmp:
        writer.open(tmp)
        try:
            for record in read_records(root):
                if record.status not in COMPLETED_STATUSES:
                    excluded[record.status] += 1
                    continue
                advantage = advantages.get(record.rollout_id)
                if advantage is None:
                    raise RecordError(
                        f"{root / ROLLOUTS_FILE} changed while it was exported (record {record.rollout_id} is new); "
                        "export again once nothing writes to the run"
                    )
                rollouts += 1
                groups.add(record.group_id)
                images_seen: set[str] = set()
                prompts = expand_prompt_ids(record.steps, f"rollout {record.rollout_id}")
                for step, prompt_ids in zip(record.steps, prompts, strict=True):
                    row = _row(root, record, step, advantage, inline_images, images_seen, prompt_ids)
                    if image_column:
                        row[IMAGES_FIELD] = _image_list(root, step, None if inline_images else row["messages"])
                    writer.write(row)
                    rows += 1
        finally:
            writer.close()
    stats = ExportStats(
        path=path,
        format=fmt,
        rows=rows,
        rollouts=rollouts,
        groups=len(groups),
        excluded=dict(sorted(excluded.items())),
        bytes=path.stat().st_size,
        torn_tail_bytes=torn,
        seconds=time.monotonic() - started,
    )
    log.info("exported %d steps of %d rollouts (%d groups) to %s", rows, rollouts, stats.groups, path)
    return stats


# --- rows -------------------------------------------------------------------------------------------------


def _outcomes(root: Path) -> Iterator[dict[str, Any]]:
    """The first pass: only what the advantages need, one small dict at a time."""
    for data in read_record_dicts(root):
        missing = [key for key in ("rollout_id", "group_id", "status", "reward") if key not in data]
        if missing:
            raise RecordError(f"a record of {root / ROLLOUTS_FILE} misses the field(s) {', '.join(missing)}")
        yield {key: data[key] for key in ("rollout_id", "group_id", "status", "reward")}


def _row(
    root: Path,
    record: RolloutRecord,
    step: StepRecord,
    advantage: float,
    inline: bool,
    images_seen: set[str],
    prompt_ids: list[int] | None,
) -> dict[str, Any]:
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
        "policy_version": record.policy.version,
        "weight_version": step.model.weight_version,
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


def _image_list(root: Path, step: StepRecord, messages: list[Any] | None) -> list[dict[str, Any]]:
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


# --- writers ----------------------------------------------------------------------------------------------


class _JsonlRows:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def open(self, tmp: Path) -> None:
        self._file = open(tmp, "w", encoding="utf-8", newline="\n")  # noqa: SIM115  (closed in close())

    def write(self, row: dict[str, Any]) -> None:
        assert self._file is not None
        self._file.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        self._file.write("\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class _ParquetRows:
    def __init__(self, path: Path, *, image_column: bool = False) -> None:
        self.path = path
        self._pa = _pyarrow()
        self._schema = parquet_schema(image_column=image_column)
        self._names = (*EXPORT_FIELDS, IMAGES_FIELD) if image_column else EXPORT_FIELDS
        self._writer: Any = None
        self._columns: dict[str, list[Any]] = {name: [] for name in self._names}
        self._rows = 0
        self._chars = 0

    def open(self, tmp: Path) -> None:
        import pyarrow.parquet as pq

        self._writer = pq.ParquetWriter(str(tmp), self._schema, compression="zstd")

    def write(self, row: dict[str, Any]) -> None:
        messages = json.dumps(row["messages"], ensure_ascii=False, separators=(",", ":"))
        for name in self._names:
            self._columns[name].append(messages if name == "messages" else row[name])
        self._rows += 1
        self._chars += len(messages) + sum(len(image["bytes"]) for image in row.get(IMAGES_FIELD) or ())
        if self._rows >= _BATCH_ROWS or self._chars >= _BATCH_CHARS:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        table = self._pa.Table.from_pydict(self._columns, schema=self._schema)
        self._writer.write_table(table)
        self._columns = {name: [] for name in self._names}
        self._rows = self._chars = 0

    def close(self) -> None:
        if self._writer is None:
            return
        try:
            self._flush()
        finally:
            self._writer.close()
            self._writer = None


# --- files ------------------------------------------------------------------------------------------------


def _format(path: Path, format: str | None) -> str:
    if format is not None:
        fmt = format.lower()
        if fmt not in FORMATS:
            raise ConfigError(f"export format {format!r} is not one of {', '.join(FORMATS)}")
        return fmt
    suffix = path.suffix.lower()
    for fmt, suffixes in FORMATS.items():
        if suffix in suffixes:
            return fmt
    raise ConfigError(
        f"cannot tell the export format of {path} from its suffix {suffix or '(none)'!r}; name the file "
        "*.jsonl or *.parquet, or give --format jsonl|parquet"
    )


def _check_out(root: Path, path: Path) -> None:
    if path.is_dir():
        raise ConfigError(f"--out {path} is a directory; give a file name such as {path / 'train.jsonl'}")
    target = path.resolve()
    run = root.resolve()
    if target in {run / name for name in (ROLLOUTS_FILE, MANIFEST_FILE, SUMMARY_FILE)} or target.parent in {
        run / MESSAGES_DIR,
        run / IMAGES_DIR,
    }:
        raise ConfigError(f"--out {path} is a file of the run itself; give another name, e.g. {root / 'train.jsonl'}")


_AGAIN = "then export again"


@contextlib.contextmanager
def _atomic(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` that replaces it only when the body completes.

    The temporary file is removed when the body fails or is interrupted. An export killed outright (SIGKILL,
    a power cut) cannot remove it, so each export first removes the temporary files of ``path`` that no
    live export holds: every export holds a lock on its own temporary file while it writes.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(path)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise storage_error(exc, path, then=_AGAIN) from exc
    tmp = Path(name)
    try:
        _lock(fd, block=True)
        try:
            yield tmp
            with open(tmp, "rb") as file:
                os.fsync(file.fileno())
            mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except StorageError:
            raise
        except OSError as exc:
            raise storage_error(exc, path, then=_AGAIN) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, *, block: bool) -> bool:
    """An exclusive ``flock`` on ``fd``; False when another process holds one (``block=False``)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover  (not POSIX: no lock, no clean-up of others' files)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _remove_stale(path: Path) -> None:
    """Remove the temporary files of ``path`` left by exports that were killed (no live export locks them)."""
    prefix = f".{path.name}."
    with os.scandir(path.parent) as entries:
        stale = [e.path for e in entries if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    for name in stale:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:  # gone meanwhile
            continue
        try:
            if _lock(fd, block=False):
                log.info("removing %s, left by an export that was killed", name)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        finally:
            os.close(fd)


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover  (a core dependency; only a broken install lacks it)
        raise MissingDependencyError(
            "Parquet export needs pyarrow: pip install 'pyarrow>=14' (a dependency of legatolabs), "
            "or export JSONL (--out FILE.jsonl)"
        ) from exc
    return pyarrow


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            f"the images column (--image-column) is written as a Hugging Face datasets Image list: pip install "
            f"'legatolabs[{DATASETS_EXTRA}]' (or 'datasets>=2.18'), or export without it"
        ) from exc
    return datasets
