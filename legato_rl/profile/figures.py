"""A run's profile figures: per-desktop usage, latency percentiles, errors by kind, and :class:`Profile`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legato_rl.profile.timeline import PHASES, Timeline
from legato_rl.store import ERROR_KINDS, FAILED_STATUSES, RolloutRecord
from legato_rl.summary import Summary, percentile

__all__ = [
    "LATENCY_KINDS",
    "PROFILE_SCHEMA",
    "TOP_MESSAGES",
    "DesktopUsage",
    "ErrorCounts",
    "ErrorTally",
    "Profile",
    "add_samples",
    "desktop_usage",
    "latency_stats",
]

#: The schema of ``profile.json`` and of ``legato rl profile --json``.
PROFILE_SCHEMA = "legato.profile/v0"
#: Latency distributions: ``model`` per policy call, ``act``/``wait`` per step (its actions summed),
#: ``reset`` (``reset_s + wait_after_reset_s``) and ``eval`` (``wait_before_eval_s + eval_s``) per try. The
#: resets are also split by the record's ``reset_kind``, as ``reset fast``, ``reset revert``, ... after these.
LATENCY_KINDS = ("model", "act", "wait", "reset", "eval")


@dataclass(frozen=True)
class DesktopUsage:
    """One desktop over the batch window.

    Attributes:
        desktop: its index.
        tries: tries it ran (all statuses).
        busy_s: seconds it was running a try.
        utilization: ``busy_s`` over the batch window.
        phase_s: seconds by timeline phase (``other``: in a try but in no phase; ``idle``: no try).
    """

    desktop: int
    tries: int
    busy_s: float
    utilization: float | None
    phase_s: Mapping[str, float]


#: How many messages :class:`ErrorCounts` keeps per kind.
TOP_MESSAGES = 3
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class ErrorCounts:
    """The errors of one kind (``policy`` or ``env``) in a run.

    Attributes:
        kind: ``policy`` (the model server failed) or ``env`` (the desktop failed).
        error: records that ended in ``error`` of this kind.
        retried: tries that failed this way and were re-run (``retried``; desktop failures only).
        top: the most frequent messages, most frequent first, as ``(count, type, message)``; messages that
            differ only in their numbers (ports, pids, seconds) count as one, shown as first seen.
    """

    kind: str
    error: int = 0
    retried: int = 0
    top: tuple[tuple[int, str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """This kind's part of ``profile.json``'s ``errors``."""
        return {
            "error": self.error,
            "retried": self.retried,
            "top": [{"count": n, "type": t, "message": m} for n, t, m in self.top],
        }


class ErrorTally:
    """Counts errors by kind and message while the records stream past."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {kind: Counter() for kind in ERROR_KINDS}
        self.messages: dict[str, Counter[tuple[str, str]]] = {kind: Counter() for kind in ERROR_KINDS}
        self.first: dict[tuple[str, str], str] = {}

    def add(self, record: RolloutRecord) -> None:
        """Count one record (only failed tries carry an error)."""
        error = record.error
        if error is None or record.status not in FAILED_STATUSES or error.kind not in self.counts:
            return
        self.counts[error.kind][record.status] += 1
        key = (error.type, _NUMBER.sub("N", error.message))
        self.messages[error.kind][key] += 1
        self.first.setdefault(key, error.message)

    def result(self) -> dict[str, ErrorCounts]:
        """The counts so far, one :class:`ErrorCounts` per kind."""
        return {
            kind: ErrorCounts(
                kind=kind,
                error=self.counts[kind]["error"],
                retried=self.counts[kind]["retried"],
                top=tuple((n, key[0], self.first[key]) for key, n in self.messages[kind].most_common(TOP_MESSAGES)),
            )
            for kind in ERROR_KINDS
        }


@dataclass(frozen=True)
class Profile:
    """A run's profile: the summary figures, per-desktop usage, latency percentiles, and the files drawn.

    Attributes:
        run_dir: the run.
        summary: :func:`legato_rl.summary.summarize` of its records.
        desktops: one per desktop that ran a try.
        latency_s: per :data:`LATENCY_KINDS`: ``n``, ``p50``, ``p95``, ``p99`` and ``max`` seconds.
        in_progress: a collect was still writing the run (the figures cover the records written so far).
        torn_tail_bytes: a torn last record left out (a collect was killed mid-write).
        files: the pictures and report written, by name (``timeline``, ``latency``, ``report``, ``json``).
        timeline: the rebuilt phase intervals.
        errors: by kind (``policy``, ``env``): how many records ended in an error, how many tries were
            re-run, and the most frequent messages.
    """

    run_dir: Path
    summary: Summary
    desktops: tuple[DesktopUsage, ...]
    latency_s: Mapping[str, Mapping[str, float | int | None]]
    in_progress: bool = False
    torn_tail_bytes: int = 0
    files: Mapping[str, Path] = field(default_factory=dict)
    timeline: Timeline = field(default_factory=Timeline, repr=False, compare=False)
    errors: Mapping[str, ErrorCounts] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``profile.json``'s content (and ``legato rl profile --json``'s output)."""
        return {
            "schema": PROFILE_SCHEMA,
            "run": str(self.run_dir),
            "in_progress": self.in_progress,
            "torn_tail_bytes": self.torn_tail_bytes,
            "summary": self.summary.to_json(),
            "desktops": [
                {
                    "desktop": d.desktop,
                    "tries": d.tries,
                    "busy_s": d.busy_s,
                    "utilization": d.utilization,
                    "phase_s": dict(d.phase_s),
                }
                for d in self.desktops
            ],
            "latency_s": {kind: dict(values) for kind, values in self.latency_s.items()},
            "errors": {kind: counts.to_json() for kind, counts in self.errors.items()},
            "files": {name: str(path) for name, path in self.files.items()},
        }


def add_samples(samples: dict[str, list[float]], record: RolloutRecord) -> None:
    """Add one record's latencies to ``samples`` (by :data:`LATENCY_KINDS`)."""
    for step in record.steps:
        samples["model"].append(step.model.seconds)
        if step.actions:
            samples["act"].append(sum(a.act_s or 0.0 for a in step.actions))
            samples["wait"].append(sum((a.ready_s or 0.0) + (a.wait_s or 0.0) for a in step.actions))
    if record.desktop is None:
        return
    timing = record.timing
    if timing.reset_s or timing.wait_after_reset_s:
        samples["reset"].append(timing.reset_s + timing.wait_after_reset_s)
        if record.reset_kind:
            samples.setdefault(f"reset {record.reset_kind}", []).append(timing.reset_s + timing.wait_after_reset_s)
    if timing.wait_before_eval_s or timing.eval_s:
        samples["eval"].append(timing.wait_before_eval_s + timing.eval_s)


def latency_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """``n``, ``p50``, ``p95``, ``p99`` and ``max`` of ``values`` (``None`` when there are none)."""
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def desktop_usage(timeline: Timeline, tries: Mapping[int, int]) -> tuple[DesktopUsage, ...]:
    """Each desktop's tries, busy seconds, utilisation and seconds by phase over the batch window."""
    window = (timeline.end - timeline.start) if timeline.start is not None and timeline.end is not None else 0.0
    usage = []
    for desktop in sorted(timeline.intervals):
        lanes = timeline.intervals[desktop]
        phase_s = {phase: sum(width for _, width in lanes[phase]) for phase in PHASES}
        # ``other`` spans whole tries under the phases: keep only its uncovered part
        phase_s["other"] = max(phase_s["other"] - sum(phase_s[p] for p in PHASES if p not in ("other", "idle")), 0.0)
        busy = timeline.busy_seconds(desktop)
        usage.append(
            DesktopUsage(
                desktop=desktop,
                tries=tries.get(desktop, 0),
                busy_s=busy,
                utilization=busy / window if window > 0 else None,
                phase_s=phase_s,
            )
        )
    return tuple(usage)
