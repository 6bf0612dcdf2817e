"""Every command's ``--help`` shows its help texts whole: rich markup would eat a ``[...]`` such as
``legatolabs[export]`` (issue 30, item 6), so the texts escape their brackets and this test reads them back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from legato_rl.cli.app import app

_BRACKETS = re.compile(r"\[[^\[\]]*\]")


def _commands() -> Iterator[tuple[list[str], Any]]:
    """Every command and group of ``legato``, with the arguments that reach it."""
    root = typer.main.get_command(app)

    def walk(command: Any, path: list[str], ctx: Any) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                yield from walk(sub, [*path, name], sub.context_class(sub, info_name=name, parent=ctx))

    yield from walk(root, [], root.context_class(root, info_name="legato"))


def _texts(command: Any) -> list[str]:
    """The command's help texts as a user should read them (rich's escape ``\\[`` shows as ``[``)."""
    texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    return [text.replace("\\[", "[") for text in texts]


def _flat(text: str) -> str:
    """Words only: rich's panels wrap and frame the text."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


COMMANDS = list(_commands())


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "legato")
def test_every_bracket_of_a_help_text_is_shown(path: list[str]) -> None:
    command = dict((tuple(p), c) for p, c in COMMANDS)[tuple(path)]
    wanted = [b for text in _texts(command) for b in _BRACKETS.findall(_flat(text))]
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    shown = _flat(result.output)
    lost = [b for b in wanted if b not in shown]
    assert not lost, f"legato {' '.join(path)} --help lost {lost}: escape them as \\[...] in the help text"


def test_export_help_names_the_extra() -> None:  # product.md's words, as a user reads them
    result = CliRunner().invoke(app, ["rl", "export", "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert "(needs legatolabs[export])" in _flat(result.output)


def test_the_scan_finds_brackets() -> None:  # a scan that finds none would pass whatever the help shows
    found = {b for _, c in COMMANDS for text in _texts(c) for b in _BRACKETS.findall(_flat(text))}
    assert "[export]" in found
