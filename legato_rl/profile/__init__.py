"""Where a batch spent its time (``legato rl profile``): figures, a timeline per desktop, latency histograms.

The figures are :func:`legato_rl.summary.summarize`'s (status counts, success rate, rollouts per hour, time
share by phase, model-call percentiles, retried calls, errors, prefix-cache hit rate, logprob and token-id
coverage), plus per-desktop utilisation and latency percentiles per phase. The pictures are PNG files
(matplotlib, the ``plots`` extra) and one self-contained HTML report that embeds them.

The package, one concern a module (its public names are importable from ``legato_rl.profile``)::

    run.py       profile_run: reads the run once, computes the figures, writes the pictures and the report
    timeline.py  the phase timeline rebuilt from the records (how: see its docstring), PHASES
    figures.py   Profile, DesktopUsage, ErrorCounts, LATENCY_KINDS: the figures and how they are computed
    pictures.py  the timeline and latency pictures (matplotlib)
    report.py    the figures as rows of text, and the self-contained HTML report
"""

from legato_rl.profile.figures import (
    LATENCY_KINDS,
    PROFILE_SCHEMA,
    TOP_MESSAGES,
    DesktopUsage,
    ErrorCounts,
    Profile,
)
from legato_rl.profile.report import error_rows, node_rows, summary_rows, top_messages
from legato_rl.profile.run import PROFILE_DIR, profile_run
from legato_rl.profile.timeline import PHASES, Timeline, TrySpan, build_timeline

__all__ = [
    "LATENCY_KINDS",
    "PHASES",
    "PROFILE_DIR",
    "PROFILE_SCHEMA",
    "TOP_MESSAGES",
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
