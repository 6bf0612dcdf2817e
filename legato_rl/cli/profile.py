"""``legato rl profile``: where a batch spent its time, as a table, JSON, pictures and an HTML report."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from legato_gym import LegatoError
from legato_rl.cli._errors import fail
from legato_rl.cli._logging import configure_logging
from legato_rl.profile import PROFILE_DIR, Profile, error_rows, profile_run, summary_rows, top_messages

__all__ = ["app", "profile_command"]

app = typer.Typer()


@app.command("profile")
def profile_command(
    run: Annotated[Path, typer.Argument(help="Run directory (the --out of legato rl collect).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON (for scripts).")] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help=f"Where to write the PNGs, report.html and profile.json; default RUN/{PROFILE_DIR}/."
        ),
    ] = None,
    plots: Annotated[
        bool | None,
        typer.Option(
            "--plots/--no-plots",
            help="Draw the pictures and the report (needs matplotlib). Default: when matplotlib is installed.",
        ),
    ] = None,
) -> None:
    """Status counts, success rate, throughput, time by phase, latencies; a timeline per desktop and histograms."""
    err = Console(stderr=True, soft_wrap=True)
    configure_logging(logging.WARNING, err)
    draw = plots if plots is not None else _have_matplotlib()
    try:
        profile = profile_run(run, out=out, plots=draw)
    except (LegatoError, OSError) as exc:  # e.g. a read-only run folder for the pictures: one line
        fail(err, exc)
    if profile.in_progress:
        err.print(
            f"[yellow]note:[/yellow] {escape(str(run))} is still being written by a collect; "
            "these figures cover the records written so far."
        )
    if profile.torn_tail_bytes:
        err.print(
            f"[yellow]note:[/yellow] rollouts.jsonl ends in a torn record ({profile.torn_tail_bytes} bytes) left by "
            "a killed collect; it is left out. Run the same collect again to resume the run."
        )
    if as_json:
        typer.echo(json.dumps(profile.to_json(), indent=2))
    else:
        console = Console()
        for table in _tables(profile):
            console.print(table)
    for name, path in profile.files.items():
        err.print(f"{name}: {escape(str(path))}")
    if not draw and plots is None:
        err.print(
            "[yellow]note:[/yellow] no pictures or report: matplotlib is not installed "
            + escape("(pip install 'legatolabs[plots]')")
        )


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _tables(profile: Profile) -> list[Table]:
    summary = Table(title=escape(f"legato rl profile: {profile.run_dir}"), title_justify="left", show_header=False)
    summary.add_column(style="bold")
    summary.add_column()
    for label, value in summary_rows(profile):
        summary.add_row(label, escape(value))
    phases = Table(title="share of desktop time", title_justify="left")
    phases.add_column("phase")
    phases.add_column("share", justify="right")
    for name, share in profile.summary.phase_share.items():
        phases.add_row(name, "–" if share is None else f"{share:.1%}")
    errors = Table(title="errors by kind", title_justify="left")
    for column in ("kind", "ended in error", "tries re-run", "most frequent messages"):
        errors.add_column(column, justify="right" if column in ("ended in error", "tries re-run") else "left")
    for kind, n_error, n_retried, _ in error_rows(profile):
        errors.add_row(kind, n_error, n_retried, escape("\n".join(top_messages(profile.errors[kind]))) or "–")
    latency = Table(title="latency (s)", title_justify="left")
    for column in ("kind", "n", "p50", "p95", "p99", "max"):
        latency.add_column(column, justify="left" if column == "kind" else "right")
    for kind, values in profile.latency_s.items():
        latency.add_row(
            kind,
            str(values["n"]),
            *("–" if values[k] is None else f"{values[k]:.3f}" for k in ("p50", "p95", "p99", "max")),
        )
    return [summary, phases, errors, latency, _desktops(profile)]


def _desktops(profile: Profile) -> Table:
    table = Table(title="desktops", title_justify="left")
    for column in ("desktop", "tries", "busy s", "utilisation"):
        table.add_column(column, justify="right")
    for d in profile.desktops:
        table.add_row(
            str(d.desktop), str(d.tries), f"{d.busy_s:.1f}", "–" if d.utilization is None else f"{d.utilization:.0%}"
        )
    return table
