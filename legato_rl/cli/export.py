"""``legato rl export``: one training sample per policy step, with group advantages (JSONL or Parquet)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from legato_gym import LegatoError
from legato_rl.cli._errors import fail, terminate_as_exit
from legato_rl.cli._logging import configure_logging
from legato_rl.export import DATASETS_EXTRA, FORMATS, export_steps

__all__ = ["app", "export_command"]

app = typer.Typer()


@app.command("export")
def export_command(
    run: Annotated[Path, typer.Argument(help="Run directory (the --out of legato rl collect).")],
    out: Annotated[Path, typer.Option("--out", help="File to write: *.jsonl or *.parquet (replaced atomically).")],
    inline_images: Annotated[
        bool,
        typer.Option(
            "--inline-images", help="Screenshots as data:image/png;base64 URLs instead of legato-image://<sha>."
        ),
    ] = False,
    format: Annotated[
        str | None,
        typer.Option("--format", help=f"{' or '.join(FORMATS)}; default: from the --out suffix."),
    ] = None,
    image_column: Annotated[
        bool,
        typer.Option(
            "--image-column",
            help="Parquet only: add an 'images' column of each step's screenshots, a Hugging Face datasets "
            f"Image list (needs legatolabs\\[{DATASETS_EXTRA}]).",  # escaped: rich markup eats "[export]"
        ),
    ] = False,
) -> None:
    """Write one line per policy step of every ok or truncated rollout, with reward and group advantage."""
    console = Console(stderr=True, soft_wrap=True)
    configure_logging(logging.WARNING, console)  # warnings (a torn last record) reach the user
    try:
        with terminate_as_exit():  # a SIGTERM mid-write still removes the temporary file
            stats = export_steps(run, out, inline_images=inline_images, format=format, image_column=image_column)
    except (LegatoError, OSError) as exc:  # a full disk or a read-only folder: one line, no traceback
        fail(console, exc)
    excluded = ", ".join(f"{status} {n}" for status, n in stats.excluded.items()) or "none"
    console.print(
        f"[green]exported[/green] {stats.rows} steps of {stats.rollouts} rollouts ({stats.groups} groups) as "
        f"{stats.format}, {_size(stats.bytes)}; records left out: {escape(excluded)}"
    )
    typer.echo(str(stats.path))


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
