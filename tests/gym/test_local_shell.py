"""The local desktop's GNOME session (``LocalOptions(session="gnome")``): the VM's top bar, dock and work area,
each app's window as the VM opens it, and the shell's own ways to run things kept inside the sandbox.

One desktop at 1920x1080 is shared by the tests (its start costs GNOME Shell's, a few seconds)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import numpy as np
import pytest
from desktop_kit import wait_for

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions
from legato_gym.backends.local.sandbox.shell import gnome_installed, opens_as
from legato_gym.backends.local.xstate import open_display

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        not (gnome_installed() and all(shutil.which(t) for t in ("Xvfb", "bwrap", "wmctrl", "xdotool", "xterm"))),
        reason="needs GNOME Shell and the Ubuntu dock (gnome-shell gnome-shell-extension-dashtodock) and xvfb",
    ),
]

SCREEN = (1920, 1080)
CONFIG = DesktopConfig(screen=SCREEN, options=LocalOptions(session="gnome", prestart=False))
EMPTY = Task("t-shell", "Look.", {"config": [], "evaluator": {"func": "infeasible"}})
#: The VM's work area at 1920x1080 (reference/osworld-vm-look.md): right of the dock, under the top bar.
WORK_AREA = (70, 27, 1850, 1053)


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    with LocalDesktop(CONFIG) as d:
        d.reset(EMPTY)
        d.wait_after_reset()
        yield d


def geometries(desktop: LocalDesktop) -> dict[str, tuple[int, int, int, int]]:
    """``WM_CLASS`` (``instance.class``, lower case) of each managed window to its frame's ``(x, y, width,
    height)`` on the screen: the client's place on the root, widened by the window manager's
    ``_NET_FRAME_EXTENTS`` (its title bar), less a GTK window's shadow (``_GTK_FRAME_EXTENTS``). ``wmctrl -lG``
    and ``xdotool`` add the frame's offsets twice."""
    from Xlib import X, error

    found = {}
    screen = open_display(desktop.display.name)  # not a stale /tmp/.X11-unix file
    try:
        root = screen.screen().root
        clients = root.get_full_property(screen.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        for wid in clients.value if clients is not None else []:
            window = screen.create_resource_object("window", wid)
            try:
                cls = window.get_wm_class() or ("", "")
                geometry = window.get_geometry()
                origin = root.translate_coords(window, 0, 0)
                extents = window.get_full_property(screen.intern_atom("_NET_FRAME_EXTENTS"), X.AnyPropertyType)
                shadow = window.get_full_property(screen.intern_atom("_GTK_FRAME_EXTENTS"), X.AnyPropertyType)
            except error.XError:
                continue  # gone meanwhile
            left, right, top, bottom = extents.value if extents is not None else (0, 0, 0, 0)
            # a GTK window that draws its own decorations (nautilus) includes its shadow: not part of its frame
            s_left, s_right, s_top, s_bottom = shadow.value if shadow is not None else (0, 0, 0, 0)
            left, right, top, bottom = left - s_left, right - s_right, top - s_top, bottom - s_bottom
            box = (origin.x - left, origin.y - top, geometry.width + left + right, geometry.height + top + bottom)
            found[f"{cls[0]}.{cls[1]}".lower()] = box
    finally:
        screen.close()
    return found


def box(desktop: LocalDesktop, instance: str) -> tuple[int, int, int, int] | None:
    """The geometry of the window whose WM_CLASS instance is ``instance`` (lower case), if one is managed."""
    return next((g for cls, g in geometries(desktop).items() if cls.startswith(instance + ".")), None)


def test_ctrl_alt_t_opens_the_terminal_at_the_first_press_as_on_the_vm(desktop: LocalDesktop) -> None:
    """The VM's ctrl+alt+t (Ubuntu's settings daemon; here legato's extension) opens GNOME Terminal. Pressed once,
    first of the module's keys: the first key event of an X server used to be lost to GNOME Shell's reload of its
    keymap (:func:`.xstate.prepare_display` presses Shift before any session runs)."""
    desktop.reset(EMPTY)
    desktop.wait_after_reset()
    desktop.act("pyautogui.hotkey('ctrl', 'alt', 't')")
    assert wait_for(lambda: box(desktop, "gnome-terminal-server") is not None, 30), geometries(desktop)
    out = desktop.client.execute(["ps", "-eo", "args"])["output"]
    assert "gnome-terminal-server" in out  # inside the sandbox: its processes are the sandbox's own
    desktop.reset(EMPTY)


def test_top_bar_and_dock_take_the_vms_rows_and_columns(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)  # the screen an agent sees first: after the ready signal (the last test only reset)
    desktop.wait_after_reset()
    screen = desktop.display.screenshot().astype(int)
    bar = screen[:27, 200:600]
    assert (np.abs(bar - 19) <= 2).all()  # the top bar: rows 0-26, near-black (19, 19, 19) as on the VM
    assert np.abs(screen[27, 200:600] - 19).sum(axis=1).min() > 6  # row 27 is the wallpaper already
    dock = screen[500:700, 60:70]
    assert np.abs(dock - dock[:, :1]).max() <= 2  # the dock: each row even through column 69 (over a gradient)
    edge = np.abs(screen[500:700, 70] - screen[500:700, 69]).sum(axis=1)
    assert edge.min() > 10  # column 70 is the wallpaper, brighter than the dock's dark band, on every row
    assert (screen[500:700, 70].sum(axis=1) > screen[500:700, 69].sum(axis=1)).all()


def test_the_wait_after_an_action_sees_what_the_compositor_draws(desktop: LocalDesktop) -> None:
    """GNOME Shell composites: apps draw off screen and the shell paints the screen. X DAMAGE on the root sees
    the shell's painting, so a window drawn after the action's last input keeps the wait open."""
    prefix = "import pyautogui; pyautogui.FAILSAFE = False; pyautogui.press('shift')\n"
    late = prefix + (
        "import time\n"
        "from Xlib import display\n"
        "d = display.Display(); s = d.screen()\n"
        "w = s.root.create_window(300, 300, 200, 200, 0, s.root_depth, background_pixel=s.white_pixel)\n"
        "w.map(); d.sync(); time.sleep(0.3)\n"
        "w.fill_rectangle(w.create_gc(foreground=s.black_pixel), 0, 0, 50, 50); d.sync()\n"
    )

    def still_after(code: str, timeout: float) -> dict[str, object]:
        still = {"quiet": 0.1, "timeout": timeout, "poll": 0.02, "allowance": 2}
        reply = desktop.client.post_json("/legato/action", {"code": code, "timeout": 30, "still": still}).json()
        assert reply["returncode"] == 0, reply
        result = reply["still"]
        assert isinstance(result, dict) and result["how"] == "damage", result
        return result

    assert still_after(prefix, 30)["ready"]
    # the clock may tick in one of them: not in three in a row
    assert any(still_after(prefix, 0.001)["ready"] for _ in range(3))  # nothing drawn after the input
    drawn = still_after(late, 0.001)
    assert not drawn["ready"] and float(str(drawn["quiet_for"])) < 0.1, drawn
    assert still_after(prefix, 30)["ready"]


def test_a_maximized_window_fills_the_vms_work_area(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    desktop.client.post_json("/setup/launch", {"command": ["xterm", "-T", "to-maximize"]})
    assert wait_for(lambda: box(desktop, "xterm") is not None)
    maximize = ["wmctrl", "-x", "-r", "xterm.XTerm", "-b", "add,maximized_vert,maximized_horz"]
    subprocess.run(maximize, env=desktop.display.env(), check=True)  # as the title bar's double-click asks
    assert wait_for(lambda: box(desktop, "xterm") == WORK_AREA), geometries(desktop)


@pytest.mark.parametrize("command", [["nautilus", "--new-window"], ["mousepad"]])
def test_each_app_opens_as_the_table_says(desktop: LocalDesktop, command: list[str]) -> None:
    desktop.reset(EMPTY)
    if shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed")
    desktop.client.post_json("/setup/launch", {"command": command})
    cls = {"nautilus": "org.gnome.nautilus", "mousepad": "mousepad"}[command[0]]
    assert wait_for(lambda: box(desktop, cls) is not None), geometries(desktop)
    time.sleep(0.5)  # the window's first configure
    found = box(desktop, cls)
    assert found is not None
    x, y, w, h = found
    if opens_as(cls) == "maximized":
        assert (x, y, w, h) == WORK_AREA
    else:
        assert (w, h) != WORK_AREA[2:] and x >= WORK_AREA[0] and y >= WORK_AREA[1]


def test_clicking_a_dock_launcher_opens_its_app(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    assert box(desktop, "org.gnome.nautilus") is None
    # Files: the 9th launcher, centred at x = 35, y = 65 + 68 * 8 as on the VM
    desktop.act(f"pyautogui.click(35, {65 + 68 * 8})")
    assert wait_for(lambda: box(desktop, "org.gnome.nautilus") is not None), geometries(desktop)


def test_show_applications_and_the_overview_search_launch_inside(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    desktop.act("pyautogui.click(35, 1040)")  # Show Applications
    desktop.act("pyautogui.typewrite('mousepad', interval=0.05)")
    # Enter launches the first result once the search has shown it (later under load); before that it does
    # nothing, and once it has launched the overview is closed and Enter goes to Mousepad
    for _ in range(8):
        desktop.act("pyautogui.press('enter')")
        if wait_for(lambda: box(desktop, "mousepad") is not None, 3):
            break
    assert wait_for(lambda: box(desktop, "mousepad") is not None), geometries(desktop)
