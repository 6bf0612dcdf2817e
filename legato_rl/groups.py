"""GRPO groups: how many attempts each task gets, when a group closes, and what each attempt becomes.

Every task is one group. It gets ``group + ceil(group * oversample)`` attempts. The group *closes* as soon as
``group`` of its attempts have completed (status ``ok`` or ``truncated``). When it closes, its attempts that
have not started become ``skipped``, those still running are cancelled at their next step (``cancelled``),
and one that completes anyway is ``surplus``. When every attempt has ended and fewer than ``group``
completed, the group closes *short*.

The group advantages (GRPO) over the completed attempts are :mod:`legato_rl.advantages`; ``advantages`` and
``group_advantages`` are importable from here too, as they were when they lived here.

This module is pure bookkeeping (no I/O, no asyncio) so the rules can be tested on their own.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from legato_gym import ConfigError, Task
from legato_rl.advantages import advantages, group_advantages
from legato_rl.store import COMPLETED_STATUSES, FINAL_STATUSES, Status

__all__ = [
    "COMPLETED_STATUSES",
    "FINAL_STATUSES",
    "Attempt",
    "Group",
    "GroupBook",
    "Status",
    "advantages",
    "attempts_per_group",
    "group_advantages",
]


def attempts_per_group(group: int, oversample: float) -> int:
    """``group + ceil(group * oversample)``, checked."""
    if group < 1:
        raise ConfigError(f"group={group!r}: a GRPO group needs at least 1 attempt (e.g. --group 4)")
    if oversample < 0:
        raise ConfigError(f"oversample={oversample!r} must be >= 0 (e.g. --oversample 0.25)")
    return group + math.ceil(group * oversample - 1e-9)


@dataclass(frozen=True)
class Attempt:
    """One attempt at a task.

    ``try_index`` counts desktop-failure retries (0 for the first try); ``failed_on`` holds the desktops
    where earlier tries failed, so a retry goes to another desktop when one is free.
    """

    group_id: str
    task: Task
    index: int
    try_index: int = 0
    failed_on: frozenset[int] = frozenset()

    @property
    def rollout_id(self) -> str:
        return f"{self.group_id}/a{self.index}/t{self.try_index}"

    def retry(self, failed_on: int | None = None) -> Attempt:
        seen = self.failed_on if failed_on is None else self.failed_on | {failed_on}
        return Attempt(self.group_id, self.task, self.index, self.try_index + 1, seen)


@dataclass
class Group:
    """Bookkeeping of one group."""

    group_id: str
    task: Task
    size: int
    n_attempts: int
    completed: int = 0
    ended: int = 0
    running: set[int] = field(default_factory=set)
    closed: bool = False

    @property
    def short(self) -> bool:
        """Closed with fewer than ``size`` completed attempts."""
        return self.closed and self.completed < self.size

    @property
    def finished(self) -> bool:
        """Every attempt has ended."""
        return self.ended >= self.n_attempts


class GroupBook:
    """Attempts waiting for a desktop, and the state of every group.

    Args:
        tasks: one group per task, in order. Group ids are ``g<index>-<task_id>``.
        group: completed attempts that close a group.
        oversample: extra attempts per group, as a fraction of ``group``.
    """

    def __init__(self, tasks: Sequence[Task], *, group: int, oversample: float) -> None:
        n = attempts_per_group(group, oversample)
        self.group_size = group
        self.attempts_per_group = n
        self.groups: dict[str, Group] = {}
        self._queue: deque[Attempt] = deque()
        for i, task in enumerate(tasks):
            gid = f"g{i:04d}-{task.task_id}"
            if gid in self.groups:
                raise ConfigError(f"task {task.task_id!r} is listed twice at index {i}; list each task once")
            self.groups[gid] = Group(gid, task, group, n)
            self._queue.extend(Attempt(gid, task, a) for a in range(n))
        # Groups with attempts still to end: every idle desktop asks all_ended each time an attempt ends.
        self._unfinished = {gid for gid, g in self.groups.items() if not g.finished}
        self._last: dict[int, str] = {}  # the group of each desktop's last attempt

    # -- queue ---------------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Attempts waiting for a desktop."""
        return len(self._queue)

    @property
    def all_ended(self) -> bool:
        return not self._unfinished

    def next_attempt(self, desktop: int | None = None, *, free: Collection[int] = ()) -> Attempt | None:
        """The next attempt to start on ``desktop``, or ``None``. Marks it running.

        ``free`` are the other desktops waiting for work: an attempt that already failed on ``desktop`` is
        left for one of them on which it has not failed. With no such desktop it runs here: a retry never
        waits for a desktop that cannot come. After the retries, a desktop gets an attempt of its last task
        where one waits (its desktop started ahead may be set up for it: :meth:`likely_next`), else the
        first in the queue.
        """
        last = self._last.get(desktop) if desktop is not None else None
        eligible = [
            position
            for position, attempt in enumerate(self._queue)
            if not (desktop in attempt.failed_on and any(d != desktop and d not in attempt.failed_on for d in free))
        ]
        if not eligible:
            return None
        position = eligible[0]
        if self._queue[position].try_index == 0:  # a retry first (it waited already); else the same task again
            position = next((p for p in eligible if self._queue[p].group_id == last), position)
        attempt = self._queue[position]
        del self._queue[position]
        self.groups[attempt.group_id].running.add(attempt.index)
        if desktop is not None:
            self._last[desktop] = attempt.group_id
        return attempt

    def likely_next(self, attempt: Attempt) -> Task | None:
        """The task the desktop just handed ``attempt`` will likely get next: the same task while its group has
        a waiting attempt for each of its running ones (:meth:`next_attempt` gives a desktop its last task
        first), else ``None`` (not known). A hint for the desktop (``expect_next``), never a promise.
        """
        group = self.groups[attempt.group_id]
        waiting = sum(1 for queued in self._queue if queued.group_id == attempt.group_id)
        return group.task if waiting >= len(group.running) else None

    def requeue(self, attempt: Attempt, failed_on: int | None = None) -> Attempt | None:
        """Queue the next try of an attempt after a desktop failure (at the front: it waited already).

        Returns the new try, or ``None`` when its group has closed meanwhile (the attempt then ends as
        ``skipped``; the caller records it).
        """
        group = self.groups[attempt.group_id]
        group.running.discard(attempt.index)
        if group.closed:
            return None
        nxt = attempt.retry(failed_on)
        self._queue.appendleft(nxt)
        return nxt

    # -- outcomes ------------------------------------------------------------------------------------
    def is_closed(self, group_id: str) -> bool:
        return self.groups[group_id].closed

    def finish(self, attempt: Attempt, status: Status) -> tuple[Status, list[Attempt]]:
        """Record that an attempt ended with ``status``.

        Returns the status to record (a completed attempt of a closed group becomes ``surplus``) and the
        queued attempts that were dropped because this closed their group (to be recorded ``skipped``).
        """
        if status is Status.RETRIED:
            raise ValueError("a retried try does not end its attempt; use requeue()")
        group = self.groups[attempt.group_id]
        group.running.discard(attempt.index)
        group.ended += 1
        if status in COMPLETED_STATUSES:
            if group.closed:
                status = Status.SURPLUS
            else:
                group.completed += 1
        dropped: list[Attempt] = []
        if not group.closed and (group.completed >= group.size or group.finished):
            dropped = self._close(group)
        if group.finished:
            self._unfinished.discard(group.group_id)
        return status, dropped

    def _close(self, group: Group) -> list[Attempt]:
        group.closed = True
        dropped = [a for a in self._queue if a.group_id == group.group_id]
        self._queue = deque(a for a in self._queue if a.group_id != group.group_id)
        group.ended += len(dropped)
        return dropped

    def restore(self, ended: Iterable[tuple[str, int, Status]], tries: Iterable[tuple[str, int]]) -> None:
        """Rebuild the state from the records of an earlier, interrupted run (resume).

        Args:
            ended: ``(group_id, attempt_index, status)`` of every attempt that has a final record.
            tries: ``(group_id, attempt_index)`` of every ``retried`` record.

        Raises:
            ConfigError: a record names a group that these tasks do not have (a group id holds its task's
                position: the tasks were reordered, removed or renamed since the run began). Nothing is
                restored, and nothing would be played twice or left out unsaid.
        """
        ended, tries = list(ended), list(tries)
        unknown = sorted(({gid for gid, _, _ in ended} | {gid for gid, _ in tries}) - set(self.groups))
        if unknown:
            named = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
            raise ConfigError(
                f"the run's records name {len(unknown)} group(s) that these tasks do not have ({named}): a group "
                "id is g<position>-<task_id>, so the tasks were reordered, removed or renamed since the run began. "
                "Give the run's tasks as they were (the same tasks, in the same order), or another --out for a new "
                "batch"
            )
        retried: dict[tuple[str, int], int] = {}
        for key in tries:
            retried[key] = retried.get(key, 0) + 1
        done: set[tuple[str, int]] = set()
        for gid, index, status in ended:
            group = self.groups[gid]
            if (gid, index) in done:
                continue
            done.add((gid, index))
            group.ended += 1
            if status in COMPLETED_STATUSES:
                group.completed += 1
        queue: deque[Attempt] = deque()
        for attempt in self._queue:
            if (attempt.group_id, attempt.index) in done:
                continue
            n = retried.get((attempt.group_id, attempt.index), 0)
            queue.append(Attempt(attempt.group_id, attempt.task, attempt.index, n))
        self._queue = queue
        for group in self.groups.values():
            if group.completed >= group.size or (group.finished and not group.closed):
                group.closed = True
        self._unfinished = {gid for gid, g in self.groups.items() if not g.finished}

    def close_remaining(self) -> list[Attempt]:
        """Drop queued attempts of groups already closed at resume time; they are recorded ``skipped``."""
        dropped = [a for a in self._queue if self.groups[a.group_id].closed]
        for attempt in dropped:
            self.groups[attempt.group_id].ended += 1
        self._queue = deque(a for a in self._queue if not self.groups[a.group_id].closed)
        self._unfinished = {gid for gid, g in self.groups.items() if not g.finished}
        return dropped
