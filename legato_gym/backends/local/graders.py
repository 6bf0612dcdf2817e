"""Who runs a local desktop's task setup and grades it: legato's own grader, or desktop-env's.

:class:`LocalGrader` runs the setup and post-config steps itself (:mod:`.task_setup`) and grades with the
built-in getters and metrics (:mod:`.evaluators`), in a per-task cache folder. :class:`OSWorldGrader` hands
both to desktop-env's own controllers and evaluator (:mod:`legato_gym.desktopenv.session`), after
putting what the file cache holds where desktop-env looks first (:func:`prefill_osworld`). A desktop picks
one with :func:`make_grader` from its resolved ``grader`` option.

Either can also run a task's setup on a desk started ahead (:meth:`Grader.setup_ahead`, in the background
while the current episode runs) and later take that desk's episode on as set up (:meth:`Grader.adopt`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from legato_gym.backends.local import apps, evaluators
from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.backends.local.lifecycle import DesktopProcesses, Port
from legato_gym.backends.local.options import LocalOptions
from legato_gym.backends.local.prestart import Desk
from legato_gym.backends.local.task_setup import SetupRunner, check_setup
from legato_gym.backends.local.tasks import TASK_DATA
from legato_gym.contract import Task, task_path

if TYPE_CHECKING:
    from legato_gym.desktopenv.session import OSWorldSession

__all__ = [
    "Grader",
    "LocalGrader",
    "OSWorldGrader",
    "Settle",
    "cache_dir",
    "file_cache",
    "grade_locally",
    "make_grader",
    "prefill_osworld",
]

#: The ready signal a setup waits on after each step: ``settle(windows, deadline, titles) -> ready``.
Settle = Callable[[int, float, Sequence[str]], bool]


class Grader(Protocol):
    """Runs a task's setup and post-config on a desktop and grades its end state."""

    #: The persistent file cache that setup downloads and ``cloud_file`` getters read first.
    files: FileCache

    def check(self, task: Task) -> None:
        """Raise :class:`~legato_gym.errors.UnsupportedTaskError` if this grader cannot set up or grade ``task``."""

    def setup(self, task: Task, deadline: float, settle: Settle | None) -> tuple[int, list[str]]:
        """Run the task's setup; the windows it opens and the titles that show them loaded."""

    def setup_ahead(self, task: Task, desk: Desk, deadline: float, settle: Settle | None) -> tuple[int, list[str]]:
        """Run the task's setup on ``desk`` (started ahead, not yet the current one), as :meth:`setup` would.

        Called from the thread that builds desks, while the current episode runs on the grader's desktop.
        """

    def adopt(self, task: Task) -> None:
        """Start an episode of ``task`` on the desk :meth:`setup_ahead` set up, which is now the current one."""

    def postconfig(
        self, task: Task, steps: Sequence[Mapping[str, Any]], deadline: float, settle: Settle | None, windows: int
    ) -> None:
        """Run the task's post-config ``steps`` (before grading); ``windows``: those the setup opened."""

    def record(self, action: str) -> None:
        """Note an action the agent took (for graders that check the action history)."""

    def evaluate(self, task: Task, actions: Sequence[str]) -> float:
        """Grade the desktop's end state."""


class LocalGrader:
    """legato's own setup runner and grader, against the desktop's server (:mod:`.task_setup`, :mod:`.evaluators`).

    Args:
        processes: the desktop's processes (its client changes at every reset).
        screen: ``(width, height)`` of the screen, for the setup's placeholders.
        files: the persistent file cache.
    """

    def __init__(self, processes: DesktopProcesses, screen: tuple[int, int], files: FileCache) -> None:
        self._processes = processes
        self.screen = screen
        self.files = files

    def check(self, task: Task) -> None:
        check_setup(task)
        evaluators.check_evaluator(task)

    def setup(self, task: Task, deadline: float, settle: Settle | None) -> tuple[int, list[str]]:
        return self._setup(self._processes.client, self._processes.state_dir, task, deadline, settle)

    def setup_ahead(self, task: Task, desk: Desk, deadline: float, settle: Settle | None) -> tuple[int, list[str]]:
        ahead = self._processes.state_dir / "ahead"  # its cache becomes the episode's in adopt()
        return self._setup(desk.client, ahead, task, deadline, settle)

    def _setup(
        self, client: DesktopClient, root: Path, task: Task, deadline: float, settle: Settle | None
    ) -> tuple[int, list[str]]:
        runner = SetupRunner(client, cache_dir(root, task), self.screen, deadline, None, files=self.files)
        if settle is not None:
            runner.settle = lambda windows, until: settle(windows, until, runner.titles)
        runner.run(task.setup)
        return runner.expected_windows, list(runner.titles)

    def adopt(self, task: Task) -> None:
        cache = task_path(self._processes.state_dir / "cache", task.task_id)
        if cache.exists():
            shutil.rmtree(cache)
        cache.parent.mkdir(parents=True, exist_ok=True)
        task_path(self._processes.state_dir / "ahead" / "cache", task.task_id).rename(cache)

    def postconfig(
        self, task: Task, steps: Sequence[Mapping[str, Any]], deadline: float, settle: Settle | None, windows: int
    ) -> None:
        if not steps:
            return
        cache = task_path(self._processes.state_dir / "cache", task.task_id)
        runner = SetupRunner(self._processes.client, cache, self.screen, deadline, None, files=self.files)
        if settle is not None:
            runner.settle = lambda launched, until: settle(launched, until, ())
        runner.launched = windows
        runner.run(steps)

    def record(self, action: str) -> None:
        """Nothing: the built-in grader gets the whole action history at :meth:`evaluate`."""

    def evaluate(self, task: Task, actions: Sequence[str]) -> float:
        cache = task_path(self._processes.state_dir / "cache", task.task_id)
        return evaluators.evaluate(task, self._processes.client, cache, actions, files=self.files)


class OSWorldGrader:
    """desktop-env's own setup controller and evaluator, through the desktop's loopback ports.

    Args:
        processes: the desktop's processes (their forwarders are the ports desktop-env talks to).
        screen: ``(width, height)`` of the screen.
        options: the local backend's options (``download_cache``).
        files: the persistent file cache, put where desktop-env looks before it downloads.
    """

    def __init__(
        self, processes: DesktopProcesses, screen: tuple[int, int], options: LocalOptions, files: FileCache
    ) -> None:
        self._processes = processes
        self.screen = screen
        self.options = options
        self.files = files
        self._session: OSWorldSession | None = None

    @property
    def session(self) -> OSWorldSession:
        """desktop-env's session for this desktop (made at first use)."""
        if self._session is None:
            endpoint = self._processes.endpoint
            ports: dict[Port, tuple[str, int]] = {
                "server": endpoint("server"),
                "devtools": endpoint("devtools"),
                "vlc": endpoint("vlc"),
            }
            self._session = self._new_session(ports, self._processes.state_dir / "osworld")
        return self._session

    def _new_session(self, ports: Mapping[Port, tuple[str, int]], work_dir: Path) -> OSWorldSession:
        from legato_gym.desktopenv.session import Endpoint, OSWorldSession

        host, port = ports["server"]
        endpoint = Endpoint(host, port, chromium_port=ports["devtools"][1], vlc_port=ports["vlc"][1])
        cache = self.options.download_cache or "~/.cache/legato/osworld-downloads"
        return OSWorldSession(endpoint, screen=self.screen, download_cache=Path(cache).expanduser(), work_dir=work_dir)

    def check(self, task: Task) -> None:
        """Nothing beyond the coverage check: desktop-env runs every setup step and metric it has."""

    def setup(self, task: Task, deadline: float, settle: Settle | None) -> tuple[int, list[str]]:
        self.adopt(task)
        self.session.setup(task.setup)
        return _opened(task)

    def setup_ahead(self, task: Task, desk: Desk, deadline: float, settle: Settle | None) -> tuple[int, list[str]]:
        with self._processes.desk_endpoints(desk) as ports:
            session = self._new_session(ports, self._processes.state_dir / "osworld-ahead")
            session.begin(task.config, task_path(TASK_DATA, task.task_id))
            prefill_osworld(self.files, task.config, session.download_cache, session.work_dir)
            session.setup(task.setup)
        return _opened(task)

    def adopt(self, task: Task) -> None:
        session = self.session
        session.begin(task.config, task_path(TASK_DATA, task.task_id))
        prefill_osworld(self.files, task.config, session.download_cache, session.work_dir)

    def postconfig(
        self, task: Task, steps: Sequence[Mapping[str, Any]], deadline: float, settle: Settle | None, windows: int
    ) -> None:
        self.session.postconfig()

    def record(self, action: str) -> None:
        if self._session is not None:
            self._session.record(action)

    def evaluate(self, task: Task, actions: Sequence[str]) -> float:
        return self.session.evaluate()


def _opened(task: Task) -> tuple[int, list[str]]:
    """The windows an OSWorld setup opens, and the titles that show them loaded (desktop-env runs it)."""
    windows = sum(
        1
        for step in task.setup
        if step.get("type") == "open"
        or (step.get("type") == "launch" and apps.opens_window((step.get("parameters") or {}).get("command", "")))
    )
    return windows, apps.ready_titles(task.setup)


def make_grader(grader: str, processes: DesktopProcesses, screen: tuple[int, int], options: LocalOptions) -> Grader:
    """The :class:`Grader` named by a resolved ``grader`` option (``"osworld"`` or ``"local"``)."""
    files = file_cache(options)
    if grader == "osworld":
        return OSWorldGrader(processes, screen, options, files)
    return LocalGrader(processes, screen, files)


def grade_locally(
    task: Task, client: DesktopClient, state_dir: Path, actions: Sequence[str], files: FileCache
) -> float:
    """Grade the desktop as it is now with the built-in grader, in a fresh copy of the task's cache folder.

    Raises:
        UnsupportedTaskError: the built-in grader lacks one of the task's getters or metrics.
    """
    evaluators.check_evaluator(task)
    return evaluators.evaluate(task, client, cache_dir(state_dir, task), actions, files=files)


def cache_dir(state_dir: Path, task: Task) -> Path:
    """``state_dir/cache/<task_id>``, made afresh from the task's gold files (:data:`.tasks.TASK_DATA`)."""
    cache = task_path(state_dir / "cache", task.task_id)
    if cache.exists():
        shutil.rmtree(cache)
    gold = task_path(TASK_DATA, task.task_id)
    if gold.is_dir():
        shutil.copytree(gold, cache)
    else:
        cache.mkdir(parents=True)
    return cache


def file_cache(options: LocalOptions) -> FileCache:
    """The persistent file cache the options name (``file_cache``), or the default one."""
    return FileCache(options.file_cache) if options.file_cache else FileCache.default()


def prefill_osworld(files: FileCache, config: Mapping[str, Any], download_cache: Path, work_dir: Path) -> None:
    """Put what the file cache holds where desktop-env's setup controller and ``cloud_file`` look first.

    desktop-env skips a setup download whose ``<download_cache>/<task_id>/<uuid5(url)>_<basename(path)>``
    exists, and a ``cloud_file`` whose ``<work_dir>/<task_id>/<dest>`` exists; what the cache lacks,
    desktop-env downloads itself.
    """
    task_id = str(config["id"])
    evaluator = config.get("evaluator") or {}
    steps = list(config.get("config") or []) + list(evaluator.get("postconfig") or [])
    targets: list[tuple[str, Path]] = []
    for step in steps:
        if step.get("type") == "download":
            for entry in (step.get("parameters") or {}).get("files") or []:
                url, path = str(entry.get("url")), str(entry.get("path"))
                name = f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"
                targets.append((url, download_cache / task_id / name))
    for key in ("result", "expected"):
        specs = evaluator.get(key)
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, Mapping) and spec.get("type") == "cloud_file":
                urls, dests = spec.get("path"), spec.get("dest")
                pairs = zip(urls or [], dests or [], strict=False) if spec.get("multi") else [(urls, dests)]
                targets += [(str(u), work_dir / task_id / str(d)) for u, d in pairs]
    for url, target in targets:
        source = files.path(url)
        if source is not None and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
