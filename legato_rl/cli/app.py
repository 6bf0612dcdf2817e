"""The ``legato`` console script: ``legato rl probe|collect|export|profile|schema`` and ``legato osworld ...``.

Each command module owns its Typer app; this module composes them: ``add_typer`` without a name merges a
module's command into ``legato rl``, in the order ``legato rl --help`` lists them, and ``legato osworld`` is
a group of its own.
"""

from __future__ import annotations

from typing import Annotated

import typer

from legato_rl.cli import collect, export, osworld, probe, profile, schema

__all__ = ["app", "main", "rl_app"]

app = typer.Typer(
    name="legato",
    help="Graded desktop rollouts for computer-use RL.\n\n"
    "Exit status: 0 done; 1 a probe or osworld check found a problem, or a collect in which no attempt "
    "completed (every one ended in error); 2 an error, reported as one 'error:' "
    "line on stderr that names the value and the fix (a bad option, an --out that is a file, a read-only "
    "folder, a full disk); 130 interrupted (run the same collect again to resume).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
rl_app = typer.Typer(
    name="rl",
    help="Collect, export and profile rollouts against your policy server.",
    no_args_is_help=True,
)
for command in (probe, collect, export, profile, schema):
    rl_app.add_typer(command.app)
app.add_typer(rl_app, name="rl")
app.add_typer(osworld.app, name="osworld")


def _print_version(value: bool) -> None:
    if value:
        from legato_gym import __version__

        typer.echo(f"legato {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print legato's version and exit."),
    ] = False,
) -> None:
    """Graded desktop rollouts for computer-use RL."""


def main() -> None:
    """Entry point of the ``legato`` console script."""
    app()
