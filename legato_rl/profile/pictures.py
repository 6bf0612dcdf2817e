"""The profile's pictures: the desktop timeline and the latency histograms, drawn with matplotlib (lazily)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from legato_gym.errors import MissingDependencyError
from legato_rl.profile.figures import LATENCY_KINDS
from legato_rl.profile.report import seconds_text
from legato_rl.profile.timeline import PHASES, Timeline
from legato_rl.store import STATUSES
from legato_rl.summary import percentile

__all__ = ["draw_latency", "draw_timeline", "matplotlib_figure", "png"]

_COLORS = {
    "reset": "#8c564b",
    "model": "#1f77b4",
    "act": "#ff7f0e",
    "wait": "#e6c229",
    "obs": "#17becf",
    "eval": "#9467bd",
    "failed_call": "#7b1f1f",
    "held": "#e3d7ef",
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


def matplotlib_figure() -> Any:
    """matplotlib's ``Figure`` class (no pyplot: no GUI backend, no global state).

    Raises:
        MissingDependencyError: matplotlib is not installed (the ``plots`` extra).
    """
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


def png(figure: Any) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def _time_scale(span: float) -> tuple[float, str]:
    if span > 2 * 3600:
        return 3600.0, "hours"
    if span > 20 * 60:
        return 60.0, "minutes"
    return 1.0, "seconds"


def draw_timeline(timeline: Timeline) -> Any:
    """One bar per desktop: its phases over the batch, and a strip of how each try ended."""
    figure_cls = matplotlib_figure()
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


def draw_latency(samples: Mapping[str, Sequence[float]]) -> Any:
    """One histogram per :data:`~legato_rl.profile.LATENCY_KINDS`, with p50, p95 and p99 marked."""
    figure_cls = matplotlib_figure()
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
            marks.append(f"p{q} {seconds_text(value)}")
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
