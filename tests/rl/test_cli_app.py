"""The ``legato`` app is composed from the command modules' own Typer apps (issue 18, item 5), and every
command sends its log records through the one handler :func:`legato_rl.cli._logging.configure_logging` sets up."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest
from rich.logging import RichHandler
from typer.testing import CliRunner

from legato_rl.cli import collect, export, osworld, probe, profile
from legato_rl.cli._logging import configure_logging

_LIST = textwrap.dedent(
    """
    import json
    import typer.main
    from legato_rl.cli.app import app

    root = typer.main.get_command(app)
    ctx = root.make_context("legato", [], resilient_parsing=True)
    groups = {name: root.get_command(ctx, name) for name in root.list_commands(ctx)}
    print(json.dumps({name: group.list_commands(ctx) for name, group in groups.items()}))
    """
)


def test_importing_the_app_gives_every_command_in_help_order() -> None:
    # a fresh interpreter: nothing else has imported the command modules, and nothing registers them
    listed = subprocess.run([sys.executable, "-c", _LIST], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(listed.stdout) == {
        "rl": ["probe", "collect", "export", "profile", "schema"],
        "osworld": ["setup", "check", "cache", "coverage"],
    }


@pytest.mark.parametrize(
    ("module", "summary"),
    [
        (probe, "Check a policy server"),
        (collect, "Collect one batch"),
        (export, "Write one line per policy step"),
        (profile, "Status counts, success rate"),
    ],
)
def test_each_command_module_owns_a_working_app(module: ModuleType, summary: str) -> None:
    result = CliRunner().invoke(module.app, ["--help"])
    assert result.exit_code == 0, result.output
    assert summary in result.output


def test_the_osworld_module_owns_its_group() -> None:
    result = CliRunner().invoke(osworld.app, ["--help"])
    assert result.exit_code == 0, result.output
    for name in ("setup", "check", "cache", "coverage"):
        assert name in result.output


@pytest.fixture
def bare_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], logging.Logger]]:
    """Gives the root logger as a fresh ``legato`` process has it: no handler (pytest's, added for the test's
    call, are set aside until it ends), level WARNING; its level is put back with ``setLevel`` afterwards, which
    also clears the loggers' cached levels."""
    root = logging.getLogger()
    saved = root.level

    def bare() -> logging.Logger:
        monkeypatch.setattr(root, "handlers", [])
        root.setLevel(logging.WARNING)
        return root

    yield bare
    root.setLevel(saved)


def test_logging_is_set_up_once_with_one_handler(bare_root: Callable[[], logging.Logger]) -> None:
    root = bare_root()
    configure_logging(logging.INFO)
    configure_logging(logging.ERROR)  # a second command in the same process changes nothing
    assert len(root.handlers) == 1 and isinstance(root.handlers[0], RichHandler)
    assert root.level == logging.INFO


def test_logging_set_up_by_the_application_is_left_alone(bare_root: Callable[[], logging.Logger]) -> None:
    root = bare_root()
    mine = logging.StreamHandler()
    root.addHandler(mine)
    configure_logging(logging.DEBUG)
    assert root.handlers == [mine] and root.level == logging.WARNING
