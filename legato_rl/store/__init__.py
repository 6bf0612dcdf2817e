"""The one writer (and reader) of ``legato.rollout/v0``.

A run directory holds::

    DIR/run.json            the run manifest: the arguments that define the batch (checked on resume)
    DIR/rollouts.jsonl      one JSON record per try of an attempt, appended and fsynced when it ends
    DIR/messages/<sha>.json each prompt message once, named by the sha256 of the file's bytes, its images
                            replaced by ``legato-image://<sha>`` references
    DIR/images/<sha>.png    each image once, named by the sha256 of its bytes
    DIR/summary.json        the batch's figures (:mod:`legato_rl.summary`)

A 15-step rollout sends a prompt that grows by one screenshot and one reply per step; content addressing
stores each message (and each screenshot) once, so the disk used grows linearly with the steps instead of
quadratically. :func:`load_request` rebuilds the exact JSON body that was sent: the message bytes, the image
data URLs and the top-level key order are all restored.

A record line is committed by its final newline: a line cut short (the process was killed mid-write) is
ignored by :func:`read_records` and cut off by the next :class:`RolloutStore` that opens the run, so a
resumed run appends after the last whole record.

The package, one concern a module (every name below is importable from ``legato_rl.store``)::

    schema.py      the record: RolloutRecord, StepRecord, ..., Status and its sets; each field described once
    fields.py      what a record field says of itself (FieldInfo, Column, Layout) and the JSON codec made from it
    json_schema.py the record's JSON Schema, derived from the record classes (docs/schema/legato.rollout-v0.json)
    prompt_ids.py  prompt token ids stored as deltas: PromptIds, prompt_ids_of, expand_prompt_ids
    writer.py      RolloutStore (content-addressed files, records), BackgroundWriter (off the event loop)
    reader.py      read_records, read_record_dicts, load_request, check_run_dir
    manifest.py    run.json (RunManifest, open_run) and resume (read_progress)
    follow_log.py  a continuous run's follow.jsonl (read_follow_log, delivered_groups)
    files.py       file names, atomic and durable writes, the writer lock, a torn last line
    errors.py      RecordError, RunInProgressError, StorageError
"""

from legato_rl.store.errors import RecordError, RunInProgressError, StorageError, storage_error
from legato_rl.store.fields import Column, FieldInfo, Layout, record_columns
from legato_rl.store.files import (
    IMAGES_DIR,
    MANIFEST_FILE,
    MESSAGES_DIR,
    ROLLOUTS_FILE,
    SUMMARY_FILE,
    is_being_written,
    torn_tail_bytes,
    write_bytes_atomic,
    write_json_atomic,
)
from legato_rl.store.follow_log import FOLLOW_FILE, append_follow_log, delivered_groups, read_follow_log
from legato_rl.store.manifest import (
    MANIFEST_SCHEMA,
    RunManifest,
    RunProgress,
    TaskDigest,
    check_manifest,
    compare_tasks,
    open_run,
    read_manifest,
    read_progress,
    task_digests,
    tasks_sha256,
    write_manifest,
)
from legato_rl.store.prompt_ids import PromptContext, PromptIds, expand_prompt_ids, prompt_ids_of
from legato_rl.store.reader import check_run_dir, is_run_dir, load_request, read_record_dicts, read_records
from legato_rl.store.schema import (
    COMPLETED_STATUSES,
    ERROR_KINDS,
    FAILED_STATUSES,
    FINAL_STATUSES,
    IMAGE_SCHEME,
    SAMPLING_KEYS,
    SCHEMA,
    STATUSES,
    ActionRecord,
    ErrorInfo,
    ModelStats,
    PolicyStamp,
    RequestRef,
    Response,
    RolloutRecord,
    Status,
    StepRecord,
    Timing,
)
from legato_rl.store.writer import BackgroundWriter, RolloutStore

__all__ = [
    "COMPLETED_STATUSES",
    "ERROR_KINDS",
    "FAILED_STATUSES",
    "FINAL_STATUSES",
    "FOLLOW_FILE",
    "IMAGES_DIR",
    "IMAGE_SCHEME",
    "MANIFEST_FILE",
    "MANIFEST_SCHEMA",
    "MESSAGES_DIR",
    "ROLLOUTS_FILE",
    "SAMPLING_KEYS",
    "SCHEMA",
    "STATUSES",
    "SUMMARY_FILE",
    "ActionRecord",
    "BackgroundWriter",
    "Column",
    "ErrorInfo",
    "FieldInfo",
    "Layout",
    "ModelStats",
    "PolicyStamp",
    "PromptContext",
    "PromptIds",
    "RecordError",
    "RequestRef",
    "Response",
    "RolloutRecord",
    "RolloutStore",
    "RunInProgressError",
    "RunManifest",
    "RunProgress",
    "Status",
    "StepRecord",
    "StorageError",
    "TaskDigest",
    "Timing",
    "append_follow_log",
    "check_manifest",
    "check_run_dir",
    "compare_tasks",
    "delivered_groups",
    "expand_prompt_ids",
    "is_being_written",
    "is_run_dir",
    "load_request",
    "open_run",
    "prompt_ids_of",
    "read_follow_log",
    "read_manifest",
    "read_progress",
    "read_record_dicts",
    "read_records",
    "record_columns",
    "storage_error",
    "task_digests",
    "tasks_sha256",
    "torn_tail_bytes",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_manifest",
]
