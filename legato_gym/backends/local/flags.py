"""What ``legato rl collect``'s local-backend flags do to the settings (declared in the backend's unit).

Each function takes the config being finished and the flag's value, and returns the config with the
backend's options set; :meth:`legato_gym.backends.Backend.with_cli` calls them, once, at the entry point.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from legato_gym.backends.local.options import GRADERS, LocalOptions
from legato_gym.config import DesktopConfig
from legato_gym.errors import ConfigError
from legato_gym.options import typed_options

__all__ = ["file_cache_flag", "grader_flag", "pause_flag", "prestart_flag", "scripted_solution", "session_flag"]


def _options(config: DesktopConfig) -> LocalOptions:
    return typed_options(config.options, LocalOptions, "local")


def grader_flag(config: DesktopConfig, grader: str) -> DesktopConfig:
    """``--grader``: ``osworld`` runs the desktops in desktop-env's interpreter (``legato osworld setup``),
    where its getters and metrics grade them; ``auto`` does so when that interpreter exists, else grades with
    ``local``; ``local`` grades with the built-in grader.

    Raises:
        ConfigError: an unknown grader, or ``osworld`` without desktop-env's interpreter.
    """
    if grader not in GRADERS:
        raise ConfigError(f"--grader {grader!r}: choose one of {', '.join(GRADERS)}")
    from legato_gym.desktopenv.venv import default_venv, recorded_python

    python = config.worker_python or recorded_python()
    if grader == "osworld" and python is None:
        raise ConfigError(
            f"--grader osworld runs desktop-env's getters and metrics in its own interpreter, and none is set "
            f"up at {default_venv()}: run `legato osworld setup`, or use --grader local"
        )
    chosen = "local" if grader == "local" or python is None else "osworld"
    options = replace(_options(config), grader=chosen)
    return replace(config, worker_python=python if chosen == "osworld" else config.worker_python, options=options)


def prestart_flag(config: DesktopConfig, prestart: bool) -> DesktopConfig:
    """``--prestart/--no-prestart``: build each desktop's next episode in the background."""
    return replace(config, options=replace(_options(config), prestart=prestart))


def pause_flag(config: DesktopConfig, pause: float | None) -> DesktopConfig:
    """``--pyautogui-pause SECONDS``: ``pyautogui.PAUSE`` for actions.

    Raises:
        ConfigError: a negative pause.
    """
    if pause is not None and not pause >= 0:
        raise ConfigError(f"--pyautogui-pause {pause}: give seconds >= 0")
    return replace(config, options=replace(_options(config), pyautogui_pause=pause))


def session_flag(config: DesktopConfig, session: str) -> DesktopConfig:
    """``--session NAME``: the desktops' session (``LocalOptions.session``).

    Raises:
        ConfigError: an unknown session, naming the ones there are.
    """
    try:
        return replace(config, options=replace(_options(config), session=session))
    except ConfigError as exc:
        raise ConfigError(f"--session {session!r}: {exc}") from exc


def file_cache_flag(config: DesktopConfig, folder: Path | None) -> DesktopConfig:
    """``--file-cache DIR``: the cache of OSWorld's task files (``LocalOptions.file_cache``)."""
    if folder is None:
        return config
    path = os.fspath(Path(folder).expanduser().resolve())
    return replace(config, options=replace(_options(config), file_cache=path))


def scripted_solution(task_id: str, screen: tuple[int, int]) -> list[str] | None:
    """The local suite's scripted solution of a task, else a real OSWorld task's; ``None``: none known."""
    from legato_gym.backends.local.solutions import OSWORLD_SOLUTIONS, osworld_solution
    from legato_gym.backends.local.tasks import solution

    try:
        return solution(task_id, screen)
    except KeyError:
        pass
    if task_id in OSWORLD_SOLUTIONS:
        return osworld_solution(task_id)
    return None
