"""The next episode's desktop, started while this episode runs (``LocalOptions.prestart``).

A fast reset in place kills the episode's sandbox and starts a fresh one on the same X server. Most of a
reset is then starting the task's app: LibreOffice takes 1.3 s here to open a document cold, and about 0.2 s
when a LibreOffice with the same profile is already running, to which the task's ``libreoffice`` hands its
document over LibreOffice's own pipe.

With ``prestart``, the desktop keeps a spare: a fresh X server, with a fresh sandbox on it (window manager,
session bus, the baseline home, the server), built in a background thread while the agent works on the
current one. A reset switches to the spare (nothing of the last episode is reused, not even the X server)
and hands the finished desktop to the same thread to be killed, which then builds the next spare.

When the last task opened LibreOffice, the spare also starts one with no window (``--nodefault``) on its
fresh home, and waits until it is idle. It is what a cold start of the task's own ``libreoffice`` would
be, minus the wait: the same profile, the same environment, and it exits when its last document window
closes, as a cold one does. The warm LibreOffice is kept only for a task whose setup opens LibreOffice
before doing anything else that could change what LibreOffice reads at start (:func:`opens_office_first`);
otherwise it is killed and its traces are put back from the home baseline before the task's setup runs,
so the agent never meets it.

A desktop that runs one task again and again (a GRPO group's attempts on one desktop) goes further: once
it has seen the same task twice in a row, the spare is also *set up* for that task in the background (the
task's own setup, by the desktop's grader, and its ready signal), so that the next reset of the same task
is only the switch. The setup is the task's, run the same way on the same fresh desktop; it only runs
earlier, while nothing else touches that desktop: OSWorld's own loop leaves a set-up VM idle for 60 s
before the agent's first screenshot. A reset of another task does not use it: a bare desk is built then, as
long as a restart takes (:class:`SetupGuess` keeps such misses rare).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import mimetypes
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from legato_gym.backends.local.apps.catalog import app_named
from legato_gym.backends.local.apps.gnome import MIME_DEFAULTS
from legato_gym.backends.local.apps.office import LIBREOFFICE_PROFILE
from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.display import Display
from legato_gym.backends.local.sandbox import Sandbox
from legato_gym.backends.local.sandbox.spec import Inside
from legato_gym.backends.local.waits import wait_cpu_idle
from legato_gym.contract import Task

__all__ = [
    "Desk",
    "Prepared",
    "Prestarter",
    "SetupGuess",
    "cool_office",
    "opens_office_first",
    "task_key",
    "warm_office",
]

logger = logging.getLogger(__name__)

#: The commands that start LibreOffice inside the desktop (its record's executables).
OFFICE_COMMANDS = frozenset(app_named("libreoffice").executables)
#: A LibreOffice with no window, waiting for a document (``--nodefault``); ``--norestore`` as OSWorld's VM
#: has document recovery off.
WARM_OFFICE = ("soffice", "--nologo", "--norestore", "--nodefault")
#: LibreOffice's process names (its launcher and the office itself).
_OFFICE_PROCESSES = "soffice.bin|oosplash"
#: What a LibreOffice start leaves outside its profile: its pipe and its temporary folders.
_OFFICE_TRACES = "/tmp/OSL_PIPE_*_SingleOfficeIPC_* /tmp/lu*.tmp"
#: Setup steps that cannot change what LibreOffice reads at start, unless they write into its profile.
_FILE_STEPS = frozenset({"download", "upload_file"})
_IDLE_S = 0.3
_POLL_S = 0.05


def task_key(task: Task) -> str:
    """What a task's setup depends on: its id and its whole config (two tasks of one id may differ)."""
    config = json.dumps(task.config, sort_keys=True, default=str)
    return f"{task.task_id}:{hashlib.sha256(config.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class Prepared:
    """A task's setup, run on a desk started ahead: which task, and what the reset's ready signal waits for."""

    key: str
    windows: int
    titles: tuple[str, ...]


@dataclass
class Desk:
    """One X server and the sandbox on it, with its server's client."""

    display: Display
    sandbox: Sandbox
    client: DesktopClient
    slot: str
    #: a LibreOffice with no window runs in it (:func:`warm_office`)
    office: bool = False
    #: the task whose setup already ran on it (its next reset of that task is only the switch)
    prepared: Prepared | None = None

    def alive(self) -> bool:
        return self.display.alive() and self.sandbox.alive()

    @property
    def pids(self) -> list[int]:
        pids = list(self.display.pids)
        if self.sandbox.init_pid is not None:
            pids.append(self.sandbox.init_pid)
        return pids


def _office_command(command: object) -> bool:
    if isinstance(command, str):
        try:
            command = shlex.split(command)
        except ValueError:
            return False
    if not isinstance(command, list) or not command:
        return False
    return PurePosixPath(str(command[0])).name in OFFICE_COMMANDS


def _office_document(path: object) -> bool:
    mime, _ = mimetypes.guess_type(str(path))
    return MIME_DEFAULTS.get(mime or "", "").startswith("libreoffice-")


def opens_office_first(steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a task's setup starts LibreOffice before any step that could change what it reads at start.

    True when, before the first step that starts LibreOffice (``launch``/``execute``/``command`` of
    ``libreoffice`` or ``soffice``, or ``open`` of a document the desktop opens in LibreOffice), there are only
    downloads and uploads that write outside LibreOffice's profile.
    """
    for step in steps:
        kind, parameters = step.get("type"), step.get("parameters") or {}
        if kind in _FILE_STEPS:
            paths = [str(item.get("path", "")) for item in parameters.get("files") or [] if isinstance(item, dict)]
            if any(LIBREOFFICE_PROFILE.split("/")[0] in path for path in paths):  # ~/.config: the profile's
                return False
            continue
        if kind == "open":
            return _office_document(parameters.get("path", ""))
        if kind in ("launch", "execute", "command"):
            return _office_command(parameters.get("command"))
        return False
    return False


def warm_office(client: DesktopClient, sandbox: Sandbox, deadline: float) -> bool:
    """Start LibreOffice with no window in a fresh sandbox; True once its pipe is up and it is idle."""
    response = client.post_json("/setup/launch", {"command": list(WARM_OFFICE)}, timeout=10)
    if response.status_code != 200:
        logger.warning("could not start a LibreOffice ahead: %s", response.text[:300])
        return False
    while time.monotonic() < deadline:
        probe = client.execute(f"ls {_OFFICE_TRACES.split()[0]}", shell=True, timeout=10)
        if probe.get("returncode") == 0:
            break
        time.sleep(_POLL_S)
    else:
        return False
    return wait_cpu_idle(sandbox.survivors, deadline, _IDLE_S, _POLL_S)


def cool_office(client: DesktopClient, timeout: float) -> None:
    """Kill the warm LibreOffice, and put its profile and ``/tmp`` back as the home baseline has them."""
    profile = f"/home/user/{LIBREOFFICE_PROFILE.rsplit('/', 2)[0]}"  # ~/.config/libreoffice
    script = (
        f"pkill -KILL -x '{_OFFICE_PROCESSES}'; "
        # killed children of the server stay zombies until it reaps them: wait for the others only
        f"while ps -o stat= -C {_OFFICE_PROCESSES.replace('|', ',')} | grep -qv '^Z'; do sleep 0.01; done; "
        f"rm -rf {profile} {_OFFICE_TRACES}; "
        f"tar -xf {Inside.BASELINE} -C /home/user ./{profile.removeprefix('/home/user/')}"
    )
    result = client.execute(script, shell=True, timeout=timeout)
    if result.get("returncode") != 0:
        raise OSError(f"could not put LibreOffice's profile back after stopping it: {result}")


class SetupGuess:
    """Which task to set a desk started ahead up for: the task of this episode, while its run should go on.

    A desktop is handed runs of one task (a GRPO group's attempts on it): its next task is guessed to be the
    current one once the run has two episodes, unless the run is already as long as the last one was. So a
    desktop of varied tasks never sets one up ahead; one handed runs of a steady length misses only at the
    end of its first run (the length is not known yet); and a run of 8 gets 6 resets that are only a switch.
    """

    def __init__(self) -> None:
        self._current: str | None = None
        self._length = 0  # episodes of the current run so far
        self._last_length: int | None = None  # of the run before it

    def reset(self, task: Task) -> None:
        """Note the task of the episode a reset starts."""
        key = task_key(task)
        if key == self._current:
            self._length += 1
            return
        if self._current is not None:
            self._last_length = self._length
        self._current, self._length = key, 1

    def next_task(self, task: Task) -> Task | None:
        """The task to set the next desk up for, during an episode of ``task``; ``None``: a bare desk."""
        if task_key(task) != self._current or self._length < 2:
            return None
        if self._last_length is not None and self._length >= self._last_length:
            return None  # the run is as long as the last one: it likely ends here
        return task


class Prestarter:
    """Builds the next desktop and kills finished ones, one at a time, in a background thread.

    Args:
        build: starts a desk in the given slot (``office``: with a warm LibreOffice; ``task``: set up for
            it); raises on failure.
        destroy: kills a desk and removes its folders.
    """

    def __init__(self, build: Callable[[str, bool, Task | None], Desk], destroy: Callable[[Desk], None]) -> None:
        self._build, self._destroy = build, destroy
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="legato-prestart")
        self._next: Future[Desk] | None = None
        self._slots = itertools.count(1)
        self._lock = threading.Lock()
        self._live: dict[str, Desk] = {}  # built and not taken, or handed back and not yet killed

    def prepare(self, office: bool, task: Task | None = None) -> None:
        """Start building the next desk (unless one is already being built or waiting), set up for ``task``."""
        if self._next is None:
            self._next = self._pool.submit(self._make, f"-{next(self._slots)}", office, task)

    @property
    def pending(self) -> bool:
        """A desk is being built or waits to be taken."""
        return self._next is not None

    def take(self, deadline: float) -> Desk | None:
        """The next desk, once built (waiting for it until ``deadline``); ``None`` if it failed or is late."""
        future, self._next = self._next, None
        if future is None:
            return None
        try:
            desk = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            logger.warning("the desktop started ahead was not ready before the reset deadline")
            future.add_done_callback(self._discard)
            return None
        except Exception as exc:  # any failure of the build means: no spare
            logger.warning("the desktop started ahead failed: %s", exc)
            return None
        with self._lock:
            self._live.pop(desk.slot, None)
        return desk

    def retire(self, desk: Desk) -> None:
        """Kill ``desk`` in the background (before the next build starts)."""
        with self._lock:
            self._live[desk.slot] = desk
        with contextlib.suppress(RuntimeError):  # closing: close() kills what is left in _live
            self._pool.submit(self._kill, desk)

    @property
    def pids(self) -> list[int]:
        """Host pids of the desks built and not taken, and of those handed back and not yet killed."""
        with self._lock:
            return [pid for desk in self._live.values() for pid in desk.pids]

    def close(self) -> None:
        """Stop building; kill every desk not taken. Waits for the build under way."""
        self._next = None
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            left, self._live = list(self._live.values()), {}
        for desk in left:
            with contextlib.suppress(Exception):
                self._destroy(desk)

    def _make(self, slot: str, office: bool, task: Task | None) -> Desk:
        desk = self._build(slot, office, task)
        with self._lock:
            self._live[slot] = desk
        return desk

    def _kill(self, desk: Desk) -> None:
        with self._lock:
            if self._live.pop(desk.slot, None) is None:
                return  # close() took it
        try:
            self._destroy(desk)
        except Exception:  # a desk that will not die is the host's to see, not the episode's
            logger.exception("could not kill the finished desktop %s", desk.slot)

    def _discard(self, future: Future[Desk]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self.retire(future.result())
