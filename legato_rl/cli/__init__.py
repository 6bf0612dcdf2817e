"""The ``legato`` command line: one module per command, each owning its Typer app; :mod:`legato_rl.cli.app`
composes them."""
