"""The ``legato`` console script: ``legato rl probe|collect|export|profile`` and ``legato osworld setup|check``.

Each command lives in its own module and is added here only when it works.
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="legato",
    help="Graded desktop rollouts for computer-use RL.\n\n"
    "Exit status: 0 done; 1 a probe or osworld check found a problem; 2 an error, reported as one 'error:' "
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
app.add_typer(rl_app, name="rl")

#: Command modules under legato_rl/cli/, in the order `legato rl --help` lists them.
COMMANDS: list[str] = ["probe", "collect", "export", "profile", "osworld"]


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


def _register_commands() -> None:
    # Each command module registers itself on rl_app when imported; only working commands are listed.
    import importlib

    for name in COMMANDS:
        importlib.import_module(f"legato_rl.cli.{name}")


def main() -> None:
    """Entry point of the ``legato`` console script."""
    _register_commands()
    app()
