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

Record layout (every key always present, ``null`` when it does not apply)::

    {"schema": "legato.rollout/v0", "rollout_id", "task_id", "domain", "group_id", "attempt", "try",
     "desktop", "policy": {"model", "version"}, "status", "reward", "error": {"kind", "type", "message"},
     "n_steps", "timing": {"reset_s", "wait_after_reset_s", "model_s", "act_s", "wait_s", "obs_s",
     "wait_before_eval_s", "eval_s", "total_s"}, "started_at", "ended_at",
     "steps": [{"index", "started_at", "request": {"model", "messages", "sampling", "extras", "order"},
                "prompt_ids": {"prefix", "start", "ids"},
                "response": {"content", "reasoning", "token_ids", "logprobs", "tokens", "finish_reason"},
                "model": {"seconds", "attempts", "prompt_tokens", "completion_tokens", "cached_tokens",
                          "weight_version"},
                "description", "parse_error",
                "actions": [{"action", "act_s", "wait_s", "ready_s", "obs_s"}]}]}

Fields added since the first ``legato.rollout/v0`` records (``prompt_ids``, ``model.weight_version``) are
optional: records without them read as ``null``, so the schema name is unchanged.

Prompt token ids (``prompt_ids``, :class:`PromptIds`) are stored as a delta: a step's prompt is the first
``start`` ids of the previous step's prompt followed by its response's token ids, then ``ids``.
:func:`expand_prompt_ids` rebuilds every step's whole prompt.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ctypes
import errno
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from legato_gym import Task
from legato_gym.errors import ConfigError, LegatoError
from legato_rl import _json
from legato_rl.groups import Status

if TYPE_CHECKING:
    from legato_rl.policy import ChatResult

__all__ = [
    "ERROR_KINDS",
    "IMAGE_SCHEME",
    "MANIFEST_SCHEMA",
    "SAMPLING_KEYS",
    "SCHEMA",
    "STATUSES",
    "ActionRecord",
    "ErrorInfo",
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
    "StepRecord",
    "StorageError",
    "Timing",
    "check_manifest",
    "check_run_dir",
    "expand_prompt_ids",
    "is_being_written",
    "is_run_dir",
    "load_request",
    "open_run",
    "prompt_ids_of",
    "read_manifest",
    "read_record_dicts",
    "read_records",
    "storage_error",
    "tasks_sha256",
    "torn_tail_bytes",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_manifest",
]

log = logging.getLogger(__name__)

#: The record schema written in every line of ``rollouts.jsonl``.
SCHEMA = "legato.rollout/v0"
#: The schema of ``run.json``.
MANIFEST_SCHEMA = "legato.run/v0"
#: The prefix of an image reference inside a stored message.
IMAGE_SCHEME = "legato-image://"
#: Every ``status`` a record can have.
STATUSES = tuple(status.value for status in Status)
#: Every ``error.kind``.
ERROR_KINDS = ("policy", "env")
#: Top-level request keys recorded under ``request.sampling``; the rest (bar model and messages) are extras.
SAMPLING_KEYS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "min_tokens",
        "logit_bias",
    }
)

ROLLOUTS_FILE = "rollouts.jsonl"
MANIFEST_FILE = "run.json"
SUMMARY_FILE = "summary.json"
MESSAGES_DIR = "messages"
IMAGES_DIR = "images"
_LOCK_FILE = ".writer.lock"

_SHA = re.compile(r"[0-9a-f]{64}")
_PNG_DATA_URL = "data:image/png;base64,"


class RecordError(LegatoError, ValueError):
    """A run directory or record that cannot be read: not a run, a corrupt line, a missing or altered file, or
    an image reference that is not a plain sha256 hash."""


class RunInProgressError(RecordError):
    """The run is still being written: a ``legato rl collect`` holds its writer lock (see
    :func:`is_being_written`). Wait for it to finish, or stop it."""


class StorageError(LegatoError, OSError):
    """A file of a run (or of an export) cannot be written or read: the disk is full, the folder is
    read-only, or a part of the path is a file. The message names the path, the cause and the fix; the
    ``errno`` and ``filename`` of the :class:`OSError` behind it are kept. Built by :func:`storage_error`."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # OSError's own form ("[Errno 28] ...") would hide the fix


#: Why a write failed, by errno, in words a user acts on.
_CAUSES: dict[int, str] = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "a file is in the way of a folder",
    errno.EISDIR: "it is a folder, not a file",
    errno.ENAMETOOLONG: "the name is too long",
}
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def storage_error(
    exc: OSError, path: str | os.PathLike[str], *, doing: str = "write", then: str | None = None
) -> StorageError:
    """The :class:`StorageError` for an :class:`OSError` met while reading or writing ``path``.

    Args:
        exc: the error.
        path: the file or folder being written (the error's own ``filename`` is named too when it differs).
        doing: ``write`` or ``read``.
        then: what to do once the cause is fixed; default: run the same command again to resume.
    """
    if isinstance(exc, StorageError):
        return exc
    code = exc.errno
    filename = exc.filename if isinstance(exc.filename, (str, bytes, os.PathLike)) else None
    where = str(path)
    if filename is not None and os.fsdecode(filename) != where:
        where = f"{where} ({os.fsdecode(filename)})"
    cause = _CAUSES.get(code, exc.strerror or str(exc)) if code is not None else (exc.strerror or str(exc))
    detail = f" [{errno.errorcode.get(code, code)}]" if code is not None else ""
    after = then or "then run the same command again to resume: what was written so far is kept"
    if code in _FULL:
        fix = f"free some space on that disk, {after}"
    elif code in _READ_ONLY:
        fix = f"make the folder writable (or give another --out for a new batch), {after}"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        fix = "give an --out whose every part is a folder (or does not exist yet)"
    else:
        fix = f"fix the cause, {after}"
    error = StorageError(f"cannot {doing} {where}: {cause}{detail}; {fix}")
    error.errno = code
    error.filename = filename
    return error


@contextlib.contextmanager
def _storage(path: str | os.PathLike[str], doing: str = "write", then: str | None = None) -> Iterator[None]:
    """Raise an :class:`OSError` in the block as a :class:`StorageError` naming ``path``."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, StorageError):
            raise
        raise storage_error(exc, path, doing=doing, then=then) from exc


# --- record values ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyStamp:
    """The policy an attempt was played with, stamped when the attempt was dispatched."""

    model: str
    version: str | None


@dataclass(frozen=True)
class ErrorInfo:
    """Why a try failed.

    Attributes:
        kind: ``policy`` (the model server failed) or ``env`` (the desktop failed).
        type: the exception's class name.
        message: the exception's message.
    """

    kind: str
    type: str
    message: str

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ConfigError(f"error kind {self.kind!r} must be one of {', '.join(ERROR_KINDS)}")

    @classmethod
    def from_exception(cls, kind: str, exc: BaseException) -> ErrorInfo:
        """The error of ``kind`` for an exception."""
        return cls(kind=kind, type=type(exc).__name__, message=str(exc))


@dataclass(frozen=True)
class Timing:
    """Seconds one try spent in each phase.

    ``wait_s`` is every wait after an action: ready-signal waits (``ready_s``) and fixed waits together.
    ``total_s`` is the try's wall time, dispatch to record (it includes the scheduler's own time).
    """

    reset_s: float = 0.0
    wait_after_reset_s: float = 0.0
    model_s: float = 0.0
    act_s: float = 0.0
    wait_s: float = 0.0
    obs_s: float = 0.0
    wait_before_eval_s: float = 0.0
    eval_s: float = 0.0
    total_s: float = 0.0

    #: The phases whose seconds add up to the desktop's busy time (``total_s`` excluded).
    PHASES: ClassVar[tuple[str, ...]] = (
        "reset_s",
        "wait_after_reset_s",
        "model_s",
        "act_s",
        "wait_s",
        "obs_s",
        "wait_before_eval_s",
        "eval_s",
    )


@dataclass(frozen=True)
class ActionRecord:
    """One action of a step and its timings (``None`` when the action did not run that phase)."""

    action: str
    act_s: float | None = None
    wait_s: float | None = None
    ready_s: float | None = None
    obs_s: float | None = None

    @classmethod
    def from_timings(cls, action: str, timings: Mapping[str, Any]) -> ActionRecord:
        """From an env step's ``info["timings"]`` (other keys, e.g. ``eval_s``, are ignored)."""

        def get(key: str) -> float | None:
            value = timings.get(key)
            return None if value is None else float(value)

        return cls(action=action, act_s=get("act_s"), wait_s=get("wait_s"), ready_s=get("ready_s"), obs_s=get("obs_s"))


@dataclass(frozen=True)
class Response:
    """The policy's reply as the server returned it."""

    content: str
    reasoning: str | None = None
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    tokens: tuple[str, ...] | None = None
    finish_reason: str | None = None

    @classmethod
    def from_chat(cls, result: ChatResult) -> Response:
        """From a :class:`~legato_rl.policy.ChatResult`."""
        return cls(
            content=result.content,
            reasoning=result.reasoning,
            token_ids=_tuple(result.token_ids),
            logprobs=_tuple(result.logprobs),
            tokens=_tuple(result.tokens),
            finish_reason=result.finish_reason,
        )


@dataclass(frozen=True)
class ModelStats:
    """One policy call: wall seconds (queueing, retries and backoff included), HTTP attempts, and usage.

    ``weight_version`` is the weight version the server reported for the reply (SGLang
    ``metadata.weight_version``, vLLM >= 0.33 ``choices[0].weight_versions``), ``None`` when it reports none.
    """

    seconds: float
    attempts: int = 1
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    weight_version: str | None = None

    @classmethod
    def from_chat(cls, result: ChatResult) -> ModelStats:
        """From a :class:`~legato_rl.policy.ChatResult`."""
        return cls(
            seconds=result.seconds,
            attempts=result.attempts,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            cached_tokens=result.cached_tokens,
            weight_version=result.weight_version,
        )


@dataclass(frozen=True)
class PromptIds:
    """A step's prompt token ids, stored as a delta of the previous step's prompt and response.

    The step's prompt is ``context[:start] + ids``, where ``context`` is the previous step's prompt followed by
    its response's token ids (empty for a first step, and when the previous step lacks either). In a
    multi-turn conversation the prompt usually continues the previous one: then ``start == len(context)``,
    ``prefix`` is true and ``ids`` is only the new turn. When the conversation was rewritten (an old
    screenshot dropped past ``--image-max``, reasoning stripped by the chat template), ``prefix`` is false
    and ``ids`` follows the longest shared prefix (``start`` is 0 when nothing is shared: the whole prompt).

    Attributes:
        prefix: the prompt continues the previous step's prompt and response exactly.
        start: how many leading ids of ``context`` the prompt shares.
        ids: the prompt's ids after those.
    """

    prefix: bool
    start: int
    ids: tuple[int, ...]

    @classmethod
    def encode(cls, prompt: Sequence[int], context: Sequence[int] | None) -> PromptIds:
        """The delta that turns ``context`` (the previous prompt and response, or ``None``) into ``prompt``."""
        if not context:
            return cls(prefix=context is not None, start=0, ids=tuple(prompt))
        if not isinstance(prompt, list) or not isinstance(context, list):  # list equality needs two lists
            prompt, context = list(prompt), list(context)
        n = len(context)
        if len(prompt) >= n and prompt[:n] == context:  # the common case: list equality runs in C
            return cls(prefix=True, start=n, ids=tuple(prompt[n:]))
        # the longest shared prefix, by halving: each comparison of two slices runs in C, about n ids in all
        # (and any integer compares, where a numpy array would overflow on a hostile server's ids)
        start, high = 0, min(n, len(prompt))
        while start < high:
            mid = (start + high + 1) // 2
            if prompt[start:mid] == context[start:mid]:
                start = mid
            else:
                high = mid - 1
        return cls(prefix=False, start=start, ids=tuple(prompt[start:]))

    def decode(self, context: Sequence[int] | None, where: str = "step") -> list[int]:
        """The whole prompt, given the previous step's prompt and response (``None`` when there is none).

        Raises:
            RecordError: ``start`` runs past ``context``, or ``prefix`` does not match it.
        """
        have = 0 if context is None else len(context)
        if self.start > have or (self.prefix and self.start != have):
            raise RecordError(
                f"{where}: prompt_ids starts at {self.start} (prefix={self.prefix}) but the previous step's prompt "
                f"and response hold {have} token ids; the record is damaged or its steps are out of order"
            )
        head = list(context[: self.start]) if context is not None and self.start else []
        head.extend(self.ids)
        return head

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "start": self.start, "ids": list(self.ids)}

    @classmethod
    def from_json(cls, data: Any) -> PromptIds:
        _require(data, ("prefix", "start", "ids"), "step.prompt_ids")
        prefix, start, ids = data["prefix"], data["start"], data["ids"]
        if (
            not isinstance(prefix, bool)
            or type(start) is not int
            or start < 0
            or not isinstance(ids, list)
            or not set(map(type, ids)) <= {int}
        ):
            raise RecordError(
                f'step.prompt_ids must be {{"prefix": bool, "start": int >= 0, "ids": [int, ...]}}, got {_clip(data)}'
            )
        return cls(prefix=prefix, start=start, ids=tuple(ids))


@dataclass(frozen=True)
class PromptContext:
    """What the next step's :class:`PromptIds` is taken against: a step's prompt and its response's token ids.

    The prompt is kept as the server's JSON text when it came as one (about 6 bytes an id, where a list of
    Python ints costs about 36: a desktop's prompt runs to tens of thousands of ids), without its closing
    ``]``; a continuation is then found by comparing bytes, and only the new turn is parsed.

    Attributes:
        head: the prompt's JSON array without its closing bracket, or the prompt's ids.
        length: how many ids the prompt holds.
        response: the response's token ids.
    """

    head: bytes | list[int]
    length: int
    response: list[int]

    def ids(self) -> list[int]:
        """The prompt's ids followed by the response's."""
        prompt = self.head if isinstance(self.head, list) else _json.loads(self.head + b"]")
        return [*prompt, *self.response]


def prompt_ids_of(result: ChatResult, context: PromptContext | None) -> tuple[PromptIds | None, PromptContext | None]:
    """The :class:`PromptIds` of one step and the context of the next.

    Both are ``None`` when the server returned no prompt ids (nothing is parsed then); the next context is
    ``None`` when the response has no token ids. A prompt that continues the previous one is recognised
    from the bytes of the server's answer, and only its new ids are parsed.

    Raises:
        PolicyResponseError: the prompt ids are not a JSON list of integers.
    """
    raw = result._prompt_ids
    if raw is None:
        return None, None
    record: PromptIds | None = None
    length = 0
    if isinstance(raw, bytes) and context is not None and isinstance(context.head, bytes):
        found = _continuation(raw, context)
        if found is not None:
            record, length = found
    if record is None:
        prompt = result.prompt_token_ids
        if prompt is None:
            return None, None
        record = PromptIds.encode(prompt, None if context is None else context.ids())
        length = len(prompt)
    if result.token_ids is None:
        return record, None
    head = raw[: raw.rindex(b"]")] if isinstance(raw, bytes) else raw
    return record, PromptContext(head=head, length=length, response=list(result.token_ids))


def _continuation(raw: bytes, context: PromptContext) -> tuple[PromptIds, int] | None:
    """The delta of ``raw`` (a prompt's JSON array) when it continues ``context``, with the prompt's length.

    ``None`` when it does not, or when the bytes do not tell (the caller then parses the whole prompt).
    """
    head = context.head
    assert isinstance(head, bytes)
    if not raw.startswith(head):
        return None
    rest = raw[len(head) :].lstrip(b" \t\r\n")
    if context.length:  # the previous prompt's last id must end where its text did: a separator follows
        if rest[:1] != b",":
            return None
        rest = rest[1:]
    try:
        tail = _json.loads(b"[" + rest)
    except ValueError:
        return None
    response = context.response
    n = len(response)
    if not isinstance(tail, list) or tail[:n] != response or not set(map(type, tail)) <= {int}:
        return None
    return PromptIds(prefix=True, start=context.length + n, ids=tuple(tail[n:])), context.length + len(tail)


def expand_prompt_ids(steps: Iterable[StepRecord], where: str = "rollout") -> Iterator[list[int] | None]:
    """Every step's whole prompt token ids (``None`` for a step without them), in step order.

    Raises:
        RecordError: a step's ``prompt_ids`` does not fit the step before it.
    """
    context: list[int] | None = None
    for step in steps:
        stored = step.prompt_ids
        if stored is None:
            context = None
            yield None
            continue
        prompt = stored.decode(context, f"{where} step {step.index}")
        token_ids = step.response.token_ids
        context = None if token_ids is None else prompt + list(token_ids)
        yield prompt


@dataclass(frozen=True)
class RequestRef:
    """A request body as stored: messages as hashes, the other top-level fields split in two.

    Attributes:
        model: the body's ``model`` (``None`` when it had none).
        messages: sha256 hex of each message's file in ``DIR/messages/``.
        sampling: the body's sampling parameters (:data:`SAMPLING_KEYS`), in body order.
        extras: every other top-level field (``logprobs``, ``return_token_ids``, ...), in body order.
        order: the body's top-level key order when it is not ``model, messages, sampling..., extras...``;
            ``None`` otherwise.
    """

    model: str | None
    messages: tuple[str, ...]
    sampling: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": list(self.messages),
            "sampling": dict(self.sampling),
            "extras": dict(self.extras),
            "order": list(self.order) if self.order is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestRef:
        _require(data, ("model", "messages", "sampling", "extras"), "request")
        messages = data["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, str) and _SHA.fullmatch(m) for m in messages):
            raise RecordError(f"request.messages must be a list of sha256 hex hashes, got {_clip(messages)}")
        order = data.get("order")
        return cls(
            model=data["model"],
            messages=tuple(messages),
            sampling=dict(data["sampling"]),
            extras=dict(data["extras"]),
            order=tuple(order) if order is not None else None,
        )


@dataclass(frozen=True)
class StepRecord:
    """One policy call and the actions its reply ran.

    Attributes:
        index: the step's position in the attempt (0-based).
        request: the prompt as stored (:meth:`RolloutStore.put_request`).
        response: the reply.
        model: the call's timing and usage.
        actions: the actions run, in order (empty when the reply gave up).
        description: the reply's description of its action (Qwen: its ``Action:`` line).
        parse_error: why (part of) the reply could not be read, or ``None``.
        started_at: Unix time the policy call was made.
        prompt_ids: the prompt's token ids as the server returned them, as a delta of the previous step's
            (:class:`PromptIds`; :func:`expand_prompt_ids` rebuilds them), or ``None``.
    """

    index: int
    request: RequestRef
    response: Response
    model: ModelStats
    actions: tuple[ActionRecord, ...] = ()
    description: str | None = None
    parse_error: str | None = None
    started_at: float | None = None
    prompt_ids: PromptIds | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "started_at": self.started_at,
            "request": self.request.to_json(),
            "prompt_ids": None if self.prompt_ids is None else self.prompt_ids.to_json(),
            "response": _plain(_shallow(self.response)),
            "model": _shallow(self.model),
            "description": self.description,
            "parse_error": self.parse_error,
            "actions": [_shallow(action) for action in self.actions],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        _require(data, ("index", "request", "response", "model", "actions"), "step")
        response = data["response"]
        return cls(
            index=int(data["index"]),
            request=RequestRef.from_json(data["request"]),
            response=Response(
                content=response["content"],
                reasoning=response.get("reasoning"),
                token_ids=_tuple(response.get("token_ids")),
                logprobs=_tuple(response.get("logprobs")),
                tokens=_tuple(response.get("tokens")),
                finish_reason=response.get("finish_reason"),
            ),
            model=_build(ModelStats, data["model"], "step.model"),
            actions=tuple(_build(ActionRecord, a, "step.actions[]") for a in data["actions"]),
            description=data.get("description"),
            parse_error=data.get("parse_error"),
            started_at=data.get("started_at"),
            prompt_ids=None if data.get("prompt_ids") is None else PromptIds.from_json(data["prompt_ids"]),
        )


@dataclass(frozen=True)
class RolloutRecord:
    """One try of one attempt: the line written to ``rollouts.jsonl`` (see the module docstring).

    Attributes:
        rollout_id: unique per try (the scheduler's ``group/attempt/try`` id).
        task_id: the task's id.
        domain: the task's OSWorld domain, or ``None``.
        group_id: the GRPO group (one per task).
        attempt: the attempt's index in its group.
        try_index: the try's index (0, then 1 after a desktop failure, ...); ``try`` in JSON.
        desktop: the vector-env index of the desktop it ran on, or ``None`` (skipped).
        policy: model and version, stamped when the attempt was dispatched.
        status: one of :data:`STATUSES`.
        reward: the evaluator's score, or ``None`` when the try was not graded.
        error: why the try failed (``status`` ``error`` or ``retried``), else ``None``.
        timing: seconds by phase.
        steps: one per policy call.
        started_at: Unix time of dispatch.
        ended_at: Unix time the try ended.
    """

    rollout_id: str
    task_id: str
    domain: str | None
    group_id: str
    attempt: int
    policy: PolicyStamp
    status: str
    try_index: int = 0
    desktop: int | None = None
    reward: float | None = None
    error: ErrorInfo | None = None
    timing: Timing = field(default_factory=Timing)
    steps: tuple[StepRecord, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None

    def __post_init__(self) -> None:
        status = str(self.status)
        if status not in STATUSES:
            raise ConfigError(f"status {self.status!r} of {self.rollout_id} must be one of {', '.join(STATUSES)}")
        object.__setattr__(self, "status", status)
        failed = status in ("error", "retried")
        if failed and self.error is None:
            raise ConfigError(f"record {self.rollout_id} has status {status!r} but no error; give ErrorInfo(...)")
        if not failed and self.error is not None:
            raise ConfigError(f"record {self.rollout_id} has status {status!r} and an error; only error/retried do")

    @property
    def n_steps(self) -> int:
        """Policy calls made."""
        return len(self.steps)

    @property
    def completed(self) -> bool:
        """``ok`` or ``truncated``: counts towards its group and carries a usable reward."""
        return self.status in ("ok", "truncated")

    def to_json(self) -> dict[str, Any]:
        """The record as written (every key present)."""
        return {
            "schema": SCHEMA,
            "rollout_id": self.rollout_id,
            "task_id": self.task_id,
            "domain": self.domain,
            "group_id": self.group_id,
            "attempt": self.attempt,
            "try": self.try_index,
            "desktop": self.desktop,
            "policy": _shallow(self.policy),
            "status": self.status,
            "reward": self.reward,
            "error": _shallow(self.error) if self.error is not None else None,
            "n_steps": self.n_steps,
            "timing": _shallow(self.timing),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "steps": [step.to_json() for step in self.steps],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RolloutRecord:
        """Read a record written by :meth:`to_json`.

        Raises:
            RecordError: it is not a ``legato.rollout/v0`` record, or misses a field.
        """
        if data.get("schema") != SCHEMA:
            raise RecordError(f"record schema {data.get('schema')!r} is not {SCHEMA!r}")
        _require(
            data,
            ("rollout_id", "task_id", "group_id", "attempt", "policy", "status", "reward", "error", "timing", "steps"),
            "record",
        )
        error = data["error"]
        try:
            return cls(
                rollout_id=data["rollout_id"],
                task_id=data["task_id"],
                domain=data.get("domain"),
                group_id=data["group_id"],
                attempt=int(data["attempt"]),
                try_index=int(data.get("try", 0)),
                desktop=data.get("desktop"),
                policy=_build(PolicyStamp, data["policy"], "policy"),
                status=data["status"],
                reward=None if data["reward"] is None else float(data["reward"]),
                error=None if error is None else _build(ErrorInfo, error, "error"),
                timing=_build(Timing, data["timing"], "timing"),
                steps=tuple(StepRecord.from_json(step) for step in data["steps"]),
                started_at=data.get("started_at"),
                ended_at=data.get("ended_at"),
            )
        except ConfigError as exc:
            raise RecordError(f"invalid record {data.get('rollout_id')!r}: {exc}") from exc


# --- the writer -------------------------------------------------------------------------------------------


class RolloutStore:
    """Writes one run directory: message and image files as requests happen, a record when a try ends.

    Opening a store takes the run's writer lock (a second writer is refused) and cuts off a torn last line
    left by a killed writer. Use it as a context manager, or call :meth:`close`. :meth:`put_request` (or
    :meth:`prepare_request`) and :meth:`append` (or :meth:`write_files`) touch separate state, so one thread
    may run each at the same time; neither may run in two threads at once.

    Durability: message and image files are written (to a temporary name, then renamed) without waiting
    for the disk; :meth:`append` makes every file written so far durable before the record that may
    refer to them. A record on disk therefore never points at a message lost to a power cut, and a step
    costs no ``fsync`` of its own.

    Args:
        run_dir: the run directory (created if missing).
        image_cache_bytes: how many characters of image data URLs to remember as already stored, so that a
            screenshot re-sent at every step is hashed once. Only a cache: a miss costs a re-hash.

    A write that fails (a full disk, a folder made read-only) raises a :class:`StorageError`, and every
    later write of this store raises it again: a record is never appended after a file it may refer to
    failed. A record cut short is cut off, so the run resumes cleanly once the cause is fixed.

    Raises:
        ConfigError: another process is writing to ``run_dir``.
        StorageError: the run directory cannot be made or written.

    Example:
        >>> import tempfile
        >>> with RolloutStore(tempfile.mkdtemp()) as store:
        ...     ref = store.put_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        ...     load_request(store.run_dir, ref) == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        True
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, image_cache_bytes: int = 256 * 2**20) -> None:
        self.run_dir = Path(run_dir)
        self._messages = self.run_dir / MESSAGES_DIR
        self._images = self.run_dir / IMAGES_DIR
        self._path = self.run_dir / ROLLOUTS_FILE
        self._lock: IO[bytes] | None = None
        self._failed: StorageError | None = None
        with _storage(self.run_dir):
            self._messages.mkdir(parents=True, exist_ok=True)
            self._images.mkdir(parents=True, exist_ok=True)
            self._lock = _acquire_writer_lock(self.run_dir)
            try:
                _remove_stale_temporaries(self.run_dir)
                _cut_torn_tail(self._path)
                # unbuffered: a write that fails leaves no bytes behind in a buffer for close() to write later
                self._file: IO[bytes] | None = open(self._path, "ab", buffering=0)  # noqa: SIM115  (close())
            except BaseException:
                if self._lock is not None:
                    self._lock.close()
                raise
        self._known_messages: set[str] = set()
        self._known_images: set[str] = set()
        self._image_cache: OrderedDict[str, str] = OrderedDict()
        self._image_cache_chars = 0
        self._image_cache_limit = image_cache_bytes
        self._warned_order = False
        self._unsynced: list[Path] = []  # files written since the last record, not yet fsynced
        self._unsynced_lock = threading.Lock()

    def __enter__(self) -> RolloutStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._file is None

    def close(self) -> None:
        """Flush and release the run (idempotent).

        Raises:
            StorageError: the files written since the last record cannot be made durable.
        """
        try:
            if self._file is not None and self._failed is None:
                with _storage(self.run_dir):
                    self._sync_files()
        finally:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def put_request(self, body: Mapping[str, Any]) -> RequestRef:
        """Store a request body's messages (and their images) and return its reference for the step record.

        Each message is written once to ``DIR/messages/<sha>.json`` (atomically; an existing file is kept),
        with every PNG data URL replaced by ``legato-image://<sha>`` and its bytes in ``DIR/images/<sha>.png``.
        Other images (JPEG, remote URLs) stay inline in the message.

        Raises:
            RecordError: the body has no ``messages`` list, or already holds a ``legato-image://`` reference.
        """
        ref, files = self.prepare_request(body)
        self.write_files(files)
        return ref

    def prepare_request(self, body: Mapping[str, Any]) -> tuple[RequestRef, list[tuple[Path, bytes]]]:
        """:meth:`put_request` in two halves: this one hashes, the files it returns go to :meth:`write_files`.

        A writer that keeps the disk off its event loop calls this on the loop and hands the files to a
        thread; every file must be written before a record that refers to it is appended (the files are
        remembered as stored as soon as they are returned).

        Raises:
            RecordError: as :meth:`put_request`.
        """
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise RecordError(f"a request body needs a 'messages' list, got {type(messages).__name__}")
        files: list[tuple[Path, bytes]] = []
        try:
            hashes = tuple(self._put_message(message, files) for message in messages)
        except BaseException:  # the files of the messages read so far are not written: forget them
            for path, _ in files:
                self._known_messages.discard(path.stem)
                self._known_images.discard(path.stem)
            if files:
                self._image_cache.clear()  # only a cache: it may name an image just forgotten
                self._image_cache_chars = 0
            raise
        sampling: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        for key, value in body.items():
            if key in ("model", "messages"):
                continue
            (sampling if key in SAMPLING_KEYS else extras)[key] = value
        keys = list(body)
        canonical = [k for k in ("model", "messages") if k in body] + list(sampling) + list(extras)
        order = None if keys == canonical else tuple(keys)
        if order is not None and not self._warned_order:
            self._warned_order = True
            log.debug("request bodies are not in model/messages/sampling/extras order; recording their key order")
        ref = RequestRef(model=body.get("model"), messages=hashes, sampling=sampling, extras=extras, order=order)
        return ref, files

    def write_files(self, files: Iterable[tuple[Path, bytes]]) -> None:
        """Write the message and image files :meth:`prepare_request` returned (fsynced by the next append).

        Raises:
            StorageError: a file cannot be written; the store then refuses every later write.
        """
        self._check_failed()
        for path, data in files:
            try:
                self._write_file(path, data)
            except OSError as exc:
                raise self._fail(exc, path) from exc

    def append(self, record: RolloutRecord) -> None:
        """Append one record to ``rollouts.jsonl`` and make it durable (flush and fsync).

        Raises:
            StateError: the store is closed.
            StorageError: the record (or a file before it) cannot be written; nothing of the record is left
                in ``rollouts.jsonl``, and the store refuses every later write.
        """
        if self._file is None:
            from legato_gym.errors import StateError

            raise StateError(f"RolloutStore for {self.run_dir} is closed; open a new one to append")
        self._check_failed()
        line = _json.dumps(record.to_json()) + b"\n"
        fd = self._file.fileno()
        start: int | None = None
        try:
            self._sync_files()
            start = os.fstat(fd).st_size
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            if start is not None:  # take back the part of the line that was written
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
            raise self._fail(exc, self._path) from exc

    def _check_failed(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _fail(self, exc: OSError, path: Path) -> StorageError:
        self._failed = storage_error(exc, path)
        return self._failed

    def _sync_files(self) -> None:
        """Make the message and image files written since the last record durable, with their names.

        One ``syncfs`` of the run's filesystem where there is one (Linux): a tenth of the CPU of an
        ``fsync`` per file and per directory, which is the fallback.
        """
        with self._unsynced_lock:
            paths, self._unsynced = self._unsynced, []
        if not paths or _syncfs(self.run_dir):
            return
        for path in paths:
            _fsync_path(path)
        for directory in {path.parent for path in paths}:
            _fsync_path(directory)

    def _write_file(self, path: Path, data: bytes) -> None:
        """Write a content-addressed file once: a temporary name, then a rename (fsynced by the next append)."""
        if path.exists():  # stored by an earlier run of this batch
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as file:
                file.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with self._unsynced_lock:
            self._unsynced.append(path)

    # -- content addressing ------------------------------------------------------------------------------

    def _put_message(self, message: Any, files: list[tuple[Path, bytes]]) -> str:
        if not _is_mapping(message):
            raise RecordError(f"a message must be a JSON object, got {_clip(message)}")
        stored = self._externalize(message, files)
        data = _json.dumps(stored)
        sha = hashlib.sha256(data).hexdigest()
        if sha not in self._known_messages:
            files.append((self._messages / f"{sha}.json", data))
            self._known_messages.add(sha)
        return sha

    def _externalize(self, message: Mapping[str, Any], files: list[tuple[Path, bytes]]) -> dict[str, Any]:
        content = message.get("content")
        if not isinstance(content, list):  # text content: nothing to take out
            return message if type(message) is dict else dict(message)
        out = dict(message)
        out["content"] = [self._externalize_part(part, files) for part in content]
        return out

    def _externalize_part(self, part: Any, files: list[tuple[Path, bytes]]) -> Any:
        if not _is_mapping(part) or part.get("type") != "image_url":
            return part
        image = part.get("image_url")
        url = image.get("url") if _is_mapping(image) else image
        if not isinstance(url, str):
            return part
        if url.startswith(IMAGE_SCHEME):
            raise RecordError(
                f"a request already holds an image reference ({_clip(url)}); send the image itself as a data URL"
            )
        sha = self._put_image(url, files)
        if sha is None:
            return part
        ref = IMAGE_SCHEME + sha
        out = dict(part)
        out["image_url"] = {**image, "url": ref} if _is_mapping(image) else ref
        return out

    def _put_image(self, url: str, files: list[tuple[Path, bytes]]) -> str | None:
        cached = self._image_cache.get(url)
        if cached is not None:
            self._image_cache.move_to_end(url)
            return cached
        if not url.startswith(_PNG_DATA_URL):
            return None
        payload = url[len(_PNG_DATA_URL) :]
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return None
        # Only canonical base64 is externalized, so that restoring it gives the very same characters. With
        # validate=True every full 4-character group maps one to one to its 3 bytes; only the last group can
        # hide non-zero padding bits, so checking it is checking the whole.
        tail = len(data) % 3 or 3
        if base64.b64encode(data[-tail:]) != payload[-4:].encode("ascii") or len(payload) % 4:
            return None
        sha = hashlib.sha256(data).hexdigest()
        if sha not in self._known_images:
            files.append((self._images / f"{sha}.png", data))
            self._known_images.add(sha)
        self._image_cache[url] = sha
        self._image_cache_chars += len(url)
        while self._image_cache_chars > self._image_cache_limit and self._image_cache:
            old, _ = self._image_cache.popitem(last=False)
            self._image_cache_chars -= len(old)
        return sha


# --- reading ----------------------------------------------------------------------------------------------


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
        inline_images: put each image back as its original data URL; ``False`` keeps the
            ``legato-image://<sha>`` references (what ``legato rl export`` writes by default).

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
    images: dict[str, str] = {}
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


def _load_message(root: Path, sha: str, inline: bool, images: dict[str, str]) -> Any:
    if not _SHA.fullmatch(sha):
        raise RecordError(f"message reference {sha!r} is not a sha256 hex hash; refusing to read it")
    path = root / MESSAGES_DIR / f"{sha}.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"message file {path} is missing: the run directory is incomplete") from None
    if hashlib.sha256(data).hexdigest() != sha:
        raise RecordError(f"message file {path} does not match its hash: it was altered or damaged")
    message = _json.loads(data)
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        message["content"] = [_restore_part(root, part, inline, images) for part in content]
    return message


def _restore_part(root: Path, part: Any, inline: bool, images: dict[str, str]) -> Any:
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return part
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url.startswith(IMAGE_SCHEME):
        return part
    sha = url[len(IMAGE_SCHEME) :]
    if not _SHA.fullmatch(sha):
        raise RecordError(f"image reference {_clip(url)!r} is not {IMAGE_SCHEME}<sha256 hex>; refusing to read it")
    if not inline:
        return part
    if sha not in images:
        path = root / IMAGES_DIR / f"{sha}.png"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise RecordError(f"image file {path} is missing: the run directory is incomplete") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise RecordError(f"image file {path} does not match its hash: it was altered or damaged")
        images[sha] = _PNG_DATA_URL + base64.b64encode(data).decode("ascii")
    restored = images[sha]
    part["image_url"] = {**image, "url": restored} if isinstance(image, dict) else restored
    return part


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
            f"{root} is still being written by a legato rl collect (it holds {root / _LOCK_FILE}); "
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


# --- the run manifest -------------------------------------------------------------------------------------


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
        manifest: RunManifest = _build(cls, {k: v for k, v in data.items() if k != "schema"}, "run manifest")
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
    with _storage(root / MANIFEST_FILE, "read"):
        existing = read_manifest(root)
    if existing is not None:
        check_manifest(existing, manifest, run_dir=root)
        return True
    if (root / ROLLOUTS_FILE).is_file():
        raise ConfigError(f"{root} holds records but no {MANIFEST_FILE}; give another --out for a new batch")
    with _storage(root):
        root.mkdir(parents=True, exist_ok=True)
    if manifest.created_at is None:
        manifest = type(manifest)(**{**asdict(manifest), "created_at": time.time()})
    write_manifest(root, manifest)
    return False


# --- files ------------------------------------------------------------------------------------------------


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, then: str | None = None) -> None:
    """Write JSON to ``path`` atomically (temporary file, fsync, rename).

    Args:
        path: the file.
        data: the JSON value.
        then: for the error message, what to do once the cause is fixed (see :func:`storage_error`).

    Raises:
        StorageError: it cannot be written; no temporary file is left behind.
    """
    text = json.dumps(data, ensure_ascii=False, indent=2, sort_keys=False) + "\n"
    with _storage(path, then=then):
        _write_atomic(Path(path), text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, then: str | None = None) -> None:
    """Write bytes to ``path`` atomically (temporary file beside it, fsync, rename).

    Raises:
        StorageError: it cannot be written (``then`` as in :func:`write_json_atomic`); no temporary file is
            left behind.
    """
    with _storage(path, then=then):
        _write_atomic(Path(path), data)


_libc_syncfs: Any = None  # the C function once looked up; False where there is none


def _syncfs(path: Path) -> bool:
    """``syncfs(2)`` on the filesystem holding ``path``; ``False`` where it is not available or fails."""
    global _libc_syncfs
    if _libc_syncfs is None:
        _libc_syncfs = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                _libc_syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    if _libc_syncfs is False:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        return bool(_libc_syncfs(fd) == 0)
    finally:
        os.close(fd)


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, with the common case (a dict) checked first: the ABC check is slow."""
    return type(value) is dict or isinstance(value, Mapping)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        # mkstemp creates 0600; give the file the usual mode (or keep the mode of the file it replaces)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _remove_stale_temporaries(root: Path) -> None:
    """Remove the temporary files a killed writer of this run left (call with the writer lock held).

    Only the run's own files: ``messages/`` and ``images/`` wholly, and the temporaries of ``run.json`` and
    ``summary.json`` (an export or a profile may be writing files of its own beside them).
    """
    own = (f".{MANIFEST_FILE}.", f".{SUMMARY_FILE}.")
    for folder, prefixes in ((root / MESSAGES_DIR, (".",)), (root / IMAGES_DIR, (".",)), (root, own)):
        with os.scandir(folder) as entries:
            stale = [e.path for e in entries if e.name.endswith(".tmp") and e.name.startswith(prefixes)]
        for path in stale:
            log.info("removing %s, left by a writer that was killed", path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _cut_torn_tail(path: Path) -> None:
    """Cut a last line that has no newline (its writer was killed mid-record)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with open(path, "r+b") as file:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return
        keep = _after_last_newline(file, size)
        log.warning("%s: cutting a torn last line (%d bytes) left by a killed writer", path, size - keep)
        file.truncate(keep)
        file.flush()
        os.fsync(file.fileno())


def _after_last_newline(file: IO[bytes], size: int) -> int:
    """The offset just after the last newline in the first ``size`` bytes of ``file`` (0 when there is none)."""
    end = size
    block = 1 << 16
    while end > 0:
        start = max(0, end - block)
        file.seek(start)
        index = file.read(end - start).rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def torn_tail_bytes(run_dir: str | os.PathLike[str]) -> int:
    """Bytes after the last newline of ``rollouts.jsonl``: a record cut short by a killed writer (0 when none).

    :func:`read_records` skips such a line; the next :class:`RolloutStore` to open the run cuts it off.
    """
    path = Path(run_dir) / ROLLOUTS_FILE
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb") as file:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return 0
        return size - _after_last_newline(file, size)


def _acquire_writer_lock(root: Path) -> IO[bytes] | None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover  (not POSIX: no lock)
        return None
    lock = open(root / _LOCK_FILE, "ab")  # noqa: SIM115  (held until close())
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise ConfigError(
            f"another process is writing to {root}; wait for it to finish or give another --out"
        ) from None
    return lock


def is_being_written(run_dir: str | os.PathLike[str]) -> bool:
    """True when a :class:`RolloutStore` (in any process) holds the run open for writing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return False
    path = Path(run_dir) / _LOCK_FILE
    if not path.exists():
        return False
    with open(path, "ab") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return False


# --- helpers ----------------------------------------------------------------------------------------------


def _tuple(value: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _shallow(value: Any) -> dict[str, Any]:
    """A flat dataclass as a dict, in field order. Unlike ``dataclasses.asdict`` it deep-copies nothing:
    the values are immutable (numbers, strings, tuples of them)."""
    cls = type(value)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(value))
    return {name: getattr(value, name) for name in names}


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def _clip(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _require(data: Mapping[str, Any], keys: Sequence[str], what: str) -> None:
    if not isinstance(data, Mapping):
        raise RecordError(f"{what} must be a JSON object, got {_clip(data)}")
    missing = [key for key in keys if key not in data]
    if missing:
        raise RecordError(f"{what} misses the field(s) {', '.join(missing)}")


def _build(cls: Any, data: Any, what: str) -> Any:
    if not isinstance(data, Mapping):
        raise RecordError(f"{what} must be a JSON object, got {_clip(data)}")
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise RecordError(f"{what} has unknown field(s) {', '.join(sorted(unknown))}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise RecordError(f"{what}: {exc}") from exc
