"""The ready signal's knowledge of the apps: which setup steps map a window, and its title once loaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from legato_gym.backends.local.apps.catalog import APPS, app_for_program
from legato_gym.backends.local.commands import command_words

__all__ = ["WINDOWLESS", "loads_after_title", "open_title", "opens_window", "ready_title", "ready_titles"]


def ready_title(command: str | Sequence[str]) -> str | None:
    """What a ``launch`` step's window title shows once the app has loaded (``None``: any window will do).

    The app's own rule says (:attr:`.catalog.App.ready`): LibreOffice maps a window before its document is
    loaded, and the document's window is titled with the file's name (``report.xlsx - LibreOffice Calc``), or
    with the component for a new document; Chrome's window is titled ``... - Chromium`` once its first page has
    a title.
    """
    words = command_words(command)
    names = [Path(word).name for word in words]
    if not names:
        return None
    program = next((n for n in names if "=" not in n and n not in ("env", "sudo")), "")
    app = app_for_program(program)
    if app is None or app.ready is None:
        return None
    return app.ready.title(words, program)


def ready_titles(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """The titles that show a task's setup has loaded: each ``launch`` step's :func:`ready_title`, and for
    each ``open`` step what its app titles the window with once the file is loaded (:func:`open_title`)."""
    titles = []
    for step in steps:
        params = step.get("parameters") or {}
        title = None
        if step.get("type") == "launch":
            title = ready_title(params.get("command", ""))
        elif step.get("type") == "open" and params.get("path"):
            title = open_title(str(params["path"]))
        if title is not None:
            titles.append(title)
    return titles


def loads_after_title(titles: Sequence[str]) -> bool:
    """Whether an app of these ready titles keeps loading for seconds after its window shows its title
    (:attr:`.catalog.ReadyRule.keeps_loading`: VS Code's workbench), longer than a ready signal waits for apps
    that never stop working (``LocalOptions.busy_s``, a playing video)."""
    endings = tuple(app.ready.keeps_loading for app in APPS if app.ready is not None and app.ready.keeps_loading)
    return any(title.endswith(endings) for title in titles)


#: Programs that OSWorld's setups launch and that map no window (the DevTools port forwarder, killers).
WINDOWLESS = frozenset({"socat", "pkill", "killall", "kill", "sleep", "tinyproxy", "xdotool", "wmctrl"})


def opens_window(command: str | Sequence[str]) -> bool:
    """Whether a ``launch`` step's program maps a window (the ready signal waits for one per launch): not a
    :data:`WINDOWLESS` program, nor an app's launch that its rule calls windowless (a conversion, a CLI call)."""
    words = [Path(word).name for word in command_words(command) if "=" not in word]
    program = next((w for w in words if w not in ("env", "sudo")), "")
    app = app_for_program(program)
    if app is not None and app.ready is not None and app.ready.windowless is not None and app.ready.windowless(words):
        return False
    return program not in WINDOWLESS


def open_title(path: str) -> str:
    """What the window of the app an ``open`` step starts for ``path`` shows once the file is loaded: the title
    of the app whose file it is (:attr:`.catalog.ReadyRule.open_title`: GIMP's ``[name]`` for images, VLC's
    title for media, the file manager's "Home"), else the file's name (LibreOffice, the PDF viewer)."""
    for app in APPS:
        if app.ready is not None and app.ready.open_title is not None:
            title = app.ready.open_title(path)
            if title is not None:
                return title
    return Path(path).name
