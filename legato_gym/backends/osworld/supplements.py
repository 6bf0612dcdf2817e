"""Metrics that OSWorld's task data names but desktop-env 1.0.2, the newest on PyPI, does not have.

OSWorld's task files moved on after its last PyPI release: a few tasks name a metric that only OSWorld's
repository has. desktop-env resolves a task's metric by name in ``desktop_env.evaluators.metrics``
(``DesktopEnv._set_task_info``), so :func:`install` adds the ones here to that module, each only where
desktop-env has none of that name (a desktop-env that has it keeps its own). Each follows the definition in
OSWorld's repository: same inputs, same rule, same score. Getters are not supplemented: the one missing
(``chrome_appearance_mode_ui``) reads Chrome's settings page through DevTools, and its task stays refused
at load.

Runs inside desktop-env's interpreter; standard library only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["METRICS", "check_play_and_exit", "install"]

logger = logging.getLogger(__name__)


def check_play_and_exit(actual_config_path: str | None, rule: Mapping[str, Any]) -> float:
    """Whether VLC's ``vlcrc`` has ``play-and-exit`` (quit at the end of the playlist) as the rule expects.

    ``rule["expected_play_and_exit"]`` is compared as text (``0`` and ``"0"`` alike). The last line that
    names ``play-and-exit=`` gives the value, commented or not: VLC writes an option at its default as a
    comment (``#play-and-exit=0``). With no such line the value is ``0``, VLC's default. A missing or
    unreadable file scores 0.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix="vlcrc", delete=False) as f:
        ...     _ = f.write("[core]\\n#play-and-exit=0\\nplay-and-exit=1\\n")
        >>> check_play_and_exit(f.name, {"expected_play_and_exit": 1})
        1.0
        >>> check_play_and_exit(f.name, {"expected_play_and_exit": 0})
        0.0
    """
    if not actual_config_path:
        return 0.0
    expected = str(rule["expected_play_and_exit"])
    try:
        with open(actual_config_path, "rb") as file:
            text = file.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        logger.error("VLC's configuration file could not be read: %s", exc)
        return 0.0
    value = "0"
    for line in text.split("\n"):
        if "play-and-exit=" in line:
            value = line.split("=")[-1].strip()
    return 1.0 if value == expected else 0.0


#: The metrics :func:`install` adds, by the name tasks give them.
METRICS: dict[str, Callable[..., float]] = {"check_play_and_exit": check_play_and_exit}


def install(metrics: Any) -> list[str]:
    """Add :data:`METRICS` to desktop-env's ``metrics`` module where it lacks them; the names added."""
    added = []
    for name, func in METRICS.items():
        if not hasattr(metrics, name):
            setattr(metrics, name, func)
            added.append(name)
    return added
