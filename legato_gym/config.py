"""Typed settings for desktops: what every backend understands, plus the backend's own typed options."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legato_gym.errors import ConfigError
from legato_gym.options import BackendOptions, rename_field

__all__ = ["OSWORLD_ENV_VAR", "DesktopConfig", "Timeouts", "default_osworld_path"]

#: Environment variable naming an OSWorld checkout (the directory holding ``evaluation_examples/``).
OSWORLD_ENV_VAR = "LEGATO_OSWORLD"


def default_osworld_path() -> Path | None:
    """The OSWorld checkout named by ``$LEGATO_OSWORLD``, or ``None``."""
    value = os.environ.get(OSWORLD_ENV_VAR)
    return Path(value).expanduser() if value else None


@dataclass(frozen=True)
class Timeouts:
    """Deadlines for each desktop phase, in seconds. A phase that overruns is a desktop failure.

    Attributes:
        reset: ``reset`` (task setup included).
        ready: each wait for a ready signal (after reset, after an action, before grading).
        act: running one action.
        evaluate: grading.
    """

    reset: float = 300.0
    ready: float = 60.0
    act: float = 120.0
    evaluate: float = 300.0

    def __post_init__(self) -> None:
        for name in ("reset", "ready", "act", "evaluate"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"Timeouts.{name}={value!r} must be a positive number of seconds")

    @property
    def longest_step(self) -> float:
        """Upper bound of one env step (act, settle, observe, and grading when the step ends the episode)."""
        return self.act + 2 * self.ready + self.evaluate


@dataclass(frozen=True)
class DesktopConfig:
    """How to build desktops.

    Attributes:
        screen: ``(width, height)`` of each desktop.
        ready_signal: wait for ready signals (screen settled, windows mapped) instead of fixed sleeps.
        fixed_wait: with ``ready_signal=False``, seconds to sleep after each action (OSWorld's 2 s
            pause); the waits after reset and before grading scale as OSWorld's do (60 s and 20 s for
            a 2 s pause). Refused (``ConfigError``) with ``ready_signal=True``, which would ignore it.
        fast_reset: reset by killing the task's apps and restoring the home baseline; ``False``
            restarts (or snapshot-reverts) the whole desktop every rollout, for baselines.
        timeouts: per-phase deadlines.
        osworld_path: an OSWorld checkout, for tasks given as ``{"task_id", "domain"}`` and for the
            ``osworld`` backend. Defaults to ``$LEGATO_OSWORLD``.
        worker_python: the interpreter that runs each desktop's worker process (the ``osworld`` backend
            needs desktop-env's own interpreter; its :meth:`~legato_gym.backends.Backend.finish` fills it in).
            ``None``: the current interpreter. Not the interpreter inside a local desktop's sandbox
            (``LocalOptions.sandbox_python``). ``python=`` is its old name, accepted for one release with a
            ``DeprecationWarning``.
        options: the backend's own options, a frozen dataclass: ``FakeOptions`` (latencies, faults),
            ``LocalOptions`` (sandbox bounds, waits, grader), ``OSWorldOptions`` (provider, VM settings);
            ``None``: the backend's defaults. A plain mapping (a YAML or JSON config) is read into the
            backend's class once, where the backend is resolved (:mod:`legato_gym.options`).

    Example::

        from legato_gym.backends.local import LocalOptions

        DesktopConfig(screen=(1280, 720), options=LocalOptions(memory_mb=2048, grader="local"))
    """

    screen: tuple[int, int] = (1920, 1080)
    ready_signal: bool = True
    fixed_wait: float = 0.0
    fast_reset: bool = True
    timeouts: Timeouts = field(default_factory=Timeouts)
    osworld_path: Path | None = field(default_factory=default_osworld_path)
    worker_python: str | None = None
    options: BackendOptions | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        width, height = self.screen
        if width < 64 or height < 64:
            raise ConfigError(f"screen={self.screen!r} is too small; give (width, height), e.g. (1920, 1080)")
        if self.fixed_wait < 0:
            raise ConfigError(f"fixed_wait={self.fixed_wait!r} must be >= 0 seconds")
        if self.fixed_wait and self.ready_signal:
            raise ConfigError(
                f"fixed_wait={self.fixed_wait!r} is slept only without the ready signal, and ready_signal is on, "
                "so it would be ignored: add ready_signal=False (CLI: --no-ready-signal) for OSWorld-style fixed "
                "sleeps, or drop fixed_wait (--fixed-wait) to wait on the ready signal"
            )
        if self.osworld_path is not None and not isinstance(self.osworld_path, Path):
            object.__setattr__(self, "osworld_path", Path(self.osworld_path).expanduser())


rename_field(DesktopConfig, "python", "worker_python")
