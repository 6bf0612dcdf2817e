"""No X server state leaks across a fast reset of a real desktop.

The X server outlives the sandbox, so what the agent changed in it (keyboard layout, root properties, the
clipboard, keys left pressed, windows kept by ``RetainPermanent``) must be put back at reset, or the reset
restarts the display. Each change is made through the agent's own channel (``act``), seen from the host
(a positive control that the action really changed it), then checked from the host after the reset.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop
from legato_gym.backends.local.xstate import open_display

Xlib = pytest.importorskip("Xlib.display", reason="python-xlib comes with `pip install 'legatolabs[local]'`")
from Xlib import X, Xatom  # type: ignore[import-untyped]  # noqa: E402

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "setxkbmap", "xprop")),
        reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool x11-utils)",
    ),
]

#: In place: a desktop started ahead (``prestart``) gets a new X server at every reset, with nothing to put back.
CONFIG = DesktopConfig(screen=(640, 480), options={"prestart": False})
TASK = Task("t-x-state", "Do nothing.", {"config": [], "evaluator": {"func": "infeasible"}})

#: A background X client (started by an action) that owns CLIPBOARD and serves "leaked" to whoever asks;
#: with RETAIN it also keeps a white window on screen after it is gone (SetCloseDownMode RetainPermanent).
CLIPBOARD_OWNER = """
import sys
from Xlib import X, Xatom, display
d = display.Display()
s = d.screen()
w = s.root.create_window(0, 0, 200, 200, 0, s.root_depth, background_pixel=s.white_pixel, override_redirect=1)
clipboard = d.intern_atom("CLIPBOARD")
w.set_selection_owner(clipboard, X.CurrentTime)
if RETAIN:
    w.map()
    d.set_close_down_mode(X.RetainPermanent)
    d.sync()
    sys.exit(0)
d.sync()
while True:
    e = d.next_event()
    if e.type == X.SelectionRequest:
        e.requestor.change_property(e.property, Xatom.STRING, 8, b"leaked")
        from Xlib.protocol import event
        e.requestor.send_event(event.SelectionNotify(time=e.time, requestor=e.requestor, selection=e.selection,
                                                     target=e.target, property=e.property))
        d.flush()
"""


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    with LocalDesktop(CONFIG) as d:
        d.reset(TASK)
        yield d


class Host:
    """The host's own view of a desktop's X server (not through legato's code under test)."""

    def __init__(self, desktop: LocalDesktop) -> None:
        self.display: Any = open_display(desktop.display.name)  # not a stale /tmp/.X11-unix file
        self.root = self.display.screen().root

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.display.close()

    def keymap(self) -> list[tuple[int, ...]]:
        info = self.display.display.info
        rows = self.display.get_keyboard_mapping(info.min_keycode, info.max_keycode - info.min_keycode + 1)
        return [tuple(row) for row in rows]

    def root_property(self, name: str) -> bytes | None:
        prop = self.root.get_full_property(self.display.intern_atom(name), X.AnyPropertyType)
        return None if prop is None else bytes(prop.value)

    def clipboard_owner(self) -> int:
        owner = self.display.get_selection_owner(self.display.intern_atom("CLIPBOARD"))
        return 0 if owner == X.NONE else int(owner.id)

    def clipboard_text(self, timeout: float = 5.0) -> bytes | None:
        s = self.display.screen()
        w = self.root.create_window(0, 0, 1, 1, 0, s.root_depth)
        prop = self.display.intern_atom("LEGATO_TEST_PASTE")
        w.convert_selection(self.display.intern_atom("CLIPBOARD"), Xatom.STRING, prop, X.CurrentTime)
        self.display.flush()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                while self.display.pending_events():
                    event = self.display.next_event()
                    if event.type == X.SelectionNotify:
                        if event.property == X.NONE:
                            return None
                        value = w.get_full_property(prop, X.AnyPropertyType)
                        return None if value is None else bytes(value.value)
                time.sleep(0.01)
            return None
        finally:
            w.destroy()  # a window left on the root would count as the episode's at reset
            self.display.sync()

    def held(self) -> tuple[list[int], int]:
        keys = self.display.query_keymap()
        pressed = [code for code in range(8, 256) if keys[code // 8] & (1 << (code % 8))]
        return pressed, self.root.query_pointer().mask

    def root_children(self) -> set[int]:
        return {w.id for w in self.root.query_tree().children}


def wait_for(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"the action did not take effect: {what}")
        time.sleep(0.02)


def test_keyboard_layout_set_by_setxkbmap_is_back(desktop: LocalDesktop) -> None:
    with Host(desktop) as host:
        keymap, names = host.keymap(), host.root_property("_XKB_RULES_NAMES")
        desktop.act("import subprocess; subprocess.run(['setxkbmap', '-layout', 'de', '-option', 'ctrl:nocaps'])")
        wait_for(lambda: host.keymap() != keymap, "setxkbmap de")
        assert desktop.reset(TASK) == desktop.last_reset_kind == "fast"  # put back, no restart needed
        assert host.keymap() == keymap
        assert host.root_property("_XKB_RULES_NAMES") == names


def test_root_properties_set_by_xprop_are_gone(desktop: LocalDesktop) -> None:
    with Host(desktop) as host:
        names = host.root_property("_XKB_RULES_NAMES")
        desktop.act(
            "import subprocess; "
            "subprocess.run(['xprop', '-root', '-f', 'LEGATO_LEAK', '8s', '-set', 'LEGATO_LEAK', 'episode-1']); "
            "subprocess.run(['xprop', '-root', '-f', 'CUT_BUFFER0', '8s', '-set', 'CUT_BUFFER0', 'secret']); "
            "subprocess.run(['xprop', '-root', '-f', '_XKB_RULES_NAMES', '8s', '-set', '_XKB_RULES_NAMES', 'x'])"
        )
        wait_for(lambda: host.root_property("LEGATO_LEAK") == b"episode-1", "xprop -root -set")
        assert host.root_property("CUT_BUFFER0") == b"secret"
        desktop.reset(TASK)
        assert desktop.last_reset_kind == "fast"
        assert host.root_property("LEGATO_LEAK") is None
        assert host.root_property("CUT_BUFFER0") is None
        assert host.root_property("_XKB_RULES_NAMES") == names


def test_the_clipboard_is_empty_in_the_next_episode(desktop: LocalDesktop) -> None:
    with Host(desktop) as host:
        code = CLIPBOARD_OWNER.replace("RETAIN", "False")
        desktop.act(
            f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {code!r}], start_new_session=True)"
        )
        wait_for(lambda: host.clipboard_owner() != 0, "an X client owns CLIPBOARD")
        assert host.clipboard_text() == b"leaked"
        desktop.reset(TASK)
        assert host.clipboard_owner() == 0
        assert host.clipboard_text() is None


def test_a_retained_client_leaves_no_window_or_selection(desktop: LocalDesktop) -> None:
    baseline = desktop.display.fingerprint()
    with Host(desktop) as host:
        before = host.root_children()
        code = CLIPBOARD_OWNER.replace("RETAIN", "True")
        desktop.act(f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])")
        wait_for(lambda: host.root_children() - before, "a RetainPermanent window")
        retained = host.root_children() - before
        assert desktop.display.fingerprint() != baseline  # the white window is on screen
        desktop.reset(TASK)
        assert desktop.last_reset_kind == "fast"
        # gone (the next session's window manager makes windows of its own, whose ids need not be the last one's)
        assert retained.isdisjoint(host.root_children())
        assert host.clipboard_owner() == 0
        assert desktop.display.fingerprint() == baseline


def test_keys_buttons_and_caps_lock_left_pressed_are_released(desktop: LocalDesktop) -> None:
    with Host(desktop) as host:
        desktop.act(
            "pyautogui.keyDown('shift'); pyautogui.press('capslock'); pyautogui.mouseDown(); pyautogui.moveTo(3, 3)"
        )
        wait_for(lambda: host.held()[0] != [], "a key held down")
        assert host.held()[1] & X.LockMask and host.held()[1] & X.Button1Mask
        desktop.reset(TASK)
        assert desktop.last_reset_kind == "fast"
        assert host.held() == ([], 0)


def test_window_manager_desktops_are_back(desktop: LocalDesktop) -> None:
    with Host(desktop) as host:
        desktops = host.root_property("_NET_NUMBER_OF_DESKTOPS")
        current = host.root_property("_NET_CURRENT_DESKTOP")
        desktop.act("import subprocess; subprocess.run(['wmctrl', '-n', '3']); subprocess.run(['wmctrl', '-s', '2'])")
        wait_for(lambda: host.root_property("_NET_CURRENT_DESKTOP") != current, "wmctrl -n 3 -s 2")
        assert host.root_property("_NET_NUMBER_OF_DESKTOPS") != desktops
        desktop.reset(TASK)
        assert desktop.last_reset_kind == "fast"
        # the next episode's window manager started from the baseline, not from what the agent left
        assert host.root_property("_NET_NUMBER_OF_DESKTOPS") == desktops
        assert host.root_property("_NET_CURRENT_DESKTOP") == current


def test_state_that_cannot_be_put_back_restarts_the_display(desktop: LocalDesktop) -> None:
    with Host(desktop) as host:
        auto_repeats = bytes(host.display.get_keyboard_control().auto_repeats)
        desktop.act(
            "from Xlib import X, display; d = display.Display(); "
            "d.change_keyboard_control(key=38, auto_repeat_mode=X.AutoRepeatModeOff); d.sync()"
        )
        wait_for(lambda: bytes(host.display.get_keyboard_control().auto_repeats) != auto_repeats, "xset r off 38")
    desktop.reset(TASK)
    assert desktop.last_reset_kind == "fallback"
    with Host(desktop) as host:  # a new X server: the one the reset started
        assert bytes(host.display.get_keyboard_control().auto_repeats) == auto_repeats
    desktop.reset(TASK)
    assert desktop.last_reset_kind == "fast"
