"""The wait between an action's pyautogui calls: pings through the focused app's event loop, on a real X server.

A small X client stands in for the app: it maps a window that lists ``_NET_WM_PING``, makes it the active
window (as a window manager would) and answers pings from its one event loop, only once it has handled the
events queued before them; it logs each answer. Which keys count as commands (waited for) is checked
without X.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legato_gym.backends.local.display import Display
from legato_gym.backends.local.xstate import open_display
from legato_gym.desktop_server.input_sync import install, is_text, wait_input_taken

#: The stand-in app: answers a ping after ``DELAY`` seconds of "work" unless ``MUTE`` exists; logs answers (and
#: the pings it leaves unanswered).
APP = """
import os, sys, time
from Xlib import X, display
from Xlib.protocol import event
from Xlib.support import unix_connect
plain = unix_connect._get_unix_socket  # the abstract socket: /tmp/.X11-unix/X<N> may be another's stale one
unix_connect._get_unix_socket = lambda address: plain(address if address[:1] == "\\0" else "\\0" + address)
log, delay, mute = sys.argv[1], float(sys.argv[2]), sys.argv[3]
d = display.Display()
root = d.screen().root
w = root.create_window(0, 0, 100, 100, 0, d.screen().root_depth)
protocols, ping = d.intern_atom("WM_PROTOCOLS"), d.intern_atom("_NET_WM_PING")
w.change_property(protocols, d.intern_atom("ATOM"), 32, [ping])
w.map()
root.change_property(d.intern_atom("_NET_ACTIVE_WINDOW"), d.intern_atom("WINDOW"), 32, [w.id])
d.sync()
open(log, "a").write("ready\\n")
while True:
    e = d.next_event()
    if e.type == X.ClientMessage and e.client_type == protocols and e.data[1][0] == ping:
        if os.path.exists(mute):
            open(log, "a").write(f"unanswered {e.data[1][1]}\\n")
            continue
        time.sleep(delay)  # the work queued before the ping
        values = list(e.data[1])
        reply = event.ClientMessage(window=root, client_type=protocols, data=(32, values))
        root.send_event(reply, event_mask=X.SubstructureNotifyMask | X.SubstructureRedirectMask)
        d.flush()
        open(log, "a").write(f"pong {values[1]}\\n")
"""


@pytest.fixture
def x_display(tmp_path: Path) -> Iterator[str]:
    if not all(shutil.which(t) for t in ("Xvfb", "bwrap")):
        pytest.skip("needs Xvfb and bubblewrap (apt: xvfb bubblewrap)")
    display = Display(tmp_path / "display", (320, 240))
    display.start(time.monotonic() + 30)
    try:
        yield display.name
    finally:
        display.stop()


def _connect(name: str) -> Any:
    return open_display(name)  # not a stale /tmp/.X11-unix file


def _start_app(name: str, tmp_path: Path, delay: float) -> tuple[subprocess.Popen[bytes], Path, Path]:
    log, mute = tmp_path / "app.log", tmp_path / "mute"
    env = dict(os.environ, DISPLAY=name)
    app = subprocess.Popen([sys.executable, "-c", APP, str(log), str(delay), str(mute)], env=env)
    deadline = time.monotonic() + 30
    while not (log.exists() and "ready" in log.read_text()):
        assert app.poll() is None and time.monotonic() < deadline, "the stand-in app did not start"
        time.sleep(0.02)
    return app, log, mute


def test_command_keys_are_waited_for_and_typed_text_is_not() -> None:
    assert is_text("a", set()) and is_text("=", set()) and is_text(" ", {"shift"})
    assert not is_text("down", set()) and not is_text("\n", set()) and not is_text("enter", set())
    assert not is_text("a", {"ctrl"}) and not is_text("home", {"ctrl"}) and not is_text("x", {"altleft"})


def test_the_wait_ends_when_the_focused_app_answered_every_ping(x_display: str, tmp_path: Path) -> None:
    conn = _connect(x_display)
    assert wait_input_taken(conn) is False  # no active window yet: nothing to wait for
    app, log, mute = _start_app(x_display, tmp_path, delay=0.3)
    try:
        assert wait_input_taken(conn, rounds=2) is True
        assert log.read_text().count("pong") == 2  # returned only once the app had answered both, in turn
        mute.touch()  # an app that stops answering is waited for up to the timeout, then not
        assert wait_input_taken(conn, rounds=2, timeout=0.5) is False
        assert log.read_text().count("pong") == 2
    finally:
        app.kill()
        app.wait()


def test_installed_pyautogui_calls_wait_for_the_app(x_display: str, tmp_path: Path) -> None:
    """Each public call, and each command key in it, ends only after the app answered; typed text does not wait."""
    import types

    calls: list[str] = []
    platform = types.SimpleNamespace(
        _keyDown=lambda key: calls.append(f"down {key}"), _keyUp=lambda key: calls.append(f"up {key}")
    )
    fake = types.ModuleType("pyautogui")
    fake.platformModule = platform  # type: ignore[attr-defined]
    fake._handlePause = lambda _pause: calls.append(f"pause {_pause}")  # type: ignore[attr-defined]
    app, log, _ = _start_app(x_display, tmp_path, delay=0.0)
    try:
        install(fake, connect=lambda: _connect(x_display))

        def pongs() -> int:
            return log.read_text().count("pong")

        for key in ("ctrl", "home"):
            platform._keyDown(key)
        platform._keyUp("home")  # a command (ctrl held): waited for
        assert pongs() == 2
        platform._keyUp("ctrl")
        assert pongs() == 4
        platform._keyDown("a")
        platform._keyUp("a")  # text: not waited for
        assert pongs() == 4
        fake._handlePause(True)  # the end of a public call: waited for, then pyautogui's own pause
        assert pongs() == 6 and calls[-1] == "pause True"
    finally:
        app.kill()
        app.wait()


def test_an_app_that_lets_a_ping_time_out_is_not_pinged_again_by_the_same_pyautogui(
    x_display: str, tmp_path: Path
) -> None:
    """As VLC's window: it lists _NET_WM_PING and never answers. One timeout, not one per call and command key."""
    import types

    platform = types.SimpleNamespace(_keyDown=lambda key: None, _keyUp=lambda key: None)
    fake = types.ModuleType("pyautogui")
    fake.platformModule = platform  # type: ignore[attr-defined]
    fake._handlePause = lambda _pause: None  # type: ignore[attr-defined]
    app, log, mute = _start_app(x_display, tmp_path, delay=0.0)
    mute.touch()
    try:
        install(fake, connect=lambda: _connect(x_display))
        for _ in range(3):
            platform._keyDown("tab")
            platform._keyUp("tab")  # a command key: waited for, the first time only
        fake._handlePause(True)
        assert log.read_text().count("unanswered") == 1
        assert "pong" not in log.read_text()
        unanswered: set[int] = set()
        assert wait_input_taken(_connect(x_display), rounds=1, timeout=0.2, unanswered=unanswered) is False
        assert len(unanswered) == 1 and log.read_text().count("unanswered") == 2  # a new set: pinged again
        mute.unlink()  # answering now, but the window is in the set: not pinged
        assert wait_input_taken(_connect(x_display), unanswered=unanswered) is False
        assert "pong" not in log.read_text()
        assert wait_input_taken(_connect(x_display)) is True  # without it: pinged and answered
    finally:
        app.kill()
        app.wait()
