"""The phase timeline of a run's desktops, rebuilt from its records.

How the timeline is rebuilt. Records keep, per try, its desktop, ``started_at`` (dispatch) and
``ended_at``, seconds by phase, and per step its ``started_at``, the model call's seconds and each action's
``act_s`` / ``ready_s`` / ``wait_s`` / ``obs_s``. Phases are laid out on that skeleton:

* **reset** (``reset_s + wait_after_reset_s``) from the try's start, then **obs** for the first screenshot
  (the try's ``obs_s`` less its actions' ``obs_s``), then **held** (``held_s``: a continuous run's desktop,
  reset ahead, waiting for its group's turn; not busy);
* per step, **model** from the step's ``started_at`` for the call's seconds (queueing for
  ``--max-inflight``, retries and backoff included); then the step's actions back to back (**act**,
  **wait** = ready-signal wait plus fixed wait, **obs**), placed so that they end where the next step
  starts (after the last step, where the try's grading starts), and never before the model call ended;
* **eval** (``wait_before_eval_s + eval_s``) at the end of the try (inside a terminal step it actually
  runs before that step's last screenshot: an ``obs_s`` too early, usually milliseconds);
* **failed_call**: in a try that ended in a policy error, the time after its last step's actions (or after
  its reset when no call succeeded): the policy call that failed, its retries and backoff included;
* **other**: the rest of the try (prompt building, storing the request, the scheduler);
* **idle**: the desktop had no try, between the batch's first dispatch and its last record.

Every interval is clipped to its try. The layout is exact for each phase's length and for each step's
start; only the order of the sub-second pieces inside a step is inferred.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from legato_rl.store import RolloutRecord
from legato_rl.summary import failed_call, held_span

__all__ = ["PHASES", "Timeline", "TrySpan", "build_timeline"]

#: Timeline phases, in drawing (and legend) order.
PHASES = ("reset", "model", "act", "wait", "obs", "eval", "failed_call", "held", "other", "idle")


@dataclass(frozen=True)
class TrySpan:
    """One try on one desktop, dispatch to record."""

    desktop: int
    start: float
    end: float
    status: str
    rollout_id: str


@dataclass
class Timeline:
    """Phase intervals per desktop, rebuilt from records (see the module docstring for how).

    Attributes:
        intervals: ``intervals[desktop][phase]`` is a list of ``(start, seconds)`` in Unix time; ``other``
            spans whole tries (the phases are drawn over it) and ``idle`` the gaps between them.
        tries: every try that ran on a desktop.
        start: the batch's first dispatch (Unix time), ``None`` when no try ran.
        end: the batch's last record.
    """

    intervals: dict[int, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    tries: list[TrySpan] = field(default_factory=list)
    start: float | None = None
    end: float | None = None

    def add(self, record: RolloutRecord) -> None:
        """Lay out one record's phases (records without a desktop or times are skipped)."""
        if record.desktop is None or record.desktop < 0 or record.started_at is None or record.ended_at is None:
            return
        t0, t1 = float(record.started_at), float(max(record.ended_at, record.started_at))
        desktop = int(record.desktop)
        self.tries.append(TrySpan(desktop, t0, t1, record.status, record.rollout_id))
        self.start = t0 if self.start is None else min(self.start, t0)
        self.end = t1 if self.end is None else max(self.end, t1)
        lanes = self.intervals.setdefault(desktop, {phase: [] for phase in PHASES})

        def put(phase: str, start: float, seconds: float) -> float:
            begin = min(max(start, t0), t1)
            finish = min(max(start + max(seconds, 0.0), t0), t1)
            if finish > begin:
                lanes[phase].append((begin, finish - begin))
            return start + max(seconds, 0.0)

        put("other", t0, t1 - t0)
        timing = record.timing
        action_obs = sum(a.obs_s or 0.0 for s in record.steps for a in s.actions)
        cursor = put("reset", t0, timing.reset_s + timing.wait_after_reset_s)
        cursor = put("obs", cursor, max(timing.obs_s - action_obs, 0.0))
        held = held_span(record)
        if held is not None:
            cursor = put("held", held[0], held[1] - held[0])
        eval_s = timing.wait_before_eval_s + timing.eval_s
        failed = failed_call(record)  # the try ends in the call that failed, not in grading
        steps = record.steps
        for i, step in enumerate(steps):
            begin = max(float(step.started_at), cursor) if step.started_at is not None else cursor
            model_end = put("model", begin, step.model.seconds)
            pieces = [
                (phase, seconds)
                for action in step.actions
                for phase, seconds in (
                    ("act", action.act_s or 0.0),
                    ("wait", (action.ready_s or 0.0) + (action.wait_s or 0.0)),
                    ("obs", action.obs_s or 0.0),
                )
            ]
            last = i == len(steps) - 1
            following = steps[i + 1].started_at if not last else None
            if last and not failed:
                pieces.append(("eval", eval_s))
                anchor = t1
            elif last:
                anchor = model_end + sum(seconds for _, seconds in pieces)
            else:
                anchor = float(following) if following is not None else model_end + sum(s for _, s in pieces)
            cursor = max(model_end, anchor - sum(seconds for _, seconds in pieces))
            for phase, seconds in pieces:
                cursor = put(phase, cursor, seconds)
        if failed:
            put("failed_call", cursor, t1 - cursor)
        elif not steps:
            put("eval", max(cursor, t1 - eval_s), eval_s)

    def finish(self) -> None:
        """Compute each desktop's idle gaps over the batch window (call once every record was added)."""
        if self.start is None or self.end is None:
            return
        by_desktop: dict[int, list[TrySpan]] = defaultdict(list)
        for span in self.tries:
            by_desktop[span.desktop].append(span)
        for desktop, spans in by_desktop.items():
            idle = self.intervals[desktop]["idle"]
            idle.clear()
            cursor = self.start
            for span in sorted(spans, key=lambda s: s.start):
                if span.start > cursor:
                    idle.append((cursor, span.start - cursor))
                cursor = max(cursor, span.end)
            if self.end > cursor:
                idle.append((cursor, self.end - cursor))

    def busy_seconds(self, desktop: int) -> float:
        """Seconds the desktop was running a try (overlaps counted once), less the time a try held it reset ahead."""
        spans = sorted((s.start, s.end) for s in self.tries if s.desktop == desktop)
        total, cursor = 0.0, float("-inf")
        for start, end in spans:
            if end > cursor:
                total += end - max(start, cursor)
                cursor = end
        return total - sum(seconds for _, seconds in self.intervals.get(desktop, {}).get("held", ()))


def build_timeline(records: Iterable[RolloutRecord]) -> Timeline:
    """The phase timeline of a run's records (see the module docstring)."""
    timeline = Timeline()
    for record in records:
        timeline.add(record)
    timeline.finish()
    return timeline
