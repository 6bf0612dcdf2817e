"""``legato osworld setup|check``: desktop-env's own interpreter for the ``osworld`` backend.

::

    legato osworld setup [--venv DIR] [--force] [--python PY] [--index-url URL]
    legato osworld check [--venv DIR] [--json]

``setup`` builds a virtual environment (default ``~/.cache/legato/osworld-venv``, or ``$LEGATO_OSWORLD_VENV``)
with desktop-env 1.0.2 and what its setup controller, docker provider, getters and metrics import, but
not torch, transformers, easyocr or librosa; it records the interpreter, which the ``osworld`` backend
then uses as ``DesktopConfig.python``. ``check`` imports desktop-env's controllers, getters and metrics
there and lists what is unavailable. Exit 1 when something that grading needs does not import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from legato_gym.backends.osworld.venv import LEFT_OUT, check_venv, default_venv, setup_venv
from legato_gym.errors import LegatoError
from legato_rl.cli._errors import fail
from legato_rl.cli.app import app

__all__ = ["check_command", "osworld_app", "setup_command"]

osworld_app = typer.Typer(
    name="osworld",
    help="Prepare and check desktop-env's own interpreter for the osworld backend.",
    no_args_is_help=True,
)
app.add_typer(osworld_app, name="osworld")

_VENV_HELP = "The virtual environment (default: $LEGATO_OSWORLD_VENV or ~/.cache/legato/osworld-venv)."


@osworld_app.command("setup")
def setup_command(
    venv: Annotated[Path | None, typer.Option("--venv", help=_VENV_HELP)] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild from scratch.")] = False,
    python: Annotated[
        str | None, typer.Option("--python", help="Base interpreter to build it from (Python 3.10-3.12).")
    ] = None,
    index_url: Annotated[str | None, typer.Option("--index-url", help="pip --index-url for the installs.")] = None,
) -> None:
    """Create desktop-env's virtual environment (desktop-env 1.0.2 without torch) and record its python."""
    console = Console(stderr=True)
    pip_args = ["--index-url", index_url] if index_url else []
    try:
        result = setup_venv(
            venv, base_python=python, force=force, pip_args=pip_args, log=lambda line: console.print(escape(line))
        )
        report = check_venv(result.venv)
    except (LegatoError, OSError) as exc:
        fail(console, exc, code=1)
    how = "reused" if result.reused else f"built in {result.seconds:.0f} s"
    console.print(
        escape(f"desktop-env {report.versions.get('desktop-env')} environment {how}: {result.venv}"), soft_wrap=True
    )
    console.print(escape(f"left out: {', '.join(sorted(LEFT_OUT))}"))
    typer.echo(str(result.python))
    if not report.ok:
        for module, error in report.failed.items():
            console.print(f"[red]does not import:[/red] {escape(f'{module}: {error}')}")
        raise typer.Exit(1)


@osworld_app.command("check")
def check_command(
    venv: Annotated[Path | None, typer.Option("--venv", help=_VENV_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Import desktop-env's controllers, getters and metrics in its interpreter; list what is unavailable."""
    console = Console()
    try:
        report = check_venv(venv or default_venv())
    except (LegatoError, OSError) as exc:
        fail(Console(stderr=True), exc, code=1)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        console.print(escape(f"python: {report.python}"))
        console.print(escape("versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items())))
        for module in report.imported:
            console.print(f"[green]ok[/green]   {escape(module)}")
        for module, error in report.failed.items():
            console.print(f"[red]FAIL[/red] {escape(f'{module}: {error}')}")
        console.print(f"{report.getters} getters, {report.metrics} metrics")
        if report.stubbed:
            console.print(escape(f"absent optional libraries: {', '.join(report.stubbed)}"))
        for metric, missing in report.unavailable_metrics.items():
            needs = ", ".join(missing)
            console.print(f"[yellow]unavailable[/yellow] {escape(f'metric {metric}: needs {needs}')}")
    if not report.ok:
        raise typer.Exit(1)
