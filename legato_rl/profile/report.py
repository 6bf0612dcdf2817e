"""The profile as text: the rows of the terminal tables and of the self-contained HTML report."""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Mapping, Sequence

from legato_rl.images import PngDataURL
from legato_rl.profile import timeline
from legato_rl.profile.figures import ErrorCounts, Profile

__all__ = ["error_rows", "node_rows", "report_html", "seconds_text", "summary_rows", "top_messages"]


def seconds_text(value: float | None) -> str:
    """``value`` seconds as text: milliseconds below a second, ``–`` for ``None``."""
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
        ("wall time", seconds_text(s.wall_s)),
        ("model call p50 / p95 / p99", " / ".join(seconds_text(lat.get(f"p{q}")) for q in (50, 95, 99))),
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


def report_html(profile: Profile, images: Mapping[str, bytes]) -> str:
    """The self-contained HTML report: the figures' tables, ``images`` (PNG bytes by name) inline."""
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
        (kind, str(v["n"]), *(seconds_text(_float(v[k])) for k in ("p50", "p95", "p99", "max")))
        for kind, v in profile.latency_s.items()
    ]
    desktop_rows = [
        (str(d.desktop), str(d.tries), seconds_text(d.busy_s), _share(d.utilization)) for d in profile.desktops
    ]
    pictures = "".join(f'<figure><img alt="{name}" src="{PngDataURL(data)}"></figure>' for name, data in images.items())
    method = html.escape((timeline.__doc__ or "").split("How the timeline is rebuilt.", 1)[-1].strip())
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
