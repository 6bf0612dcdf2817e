"""The record schema ``legato.rollout/v0``: what one line of ``rollouts.jsonl`` holds, and its statuses.

Record layout (every key always present, ``null`` when it does not apply)::

    {"schema": "legato.rollout/v0", "rollout_id", "task_id", "domain", "group_id", "attempt", "try",
     "desktop", "policy": {"model", "version"}, "status", "reward", "grader", "error": {"kind", "type", "message"},
     "n_steps", "timing": {"reset_s", "wait_after_reset_s", "model_s", "act_s", "wait_s", "obs_s",
     "wait_before_eval_s", "eval_s", "total_s"}, "started_at", "ended_at",
     "steps": [{"index", "started_at", "request": {"model", "messages", "sampling", "extras", "order"},
                "prompt_ids": {"prefix", "start", "ids"},
                "response": {"content", "reasoning", "token_ids", "logprobs", "tokens", "finish_reason"},
                "model": {"seconds", "attempts", "prompt_tokens", "completion_tokens", "cached_tokens",
                          "weight_version", "policy_version"},
                "description", "parse_error",
                "actions": [{"action", "act_s", "wait_s", "ready_s", "obs_s"}]}]}

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
from legato_rl.store._fields import build, clip, plain, require, shallow, tuple_or_none
from legato_rl.store.errors import RecordError
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
    weight_version: str | None = None
    policy_version: str | None = None

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
        require(data, ("model", "messages", "sampling", "extras"), "request")
        messages = data["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, str) and SHA256_HEX.fullmatch(m) for m in messages):
            raise RecordError(f"request.messages must be a list of sha256 hex hashes, got {clip(messages)}")
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

    index: int
    request: RequestRef
    response: Response
    model: ModelStats
    actions: tuple[ActionRecord, ...] = ()
    description: str | None = None
    parse_error: str | None = None
    started_at: float | None = None
    prompt_ids: PromptIds | None = None

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
        return {
            "index": self.index,
            "started_at": self.started_at,
            "request": self.request.to_json(),
            "prompt_ids": None if self.prompt_ids is None else self.prompt_ids.to_json(),
            "response": plain(shallow(self.response)),
            "model": shallow(self.model),
            "description": self.description,
            "parse_error": self.parse_error,
            "actions": [shallow(action) for action in self.actions],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        require(data, ("index", "request", "response", "model", "actions"), "step")
        response = data["response"]
        return cls(
            index=int(data["index"]),
            request=RequestRef.from_json(data["request"]),
            response=Response(
                content=response["content"],
                reasoning=response.get("reasoning"),
                token_ids=tuple_or_none(response.get("token_ids")),
                logprobs=tuple_or_none(response.get("logprobs")),
                tokens=tuple_or_none(response.get("tokens")),
                finish_reason=response.get("finish_reason"),
            ),
            model=build(ModelStats, data["model"], "step.model"),
            actions=tuple(build(ActionRecord, a, "step.actions[]") for a in data["actions"]),
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
        grader: the grader that scored ``reward`` (``osworld``: desktop-env's getters and metrics, ``local``:
            the local backend's built-in one, ``fake``: the fake suite's, else the backend's own name), or
            ``None`` when the try was not graded (or was written before records named their grader).
        error: why the try failed (``status`` ``error`` or ``retried``; or, of kind ``agent``, a completed try
            whose desktop the agent's actions destroyed, graded 0), else ``None``.
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
    grader: str | None = None

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
        return {
            "schema": SCHEMA,
            "rollout_id": self.rollout_id,
            "task_id": self.task_id,
            "domain": self.domain,
            "group_id": self.group_id,
            "attempt": self.attempt,
            "try": self.try_index,
            "desktop": self.desktop,
            "policy": shallow(self.policy),
            "status": self.status,
            "reward": self.reward,
            "grader": self.grader,
            "error": shallow(self.error) if self.error is not None else None,
            "n_steps": self.n_steps,
            "timing": shallow(self.timing),
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
        require(
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
                policy=build(PolicyStamp, data["policy"], "policy"),
                status=data["status"],
                reward=None if data["reward"] is None else float(data["reward"]),
                grader=data.get("grader"),
                error=None if error is None else build(ErrorInfo, error, "error"),
                timing=build(Timing, data["timing"], "timing"),
                steps=tuple(StepRecord.from_json(step) for step in data["steps"]),
                started_at=data.get("started_at"),
                ended_at=data.get("ended_at"),
            )
        except ConfigError as exc:
            raise RecordError(f"invalid record {data.get('rollout_id')!r}: {exc}") from exc
