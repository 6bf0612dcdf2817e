"""Where every ``legato`` command's log records go: one handler on stderr, set up in this one place."""

from __future__ import annotations

import logging

from rich.console import Console

__all__ = ["configure_logging"]


def configure_logging(level: int, console: Console | None = None) -> None:
    """Show log records of ``level`` and above on stderr, through one rich handler on the root logger.

    Each command calls this once with the level it reports at (``collect`` INFO: its progress lines;
    ``export`` and ``profile`` WARNING; ``probe`` ERROR: its table reports what the client would log). When
    the root logger already has a handler (an application or a test that set up logging), nothing changes.

    Args:
        level: the lowest level shown, e.g. ``logging.WARNING``.
        console: the stderr console the command prints on, so log lines and its output share one console.
    """
    root = logging.getLogger()
    if root.handlers:
        return
    from rich.logging import RichHandler

    handler = RichHandler(console=console or Console(stderr=True, soft_wrap=True), show_path=False)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
