"""Continuous collection for asynchronous RL: desktops that never wait for the trainer, with bounded staleness.

A :class:`Follower` runs the same scheduler, store and records as :func:`legato_rl.collect.collect` (one
attempt loop: :class:`~legato_rl.collect.Collector`), over a task stream that does not end
(:class:`~legato_rl.stream.TaskStream`), and hands each GRPO group to the trainer as it completes::

    async with Follower("tasks.json", policy, out="runs/async", desktops=16, group=8, max_ready=4) as run:
        async for group in run:                  # CompletedGroup: records, rewards, advantages, staleness
            await train_on(group)
            run.set_version("step-42")           # the server has loaded step-42: calls from now carry it

:func:`follow` is the blocking form (a background thread runs the loop); ``legato rl collect --follow`` the
command line's (it reads the trainer's ``--control`` file: docs/async.md).

* **Versions.** :meth:`Follower.set_version` says a version is loaded: every policy call asked from then on
  records it in its step (``model.policy_version``, beside the server's own ``model.weight_version``); the
  record's ``policy.version`` stays the version at dispatch. The versions are numbered in the order they are
  first loaded; staleness counts in those numbers.
* **Partial rollouts.** ``partial="continue"`` (default): an attempt in flight at a version change goes on
  under the new version, so its steps show both. ``partial="restart"``: it is cut short, recorded ``retried``
  (error kind ``version``) and played again from its reset under the new version; such a try does not count
  against ``env_retries`` (it was no desktop failure).
* **Bounded staleness.** With ``max_staleness=k``, a group whose oldest step is more than ``k`` versions
  behind the current one when the trainer takes it is re-run as a new group of the same task
  (``stale="rerun"``, its id ``g<n>r<k>-<task_id>``) or handed over marked ``stale`` (``stale="deliver"``);
  never mixed silently. A group re-run twice for staleness goes before every other attempt.
* **Backpressure.** At most ``max_ready`` completed groups wait for the trainer: a group opens only while the
  groups waiting and the groups open stay within ``max_ready`` (one more while the trainer waits in
  :meth:`Follower.next_group` with no group ready: it takes the next group to complete at once), and no new
  attempt calls the policy while ``max_ready`` wait (those in flight finish); the desktops go on as soon as the
  trainer takes a group.
* **Reset ahead** (``reset_ahead=True``, the default). A desktop with nothing it may start takes the next attempt
  anyway, its group opened *held*: it resets the desktop for the task and holds before the first policy call
  until the group's turn comes (held groups get it in order, before any other group opens). A reset needs no
  policy, so staleness is as if the desktop had waited; the record's ``timing.held_s`` is the hold, not busy.
* **The store stays true.** Records are appended as attempts end, so ``rollouts.jsonl`` may be tailed and
  ``legato rl export`` / ``profile`` read a live run. ``DIR/follow.jsonl`` logs each version loaded and each
  group handed over (``delivered``), marked stale (``stale``) or re-run (``rerun``). A killed run resumes from
  the same ``out``: nothing is lost or duplicated, and groups that completed but were not handed over are
  handed over first.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from legato_gym import Backend, ConfigError, DesktopConfig, Task, resolve_backend
from legato_gym.backends import Finished
from legato_gym.vector import RayPlacement
from legato_rl.advantages import group_advantages
from legato_rl.collect import Collector, _Playing, _with_limits
from legato_rl.collect_options import CollectOptions
from legato_rl.groups import Attempt, Group, GroupBook, Status
from legato_rl.harness import Harness
from legato_rl.policy import PolicyConfig
from legato_rl.progress import Progress
from legato_rl.store import ErrorInfo, RolloutRecord, read_records, write_json_atomic
from legato_rl.store.files import SUMMARY_FILE
from legato_rl.store.follow_log import FOLLOW_FILE, append_follow_log, read_follow_log
from legato_rl.stream import Order, TaskStream
from legato_rl.summary import Summary, busy_spans

__all__ = [
    "FOLLOW_FILE",
    "CompletedGroup",
    "FollowOptions",
    "FollowRun",
    "Follower",
    "follow",
    "follow_figures",
    "read_follow_log",
]

log = logging.getLogger(__name__)

_GROUP_ID = re.compile(r"^g(\d+)(?:r(\d+))?-")

Stale = Literal["rerun", "deliver"]
Partial = Literal["continue", "restart"]
T = TypeVar("T")


@dataclass(frozen=True)
class FollowOptions:
    """The knobs of continuous collection (each the :class:`Follower` argument of the same name).

    Attributes:
        order: ``cycle`` or ``draw`` the tasks (:class:`~legato_rl.stream.TaskStream`).
        max_ready: completed groups that may wait for the trainer before new attempts stop calling the policy.
        max_staleness: versions a group's oldest step may lag the current one; ``None``: no bound.
        stale: what a group past ``max_staleness`` becomes: ``rerun`` or ``deliver`` (marked ``stale``).
        partial: what an attempt in flight at a version change does: ``continue`` or ``restart``.
        reset_ahead: a desktop with nothing that may start resets one ahead and holds it before its first
            policy call until its turn comes; ``False``: it waits unreset.
    """

    order: Order = "cycle"
    max_ready: int = 4
    max_staleness: int | None = None
    stale: Stale = "rerun"
    partial: Partial = "continue"
    reset_ahead: bool = True

    def __post_init__(self) -> None:
        if self.max_ready < 1:
            raise ConfigError(f"max_ready={self.max_ready!r} must be >= 1 (e.g. --max-ready 4)")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError(f"max_staleness={self.max_staleness!r} must be >= 0 (e.g. --max-staleness 1)")
        if self.stale not in ("rerun", "deliver"):
            raise ConfigError(f"stale={self.stale!r} must be 'rerun' or 'deliver' (e.g. --stale deliver)")
        if self.partial not in ("continue", "restart"):
            raise ConfigError(f"partial={self.partial!r} must be 'continue' or 'restart' (e.g. --partial restart)")


@dataclass(frozen=True)
class CompletedGroup:
    """One GRPO group, every attempt ended, as handed to the trainer.

    Attributes:
        group_id: ``g<n>-<task_id>`` (``g<n>r<k>-<task_id>``: its ``k``-th re-run for staleness).
        task: the task.
        records: the final record of each attempt (``retried`` tries left out), in the order written.
        versions: the policy versions of its steps, oldest first.
        staleness: versions between its oldest step and the current version when it was handed over.
        stale: handed over although ``staleness`` exceeds ``max_staleness`` (``stale="deliver"``).
    """

    group_id: str
    task: Task
    records: tuple[RolloutRecord, ...]
    versions: tuple[str | None, ...] = ()
    staleness: int = 0
    stale: bool = False

    @property
    def completed(self) -> tuple[RolloutRecord, ...]:
        """The ``ok`` and ``truncated`` records: the group's samples."""
        return tuple(record for record in self.records if record.completed)

    @property
    def rewards(self) -> list[float]:
        return [float(record.reward or 0.0) for record in self.completed]

    def advantages(self) -> dict[str, float]:
        """The GRPO advantage of each completed record, by ``rollout_id``."""
        return group_advantages(self.completed)


class _FollowBook(GroupBook):
    """The group book of a continuous run: groups are opened from the stream as desktops ask for work."""

    def __init__(self, stream: TaskStream, *, group: int, oversample: float) -> None:
        super().__init__([], group=group, oversample=oversample)
        self._stream = iter(stream)
        self.position = 0  # the next stream position to open
        self.paused = False  # backpressure: no attempt starts (with reset ahead: none calls the policy)
        self.open_slots: int | None = None  # backpressure: groups that may be open (unfinished) at once
        self.stopping = False  # no group opens; with draining, the open ones finish
        self.draining = False
        self.reruns: deque[tuple[str, Task]] = deque()  # groups to run again, before the stream's next
        self.origin: dict[str, tuple[int, int]] = {}  # group id -> (stream position, re-runs)
        self.ahead = False  # reset ahead: with nothing that may start, a desktop takes an attempt that may not
        self.held: dict[str, None] = {}  # groups opened ahead of their turn, in order: their attempts hold

    @property
    def open_groups(self) -> int:
        """Groups open and unfinished, not counting those held ahead of their turn."""
        return len(self._unfinished) - len(self.held)

    def may_start(self, group_id: str) -> bool:
        """An attempt of ``group_id`` may make its first policy call: nothing holds the desktops back and its
        group's turn has come (or the run stops: a drain finishes what it holds, a stop cuts it short)."""
        return self.stopping or (not self.paused and group_id not in self.held)

    def release(self) -> bool:
        """Give the groups held ahead their turn, oldest first, while the open groups leave room; ``True`` if any
        was given it."""
        released = False
        while self.held and (self.stopping or self.open_slots is None or self.open_groups < self.open_slots):
            del self.held[next(iter(self.held))]
            released = True
        return released

    @property
    def all_ended(self) -> bool:
        return self.stopping and (not self.draining or not self._unfinished)

    def next_attempt(self, desktop: int | None = None, *, free: Iterable[int] = ()) -> Attempt | None:
        if (self.paused and not self.ahead) or (self.stopping and not self.draining):
            return None
        free = tuple(free)
        attempt = super().next_attempt(desktop, free=free)
        if attempt is None and not self.stopping and self._open_next():
            attempt = super().next_attempt(desktop, free=free)
        return attempt

    def _open_next(self) -> bool:
        self.release()
        # The groups open would fill the trainer's queue (or it is full): no group's turn until it takes some. A
        # desktop may still reset one ahead: the group opens held, its attempts waiting before their first call.
        full = self.paused or (self.open_slots is not None and self.open_groups >= self.open_slots)
        if full and not self.ahead:
            return False
        if self.reruns:
            gid, task = self.reruns.popleft()
            self.add(gid, task, first=self.origin[gid][1] >= 2)
        else:
            try:
                position, task = next(self._stream)
            except StopIteration:
                log.info("the task stream ended: finishing the groups in flight")
                self.stopping = self.draining = True
                return False
            gid = self.open_position(position, task)
        if full:
            self.held[gid] = None
        return True

    def open_position(self, position: int, task: Task) -> str:
        gid = f"g{position:04d}-{task.task_id}"
        self.origin[gid] = (position, 0)
        self.add(gid, task)
        self.position = position + 1
        return gid

    def add(self, gid: str, task: Task, *, first: bool = False) -> None:
        """Open group ``gid``; ``first`` queues its attempts before all others (a group re-run twice)."""
        n = self.attempts_per_group
        self.groups[gid] = Group(gid, task, self.group_size, n)
        attempts = [Attempt(gid, task, a) for a in range(n)]
        if first:
            self._queue.extendleft(reversed(attempts))
        else:
            self._queue.extend(attempts)
        self._unfinished.add(gid)

    def finish(self, attempt: Attempt, status: Status) -> tuple[Status, list[Attempt]]:
        result = super().finish(attempt, status)
        if self.groups[attempt.group_id].finished:  # every attempt failed before its turn came
            self.held.pop(attempt.group_id, None)
        return result

    def rerun(self, gid: str) -> str:
        """Queue a new group for the task of ``gid``, which was too stale; returns its id."""
        position, reruns = self.origin[gid]
        task = self.groups[gid].task
        new = f"g{position:04d}r{reruns + 1}-{task.task_id}"
        self.origin[new] = (position, reruns + 1)
        self.reruns.append((new, task))
        return new

    def skip_to(self, position: int) -> None:
        """Open every stream position before ``position`` (a resume), so their groups exist to be restored."""
        while self.position < position:
            try:
                at, task = next(self._stream)
            except StopIteration:
                raise ConfigError(
                    f"the task stream ended at position {self.position}, but the run has groups up to position "
                    f"{position - 1}: give the run's task stream as it was"
                ) from None
            self.open_position(at, task)


class _FollowCollector(Collector):
    """The scheduler of :class:`Collector`, with groups opened from a stream and handed to a trainer."""

    def __init__(self, stream: TaskStream, follow: FollowOptions, seed: int, **kwargs: Any) -> None:
        pool = list(stream.pool) if stream.pool is not None else []
        super().__init__(pool or [_PLACEHOLDER], **kwargs)
        self.stream = stream
        self.follow = follow
        self.seed = seed
        self.book = _FollowBook(stream, group=self.options.group, oversample=self.options.oversample)
        self.book.open_slots = follow.max_ready
        self.book.ahead = follow.reset_ahead
        self._turn = asyncio.Event()  # an attempt held before its first call may look again
        self.progress.groups = 0
        self.ready: deque[CompletedGroup] = deque()
        self.changed = asyncio.Event()  # a group became ready, a version was loaded, or the run ended
        self.asking = 0  # next_group() calls under way: the trainer takes that many groups now (as they complete)
        self._records: dict[str, list[RolloutRecord]] = {}
        self._handled: set[str] = set()  # groups made ready (or handed over) once
        self._versions: dict[str | None, int] = {}  # version -> its number, in the order first loaded
        self._logged: set[str | None] = set()  # versions in follow.jsonl
        # (group id, attempt index) -> its tries restarted for a version change: those are not desktop failures,
        # so they do not count against env_retries
        self._restarts: Counter[tuple[str, int]] = Counter()
        self._started_at = time.time()
        if stream.pool is None:
            self.tasks = []

    # -- the run's manifest and its resume ----------------------------------------------------------------
    def manifest(self) -> Any:
        base = super().manifest()
        return replace(base, policy_version=None, follow={"order": self.stream.order, "seed": self.seed})

    def _restore(self) -> None:
        book = self.book
        assert isinstance(book, _FollowBook)
        records = list(read_records(self.out))
        log_lines = read_follow_log(self.out)
        for line in log_lines:
            if line.get("event") == "version":
                self._number(line["version"])
                self._logged.add(line["version"])
        if self.policy_config.version not in self._logged:  # resumed under another version than the last
            self._note_version(self.policy_config.version)
        positions = [int(m.group(1)) for r in records if (m := _GROUP_ID.match(r.group_id))]
        book.skip_to(max(positions, default=-1) + 1)
        reruns = [line for line in log_lines if line.get("event") == "group" and line.get("outcome") == "rerun"]
        for line in reruns:
            new = book.rerun(line["group_id"])
            if new != line["rerun_as"]:
                raise ConfigError(f"{FOLLOW_FILE} names re-run {line['rerun_as']!r} but the run would make {new!r}")
        while book.reruns:  # every re-run decided is a group of the run, before the stream's next
            gid, task = book.reruns.popleft()
            book.add(gid, task, first=book.origin[gid][1] >= 2)
        handled = {line["group_id"] for line in log_lines if line.get("event") == "group"}
        super()._restore()
        for record in records:
            if record.status != Status.RETRIED.value:
                self._records.setdefault(record.group_id, []).append(record)
            elif record.error is not None and record.error.kind == "version":
                self._restarts[(record.group_id, record.attempt)] += 1
        for attempt in book.close_remaining():  # queued attempts of groups closed before the kill: skipped now,
            self._write(self._skipped(attempt))  # so that those groups finish and are handed over below
        for gid, group in book.groups.items():
            if gid in handled:
                self._handled.add(gid)
                self._records.pop(gid, None)
            elif group.finished:
                self._group_finished(gid)
        log.info("resuming a continuous run at stream position %d, %d groups ready", book.position, len(self.ready))

    # -- versions -----------------------------------------------------------------------------------------
    def _number(self, version: str | None) -> int:
        return self._versions.setdefault(version, len(self._versions))

    @property
    def current(self) -> int:
        return self._number(self.policy_config.version)

    def _note_start_version(self) -> None:
        """Log the version the run started with, once (when the first group completes or the first change comes)."""
        if not self._logged:
            self._note_version(self.policy_config.version, self._started_at)

    def _note_version(self, version: str | None, at: float | None = None) -> None:
        self._number(version)
        self._logged.add(version)
        self._log({"event": "version", "version": version, "at": time.time() if at is None else at})

    def load_version(self, version: str) -> None:
        if self._store is None:  # before the run opened its store: the version it starts with
            super().load_version(version)
            return
        self._note_start_version()
        super().load_version(version)
        self._note_version(version)
        self.changed.set()
        if self.follow.partial == "restart":
            self._restart_running(version)

    def _restart_running(self, version: str) -> None:
        """Cut short every attempt in flight that has called the policy, and queue it again (``partial="restart"``);
        one still in its reset, or held ahead, makes every call under the new version anyway and goes on."""
        for playing, task in list(self._running.values()):
            if not playing.calling or not task.cancel():
                continue
            error = ErrorInfo("version", "VersionChanged", f"version {version} was loaded while this try ran")
            self._write(playing.record(Status.RETRIED, error))
            self._restarts[(playing.attempt.group_id, playing.attempt.index)] += 1
            if self.book.requeue(playing.attempt) is None:
                self._end(playing, Status.SKIPPED)
        assert self._wake is not None
        self._wake.set()

    def _env_tries(self, attempt: Attempt) -> int:
        return attempt.try_index - self._restarts[(attempt.group_id, attempt.index)]

    def _hold_of(self, playing: _Playing) -> Callable[[], Awaitable[float]] | None:
        book = self.book
        assert isinstance(book, _FollowBook)
        gid = playing.attempt.group_id

        async def hold() -> float:  # reset ahead: wait for the group's turn before the first policy call
            if book.ahead and not book.may_start(gid):
                since = time.monotonic()
                self.progress.held += 1
                try:
                    while not book.may_start(gid):
                        self._turn.clear()
                        await self._turn.wait()
                finally:  # a try cancelled while it holds (its group closed) records its hold too
                    playing.episode.held_s = time.monotonic() - since
                    self.progress.held -= 1
            playing.calling = True
            return playing.episode.held_s

        return hold

    # -- groups -------------------------------------------------------------------------------------------
    def _write(self, record: RolloutRecord) -> None:
        super()._write(record)
        if record.status != Status.RETRIED.value:
            self._records.setdefault(record.group_id, []).append(record)

    def _group_finished(self, group_id: str) -> None:
        if group_id in self._handled:
            return
        self._handled.add(group_id)
        self._note_start_version()
        records = tuple(self._records.pop(group_id, ()))
        versions = sorted(
            {step.model.policy_version for r in records for step in r.steps}, key=lambda v: self._number(v)
        )
        group = self.book.groups[group_id]
        self.progress.groups = len(self.book.groups)
        self.ready.append(CompletedGroup(group_id, group.task, records, tuple(versions)))
        self._backpressure()
        self.changed.set()

    def _backpressure(self) -> None:
        book = self.book
        assert isinstance(book, _FollowBook)
        # The groups waiting and the groups open together stay within max_ready, so the queue never exceeds it; a
        # drain finishes its groups. A trainer waiting in next_group() takes the next group to complete at once: that
        # one never waits, so one more group may be open while it asks (a desktop need not sit idle while the trainer
        # waits for a group).
        paused = self.waiting >= self.follow.max_ready and not book.stopping
        slots = self.follow.max_ready - len(self.ready) + self.asking
        freed = (book.paused and not paused) or (book.open_slots is not None and slots > book.open_slots)
        if freed and self._wake is not None:
            self._wake.set()  # desktops waiting for work look again
        if paused != book.paused and self._store is not None:
            self._log({"event": "queue", "full": paused, "at": time.time()})
        book.paused, book.open_slots = paused, slots
        if book.release() or freed:
            self._turn.set()  # attempts held before their first call look again

    @property
    def waiting(self) -> int:
        """Completed groups waiting for the trainer: those ready less the ones its next_group() calls are taking."""
        return max(0, len(self.ready) - self.asking)

    def take(self) -> CompletedGroup | None:
        """The next group to hand over (staleness checked now), or ``None`` when none is ready."""
        book = self.book
        assert isinstance(book, _FollowBook)
        while self.ready:
            group = self.ready.popleft()
            self._backpressure()
            oldest = min((self._number(v) for v in group.versions), default=self.current)
            staleness = self.current - oldest
            limit = self.follow.max_staleness
            entry: dict[str, Any] = {"event": "group", "group_id": group.group_id, "staleness": staleness}
            if limit is not None and staleness > limit and self.follow.stale == "rerun" and not book.stopping:
                new = book.rerun(group.group_id)
                self._log({**entry, "outcome": "rerun", "rerun_as": new, "at": time.time()})
                log.info("%s is %d versions stale: re-run as %s", group.group_id, staleness, new)
                if self._wake is not None:
                    self._wake.set()
                continue
            stale = limit is not None and staleness > limit
            self._log({**entry, "outcome": "stale" if stale else "delivered", "at": time.time()})
            return replace(group, staleness=staleness, stale=stale)
        return None

    async def flush(self) -> None:
        """Wait until every record written so far is durable."""
        if self._store is not None:
            await self._store.flush()

    def stop(self, *, drain: bool) -> None:
        """No group opens any more; without ``drain`` the attempts in flight are cut short unrecorded (a resume
        runs them again), with it the open groups finish."""
        book = self.book
        assert isinstance(book, _FollowBook)
        book.stopping, book.draining = True, drain
        book.paused = False
        book.release()
        self._turn.set()
        if not drain:
            for _, task in list(self._running.values()):
                task.cancel()
        if self._wake is not None:
            self._wake.set()

    def _log(self, entry: Mapping[str, Any]) -> None:
        append_follow_log(self.out, entry)

    # -- the run --------------------------------------------------------------------------------------------
    async def run(self) -> Summary:
        try:
            summary = await super().run()
        finally:
            self.changed.set()
        figures = follow_figures(self.out, desktops=self.options.desktops, since=self._started_at)
        summary = replace(summary, follow=figures)
        write_json_atomic(Path(self.out) / SUMMARY_FILE, summary.to_json())
        return summary


_PLACEHOLDER = Task(task_id="stream", instruction="", config={})


def follow_figures(run_dir: str | os.PathLike[str], *, desktops: int, since: float | None = None) -> dict[str, Any]:
    """The figures of a continuous run that ``summary.json`` holds under ``follow`` (see :mod:`legato_rl.summary`).

    Utilisation counts the records' desktop time (``started_at`` to ``ended_at``) against ``desktops`` x the
    wall time from the first record's start to the last record's end, over the records started at ``since`` or
    later (default: all).
    """
    lines = read_follow_log(run_dir)
    groups = [line for line in lines if line.get("event") == "group"]
    handed = [int(line["staleness"]) for line in groups if line["outcome"] != "rerun"]
    loads: list[tuple[float, str | None]] = [
        (float(line["at"]), line["version"]) for line in lines if line.get("event") == "version"
    ]
    loads.sort(key=lambda load: load[0])  # the version loaded at start is logged when the first change comes
    intervals = [  # the desktops' busy time: a try less the time it held its desktop reset ahead
        span for r in read_records(run_dir) if since is None or (r.started_at or 0.0) >= since for span in busy_spans(r)
    ]
    start = min((a for a, _ in intervals), default=None)
    end = max((b for _, b in intervals), default=None)

    def utilisation(lo: float, hi: float) -> float | None:
        if hi <= lo:
            return None
        busy = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)
        return round(busy / (desktops * (hi - lo)), 4)

    full_s = 0.0  # the time max_ready groups waited for the trainer, within the records' span
    if start is not None and end is not None:
        full_at: float | None = None
        for line in lines:
            if line.get("event") != "queue" or (since is not None and float(line["at"]) < since):
                continue
            at = min(max(float(line["at"]), start), end)
            if line["full"] and full_at is None:
                full_at = at
            elif not line["full"] and full_at is not None:
                full_s, full_at = full_s + at - full_at, None
        if full_at is not None:
            full_s += end - full_at
    busy_mean = (
        None if start is None or end is None or end <= start else sum(b - a for a, b in intervals) / (end - start)
    )

    by_version: list[dict[str, Any]] = []
    if start is not None and end is not None:
        bounds = [(at, version) for at, version in loads if start < at < end]
        first = [version for at, version in loads if at <= start][-1:] or [None]
        edges = [start] + [at for at, _ in bounds] + [end]
        labels = first + [version for _, version in bounds]
        for label, lo, hi in zip(labels, edges, edges[1:], strict=False):
            by_version.append({"version": label, "seconds": round(hi - lo, 3), "utilisation": utilisation(lo, hi)})
    return {
        "staleness": {
            "mean": round(sum(handed) / len(handed), 4) if handed else None,
            "max": max(handed, default=None),
        },
        "versions": list(dict.fromkeys(version for _, version in loads)),
        "groups_delivered": sum(line["outcome"] == "delivered" for line in groups),
        "groups_stale": sum(line["outcome"] == "stale" for line in groups),
        "groups_rerun": sum(line["outcome"] == "rerun" for line in groups),
        "utilisation": utilisation(start, end) if start is not None and end is not None else None,
        "utilisation_by_version": by_version,
        "desktops": desktops,
        "queue_full_s": round(full_s, 3),
        # The trainer held the desktops back (its queue was full) part of the time: the desktops busy on average
        # would have kept up with it, and the others only made groups for it to take later, or never.
        "desktops_to_keep_up": math.ceil(round(busy_mean, 3)) if busy_mean and full_s > 0 else None,
    }


class Follower:
    """Continuous collection: an async iterator of completed groups (see the module docstring).

    Args:
        tasks: a tasks file's path, a list of tasks (cycled or drawn), or any other iterable of tasks (taken as
            it comes; it may be endless).
        policy: the policy server, its sampling and limits; ``policy.version`` is the version loaded at start.
        out: the run directory; an existing continuous run with the same arguments resumes.
        order: ``cycle`` or ``draw`` (seeded by ``seed``) a list of tasks.
        max_ready, max_staleness, stale, partial, reset_ahead: :class:`FollowOptions`.
        The other arguments are :func:`~legato_rl.collect.collect`'s.
    """

    def __init__(
        self,
        tasks: Sequence[Task | Mapping[str, Any]] | Iterable[Task | Mapping[str, Any]] | str | Path,
        policy: PolicyConfig,
        *,
        out: str | Path,
        desktops: int = CollectOptions.desktops,
        group: int = CollectOptions.group,
        oversample: float = CollectOptions.oversample,
        max_inflight: int | None = None,
        step_timeout: float | None = None,
        retries: int | None = None,
        max_steps: int = CollectOptions.max_steps,
        rollout_timeout: float | None = CollectOptions.rollout_timeout,
        env_retries: int = CollectOptions.env_retries,
        image_max: int = CollectOptions.image_max,
        desktop: DesktopConfig | Finished | None = None,
        backend: str | Backend = CollectOptions.backend,
        harness: Harness | None = None,
        seed: int = CollectOptions.seed,
        order: Order = FollowOptions.order,
        max_ready: int = FollowOptions.max_ready,
        max_staleness: int | None = FollowOptions.max_staleness,
        stale: Stale = FollowOptions.stale,
        partial: Partial = FollowOptions.partial,
        reset_ahead: bool = FollowOptions.reset_ahead,
        ray: RayPlacement | str | None = None,
        progress: Progress | None = None,
    ) -> None:
        resolved = resolve_backend(backend)
        finished = resolved.finish(desktop)  # once: typed options, the workers' interpreter
        stream = TaskStream.of(tasks, order=order, seed=seed, osworld_path=finished.config.osworld_path)
        options = CollectOptions(
            desktops=desktops, group=group, oversample=oversample, max_steps=max_steps,
            rollout_timeout=rollout_timeout, env_retries=env_retries, image_max=image_max, backend=resolved.name,
            seed=seed,
        )  # fmt: skip
        self.options = FollowOptions(order, max_ready, max_staleness, stale, partial, reset_ahead)
        self._collector = _FollowCollector(
            stream, self.options, seed,
            policy=_with_limits(policy, max_inflight=max_inflight, step_timeout=step_timeout, retries=retries),
            out=out, options=options, desktop=finished, harness=harness, ray=ray, progress=progress,
            backend=resolved,
        )  # fmt: skip
        self._run: asyncio.Task[Summary] | None = None

    @property
    def out(self) -> Path:
        return self._collector.out

    @property
    def version(self) -> str | None:
        """The version loaded now."""
        return self._collector.policy_config.version

    @property
    def waiting(self) -> int:
        """Completed groups waiting for the trainer (not counting the one a :meth:`next_group` call is taking)."""
        return self._collector.waiting

    async def start(self) -> None:
        """Start collecting (``async with`` does)."""
        if self._run is None:
            self._run = asyncio.ensure_future(self._collector.run())

    def set_version(self, version: str) -> None:
        """The policy server has loaded ``version``: calls asked from now on carry it (call on the run's loop)."""
        if not version:
            raise ConfigError("set_version() needs a version label, e.g. 'step-42'")
        if version != self.version:
            self._collector.load_version(version)

    async def next_group(self) -> CompletedGroup:
        """The next completed group (waits for one).

        Raises:
            StopAsyncIteration: the run has ended (stopped, or its task stream ended) and no group is left.
            PolicyUnavailable: the policy server went away (what was collected is kept; resume finishes it).
        """
        await self.start()
        assert self._run is not None
        collector = self._collector
        collector.asking += 1
        collector._backpressure()  # the trainer asks: the next group to complete is its, and one more may open
        asking = True
        try:
            while True:
                if collector.ready:
                    await collector.flush()  # its records are durable before it is handed over (and logged)
                    # the group taken leaves the queue with this call's ask: counted once, no room opens for it
                    collector.asking -= 1
                    asking = False
                    group = collector.take()
                    if group is not None:
                        return group
                    collector.asking += 1  # every group ready was re-run for staleness: still asking
                    asking = True
                    collector._backpressure()
                if self._run.done():
                    self._run.result()  # raises what stopped the run
                    raise StopAsyncIteration
                collector.changed.clear()
                changed = asyncio.ensure_future(collector.changed.wait())
                await asyncio.wait((changed, self._run), return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
        finally:
            if asking:
                collector.asking -= 1
            collector._backpressure()

    def __aiter__(self) -> Follower:
        return self

    async def __anext__(self) -> CompletedGroup:
        return await self.next_group()

    async def stop(self, *, drain: bool = False) -> dict[str, Any]:
        """End the run and return its summary (also written to ``OUT/summary.json``).

        Args:
            drain: finish the groups in flight first (their records are written; they are not handed over
                unless taken). Without it they are cut short unrecorded, and a resume plays them again.
        """
        await self.start()
        assert self._run is not None
        self._collector.stop(drain=drain)
        return (await self._run).to_json()

    async def __aenter__(self) -> Follower:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._run is not None and not self._run.done():
            await self.stop()


class FollowRun:
    """The blocking form of :class:`Follower` (:func:`follow`): its loop runs in a background thread.

    Iterate for completed groups; :meth:`set_version` and :meth:`stop` may be called from any thread.
    """

    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="legato-follow", daemon=True)
        self._thread.start()
        self._call(follower.start())
        self.summary: dict[str, Any] | None = None

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __iter__(self) -> Iterator[CompletedGroup]:
        while True:
            try:
                yield self._call(self.follower.next_group())
            except StopAsyncIteration:
                return

    def set_version(self, version: str) -> None:
        async def load() -> None:
            self.follower.set_version(version)

        self._call(load())

    def stop(self, *, drain: bool = False) -> dict[str, Any]:
        """End the run (see :meth:`Follower.stop`) and return its summary."""
        if self.summary is None:
            try:
                self.summary = self._call(self.follower.stop(drain=drain))
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join()
                self._loop.close()
        return self.summary

    def __enter__(self) -> FollowRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def follow(
    tasks: Sequence[Task | Mapping[str, Any]] | Iterable[Task | Mapping[str, Any]] | str | Path,
    policy: PolicyConfig,
    **kwargs: Any,
) -> FollowRun:
    """Start continuous collection and return its blocking handle (the arguments are :class:`Follower`'s).

    Example:
        >>> with follow("tasks.json", policy, out="runs/async", backend="fake") as run:  # doctest: +SKIP
        ...     for group in run:
        ...         train_on(group)
        ...         run.set_version("step-2")
    """
    return FollowRun(Follower(tasks, policy, **kwargs))
