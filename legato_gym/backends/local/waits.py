"""The local desktop's ready signals: windows mapped and titled, the screen settled, the apps idle, files written.

Each wait polls its condition until a deadline; none sleeps a fixed time in place of a condition (the fixed
waits of ``ready_signal=False`` are OSWorld's own scaled sleeps, :func:`fixed_wait`).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from legato_gym.backends.local import apps, writeback
from legato_gym.backends.local.options import LocalOptions
from legato_gym.contract import Task, Waited

if TYPE_CHECKING:
    from legato_gym.backends.local.client import DesktopClient
    from legato_gym.backends.local.display import Display
    from legato_gym.backends.local.sandbox import Sandbox

__all__ = ["IDLE_TICKS", "DesktopView", "ReadySignals", "cpu_ticks", "fixed_wait", "wait_cpu_idle"]

logger = logging.getLogger(__name__)

#: The sandbox counts as idle (its apps done loading) while its processes use at most this many clock
#: ticks (10 ms each) per ``settle_s`` (at least 0.1 s): browsers keep a little background work going.
IDLE_TICKS = 2


class DesktopView(Protocol):
    """The X server, sandbox and server client the waits read: a desktop's current ones, or a desk's."""

    @property
    def display(self) -> Display: ...

    @property
    def sandbox(self) -> Sandbox | None: ...

    @property
    def client(self) -> DesktopClient: ...


class ReadySignals:
    """The waits of one desktop, read from its current X server and sandbox.

    Args:
        processes: the desktop's processes (the sandbox changes at every reset), or a desk started ahead.
        options: the local backend's options (``settle_s``, ``poll_s``, ``busy_s``, ``window_timeout``).
    """

    def __init__(self, processes: DesktopView, options: LocalOptions) -> None:
        self._processes = processes
        self.options = options

    def settle_windows(self, windows: int, deadline: float, titles: Sequence[str] = ()) -> bool:
        """The launched windows mapped, each app's document loaded (its title shown), then the screen settled."""
        display = self._processes.display
        window_deadline = min(deadline, time.monotonic() + self.options.window_timeout)
        mapped = display.wait_windows(windows, window_deadline)
        loaded = display.wait_titles(titles, window_deadline)
        if titles:  # an app drawn is not yet an app that takes input: wait until it stops computing
            slow = apps.loads_after_title(titles)  # up to window_timeout again, not busy_s, from its title
            until = min(deadline, time.monotonic() + self.options.window_timeout) if slow else window_deadline
            loaded = self.wait_idle(until if slow else self.busy_deadline(until)) and loaded
        settled = display.wait_settled(self.busy_deadline(deadline), self.options.settle_s, self.options.poll_s)
        return mapped and loaded and settled

    def busy_deadline(self, deadline: float) -> float:
        """``deadline``, or sooner: a screen or app still busy after ``busy_s`` (a video) is taken as it is."""
        return min(deadline, time.monotonic() + self.options.busy_s)

    def wait_settled(self, deadline: float) -> bool:
        """Wait until the screen is unchanged for ``settle_s`` (or ``busy_s`` has passed)."""
        return self._processes.display.wait_settled(
            self.busy_deadline(deadline), self.options.settle_s, self.options.poll_s
        )

    def wait_idle(self, deadline: float) -> bool:
        """Wait until the sandbox's processes use at most :data:`IDLE_TICKS` clock ticks in ``settle_s``.

        LibreOffice maps, titles and draws its window before it has finished setting up the document
        view; keys sent in between are lost. Its CPU time stops growing once it is done.
        """
        sandbox = self._processes.sandbox
        if sandbox is None:
            return False
        return wait_cpu_idle(sandbox.survivors, deadline, max(self.options.settle_s, 0.1), self.options.poll_s)

    def wait_quiet(self, deadline: float) -> bool:
        """Wait until the screen is unchanged and the apps idle (:data:`IDLE_TICKS`) for ``settle_s`` together.

        After an action an app may still be working with nothing new drawn yet (LibreOffice opening its
        Options dialog on a loaded machine): keys the agent sends then are lost, and its next screenshot
        is stale. Both signals are read in the same polls, so an app that is done costs no extra wait.
        """
        sandbox = self._processes.sandbox

        def ticks() -> int:
            return cpu_ticks(sandbox.survivors()) if sandbox is not None else 0

        settle = max(self.options.settle_s, 0.1)
        display = self._processes.display
        return display.wait_settled(deadline, settle, self.options.poll_s, work=ticks, allowance=IDLE_TICKS)

    def wait_write_back(self, task: Task, deadline: float, last_input: float) -> bool:
        """Wait until the running apps whose files the grader reads have written them (:mod:`.writeback`).

        Args:
            task: the task being graded (its evaluator names the files).
            deadline: monotonic time to give up by.
            last_input: monotonic time the last action or setup step ended.
        """
        sandbox = self._processes.sandbox
        if sandbox is None:
            return True
        running = set()
        for pid in sandbox.survivors():
            with contextlib.suppress(OSError):
                running.add(Path(f"/proc/{pid}/comm").read_text().strip())
        delay = writeback.write_back_delay(task.evaluator, running)
        if not delay:
            return True
        until = min(deadline, last_input + delay)
        files = writeback.written_files(task.evaluator, running)
        since = time.time() - (time.monotonic() - last_input)  # the last input, on the file clock
        logger.debug("waiting up to %.1f s for %s to write %s", until - time.monotonic(), sorted(running), files)
        while time.monotonic() < until and not (files and self._written_since(files, since)):
            time.sleep(min(0.1, max(0.0, until - time.monotonic())))
        return self.wait_idle(self.busy_deadline(deadline))

    def _written_since(self, files: Sequence[str], since: float) -> bool:
        """Whether every one of ``files`` (home-relative) was modified at or after ``since`` (epoch seconds)."""
        script = "; ".join(f"date -r {shlex.quote('/home/user/' + f)} +%s.%N" for f in files)
        result = self._processes.client.execute(script, shell=True, timeout=10)
        try:
            stamps = [float(line) for line in result.get("output", "").split()]
        except ValueError:
            return False
        return len(stamps) == len(files) and min(stamps) >= since


def fixed_wait(seconds: float) -> Waited:
    """Sleep ``seconds`` (OSWorld's scaled sleep, for ``ready_signal=False``): a wait that is never ready."""
    start = time.monotonic()
    if seconds > 0:
        time.sleep(seconds)
    return Waited(seconds=time.monotonic() - start, ready=False)


def wait_cpu_idle(pids: Callable[[], Sequence[int]], deadline: float, settle: float, poll: float) -> bool:
    """Wait until the processes ``pids()`` lists use at most :data:`IDLE_TICKS` clock ticks in ``settle`` s."""
    last, since = cpu_ticks(pids()), time.monotonic()
    while True:
        time.sleep(poll)
        now, ticks = time.monotonic(), cpu_ticks(pids())
        if ticks - last > IDLE_TICKS:
            last, since = ticks, now
        elif now - since >= settle:
            return True
        if now >= deadline:
            return False


def cpu_ticks(pids: Sequence[int]) -> int:
    """User plus system clock ticks the processes have used (those gone meanwhile count as 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total
