"""The screen's changes as the X server reports them: X DAMAGE events on the root window, read by a thread.

Why: the ready signal after an action is "the screen still (and the apps idle) for the quiet period". Read by
comparing frames it can only start counting once the action is over, so every action costs at least the
quiet period (0.1 s) even on a screen that did not change. The X server knows when it drew: a DAMAGE
object on the root window reports every drawing into it or into any window on it (a compositor's too), and
one on each top-level window reports an app's drawing before a compositor has painted it.
With the time of the last change known, the quiet period counts from when the focused app took the
action's last input (:mod:`.input_sync`, recorded by the action's process) or the last change, whichever is
later; with pyautogui's 0.1 s pause after each call, that period is over by the time the action returns,
and the wait is a look at a clock.

:class:`ScreenWatch` keeps one X connection of its own and one thread: each DamageNotify (report level
``NonEmpty``, then the damage subtracted, so at most one event per burst of drawing reaches the thread
before it asks again) stamps :attr:`ScreenWatch.last_change` with the monotonic clock. A waiter first makes
a round trip through that thread's connection (:meth:`ScreenWatch.sync`), so every drawing the X server did
before the wait began is counted. Without python-xlib, without the DAMAGE extension or without X,
:meth:`ScreenWatch.start` says so and the host compares frames as before.

Standard library only at import (python-xlib is imported when the watch starts, as pyautogui is by the
fork server), so this module loads wherever the server does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["ScreenWatch", "Still", "work_ticks"]

logger = logging.getLogger("legato.desktop_server")

#: How long a waiter waits for the watch thread's round trip before it takes the screen as unknown.
SYNC_TIMEOUT_S = 2.0


def work_ticks(exclude: Iterable[int] = ()) -> int:
    """User plus system clock ticks of every process this pid namespace shows, but ``exclude``.

    Inside a desktop's sandbox that is the desktop's own processes: its apps, its window manager (or
    shell). The server, the fork server and the action's own process are left out by the callers: their
    work is the wait's and the action's, not an app's.
    """
    skip = set(exclude)
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total


class Still(NamedTuple):
    """What one wait found.

    Attributes:
        ready: the screen was still, and the apps idle, for the quiet period before the deadline.
        seconds: how long the wait took.
        quiet_for: how long the screen had been still when the wait ended (from the later of the last change
            and the wait's ``since``).
    """

    ready: bool
    seconds: float
    quiet_for: float


class ScreenWatch:
    """The time of the screen's last change, from X DAMAGE events (see the module's docstring).

    Args:
        connect: opens the python-xlib ``Display`` the watch reads (default: ``$DISPLAY``).
    """

    def __init__(self, connect: Callable[[], Any] | None = None) -> None:
        self._connect = connect
        self._cond = threading.Condition()
        #: Monotonic time of the last DamageNotify read (0.0: none yet).
        self.last_change = 0.0
        self._changes = 0
        self._synced = 0
        self._sync_wanted = 0
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        self._stopped = False
        #: Why the watch is not running (``""`` while it runs).
        self.unavailable = "not started"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def changes(self) -> int:
        """How many DamageNotify events the watch has read."""
        return self._changes

    def start(self) -> bool:
        """Open the X connection, create the DAMAGE object and start the thread; False (and why in
        :attr:`unavailable`) when python-xlib, the DAMAGE extension or the X server is missing."""
        try:
            from Xlib.ext import damage  # type: ignore[import-untyped]

            display = self._connect() if self._connect else _default_display()
        except Exception as exc:  # no python-xlib, no X server: the host compares frames instead
            self.unavailable = f"{type(exc).__name__}: {exc}"
            return False
        try:
            if not display.has_extension(damage.extname):
                display.close()
                self.unavailable = "the X server has no DAMAGE extension"
                return False
            display.damage_query_version()
            tracked = _Tracked(display, damage)
            display.sync()
        except Exception as exc:
            with contextlib.suppress(Exception):
                display.close()
            self.unavailable = f"DAMAGE could not be set up: {type(exc).__name__}: {exc}"
            return False
        self._wake_r, self._wake_w = os.pipe()
        self.last_change = time.monotonic()  # nothing is known about the screen before the watch: a change now
        self.unavailable = ""
        self._thread = threading.Thread(target=self._run, args=(tracked,), name="legato-damage", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """End the thread (and its X connection). Idempotent."""
        self._stopped = True
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=SYNC_TIMEOUT_S)

    def _run(self, tracked: _Tracked) -> None:
        display = tracked.display
        fd = display.fileno()
        try:
            while not self._stopped:
                ready, _, _ = select.select([fd, self._wake_r], [], [])
                synced = self._sync_wanted
                if self._wake_r in ready:
                    os.read(self._wake_r, 4096)
                    if self._stopped:
                        break
                    display.sync()  # a round trip: every event the server sent before now is read
                if tracked.drain():
                    with self._cond:
                        self.last_change = time.monotonic()
                        self._changes += 1
                        self._cond.notify_all()
                if self._wake_r in ready:
                    with self._cond:
                        self._synced = max(self._synced, synced)
                        self._cond.notify_all()
        except Exception as exc:  # the X server went away: waiters fall back to frames
            self.unavailable = f"the DAMAGE watch stopped: {type(exc).__name__}: {exc}"
            logger.warning("%s", self.unavailable)
        finally:
            with self._cond:
                self._cond.notify_all()
            with contextlib.suppress(Exception):
                display.close()
            for end in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(end)

    def sync(self, timeout: float = SYNC_TIMEOUT_S) -> bool:
        """Make a round trip through the watch's connection: after it, every drawing the X server did before
        this call is in :attr:`last_change`. False when the watch is not running (or did not answer)."""
        if not self.running:
            return False
        with self._cond:
            self._sync_wanted += 1
            wanted = self._sync_wanted
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"s")
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._synced < wanted:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.running:
                    return False
                self._cond.wait(remaining)
        return True

    def wait_still(
        self,
        since: float,
        quiet: float,
        deadline: float,
        poll: float,
        work: Callable[[], int] | None = None,
        work_since: int | None = None,
        allowance: int = 0,
    ) -> Still:
        """Wait until the screen has had no change for ``quiet`` s counted from ``since`` or its last change,
        whichever is later; with ``work`` (a counter that grows while the apps compute, such as
        :func:`work_ticks`), it must also have grown by at most ``allowance`` over a ``quiet`` s that starts
        no earlier than ``since`` (``work_since``: its value at ``since``; ``None``: read now, from now).

        ``since`` is the monotonic time the input the wait is for was taken. A screen that was still from
        then on returns at once. ``ready`` is False when ``deadline`` passed first or the watch stopped.
        """
        start = time.monotonic()
        if not self.sync():
            return Still(False, time.monotonic() - start, 0.0)
        busy_from, busy_base = (since, work_since) if work_since is not None else (start, None)
        if work is not None and busy_base is None:
            busy_base = work()
        while True:
            now = time.monotonic()
            with self._cond:
                still_from = max(since, self.last_change)
            if work is not None and busy_base is not None:
                done = work()
                if done - busy_base > allowance:
                    busy_from, busy_base = now, done
            calm_from = max(still_from, busy_from if work is not None else still_from)
            if now - calm_from >= quiet:
                return Still(True, now - start, now - still_from)
            if now >= deadline or not self.running:
                return Still(False, now - start, now - still_from)
            until = min(deadline, calm_from + quiet, now + poll if work is not None else deadline)
            with self._cond:
                changes = self._changes
                while self._changes == changes and self.running:
                    remaining = until - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            if not self.sync():
                return Still(False, time.monotonic() - start, time.monotonic() - still_from)


class _Tracked:
    """The DAMAGE objects of one connection: on the root window, and on each of its child windows.

    The root's reports what reaches the screen. Under a compositor (GNOME Shell) an app draws into a window
    redirected off screen, and the screen changes only when the compositor paints it, a frame or more later:
    a DAMAGE object on each top-level window (what compositors themselves watch) reports the app's drawing
    when it is done, so a wait that begins between the two still counts it.
    """

    def __init__(self, display: Any, damage: Any) -> None:
        from Xlib import X  # type: ignore[import-untyped]

        self.display = display
        self._damage = damage
        self._x = X
        self.notify = display.query_extension(damage.extname).first_event + damage.DamageNotifyCode
        display.set_error_handler(_ignore)  # a window gone before its DAMAGE object was made: nothing to watch
        self.root = display.screen().root
        self.root.change_attributes(event_mask=X.SubstructureNotifyMask)
        self.objects: dict[int, int] = {self.root.id: self.root.damage_create(damage.DamageReportNonEmpty)}
        for child in self.root.query_tree().children:
            self._watch(child)

    def _watch(self, window: Any) -> None:
        if window.id not in self.objects:
            self.objects[window.id] = window.damage_create(self._damage.DamageReportNonEmpty)

    def drain(self) -> bool:
        """Read the queued events: whether anything was drawn. Each reporting object is made NonEmpty again
        (its damage subtracted), so the next drawing sends the next event."""
        drawn: set[int] = set()
        x = self._x
        while self.display.pending_events():
            event = self.display.next_event()
            if event.type == self.notify:
                drawn.add(int(event.damage))
            elif event.type == x.CreateNotify and event.parent.id == self.root.id:
                self._watch(event.window)
            elif event.type == x.DestroyNotify and event.event.id == self.root.id:
                gone = self.objects.pop(event.window.id, None)  # the server freed it with the window
                if gone is not None:
                    self.display.display.free_resource_id(gone)
        for handle in drawn:
            self.display.damage_subtract(handle)
        if drawn:
            self.display.flush()
        return bool(drawn)


def _ignore(*_: Any) -> None:
    """python-xlib's handler for errors of requests without a reply: dropped (the window went away)."""


def _default_display() -> Any:
    from Xlib import display  # type: ignore[import-untyped]

    return display.Display()
