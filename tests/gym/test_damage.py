"""The wait for a still screen through X DAMAGE events (:mod:`legato_gym.desktop_server.damage`), on real X servers.

Drawing is done by a second X client, into a window on the root (what an app does); the watch must see it,
count the quiet period from the later of ``since`` and the last drawing, and give up at its deadline. A
deadline already passed makes each answer independent of the machine's speed: ready then means the screen
was still long enough before the wait began. Without the DAMAGE extension the watch says why it cannot run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legato_gym.backends.local.display import Display
from legato_gym.backends.local.xstate import open_display
from legato_gym.desktop_server.damage import ScreenWatch

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("Xvfb", "bwrap")), reason="needs Xvfb and bubblewrap (apt: xvfb bubblewrap)"
)

QUIET = 0.1


@pytest.fixture(scope="module")
def x_display(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    display = Display(tmp_path_factory.mktemp("damage") / "display", (320, 240))
    display.start(time.monotonic() + 30)
    try:
        yield display.name
    finally:
        display.stop()


@pytest.fixture
def watch(x_display: str) -> Iterator[ScreenWatch]:
    screen = ScreenWatch(lambda: open_display(x_display))
    assert screen.start(), screen.unavailable
    try:
        yield screen
    finally:
        screen.stop()


@pytest.fixture
def painter(x_display: str) -> Iterator[Any]:
    """An app's window (a child of the root, mapped) and a way to draw into it."""
    connection = open_display(x_display)
    screen = connection.screen()
    window = screen.root.create_window(10, 10, 100, 80, 0, screen.root_depth, background_pixel=screen.white_pixel)
    window.map()
    connection.sync()
    gc = window.create_gc(foreground=screen.black_pixel)

    def draw() -> None:
        window.fill_rectangle(gc, 5, 5, 10, 10)
        connection.sync()  # drawn by the X server before the wait that follows begins

    try:
        yield draw
    finally:
        connection.close()


def _still_since(watch: ScreenWatch, since: float) -> Any:
    """A wait whose deadline is already over: it reports what the screen did from ``since`` up to now."""
    now = time.monotonic()
    return watch.wait_still(since=since, quiet=QUIET, deadline=now, poll=0.02)


def _settle(watch: ScreenWatch) -> float:
    """Wait (up to 30 s) until the screen is still for the quiet period; the time it counted from."""
    result = watch.wait_still(since=time.monotonic(), quiet=QUIET, deadline=time.monotonic() + 30, poll=0.02)
    assert result.ready, result
    return time.monotonic() - result.quiet_for


def test_a_screen_still_since_the_input_is_ready_without_waiting(watch: ScreenWatch, painter: Any) -> None:
    painter()
    taken = _settle(watch) + QUIET  # the input was taken after that drawing
    while time.monotonic() < taken + QUIET:
        time.sleep(QUIET / 4)
    result = _still_since(watch, taken)
    assert result.ready and result.quiet_for >= QUIET, result


def test_drawing_in_an_apps_window_after_the_input_restarts_the_quiet_period(watch: ScreenWatch, painter: Any) -> None:
    start = _settle(watch)
    taken = time.monotonic()
    changes = watch.changes
    painter()  # the app draws after it took the input
    result = _still_since(watch, taken - 10 * QUIET)
    assert watch.changes > changes, "the drawing into a window on the root was not reported"
    assert not result.ready and result.quiet_for < QUIET, result
    waited = watch.wait_still(since=taken, quiet=QUIET, deadline=time.monotonic() + 30, poll=0.02)
    assert waited.ready and waited.quiet_for >= QUIET and watch.last_change > start, waited


def test_a_quiet_period_not_over_yet_is_waited_for(watch: ScreenWatch) -> None:
    _settle(watch)
    since = time.monotonic()
    assert not _still_since(watch, since).ready  # the input was taken just now: the period is still to come
    result = watch.wait_still(since=since, quiet=QUIET, deadline=since + 30, poll=0.02)
    assert result.ready and result.quiet_for >= QUIET, result


def test_a_screen_that_keeps_changing_is_not_ready_at_the_deadline(watch: ScreenWatch, painter: Any) -> None:
    _settle(watch)
    since = time.monotonic()
    results = []
    for _ in range(5):
        painter()
        results.append(_still_since(watch, since - 10 * QUIET))
    assert not any(r.ready for r in results), results


def test_apps_still_computing_keep_the_wait_open(watch: ScreenWatch) -> None:
    taken = _settle(watch) + QUIET
    while time.monotonic() < taken + QUIET:
        time.sleep(QUIET / 4)
    busy = watch.wait_still(taken, QUIET, time.monotonic(), 0.02, work=lambda: 100, work_since=90, allowance=2)
    assert not busy.ready and busy.quiet_for >= QUIET, busy  # the screen is still; the apps are not
    idle = watch.wait_still(taken, QUIET, time.monotonic(), 0.02, work=lambda: 100, work_since=99, allowance=2)
    assert idle.ready, idle


@pytest.fixture
def bare_x(tmp_path: Path) -> Iterator[str]:
    """A plain Xvfb without the DAMAGE extension (``-extension DAMAGE``), ended by SIGTERM (it removes its files)."""
    read_fd, write_fd = os.pipe()
    xvfb = ["Xvfb", "-displayfd", str(write_fd), "-extension", "DAMAGE", "-nolisten", "tcp", "-screen", "0", "64x64x24"]
    proc = subprocess.Popen(xvfb, pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as numbers:
            number = numbers.readline().strip()
        assert number, "Xvfb did not report its display"
        yield f":{number}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_without_damage_the_watch_says_why_and_does_not_run(bare_x: str) -> None:
    screen = ScreenWatch(lambda: open_display(bare_x))
    assert not screen.start()
    assert screen.unavailable == "the X server has no DAMAGE extension" and not screen.running
    assert not screen.sync()
    result = screen.wait_still(since=0.0, quiet=QUIET, deadline=time.monotonic() + 30, poll=0.02)
    assert not result.ready  # never "still" on a screen nobody watches: the caller compares frames


def test_without_an_x_server_the_watch_says_why() -> None:
    def refuse() -> Any:
        raise ConnectionRefusedError("no X server")

    screen = ScreenWatch(refuse)
    assert not screen.start() and "no X server" in screen.unavailable
