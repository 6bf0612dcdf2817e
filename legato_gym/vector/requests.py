"""One request to a desktop's worker, and how long each kind may take (:class:`Deadlines`)."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any, Literal

from legato_gym.config import Timeouts
from legato_gym.errors import ConfigError
from legato_gym.vector.results import Result

__all__ = ["EPISODE_OPS", "Deadlines", "Request", "Sink"]

#: Where a request's result goes: kept for the pool (``init``, ``call``), ``recv()``, a waiting ``reset`` /
#: ``step``, or an asyncio future (``areset``, ``astep``, ``atruncate``).
Sink = Literal["internal", "recv", "wait", "future"]
#: Requests that belong to a desktop's episode (the others: ``init``, ``call``, ``get_attr``).
EPISODE_OPS = ("reset", "step", "truncate")


@dataclass(frozen=True)
class Deadlines:
    """How long the parent waits for each request before it kills the worker, in seconds.

    Attributes:
        start: start a worker and build its desktop.
        reset: ``reset`` (reset, wait for ready, observe).
        step: one step (act, settle, observe, and grading when the step ends the episode).
        truncate: grading without a step.
        call: ``call`` / ``get_attr``.
        close: closing a desktop before its worker is killed.
    """

    start: float
    reset: float
    step: float
    truncate: float
    call: float
    close: float

    def __post_init__(self) -> None:
        for name in ("start", "reset", "step", "truncate", "call", "close"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"Deadlines.{name}={value!r} must be a positive number of seconds")

    @classmethod
    def from_timeouts(cls, timeouts: Timeouts) -> Deadlines:
        """Request deadlines that cover the phases each request runs."""
        return cls(
            start=timeouts.reset,
            reset=timeouts.reset + 2 * timeouts.ready,
            step=timeouts.longest_step,
            truncate=timeouts.ready + timeouts.evaluate,
            call=timeouts.act,
            close=timeouts.ready,
        )

    def for_op(self, op: str) -> float:
        """The deadline of a request ``op``."""
        return {"reset": self.reset, "step": self.step, "truncate": self.truncate}.get(op, self.call)


_ids = itertools.count(1)


class Request:
    """One request to a desktop's worker, from submission until its :class:`Result` is handed over."""

    __slots__ = ("args", "deadline", "env_id", "future", "id", "op", "result", "sink", "timeout", "timer")

    def __init__(self, env_id: int, op: str, args: dict[str, Any], timeout: float, sink: Sink) -> None:
        self.id = next(_ids)
        self.env_id = env_id
        self.op = op
        self.args = args
        self.timeout = timeout
        self.sink: Sink = sink
        self.deadline: float | None = None
        self.future: asyncio.Future[Result] | None = None
        self.result: Result | None = None
        self.timer: asyncio.TimerHandle | None = None
