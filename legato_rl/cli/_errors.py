"""How every ``legato`` command reports a failure: one line on stderr and a non-zero exit, never a traceback.

Messages are printed as text, not as rich markup: an install hint such as ``pip install 'legatolabs[local]'``
keeps its ``[local]``, and a message holding ``[/x]`` cannot break the printing.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from legato_gym.errors import LegatoError
from legato_rl.store import storage_error

__all__ = ["EXIT_ERROR", "EXIT_NOTHING_COMPLETED", "describe", "fail", "terminate_as_exit"]

#: The exit status of a command that failed on a legato error or a file it cannot write.
EXIT_ERROR = 2
#: The exit status of ``legato rl collect`` when the batch ran but no attempt completed (every one ``error``).
EXIT_NOTHING_COMPLETED = 1


def describe(exc: BaseException) -> str:
    """The one-line message for a failure: the error's own message; for an :class:`OSError`, what could not
    be written, why, and the fix."""
    if isinstance(exc, OSError) and exc.filename is not None:  # a StorageError is passed through as it is
        return str(storage_error(exc, exc.filename))
    if isinstance(exc, OSError) and not isinstance(exc, LegatoError):
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__


def fail(console: Console, exc: BaseException | str, code: int = EXIT_ERROR) -> NoReturn:
    """Print ``error: <message>`` as one line (markup escaped, not wrapped) and exit with ``code``."""
    text = exc if isinstance(exc, str) else describe(exc)
    console.print(f"[red]error:[/red] {escape(text)}", soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit(143)`` while the block runs, so its ``finally`` clean-up runs (a killed
    export removes its temporary file) instead of the process vanishing mid-write."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
