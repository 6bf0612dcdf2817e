"""Where a batch spent its time (``legato rl profile``): figures, a timeline per desktop, latency histograms.

The figures are :func:`legato_rl.summary.summarize`'s (status counts, success rate, rollouts per hour, time
share by phase, model-call percentiles, retried calls, errors, prefix-cache hit rate, logprob and token-id
coverage), plus per-desktop utilisation and latency percentiles per phase. The pictures are PNG files
(matplotlib, the ``plots`` extra) and one self-contained HTML report that embeds them.

How the timeline is rebuilt. Records keep, per try, its desktop, ``started_at`` (dispatch) and
``ended_at``, seconds by phase, and per step its ``started_at``, the model call's seconds and each action's
``act_s`` / ``ready_s`` / ``wait_s`` / ``obs_s``. Phases are laid out on that skeleton:

* **reset** (``reset_s + wait_after_reset_s``) from the try's start, then **obs** for the first screenshot
  (the try's ``obs_s`` less its actions' ``obs_s``);
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

import base64
import html
import io
import json
import logging
import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from legato_gym.errors import MissingDependencyError
from legato_rl.store import (
    ERROR_KINDS,
    STATUSES,
    RecordError,
    RolloutRecord,
    check_run_dir,
    is_being_written,
    read_manifest,
    read_records,
    storage_error,
    torn_tail_bytes,
    write_bytes_atomic,
    write_json_atomic,
)
from legato_rl.summary import Summary, failed_call, percentile, read_nodes, summarize

__all__ = [
    "LATENCY_KINDS",
    "PHASES",
    "PROFILE_DIR",
    "PROFILE_SCHEMA",
    "DesktopUsage",
    "ErrorCounts",
    "Profile",
    "Timeline",
    "TrySpan",
    "build_timeline",
    "error_rows",
    "node_rows",
    "profile_run",
    "summary_rows",
    "top_messages",
]

log = logging.getLogger(__name__)

#: The schema of ``profile.json`` and of ``legato rl profile --json``.
PROFILE_SCHEMA = "legato.profile/v0"
#: Where the pictures go inside the run unless told otherwise.
PROFILE_DIR = "profile"
#: Timeline phases, in drawing (and legend) order.
PHASES = ("reset", "model", "act", "wait", "obs", "eval", "failed_call", "other", "idle")
#: Latency distributions: ``model`` per policy call, ``act``/``wait`` per step (its actions summed),
#: ``reset`` (``reset_s + wait_after_reset_s``) and ``eval`` (``wait_before_eval_s + eval_s``) per try.
LATENCY_KINDS = ("model", "act", "wait", "reset", "eval")

_COLORS = {
    "reset": "#8c564b",
    "model": "#1f77b4",
    "act": "#ff7f0e",
    "wait": "#e6c229",
    "obs": "#17becf",
    "eval": "#9467bd",
    "failed_call": "#7b1f1f",
    "other": "#bdbdbd",
    "idle": "#f2f2f2",
}
# How a try ended (the strip under each desktop's bar): no colour shared with a phase.
_STATUS_COLORS = {
    "ok": "#2ca02c",
    "truncated": "#98df8a",
    "cancelled": "#3d3d3d",
    "skipped": "#3d3d3d",
    "surplus": "#e377c2",
    "retried": "#ff9896",
    "error": "#d62728",
}


# --- the timeline -----------------------------------------------------------------------------------------


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
        """Seconds the desktop was running a try (overlaps counted once)."""
        spans = sorted((s.start, s.end) for s in self.tries if s.desktop == desktop)
        total, cursor = 0.0, float("-inf")
        for start, end in spans:
            if end > cursor:
                total += end - max(start, cursor)
                cursor = end
        return total


def build_timeline(records: Iterable[RolloutRecord]) -> Timeline:
    """The phase timeline of a run's records (see the module docstring)."""
    timeline = Timeline()
    for record in records:
        timeline.add(record)
    timeline.finish()
    return timeline


# --- the profile ------------------------------------------------------------------------------------------


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
        return {
            "error": self.error,
            "retried": self.retried,
            "top": [{"count": n, "type": t, "message": m} for n, t, m in self.top],
        }


class _ErrorTally:
    """Counts errors by kind and message while the records stream past."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {kind: Counter() for kind in ERROR_KINDS}
        self.messages: dict[str, Counter[tuple[str, str]]] = {kind: Counter() for kind in ERROR_KINDS}
        self.first: dict[tuple[str, str], str] = {}

    def add(self, record: RolloutRecord) -> None:
        error = record.error
        if error is None or record.status not in ("error", "retried") or error.kind not in self.counts:
            return
        self.counts[error.kind][record.status] += 1
        key = (error.type, _NUMBER.sub("N", error.message))
        self.messages[error.kind][key] += 1
        self.first.setdefault(key, error.message)

    def result(self) -> dict[str, ErrorCounts]:
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


def profile_run(
    run_dir: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    plots: bool = True,
) -> Profile:
    """Profile a run: compute its figures, and draw its timeline, latency histograms and HTML report.

    A run that a collect is still writing is profiled as far as it got (``Profile.in_progress``).

    Args:
        run_dir: the run directory.
        out: where to write ``timeline.png``, ``latency.png``, ``report.html`` and ``profile.json``;
            ``RUN/profile/`` by default.
        plots: draw the pictures and the report (needs matplotlib); ``False`` computes the figures only
            and writes nothing.

    Raises:
        RecordError: ``run_dir`` is not a run, has no manifest, or a record is damaged.
        MissingDependencyError: ``plots`` and matplotlib is not installed (``pip install 'legatolabs[plots]'``).
        StorageError: the pictures cannot be written (a read-only run folder: give ``out``).

    Example:
        >>> from legato_rl.profile import profile_run
        >>> profile = profile_run("runs/step-41")            # doctest: +SKIP
        >>> profile.files["report"]                          # doctest: +SKIP
        PosixPath('runs/step-41/profile/report.html')
    """
    root = check_run_dir(run_dir, allow_in_progress=True)
    manifest = read_manifest(root)
    if manifest is None:
        raise RecordError(f"{root} has no run.json: it is not a legato rl collect run")
    if plots:
        _matplotlib()  # fail before reading a large run
    in_progress = is_being_written(root)
    torn = 0 if in_progress else torn_tail_bytes(root)
    timeline = Timeline()
    samples: dict[str, list[float]] = {kind: [] for kind in LATENCY_KINDS}
    tries: dict[int, int] = defaultdict(int)
    errors = _ErrorTally()

    def tap(records: Iterator[RolloutRecord]) -> Iterator[RolloutRecord]:
        for record in records:
            timeline.add(record)
            errors.add(record)
            if record.desktop is not None and record.desktop >= 0:
                tries[int(record.desktop)] += 1
            _add_samples(samples, record)
            yield record

    summary = summarize(tap(read_records(root)), group=manifest.group)
    summary = replace(summary, nodes=read_nodes(root))  # kept by collect in summary.json, not in the records
    timeline.finish()
    profile = Profile(
        run_dir=root,
        summary=summary,
        desktops=_usage(timeline, tries),
        latency_s={kind: _stats(values) for kind, values in samples.items()},
        in_progress=in_progress,
        torn_tail_bytes=torn,
        timeline=timeline,
        errors=errors.result(),
    )
    if not plots:
        return profile
    target = Path(out) if out is not None else root / PROFILE_DIR
    again = "then run legato rl profile again (or give --out another folder)"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, target, then=again) from exc
    images = {
        "timeline": _png(_draw_timeline(timeline)),
        "latency": _png(_draw_latency(samples)),
    }
    files: dict[str, Path] = {}
    for name, data in images.items():
        files[name] = target / f"{name}.png"
        write_bytes_atomic(files[name], data, then=again)
    files["report"] = target / "report.html"
    files["json"] = target / "profile.json"
    profile = replace(profile, files=files)
    write_bytes_atomic(files["report"], _html(profile, images).encode("utf-8"), then=again)
    write_json_atomic(files["json"], profile.to_json(), then=again)
    log.info("profile of %s written to %s", root, target)
    return profile


def _add_samples(samples: dict[str, list[float]], record: RolloutRecord) -> None:
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
    if timing.wait_before_eval_s or timing.eval_s:
        samples["eval"].append(timing.wait_before_eval_s + timing.eval_s)


def _stats(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def _usage(timeline: Timeline, tries: Mapping[int, int]) -> tuple[DesktopUsage, ...]:
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


# --- pictures ---------------------------------------------------------------------------------------------


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependencyError(
            "legato rl profile draws its pictures with matplotlib, which is not installed: "
            "pip install 'legatolabs[plots]' (or run it with --no-plots for the figures only)"
        ) from exc
    del matplotlib
    return Figure


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def _time_scale(span: float) -> tuple[float, str]:
    if span > 2 * 3600:
        return 3600.0, "hours"
    if span > 20 * 60:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _draw_timeline(timeline: Timeline) -> Any:
    figure_cls = _matplotlib()
    from matplotlib.patches import Patch

    desktops = sorted(timeline.intervals)
    rows = max(len(desktops), 1)
    figure = figure_cls(figsize=(13, 1.6 + 0.42 * rows), layout="constrained")
    ax = figure.add_subplot()
    if timeline.start is None or timeline.end is None or not desktops:
        ax.text(0.5, 0.5, "no tries ran on a desktop", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return figure
    t0 = timeline.start
    unit, unit_name = _time_scale(timeline.end - t0)
    for row, desktop in enumerate(desktops):
        lanes = timeline.intervals[desktop]
        for phase in ("idle", "other", *(p for p in PHASES if p not in ("idle", "other"))):
            spans = [((start - t0) / unit, width / unit) for start, width in lanes[phase]]
            if spans:
                ax.broken_barh(spans, (row - 0.36, 0.6), facecolors=_COLORS[phase], linewidth=0)
    # a thin strip under each row: each try, coloured by how it ended, with its boundaries
    statuses_seen: set[str] = set()
    rows_of = {desktop: row for row, desktop in enumerate(desktops)}
    edge = 0.6 if len(timeline.tries) <= 150 * len(desktops) else 0.0
    for span in timeline.tries:
        row = rows_of[span.desktop]
        start, width = (span.start - t0) / unit, (span.end - span.start) / unit
        ax.broken_barh(
            [(start, width)],
            (row + 0.28, 0.12),
            facecolors=_STATUS_COLORS.get(span.status, "black"),
            edgecolors="white",
            linewidth=edge,
        )
        statuses_seen.add(span.status)
    ax.set_yticks(range(len(desktops)), [f"desktop {d}" for d in desktops])
    ax.set_ylim(len(desktops) - 0.5, -0.6)
    ax.set_xlim(0, (timeline.end - t0) / unit)
    ax.set_xlabel(f"{unit_name} since the first dispatch")
    ax.set_title("Desktop timeline: phases (bars) and how each try ended (strip below)", loc="left")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles = [Patch(facecolor=_COLORS[p], edgecolor="#999999" if p == "idle" else _COLORS[p], label=p) for p in PHASES]
    handles += [Patch(facecolor=_STATUS_COLORS[s], label=f"try: {s}") for s in STATUSES if s in statuses_seen]
    figure.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 8), frameon=False, fontsize=9)
    return figure


_LATENCY_TITLES = {
    "model": "model call (per step)",
    "act": "act (per step)",
    "wait": "wait after actions (per step)",
    "reset": "reset + wait after reset (per try)",
    "eval": "wait before eval + eval (per try)",
}


_PERCENTILE_STYLES: tuple[tuple[int, Any], ...] = ((50, "-"), (95, "--"), (99, ":"))


def _draw_latency(samples: Mapping[str, Sequence[float]]) -> Any:
    figure_cls = _matplotlib()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    figure = figure_cls(figsize=(13, 7.5), layout="constrained")
    axes = figure.subplots(2, 3)
    for ax, kind in zip(axes.flat, LATENCY_KINDS, strict=False):
        values = list(samples.get(kind, ()))
        ax.set_title(_LATENCY_TITLES[kind], loc="left", fontsize=10)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        top = max(values) if values else 0.0
        if top <= 0:
            empty = f"all {len(values)} are 0 s" if values else "no samples"
            ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, color="#555555")
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        scale, unit = (1000.0, "milliseconds") if top < 1 else (1.0, "seconds")
        ax.set_xlabel(unit)
        ax.hist(
            [v * scale for v in values],
            bins=min(40, max(5, len(values) // 3)),
            range=(0, top * scale * 1.02),
            color=_COLORS[kind],
        )
        ax.set_ylabel("count")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        marks = []
        for q, style in _PERCENTILE_STYLES:
            value = percentile(values, q)
            assert value is not None
            ax.axvline(value * scale, color="black", linestyle=style, linewidth=1)
            marks.append(f"p{q} {_seconds(value)}")
        ax.set_title(f"{_LATENCY_TITLES[kind]}\nn = {len(values)}:  " + ",  ".join(marks), loc="left", fontsize=9.5)
    for ax in list(axes.flat)[len(LATENCY_KINDS) :]:
        ax.set_axis_off()
    figure.suptitle("Latency distributions", x=0.01, ha="left")
    figure.legend(
        handles=[
            Line2D([], [], color="black", linestyle=style, linewidth=1, label=f"p{q}")
            for q, style in _PERCENTILE_STYLES
        ],
        loc="outside upper right",
        ncol=3,
        frameon=False,
        fontsize=9,
    )
    return figure


# --- the report -------------------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 1:
        return f"{value * 1000:.0f} ms" if value >= 0.001 else f"{value * 1000:.2f} ms"
    return f"{value:.2f} s"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _number(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def summary_rows(profile: Profile) -> list[tuple[str, str]]:
    """The profile's headline figures as (label, text) rows, for the terminal table and the HTML report."""
    s = profile.summary
    counts = ", ".join(f"{k} {v}" for k, v in s.status_counts.items() if v) or "no records"
    lat = s.model_latency_s
    return [
        ("records", f"{s.n_records} ({counts})"),
        ("success rate", _share(s.success_rate)),
        ("rollouts per hour", _number(s.rollouts_per_hour, 0)),
        ("wall time", _seconds(s.wall_s)),
        ("model call p50 / p95 / p99", " / ".join(_seconds(lat.get(f"p{q}")) for q in (50, 95, 99))),
        ("policy calls", f"{s.n_steps} ({s.retried_calls} retried)"),
        ("errors", f"policy {s.errors.get('policy', 0)}, env {s.errors.get('env', 0)}"),
        ("prefix-cache hit rate", _share(s.prefix_cache_hit_rate)),
        ("steps with logprobs", _share(s.share_steps_with_logprobs)),
        ("steps with token ids", _share(s.share_steps_with_token_ids)),
        ("steps with prompt ids", _share(s.share_steps_with_prompt_ids)),
        ("server weight versions", _weight_versions(s.weight_versions, s.weight_version_mismatches)),
        ("groups (short)", f"{s.groups} ({s.groups_short})"),
        *([("Ray nodes: desktops started (lost)", _nodes(s.nodes))] if s.nodes else []),
    ]


def _nodes(nodes: Mapping[str, Mapping[str, int]]) -> str:
    return "; ".join(f"{name}: {c.get('desktops', 0)} ({c.get('lost', 0)})" for name, c in nodes.items())


def node_rows(profile: Profile) -> list[tuple[str, str, str]]:
    """One row per Ray node the run's desktops ran on: the node, desktops started there, desktops lost with it."""
    return [(name, str(c.get("desktops", 0)), str(c.get("lost", 0))) for name, c in profile.summary.nodes.items()]


def _weight_versions(versions: Mapping[str, int], mismatches: int) -> str:
    if not versions:
        return "not reported"
    text = ", ".join(f"{label} ({n})" for label, n in versions.items())
    return f"{text}; {mismatches} call(s) differ from --version" if mismatches else text


def error_rows(profile: Profile) -> list[tuple[str, str, str, str]]:
    """One row per error kind: records that ended in it, tries re-run, and the top messages (``N× type: msg``)."""
    rows = []
    for kind, counts in profile.errors.items():
        rows.append((kind, str(counts.error), str(counts.retried), "; ".join(top_messages(counts)) or "–"))
    return rows


def top_messages(counts: ErrorCounts, limit: int = 200) -> list[str]:
    """``"N× Type: message"`` for each of the kind's most frequent messages, each cut to ``limit`` characters."""
    lines = []
    for n, kind, message in counts.top:
        text = f"{kind}: {message}"
        lines.append(f"{n}× " + (text if len(text) <= limit else text[: limit - 3] + "..."))
    return lines


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html(profile: Profile, images: Mapping[str, bytes]) -> str:
    s = profile.summary
    notes = []
    if profile.in_progress:
        notes.append("A collect was still writing this run: the figures cover the records written so far.")
    if profile.torn_tail_bytes:
        notes.append(
            f"rollouts.jsonl ends in a torn record ({profile.torn_tail_bytes} bytes) from a killed collect; "
            "it is left out. Resume the collect to finish the run."
        )
    phase_rows = [(name, _share(value)) for name, value in s.phase_share.items()]
    latency_rows = [
        (kind, str(v["n"]), *(_seconds(_float(v[k])) for k in ("p50", "p95", "p99", "max")))
        for kind, v in profile.latency_s.items()
    ]
    desktop_rows = [(str(d.desktop), str(d.tries), _seconds(d.busy_s), _share(d.utilization)) for d in profile.desktops]
    pictures = "".join(
        f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}"></figure>'
        for name, data in images.items()
    )
    method = html.escape((__doc__ or "").split("How the timeline is rebuilt.", 1)[-1].strip())
    title = f"legato rl profile: {profile.run_dir}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1500px; color: #222; padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 0.5em 2em 1.5em 0; display: inline-table; vertical-align: top; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.25em 0.8em; text-align: left; font-size: 0.92em; }}
th {{ background: #f4f4f4; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
.note {{ background: #fff4d6; padding: 0.5em 1em; border-left: 4px solid #e0a800; }}
pre {{ white-space: pre-wrap; font-size: 0.85em; color: #444; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Written {html.escape(time.strftime("%Y-%m-%d %H:%M:%S %Z"))}.</p>
{"".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)}
<h2>Summary</h2>
{_table(("figure", "value"), summary_rows(profile))}
{_table(("phase", "share of desktop time"), phase_rows)}
<h2>Errors</h2>
{_table(("kind", "ended in error", "tries re-run", "most frequent messages"), error_rows(profile))}
<h2>Latency</h2>
{_table(("kind", "n", "p50", "p95", "p99", "max"), latency_rows)}
{_table(("desktop", "tries", "busy", "utilisation"), desktop_rows)}
{_table(("Ray node", "desktops started", "lost"), node_rows(profile)) if profile.summary.nodes else ""}
<h2>Pictures</h2>
{pictures}
<h2>How the timeline is rebuilt</h2>
<pre>{method}</pre>
<h2>Raw figures</h2>
<pre>{html.escape(json.dumps(profile.to_json(), indent=2))}</pre>
</body></html>
"""


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)
