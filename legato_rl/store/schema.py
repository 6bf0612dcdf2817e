"""The record schema ``legato.rollout/v0``: what one line of ``rollouts.jsonl`` holds, and its statuses.

Each field is described once, where it is declared: its type, its docstring (``Attributes:``) and its
``metadata=info(...)`` (:mod:`legato_rl.store.fields`): the JSON key, whether a record read back may lack it,
the checks made on reading, and the export column it fills. The JSON written and read, the published JSON
Schema (``docs/schema/legato.rollout-v0.json``, :mod:`legato_rl.store.json_schema`) and the export's columns
and Parquet schema (:mod:`legato_rl.export`) are all derived from these classes. A record is written with
every key present (``null`` when it does not apply), in the order of its fields, except where a class's
``JSON`` layout names the keys written first (a record: ``schema`` first, ``steps`` last).

Fields added since the first ``legato.rollout/v0`` records (``grader``, ``prompt_ids``,
``model.weight_version``, ``model.policy_version``) are optional: records without them read as ``null``, so the
schema name is unchanged.

:class:`Status` and the sets of statuses (:data:`FINAL_STATUSES`, :data:`COMPLETED_STATUSES`,
:data:`FAILED_STATUSES`) are defined here and nowhere else: the group rules (:mod:`legato_rl.groups`), the
summary and the export read them from here. ``Status`` is a ``str`` enum, so each set also holds the plain
strings of a record read back (``"ok" in COMPLETED_STATUSES``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from legato_gym.errors import ConfigError
from legato_rl.images import PNG_DATA_URL  # the prefix of the data URLs stored as DIR/images/<sha>.png
from legato_rl.store.errors import RecordError
from legato_rl.store.fields import Column, Layout, decode, encode, info, tuple_or_none
from legato_rl.store.prompt_ids import PromptIds

if TYPE_CHECKING:
    from legato_rl.policy import ChatResult

__all__ = [
    "COMPLETED_STATUSES",
    "ERROR_KINDS",
    "FAILED_STATUSES",
    "FINAL_STATUSES",
    "IMAGE_SCHEME",
    "PNG_DATA_URL",
    "SAMPLING_KEYS",
    "SCHEMA",
    "SHA256_HEX",
    "STATUSES",
    "ActionRecord",
    "ErrorInfo",
    "ModelStats",
    "PolicyStamp",
    "RequestRef",
    "Response",
    "RolloutRecord",
    "Status",
    "StepRecord",
    "Timing",
]

#: The record schema written in every line of ``rollouts.jsonl``.
SCHEMA = "legato.rollout/v0"
#: The prefix of an image reference inside a stored message.
IMAGE_SCHEME = "legato-image://"
#: A sha256 hex digest: the name of a message or image file.
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class Status(str, enum.Enum):
    """What became of one try of one attempt (the ``status`` field of a record)."""

    OK = "ok"  # ended by the agent (DONE/FAIL) or by the step limit; graded
    TRUNCATED = "truncated"  # hit --rollout-timeout; graded
    CANCELLED = "cancelled"  # its group closed while it ran
    SKIPPED = "skipped"  # its group closed before it started
    SURPLUS = "surplus"  # completed after its group had closed
    RETRIED = "retried"  # a desktop failure; the attempt was queued again
    ERROR = "error"  # a policy failure, or a desktop failure with no retries left

    def __str__(self) -> str:
        return self.value


#: Every ``status`` a record can have, in :class:`Status` order.
STATUSES = tuple(status.value for status in Status)
#: Statuses that end an attempt (``retried`` does not: the attempt runs again).
FINAL_STATUSES = frozenset(s for s in Status if s is not Status.RETRIED)
#: Statuses of completed attempts: the ones that count towards a group and carry a usable reward.
COMPLETED_STATUSES = frozenset({Status.OK, Status.TRUNCATED})
#: Statuses of failed tries: the ones whose record carries an ``error``.
FAILED_STATUSES = frozenset({Status.ERROR, Status.RETRIED})
#: Every ``error.kind``: ``agent`` only on a completed try (the agent's actions destroyed its desktop; graded 0);
#: ``version`` only on a ``retried`` try that a continuous run cut short at a version change (``partial="restart"``).
ERROR_KINDS = ("policy", "env", "agent", "version")
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


@dataclass(frozen=True)
class PolicyStamp:
    """The policy an attempt was played with, stamped when the attempt was dispatched."""

    model: str
    version: str | None


@dataclass(frozen=True)
class ErrorInfo:
    """Why a try failed.

    Attributes:
        kind: ``policy`` (the model server failed), ``env`` (the desktop failed), ``agent`` (the agent's own
            actions destroyed or exhausted its desktop: the try is completed, graded 0, and this says how) or
            ``version`` (a continuous run with ``partial="restart"`` cut the try short at a version change and runs
            the attempt again).
        type: the exception's class name.
        message: the exception's message.
    """

    kind: str = field(metadata=info(choices=ERROR_KINDS))
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
    ``held_s`` is the time a try's desktop, reset ahead, held it before its first policy call, waiting for its
    group's turn (a continuous run's reset ahead, :mod:`legato_rl.follow`): in ``total_s``, in no phase, not busy.
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
    held_s: float = field(default=0.0, metadata=info(required=False))

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

    content: str = field(metadata=info(column=Column("response_text", "string", nullable=False)))
    reasoning: str | None = field(default=None, metadata=info(column=Column("response_reasoning", "string")))
    token_ids: tuple[int, ...] | None = field(
        default=None, metadata=info(column=Column("response_token_ids", "list<int32>"))
    )
    logprobs: tuple[float, ...] | None = field(
        default=None, metadata=info(column=Column("response_logprobs", "list<float32>"))
    )
    tokens: tuple[str, ...] | None = field(
        default=None, metadata=info(column=Column("response_tokens", "list<string>"))
    )
    finish_reason: str | None = field(default=None, metadata=info(column=Column("finish_reason", "string")))

    @classmethod
    def from_chat(cls, result: ChatResult) -> Response:
        """From a :class:`~legato_rl.policy.ChatResult`."""
        return cls(
            content=result.content,
            reasoning=result.reasoning,
            token_ids=tuple_or_none(result.token_ids),
            logprobs=tuple_or_none(result.logprobs),
            tokens=tuple_or_none(result.tokens),
            finish_reason=result.finish_reason,
        )


@dataclass(frozen=True)
class ModelStats:
    """One policy call: wall seconds (queueing, retries and backoff included), HTTP attempts, and usage.

    ``weight_version`` is the weight version the server reported for the reply (SGLang
    ``metadata.weight_version``, vLLM >= 0.33 ``choices[0].weight_versions``), ``None`` when it reports none.
    ``policy_version`` is the version legato was told was loaded when the call was made (``--version``, or the
    trainer's latest :meth:`~legato_rl.follow.Follower.set_version` in a continuous run), ``None`` when unknown:
    an attempt that runs across a version change shows both versions in its steps.
    """

    seconds: float
    attempts: int = 1
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    weight_version: str | None = field(
        default=None, metadata=info(optional=True, column=Column("weight_version", "string"))
    )
    policy_version: str | None = field(default=None, metadata=info(optional=True))

    @classmethod
    def from_chat(cls, result: ChatResult, policy_version: str | None = None) -> ModelStats:
        """From a :class:`~legato_rl.policy.ChatResult`."""
        return cls(
            seconds=result.seconds,
            attempts=result.attempts,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            cached_tokens=result.cached_tokens,
            weight_version=result.weight_version,
            policy_version=policy_version,
        )


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
    messages: tuple[str, ...] = field(metadata=info(pattern=SHA256_HEX))
    sampling: Mapping[str, Any] = field(default_factory=dict, metadata=info(required=True))
    extras: Mapping[str, Any] = field(default_factory=dict, metadata=info(required=True))
    order: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The request as written in a step."""
        return encode(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], what: str = "request") -> RequestRef:
        """Read a request written by :meth:`to_json`.

        Raises:
            RecordError: it misses a field, or a message is not named by its sha256 hex hash.
        """
        return decode(cls, data, what)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class StepRecord:
    """One policy call and the actions its reply ran.

    Attributes:
        index: the step's position in the attempt (0-based).
        request: the prompt as stored (:meth:`~legato_rl.store.RolloutStore.put_request`).
        response: the reply.
        model: the call's timing and usage.
        actions: the actions run, in order (empty when the reply gave up).
        description: the reply's description of its action (Qwen: its ``Action:`` line).
        parse_error: why (part of) the reply could not be read, or ``None``.
        started_at: Unix time the policy call was made.
        prompt_ids: the prompt's token ids as the server returned them, as a delta of the previous step's
            (:class:`PromptIds`; :func:`expand_prompt_ids` rebuilds them), or ``None``.
    """

    index: int = field(metadata=info(read=int, minimum=0, column=Column("step_index", "int32", nullable=False)))
    request: RequestRef
    response: Response
    model: ModelStats
    actions: tuple[ActionRecord, ...] = field(default=(), metadata=info(required=True))
    description: str | None = None
    parse_error: str | None = None
    started_at: float | None = None
    prompt_ids: PromptIds | None = field(default=None, metadata=info(optional=True))

    JSON: ClassVar[Layout] = Layout(
        first=("index", "started_at", "request", "prompt_ids", "response", "model", "description", "parse_error")
    )

    @classmethod
    def from_chat(
        cls,
        result: ChatResult,
        *,
        index: int,
        request: RequestRef,
        actions: Sequence[ActionRecord] = (),
        description: str | None = None,
        parse_error: str | None = None,
        started_at: float | None = None,
        prompt_ids: PromptIds | None = None,
        policy_version: str | None = None,
    ) -> StepRecord:
        """The step of one policy call: its reply and usage from a :class:`~legato_rl.policy.ChatResult`, and the
        policy version that was loaded when it was made."""
        return cls(
            index=index,
            request=request,
            response=Response.from_chat(result),
            model=ModelStats.from_chat(result, policy_version),
            actions=tuple(actions),
            description=description,
            parse_error=parse_error,
            started_at=started_at,
            prompt_ids=prompt_ids,
        )

    def to_json(self) -> dict[str, Any]:
        """The step as written in a record."""
        return encode(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], what: str = "step") -> StepRecord:
        """Read a step written by :meth:`to_json`.

        Raises:
            RecordError: it misses a field, or a field fails its check.
        """
        return decode(cls, data, what)  # type: ignore[no-any-return]


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
        grader: the grader that scored ``reward`` (``osworld``: desktop-env's getters and metrics, ``local``:
            the local backend's built-in one, ``fake``: the fake suite's, else the backend's own name), or
            ``None`` when the try was not graded (or was written before records named their grader).
        reset_kind: how its desktop was reset for it, in the backend's word (local: ``fast``, ``ahead``,
            ``prepared``, ``restart``, ``fallback``; osworld: ``fast``, ``revert``, ``fallback``; fake: ``fast``),
            or ``None`` (no reset completed, the backend does not say, or written before records said).
        error: why the try failed (``status`` ``error`` or ``retried``; or, of kind ``agent``, a completed try
            whose desktop the agent's actions destroyed, graded 0), else ``None``.
        timing: seconds by phase.
        steps: one per policy call.
        started_at: Unix time of dispatch.
        ended_at: Unix time the try ended.
    """

    rollout_id: str = field(metadata=info(column=Column("rollout_id", "string", nullable=False)))
    task_id: str = field(metadata=info(column=Column("task_id", "string", nullable=False)))
    domain: str | None = field(metadata=info(required=False))
    group_id: str = field(metadata=info(column=Column("group_id", "string", nullable=False)))
    attempt: int = field(metadata=info(read=int, minimum=0))
    policy: PolicyStamp
    status: str = field(metadata=info(choices=STATUSES, column=Column("status", "string", nullable=False)))
    try_index: int = field(default=0, metadata=info(key="try", read=int, minimum=0))
    desktop: int | None = None
    # completed records have a reward (group_advantages checks it): not null in the export
    reward: float | None = field(
        default=None, metadata=info(required=True, read=float, column=Column("reward", "float64", nullable=False))
    )
    error: ErrorInfo | None = field(default=None, metadata=info(required=True))
    timing: Timing = field(default_factory=Timing, metadata=info(required=True))
    steps: tuple[StepRecord, ...] = field(default=(), metadata=info(required=True))
    started_at: float | None = None
    ended_at: float | None = None
    grader: str | None = field(default=None, metadata=info(optional=True, column=Column("grader", "string")))
    reset_kind: str | None = field(default=None, metadata=info(optional=True, column=Column("reset_kind", "string")))

    JSON: ClassVar[Layout] = Layout(
        first=("schema", "rollout_id", "task_id", "domain", "group_id", "attempt", "try", "desktop", "policy",
               "status", "reward", "grader", "error", "n_steps", "reset_kind", "timing", "started_at",
               "ended_at"),
        computed={"schema": lambda record: SCHEMA, "n_steps": lambda record: record.n_steps},
    )  # fmt: skip

    def __post_init__(self) -> None:
        status = str(self.status)
        if status not in STATUSES:
            raise ConfigError(f"status {self.status!r} of {self.rollout_id} must be one of {', '.join(STATUSES)}")
        object.__setattr__(self, "status", status)
        failed = status in FAILED_STATUSES
        agent = self.error is not None and self.error.kind == "agent"
        if failed and self.error is None:
            raise ConfigError(f"record {self.rollout_id} has status {status!r} but no error; give ErrorInfo(...)")
        if agent and status not in COMPLETED_STATUSES:
            raise ConfigError(
                f"record {self.rollout_id} has status {status!r} and an agent error; only ok/truncated do"
            )
        if not failed and self.error is not None and not agent:
            raise ConfigError(f"record {self.rollout_id} has status {status!r} and an error; only error/retried do")

    @property
    def n_steps(self) -> int:
        """Policy calls made."""
        return len(self.steps)

    @property
    def completed(self) -> bool:
        """``ok`` or ``truncated``: counts towards its group and carries a usable reward."""
        return self.status in COMPLETED_STATUSES

    def to_json(self) -> dict[str, Any]:
        """The record as written (every key present)."""
        return encode(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RolloutRecord:
        """Read a record written by :meth:`to_json`.

        Raises:
            RecordError: it is not a ``legato.rollout/v0`` record, misses a field, or a field fails its check.
        """
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            schema = data.get("schema") if isinstance(data, Mapping) else None
            raise RecordError(f"record schema {schema!r} is not {SCHEMA!r}")
        try:
            return decode(cls, data, "record")  # type: ignore[no-any-return]
        except ConfigError as exc:
            raise RecordError(f"invalid record {data.get('rollout_id')!r}: {exc}") from exc
