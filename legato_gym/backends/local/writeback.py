"""Apps that write their settings to disk a while after a change, and how long grading must wait for them.

OSWorld sleeps 20 s before every grading, and some tasks depend on it without saying so: LibreOffice keeps
a changed option in memory and writes ``registrymodifications.xcu`` about a second later (its config
manager's write-back thread), Chrome writes ``Preferences``, ``Local State`` and ``Bookmarks`` through a
delayed file writer (up to 10 s). A grader that reads those files at once reads the old settings and
scores a solved task 0. The local desktop grades as soon as the desktop is settled, so it waits for these
writers instead, and only when it matters: the app is still running (a post-config that closes it has made
it flush) and the task's grader reads one of its files.

Example::

    delay = write_back_delay(task.evaluator, {"soffice.bin", "Xvfb"})  # 2.0: wait 2 s after the last input
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from legato_gym.backends.local.apps.catalog import APPS

__all__ = ["WRITERS", "Writer", "files_read", "write_back_delay", "written_files"]


@dataclass(frozen=True)
class Writer:
    """One app's delayed write-back.

    Attributes:
        app: the app's name, for logs.
        processes: its process names (``/proc/PID/comm``, 15 characters at most).
        paths: the folders it writes, relative to the home or absolute under ``/home/user``.
        getters: OSWorld getter types that read those files.
        delay_s: how long after the last change the file is on disk, with a margin.
    """

    app: str
    processes: frozenset[str]
    paths: tuple[str, ...]
    getters: frozenset[str]
    delay_s: float


#: The apps with a late write-back (:attr:`legato_gym.backends.local.apps.catalog.App.write_back`).
WRITERS: tuple[Writer, ...] = tuple(
    Writer(app.name, app.write_back.processes, app.write_back.paths, app.write_back.getters, app.write_back.delay_s)
    for app in APPS
    if app.write_back is not None
)

_HOME = "/home/user/"


def _specs(evaluator: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = evaluator.get(key)
    items = value if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, Mapping)]


def files_read(evaluator: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The home-relative paths of the desktop files an evaluator reads (``vm_file``), and its getter types."""
    paths: set[str] = set()
    getters: set[str] = set()
    for spec in _specs(evaluator, "result") + _specs(evaluator, "expected"):
        kind = spec.get("type")
        if not isinstance(kind, str):
            continue
        getters.add(kind)
        if kind == "vm_file":
            path_spec = spec.get("path")
            for path in path_spec if isinstance(path_spec, list) else [path_spec]:
                if isinstance(path, str):
                    paths.add(path.removeprefix(_HOME).removeprefix("~/"))
    return paths, getters


def write_back_delay(evaluator: Mapping[str, Any], running: Iterable[str]) -> float:
    """Seconds after the last input before the evaluator may read the files it grades (0: read at once).

    Args:
        evaluator: the task's OSWorld evaluator.
        running: the names of the processes running in the desktop (``/proc/PID/comm``).
    """
    names = set(running)
    paths, getters = files_read(evaluator)
    delay = 0.0
    for writer in WRITERS:
        if not writer.processes & names:
            continue
        reads = getters & writer.getters or any(path.startswith(writer.paths) for path in paths)
        if reads:
            delay = max(delay, writer.delay_s)
    return delay


def written_files(evaluator: Mapping[str, Any], running: Iterable[str]) -> list[str]:
    """The files the evaluator reads that a running late writer writes (home-relative): once each has been
    written after the last input, the wait of :func:`write_back_delay` can end early."""
    names = set(running)
    paths, _ = files_read(evaluator)
    return sorted(
        path for path in paths for writer in WRITERS if writer.processes & names and path.startswith(writer.paths)
    )
