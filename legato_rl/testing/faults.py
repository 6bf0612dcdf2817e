"""Fault plans for end-to-end fault injection, and the tally of what a run recorded for them.

A :class:`HitTasks` plan makes the reference policy server answer the chat requests of chosen tasks with
one fault kind (at chosen steps, or at every step), so that a test or a benchmark knows which attempts
were hit. :func:`tally` reads the run's records back and counts, per hit attempt, whether it ended with
the status legato documents for that fault (docs/reliability.md, "Hostile replies")::

    plan = HitTasks("surrogate", frozenset({tasks[0].instruction}), steps=frozenset({0}))
    with ReferencePolicyServer(faults=Faults(plan=plan)) as server:
        collect(tasks, PolicyConfig(server.url, server.model), out=run, backend="fake")
    figures = tally(read_record_dicts(run), plan, task_ids={tasks[0].task_id})
    assert figures.hit == figures.as_documented
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from legato_gym.errors import ConfigError
from legato_rl.store import FINAL_STATUSES
from legato_rl.testing.brains import Brain, Reply, prompt_instruction, prompt_step_index
from legato_rl.testing.server import FAULTS

__all__ = [
    "FINAL_STATUSES",
    "FaultTally",
    "HitTasks",
    "KillDesktopOnCalls",
    "documented_outcome",
    "tally",
    "worker_pids",
]


#: Faults whose reply legato reads, and whose content the harness then refuses: the attempt goes on.
_AGENT_FAULTS = frozenset({"deep-tool-call"})


def documented_outcome(kind: str) -> tuple[str, str | None]:
    """The ``(status, error kind)`` an attempt ends with when its policy call meets fault ``kind``.

    Every fault of the server or the transport, once the client's retries are spent (``hang``, ``500``,
    ``429``, ``drop``, ``half``, ``malformed``), and every reply the client refuses to read (``surrogate``,
    ``deep``, ``huge``: never retried) ends the attempt as ``("error", "policy")``. A reply that is read
    but whose tool call the harness refuses (``deep-tool-call``) is the agent's failure: the step records
    a ``parse_error``, runs as ``WAIT`` and the attempt goes on, so ``("ok", None)``.

    Raises:
        ConfigError: ``kind`` is not one of :data:`~legato_rl.testing.server.FAULTS`.
    """
    if kind not in FAULTS:
        raise ConfigError(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
    return ("ok", None) if kind in _AGENT_FAULTS else ("error", "policy")


@dataclass(frozen=True)
class HitTasks:
    """A :data:`~legato_rl.testing.server.FaultPlan`: fault ``kind`` on the calls of chosen tasks.

    Attributes:
        kind: the fault to inject (one of :data:`~legato_rl.testing.server.FAULTS`).
        instructions: the instructions of the tasks to hit (read from each request's prompt).
        steps: the step indices to hit (0: an attempt's first call); ``None`` hits every call, retries
            included, so a retryable fault exhausts the client's retries.
    """

    kind: str
    instructions: frozenset[str]
    steps: frozenset[int] | None = None

    def __post_init__(self) -> None:
        documented_outcome(self.kind)  # checks the kind

    def __call__(self, number: int, body: Mapping[str, Any]) -> str | None:
        messages = body.get("messages")
        if not isinstance(messages, list) or prompt_instruction(messages) not in self.instructions:
            return None
        if self.steps is not None and prompt_step_index(messages) not in self.steps:
            return None
        return self.kind


@dataclass(frozen=True)
class FaultTally:
    """What a run recorded for the attempts a :class:`HitTasks` plan hit.

    Attributes:
        kind: the fault.
        hit: final records of the hit tasks' attempts that ran (``skipped`` and ``surplus`` ones never met
            the fault).
        as_documented: those among ``hit`` with :func:`documented_outcome`'s status and error kind (and, for a
            fault the agent pays, a ``parse_error`` on a step).
        others: final records of the other tasks' attempts that ran.
        others_ok: those among ``others`` that ended ``ok``.
        attempts_recorded: ``(group, attempt)`` pairs with a final record, each counted once.
        duplicates: ``(group, attempt)`` pairs with more than one final record (should be 0).
    """

    kind: str
    hit: int
    as_documented: int
    others: int
    others_ok: int
    attempts_recorded: int
    duplicates: int


def tally(records: Iterable[Mapping[str, Any]], plan: HitTasks, *, task_ids: Collection[str]) -> FaultTally:
    """Count how a run's records ended for the attempts ``plan`` hit (the tasks ``task_ids``) and the others.

    Args:
        records: the run's records (``legato_rl.store.read_record_dicts``).
        plan: the plan the server ran with.
        task_ids: the ids of the tasks whose instructions ``plan.instructions`` names.
    """
    status, error_kind = documented_outcome(plan.kind)
    seen: dict[tuple[str, int], int] = {}
    hit = as_documented = others = others_ok = 0
    for record in records:
        if record["status"] not in FINAL_STATUSES:
            continue
        key = (str(record["group_id"]), int(record["attempt"]))
        seen[key] = seen.get(key, 0) + 1
        if record["status"] in ("skipped", "surplus"):
            continue
        if record["task_id"] in task_ids:
            hit += 1
            error = record.get("error") or {}
            steps = record.get("steps") or []
            parse_error = any(step.get("parse_error") for step in steps)
            if (
                record["status"] == status
                and error.get("kind") == error_kind
                and (plan.kind not in _AGENT_FAULTS or parse_error)
            ):
                as_documented += 1
        else:
            others += 1
            others_ok += record["status"] == "ok"
    duplicates = sum(1 for count in seen.values() if count > 1)
    return FaultTally(plan.kind, hit, as_documented, others, others_ok, len(seen), duplicates)


def worker_pids(parent: int | None = None) -> list[int]:
    """Live desktop worker processes (``legato_gym.vector.worker``) whose parent is ``parent`` (default: this
    process), read from ``/proc``."""
    parent = os.getpid() if parent is None else parent
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            state, ppid = _stat(int(entry))
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ppid == parent and state != "Z" and b"legato_gym.vector.worker" in cmdline:
            pids.append(int(entry))
    return pids


def _stat(pid: int) -> tuple[str, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


class KillDesktopOnCalls:
    """A brain that kills a desktop's worker process (SIGKILL) on chosen calls, then answers as ``brain``.

    It waits until the process is gone before it answers, so the attempt that asked always meets a dead or
    replaced desktop at its next desktop call: the "worker died while its attempt waited on the model" case.
    Use it with one desktop per collect, or the victim is whichever worker comes first.

    Args:
        brain: answers every call.
        calls: the 1-based numbers of the calls before which a worker is killed.
    """

    def __init__(self, brain: Brain, calls: Collection[int]) -> None:
        self.brain, self.calls = brain, frozenset(calls)
        self.killed: list[int] = []
        self._count = 0
        self._lock = threading.Lock()

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        with self._lock:
            self._count += 1
            kill = self._count in self.calls
        if kill:
            pids = worker_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                self.killed.append(pids[0])
                _wait_gone(pids[0])
        return self.brain.respond(messages)


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _stat(pid)[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.01)  # a poll, bounded by the deadline
    raise TimeoutError(f"worker {pid} still alive {timeout} s after SIGKILL")
