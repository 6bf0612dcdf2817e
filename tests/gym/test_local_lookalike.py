"""The lookalike session (``LocalOptions(session="lookalike")``): openbox with legato's own top bar and dock that
look and act as OSWorld's VM's GNOME Shell (reference/osworld-vm-look.md): its rows and columns, its work
area, every app's window as the one table says (each of its classes), the launchers, the overview, a launcher's
menu, and the pointer in screenshots as OSWorld's server pastes it (Yaru's arrow, as the VM's).

One 1920x1080 desktop is shared by the tests; one more at 1280x720 checks another screen size."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from desktop_kit import wait_for

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions, apps, vscode
from legato_gym.backends.local.sandbox.lookalike import (
    BAR_COLOUR,
    DOT_COLOUR,
    LAUNCHERS,
    MENU_COLOUR,
    SUBMENU_COLOUR,
    TITLE_BAR_COLOURS,
    TITLE_BAR_HEIGHT,
    layout,
    wallpaper,
)
from legato_gym.backends.local.sandbox.panel import GAP, PAD, ROW, SEPARATOR
from legato_gym.backends.local.sandbox.shell import APP_WINDOWS
from legato_gym.backends.local.xstate import open_display

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("Xvfb", "bwrap", "openbox", "wmctrl", "xterm")),
        reason="needs xvfb, bubblewrap, openbox, wmctrl and xterm",
    ),
]

SCREEN = (1920, 1080)
EMPTY = Task("t-lookalike", "Look.", {"config": [], "evaluator": {"func": "infeasible"}})
#: The VM's work area at 1920x1080 (reference/osworld-vm-look.md): right of the dock, under the top bar.
WORK_AREA = (70, 27, 1850, 1053)
FILES = 65 + 68 * 8  # the Files launcher's centre, the 9th, as on the VM
SHOW_APPS = 1040


def options() -> LocalOptions:
    return LocalOptions(session="lookalike", prestart=False)


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    with LocalDesktop(DesktopConfig(screen=SCREEN, options=options())) as d:
        d.reset(EMPTY)
        d.wait_after_reset()
        yield d


def client_frames(
    desktop: LocalDesktop, *, normal_only: bool = False
) -> list[tuple[tuple[str, str], tuple[int, int, int, int]]]:
    """``WM_CLASS`` (``(instance, class)``) and frame ``(x, y, width, height)`` of each managed window: the
    client's place on the root, widened by the window manager's ``_NET_FRAME_EXTENTS`` (its title bar).
    ``normal_only``: only normal windows that are no other window's dialog, the windows the table's rules place
    (openbox's rules are ``type="normal"``, GNOME's extension the same)."""
    from Xlib import X, error

    found = []
    screen = open_display(desktop.display.name)
    try:
        root = screen.screen().root
        normal = screen.intern_atom("_NET_WM_WINDOW_TYPE_NORMAL")
        clients = root.get_full_property(screen.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        for wid in clients.value if clients is not None else []:
            window = screen.create_resource_object("window", wid)
            try:
                cls = window.get_wm_class() or ("", "")
                if normal_only:
                    kind = window.get_full_property(screen.intern_atom("_NET_WM_WINDOW_TYPE"), X.AnyPropertyType)
                    if (kind is not None and normal not in kind.value) or window.get_wm_transient_for() is not None:
                        continue
                geometry = window.get_geometry()
                origin = root.translate_coords(window, 0, 0)
                extents = window.get_full_property(screen.intern_atom("_NET_FRAME_EXTENTS"), X.AnyPropertyType)
            except error.XError:
                continue  # gone meanwhile
            left, right, top, bottom = extents.value if extents is not None else (0, 0, 0, 0)
            box = (origin.x - left, origin.y - top, geometry.width + left + right, geometry.height + top + bottom)
            found.append(((cls[0], cls[1]), box))
    finally:
        screen.close()
    return found


def frames(desktop: LocalDesktop) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """``WM_CLASS`` of each managed window to its frame (:func:`client_frames`)."""
    return dict(client_frames(desktop))


def frame_of(desktop: LocalDesktop, cls: str) -> tuple[int, int, int, int] | None:
    """The frame of the window whose WM_CLASS class is ``cls`` (either part, case-insensitively), if managed."""
    return next((b for name, b in frames(desktop).items() if cls.lower() in (name[0].lower(), name[1].lower())), None)


def work_area(desktop: LocalDesktop) -> list[int]:
    from Xlib import X

    screen = open_display(desktop.display.name)
    try:
        root = screen.screen().root
        prop = root.get_full_property(screen.intern_atom("_NET_WORKAREA"), X.AnyPropertyType)
        return list(prop.value[:4]) if prop is not None else []
    finally:
        screen.close()


def pixels(desktop: LocalDesktop) -> np.ndarray:
    return desktop.display.screenshot().astype(int)


def test_top_bar_and_dock_take_the_vms_rows_and_columns(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    screen = pixels(desktop)
    assert (np.abs(screen[:27, 300:800] - np.array(BAR_COLOUR)) <= 2).all()  # rows 0-26, (19, 19, 19) as the VM
    assert np.abs(screen[27, 300:800] - np.array(BAR_COLOUR)).sum(axis=1).min() > 6  # row 27: the wallpaper
    assert (screen[3:24, 18:80] > 200).any()  # "Activities" at the left, white
    assert (screen[3:24, 900:1020] > 200).any()  # the clock, centred
    assert (screen[3:24, 1820:1910] > 200).any()  # the status icons at the right
    dock = screen[500:700, 60:70]
    assert np.abs(dock - dock[:, :1]).max() <= 2  # the dock's dark band: each row even through column 69
    assert (screen[500:700, 70].sum(axis=1) > screen[500:700, 69].sum(axis=1) + 10).all()  # column 70: wallpaper
    for k in range(len(LAUNCHERS)):  # an icon centred at x = 35, y = 65 + 68 k, on the dark band
        cell = screen[65 + 68 * k - 20 : 65 + 68 * k + 20, 15:55]
        assert np.abs(cell - screen[65 + 68 * k, 66]).sum(axis=2).max() > 100, k
    assert (screen[SHOW_APPS - 16 : SHOW_APPS + 16, 19:51] > 200).any()  # Show Applications' dots


def wallpaper_shown(desktop: LocalDesktop) -> np.ndarray:
    """Where the screen's work area is not the session's wallpaper (pixel for pixel), the pointer's box left out."""
    import zlib

    picture = wallpaper(SCREEN)
    bgrx = np.frombuffer(zlib.decompress(picture.pixels), np.uint8).reshape(picture.height, picture.width, 4)
    screen = desktop.display.screenshot()
    differ = (screen != bgrx[:, :, 2::-1]).any(axis=2)
    screen_x = open_display(desktop.display.name)
    try:
        pointer = screen_x.screen().root.query_pointer()
    finally:
        screen_x.close()
    differ[max(0, pointer.root_y - 8) : pointer.root_y + 40, max(0, pointer.root_x - 8) : pointer.root_x + 40] = False
    x, y, _, _ = WORK_AREA
    return np.argwhere(differ[y:, x:])


def flash(desktop: LocalDesktop, x: int, y: int) -> None:
    """Show a black 200 px square of the host's at ``(x, y)`` and take it away: the root shows its background there."""
    host = open_display(desktop.display.name)
    try:
        s = host.screen()
        window = s.root.create_window(x, y, 200, 200, 0, s.root_depth, background_pixel=0, override_redirect=1)
        window.map()
        host.sync()
        assert wait_for(lambda: tuple(pixels(desktop)[y + 100, x + 100]) == (0, 0, 0), 10)  # control: it was shown
        window.destroy()
        host.sync()
    finally:
        host.close()


#: An action that makes the root window's background red, and shows it only where a window of its own went away
#: (a 100 px square at 900, 500): everywhere else the red background is latent, seen once a window there goes.
RED_ROOT = """
from Xlib import display
d = display.Display()
s = d.screen()
s.root.change_attributes(background_pixel=0xFF0000)
w = s.root.create_window(900, 500, 100, 100, 0, s.root_depth, background_pixel=0, override_redirect=1)
w.map()
d.sync()
w.destroy()
d.sync()
"""


def test_a_reset_leaves_the_wallpaper_of_a_fresh_desktop_though_the_sandbox_changed_the_root(
    desktop: LocalDesktop,
) -> None:
    desktop.reset(EMPTY)
    desktop.wait_after_reset()
    assert len(wallpaper_shown(desktop)) == 0  # a fresh desktop's work area is the wallpaper, every pixel
    desktop.act(f"exec({RED_ROOT!r})")
    assert wait_for(lambda: tuple(pixels(desktop)[550, 950]) == (255, 0, 0), 10)  # control: the root is red
    desktop.reset(EMPTY)
    assert desktop.last_reset_kind == "fast"
    desktop.wait_after_reset()
    assert len(wallpaper_shown(desktop)) == 0
    # the latent red is gone too: a window of the host's, mapped and destroyed elsewhere, leaves the wallpaper
    flash(desktop, 300, 300)
    assert wait_for(lambda: len(wallpaper_shown(desktop)) == 0, 10)


def test_a_background_that_differs_only_where_nothing_went_away_is_painted_over_at_reset(
    desktop: LocalDesktop,
) -> None:
    """The wallpaper with a red square in the work area as the root's background, the root left unpainted: where
    the bar and the dock go at the kill it is the wallpaper, so only the repaint of the whole root shows it."""
    import zlib

    from Xlib import X

    desktop.reset(EMPTY)
    desktop.wait_after_reset()
    picture = wallpaper(SCREEN)
    bgrx = np.frombuffer(zlib.decompress(picture.pixels), np.uint8).reshape(picture.height, picture.width, 4).copy()
    bgrx[600:700, 1200:1300] = (0, 0, 255, 0)  # red, as BGRX
    host = open_display(desktop.display.name)
    try:
        s = host.screen()
        pixmap = s.root.create_pixmap(picture.width, picture.height, s.root_depth)
        gc = pixmap.create_gc()
        for top in range(0, picture.height, 20):
            pixmap.put_image(gc, 0, top, picture.width, 20, X.ZPixmap, s.root_depth, 0, bgrx[top : top + 20].tobytes())
        s.root.change_attributes(background_pixmap=pixmap)  # and no clear: nothing shows it yet
        pixmap.free()
        host.sync()
    finally:
        host.close()
    assert len(wallpaper_shown(desktop)) == 0
    desktop.reset(EMPTY)
    assert desktop.last_reset_kind == "fast"
    flash(desktop, 1150, 550)
    assert wait_for(lambda: len(wallpaper_shown(desktop)) == 0, 10)


def extents(desktop: LocalDesktop, cls: str) -> list[int]:
    """``_NET_FRAME_EXTENTS`` (left, right, top, bottom) of the window of WM_CLASS class ``cls``."""
    from Xlib import X

    screen = open_display(desktop.display.name)
    try:
        root = screen.screen().root
        for wid in root.get_full_property(screen.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType).value:
            window = screen.create_resource_object("window", wid)
            if (window.get_wm_class() or ("", ""))[1] == cls:
                prop = window.get_full_property(screen.intern_atom("_NET_FRAME_EXTENTS"), X.AnyPropertyType)
                return list(prop.value) if prop is not None else []
        return []
    finally:
        screen.close()


def test_a_windows_title_bar_is_yarus(desktop: LocalDesktop) -> None:
    """openbox draws mutter's title bar under Yaru: 37 px, no border, its colours, the title centred and the
    minimize, maximize and close symbols at the right (the theme shipped in the package)."""
    desktop.reset(EMPTY)
    desktop.client.post_json("/setup/launch", {"command": ["xterm", "-geometry", "80x20+400+300"]})
    assert wait_for(lambda: frame_of(desktop, "XTerm") is not None)
    assert wait_for(lambda: extents(desktop, "XTerm")[:3] == [0, 0, TITLE_BAR_HEIGHT], 10), extents(desktop, "XTerm")
    x, y, width, _ = frame_of(desktop, "XTerm") or (0, 0, 0, 0)
    time.sleep(0.5)  # drawn
    bar = pixels(desktop)[y : y + TITLE_BAR_HEIGHT, x : x + width]
    colours = {name: np.array(rgb) for name, rgb in TITLE_BAR_COLOURS.items()}
    assert (np.abs(bar[0, 20:-20] - colours["top"]) <= 2).all()  # its first row, lighter
    assert (np.abs(bar[1:-1, 2:30] - colours["bar"]) <= 2).all()  # the bar, left of the title
    assert (np.abs(bar[-1, :] - colours["line"]) <= 2).all()  # and the line under it
    dark = np.abs(bar[1:-1] - colours["symbol"]).sum(axis=2) <= 30
    assert dark[:, width - 110 :].sum() > 20  # the buttons' symbols, at the right
    text = (bar[1:-1].sum(axis=2) < 3 * 150).any(axis=0).nonzero()[0]
    text = text[text < width - 110]
    assert text.size and abs((text.min() + text.max()) / 2 - width / 2) <= 8  # the title, centred on the bar


def test_a_maximized_window_fills_the_vms_work_area(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    assert work_area(desktop) == list(WORK_AREA)  # the struts, as openbox reads them
    desktop.client.post_json("/setup/launch", {"command": ["xterm", "-T", "to-maximize"]})
    assert wait_for(lambda: frame_of(desktop, "XTerm") is not None)
    maximize = ["wmctrl", "-x", "-r", "xterm.XTerm", "-b", "add,maximized_vert,maximized_horz"]
    subprocess.run(maximize, env=desktop.display.env(), check=True)  # as the title bar's double-click asks
    assert wait_for(lambda: frame_of(desktop, "XTerm") == WORK_AREA), frames(desktop)
    screen = pixels(desktop)
    assert (np.abs(screen[:27, 300:800] - np.array(BAR_COLOUR)) <= 2).all()  # the bar stays over it


#: Commands that open a window of each class of the table, all of them (a launch command as OSWorld's tasks
#: give it). Two classes are the VM's spellings that no app installed here makes (Google Chrome's own; the
#: name older LibreOffice builds give their windows): a window of that class is made with the app's ``--class``
#: flag, which checks the window manager's rule for it.
COMMANDS: dict[str, tuple[str, ...]] = {
    "libreoffice*": ("libreoffice --writer", "libreoffice --calc", "libreoffice --impress"),
    "Soffice": ("xterm -class Soffice",),  # XTerm itself opens at its own size: the rule maximizes it
    "Chromium*": ("google-chrome",),
    "Google-chrome": ("google-chrome --class=Google-chrome",),
    "org.gnome.Nautilus": ("nautilus --new-window",),
    "Evince": ("evince",),
    "thunderbird": ("thunderbird",),
    "Gimp*": ("gimp",),
    "vlc": ("VLC_VERBOSE=-1 vlc --no-audio --no-video-title-show",),  # as OSWorld's vlc tasks launch it
    "Mousepad": ("mousepad",),
    "Code": ("code",),
    "XTerm": ("xterm",),
    "Gnome-terminal": ("gnome-terminal",),
    "Totem": ("totem",),
}
#: What a launch needs on the host beyond its program on ``PATH``: (is it there, why not).
_NEEDS: dict[str, tuple[Callable[[], bool], str]] = {
    "google-chrome": (lambda: apps.chromium_binary() is not None, "Chromium (apt: chromium) as google-chrome"),
    "code": (
        lambda: vscode.installed() and apps.chromium_binary() is not None,
        f"code-server {vscode.CODE_SERVER_VERSION} (scripts/test installs it with npm) and Chromium",
    ),
}


def normal_windows(desktop: LocalDesktop) -> list[tuple[str, tuple[int, int, int, int]]]:
    """``(WM_CLASS class, frame)`` of each managed normal window that is no other window's dialog."""
    return [(cls[1], box) for cls, box in client_frames(desktop, normal_only=True)]


def test_the_commands_cover_every_class_of_the_table() -> None:
    assert set(COMMANDS) == set(APP_WINDOWS), "a class of the catalog's table has no command here, or one is gone"


@pytest.mark.timeout(600)  # one app's start and its reset: a minute or more on a loaded 2-core machine
@pytest.mark.parametrize(
    ("pattern", "command"), [(p, c) for p, commands in COMMANDS.items() for c in commands], ids=lambda v: str(v)
)
def test_each_app_opens_as_the_table_says(desktop: LocalDesktop, pattern: str, command: str) -> None:
    """Every class of :data:`APP_WINDOWS` (the catalog's table), its app launched alone on the shared desktop:
    a maximized one's frame fills the VM's work area exactly, one at its own size lies inside it."""
    program = next(word for word in command.split() if "=" not in word)
    there, what = _NEEDS.get(program, (lambda: shutil.which(program) is not None, f"{program} (apt)"))
    if not there():
        pytest.skip(f"needs {what} to open a window of class {pattern}")
    desktop.reset(EMPTY)
    desktop.client.post_json("/setup/launch", {"command": command, "shell": True})

    def mine() -> list[tuple[int, int, int, int]]:
        return [box for cls, box in normal_windows(desktop) if _hit(pattern, cls)]

    try:
        assert wait_for(lambda: bool(mine()), 240), (command, normal_windows(desktop))
        if APP_WINDOWS[pattern] == "maximized":
            assert wait_for(lambda: mine() == [WORK_AREA], 20), (command, mine())
        else:
            time.sleep(1.0)  # its first configure
            x0, y0, w0, h0 = WORK_AREA
            for x, y, w, h in mine():
                assert x >= x0 and y >= y0 and x + w <= x0 + w0 and y + h <= y0 + h0, (command, (x, y, w, h))
                assert (w, h) != (w0, h0), (command, "maximized")
    finally:
        desktop.reset(EMPTY)


def _hit(pattern: str, cls: str) -> bool:
    """The table's match (``shell.opens_as``): the class as spelt, case-insensitively, ``*`` any rest."""
    pattern, cls = pattern.lower(), cls.lower()
    return cls == pattern or (pattern.endswith("*") and cls.startswith(pattern[:-1]))


def test_clicking_a_dock_launcher_opens_its_app_with_a_dot_and_its_name(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    screen = pixels(desktop)
    assert not (np.abs(screen[FILES - 3 : FILES + 4, 1:8] - np.array(DOT_COLOUR)).sum(axis=2) < 30).any()
    assert not (screen[3:24, 100:200] > 200).any()  # no app's name: nothing is focused
    desktop.act(f"pyautogui.click(35, {FILES})")
    assert wait_for(lambda: frame_of(desktop, "org.gnome.Nautilus") is not None), frames(desktop)

    def dot() -> bool:  # the running app's orange dot left of its icon, as the Ubuntu dock's
        near = np.abs(pixels(desktop)[FILES - 3 : FILES + 4, 1:8] - np.array(DOT_COLOUR)).sum(axis=2)
        return bool((near < 30).sum() >= 10)

    assert wait_for(dot, 10)
    assert wait_for(lambda: bool((pixels(desktop)[3:24, 100:200] > 200).any()), 10)  # "Files" after Activities


def test_show_applications_and_the_overview_search_launch_inside(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    before = pixels(desktop)
    desktop.act(f"pyautogui.click(35, {SHOW_APPS})")  # Show Applications: the app grid
    assert wait_for(lambda: bool(np.abs(pixels(desktop)[600, 1000] - before[600, 1000]).sum() > 30), 10)
    desktop.act("pyautogui.typewrite('mousepad', interval=0.02)")
    desktop.act("pyautogui.press('enter')")
    assert wait_for(lambda: frame_of(desktop, "Mousepad") is not None), frames(desktop)
    desktop.reset(EMPTY)
    desktop.act("pyautogui.click(40, 13)")  # Activities: the overview, with its search
    assert wait_for(lambda: bool(np.abs(pixels(desktop)[600, 1000] - before[600, 1000]).sum() > 30), 10)
    desktop.act("pyautogui.press('escape')")  # and away again
    assert wait_for(lambda: bool(np.abs(pixels(desktop)[600, 1000] - before[600, 1000]).sum() <= 3), 10)
    desktop.act("pyautogui.press('win')")  # the Super key opens it, as GNOME's overlay key
    assert wait_for(lambda: bool(np.abs(pixels(desktop)[600, 1000] - before[600, 1000]).sum() > 30), 10)
    desktop.act("pyautogui.typewrite('xterm', interval=0.02); pyautogui.press('enter')")
    assert wait_for(lambda: frame_of(desktop, "XTerm") is None, 2)  # xterm is not in the grid: nothing opens
    desktop.act("pyautogui.press('escape')")


def test_a_launchers_right_click_menu_opens_a_new_window_and_quits(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    before = pixels(desktop)
    desktop.act(f"pyautogui.rightClick(35, {FILES})")
    assert wait_for(lambda: bool(np.abs(pixels(desktop)[FILES, 150] - before[FILES, 150]).sum() > 30), 10)
    desktop.act(f"pyautogui.click(150, {FILES} - 16 + 6 + 16)")  # the menu's first item: New Window
    assert wait_for(lambda: frame_of(desktop, "org.gnome.Nautilus") is not None), frames(desktop)
    before = pixels(desktop)
    desktop.act(f"pyautogui.rightClick(35, {FILES})")  # now with Quit as its second item
    assert wait_for(lambda: bool(np.abs(pixels(desktop)[FILES, 150] - before[FILES, 150]).sum() > 30), 10)
    desktop.act(f"pyautogui.click(150, {FILES} - 32 + 6 + 32 + 16)")
    assert wait_for(lambda: frame_of(desktop, "org.gnome.Nautilus") is None), frames(desktop)


def test_another_screen_size_keeps_the_bar_and_dock_sizes() -> None:
    """GNOME keeps its 27 px bar and 70 px dock at every size (scale 1); the launchers stay on the screen."""
    with LocalDesktop(DesktopConfig(screen=(1280, 720), options=options())) as small:
        small.reset(EMPTY)
        assert work_area(small) == [70, 27, 1210, 693]
        screen = pixels(small)
        assert (np.abs(screen[:27, 300:500] - np.array(BAR_COLOUR)) <= 2).all()
        assert (screen[500:600, 70].sum(axis=1) > screen[500:600, 69].sum(axis=1) + 10).all()
        spot = layout((1280, 720))
        assert spot.launcher_centre(len(LAUNCHERS)) + spot.cell // 2 < spot.show_apps_centre - spot.cell // 2


# ------------------------------------------------------------------------------------------- the pointer

#: Where the VM's cursor theme keeps its arrow (Yaru's, as Ubuntu 22.04's GNOME shows it, at GNOME's 24 px).
YARU_LEFT_PTR = Path("/usr/share/icons/Yaru/cursors/left_ptr")


def xcursor_image(path: Path, size: int) -> tuple[int, int, int, int, list[int]]:
    """``(width, height, xhot, yhot, ARGB pixels)`` of the ``size`` image in an Xcursor file (libXcursor's
    format: a table of chunks; an image chunk is 9 32-bit words, then its premultiplied ARGB pixels)."""
    data = path.read_bytes()
    assert data[:4] == b"Xcur", path
    (count,) = struct.unpack_from("<I", data, 12)
    for k in range(count):
        kind, subtype, position = struct.unpack_from("<III", data, 16 + 12 * k)
        if kind == 0xFFFD0002 and subtype == size:
            width, height, xhot, yhot = struct.unpack_from("<4I", data, position + 16)
            return width, height, xhot, yhot, list(struct.unpack_from(f"<{width * height}I", data, position + 36))
    raise AssertionError(f"{path} has no {size} px image")


def osworlds_screenshot(desktop: LocalDesktop) -> tuple[np.ndarray, np.ndarray, Any]:
    """``(plain screen, the screen as OSWorld's server makes it, the X cursor image)``: the pointer read with
    XFixes through python-xlib (not legato's reader), each pixel's 4 bytes in memory order taken as R, G, B,
    A as pyxcursor takes them, pasted by PIL at the pointer's position through its own alpha, as the
    server's ``/screenshot`` does (``screenshot.paste(cursor, (x, y), cursor)``)."""
    from PIL import Image

    plain = np.ascontiguousarray(desktop.display._framebuffer()[:, :, 2::-1])
    screen = open_display(desktop.display.name)
    try:
        screen.xfixes_query_version()
        cursor = screen.xfixes_get_cursor_image(screen.screen().root)
    finally:
        screen.close()
    raw = struct.pack(f"<{len(cursor.cursor_image)}I", *cursor.cursor_image)
    image = Image.frombytes("RGBA", (cursor.width, cursor.height), raw)
    shot = Image.fromarray(plain)
    shot.paste(image, (cursor.x, cursor.y), image)
    return plain, np.asarray(shot), cursor


def still_screenshots(desktop: LocalDesktop) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """The agent's screenshot (``observe()``) and :func:`osworlds_screenshot` of one unchanged screen (the
    bar's clock may tick between them: then once more)."""
    for _ in range(3):
        before = desktop.display._framebuffer().copy()
        agents = desktop.observe().screenshot
        plain, osworlds, cursor = osworlds_screenshot(desktop)
        if np.array_equal(before, desktop.display._framebuffer()):
            return agents, plain, osworlds, cursor
    raise AssertionError("the screen kept changing")


def test_the_pointer_is_pasted_into_the_screenshot_as_osworlds_server_pastes_it(desktop: LocalDesktop) -> None:
    """Over the bar's flat colour: the agent's screenshot is the screen with the X cursor's image (Yaru's
    arrow at 24 px, as the VM's) pasted with its top-left corner at the pointer, hotspot not subtracted,
    blended by its alpha; nowhere else a pixel differs (the X server draws no pointer of its own into the
    screen: Xvfb's ``-nocursor``); it follows the pointer; ``/screenshot`` agrees."""
    from PIL import Image

    desktop.reset(EMPTY)
    spots = [(500, 2), (1300, 2)]
    taken = []
    for x, y in spots:
        desktop.act(f"pyautogui.moveTo({x}, {y})")
        agents, plain, osworlds, cursor = still_screenshots(desktop)
        assert (cursor.x, cursor.y) == (x, y)
        under = plain[y : y + cursor.height, x : x + cursor.width]
        assert (under == under[0, 0]).all() and tuple(under[0, 0]) == BAR_COLOUR  # a flat background
        changed = np.argwhere((osworlds != plain).any(axis=2))  # the arrow's pixels
        assert len(changed) > 100 and (changed.min(axis=0) >= (y, x)).all(), changed.min(axis=0)
        assert (changed.max(axis=0) < (y + cursor.height, x + cursor.width)).all()
        np.testing.assert_array_equal(agents, osworlds)  # every pixel: there as pasted, and nothing elsewhere
        taken.append((agents, plain, cursor))
    (first, plain, cursor), (second, _, _) = taken
    x, y = spots[0]
    box = (slice(y, y + cursor.height), slice(x, x + cursor.width))
    np.testing.assert_array_equal(second[box], plain[box])  # gone from where it was
    assert (first[box] != plain[box]).any(axis=2).sum() > 100
    served = desktop.client.request("GET", "/screenshot")  # what an OSWorld client of the desktop's server gets
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(served.content)).convert("RGB")), second)
    # the VM's arrow: Yaru's left_ptr at 24 px (the session's XCURSOR_THEME/XCURSOR_SIZE), not X's own cursor
    if not YARU_LEFT_PTR.exists():
        pytest.skip(f"no {YARU_LEFT_PTR} (apt: yaru-theme-icon): the session shows the default theme's arrow")
    width, height, xhot, yhot, pixels_ = xcursor_image(YARU_LEFT_PTR, 24)
    assert (cursor.width, cursor.height, cursor.xhot, cursor.yhot) == (width, height, xhot, yhot)
    assert list(cursor.cursor_image) == pixels_


# the top bar's menus (GNOME Shell 42's: the app menu, the calendar, the system menu and its end-session dialogs)

#: A menu's first row (under the bar, its gap and its padding), and the system menu's rows (panel.SYSTEM_MENU).
FIRST_ROW = 27 + GAP + PAD
POWER_ROW = FIRST_ROW + 4 * ROW + 2 * SEPARATOR + ROW // 2  # "Power Off / Log Out", under volume, network, ...
POWER_OFF_ROW = POWER_ROW + 3 * ROW  # its submenu: Suspend, Restart…, Power Off…, a separator, Log Out
LOG_OUT_ROW = POWER_ROW + 4 * ROW + SEPARATOR
STATUS = (1860, 13)
CLOCK = (960, 13)


def is_menu(desktop: LocalDesktop, x: int, y: int, colour: tuple[int, int, int] = MENU_COLOUR) -> bool:
    """Whether the screen at ``(x, y)`` is a menu's background (Yaru's dark popover; a submenu's ``colour``)."""
    return bool(np.abs(pixels(desktop)[y, x] - np.array(colour)).sum() <= 6)


def app_name_shown(desktop: LocalDesktop) -> bool:
    return bool((pixels(desktop)[3:24, 100:160] > 200).any())


def test_the_top_bars_menus_open_under_it_and_close_on_escape_or_a_click_beside(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    spots = {"calendar": (CLOCK, (700, 200)), "system": (STATUS, (1700, FIRST_ROW + 60))}
    for name, ((bx, by), (x, y)) in spots.items():
        assert not is_menu(desktop, x, y), name  # the wallpaper there
        desktop.act(f"pyautogui.click({bx}, {by})")
        assert wait_for(lambda: is_menu(desktop, x, y), 10), name  # noqa: B023
        desktop.act("pyautogui.press('escape')")
        assert wait_for(lambda: not is_menu(desktop, x, y), 10), name  # noqa: B023
    desktop.act(f"pyautogui.click({CLOCK[0]}, {CLOCK[1]})")  # the calendar, then the status icons: their menu
    assert wait_for(lambda: is_menu(desktop, 700, 200), 10)
    desktop.act(f"pyautogui.click({STATUS[0]}, {STATUS[1]})")
    assert wait_for(lambda: is_menu(desktop, 1700, FIRST_ROW + 60) and not is_menu(desktop, 700, 200), 10)
    desktop.act("pyautogui.press('down', presses=4); pyautogui.press('enter')")  # the keyboard: 4th row, opened
    assert wait_for(lambda: is_menu(desktop, 1890, POWER_ROW + ROW, SUBMENU_COLOUR), 10)
    desktop.act("pyautogui.click(900, 700)")  # a click beside it closes it, and only that
    assert wait_for(lambda: not is_menu(desktop, 1700, FIRST_ROW + 60), 10)
    desktop.act(f"pyautogui.click({CLOCK[0]}, {CLOCK[1]})")
    assert wait_for(lambda: is_menu(desktop, 700, 200), 10)
    desktop.act(f"pyautogui.click({CLOCK[0]}, {CLOCK[1]})")  # its own button again: closed
    assert wait_for(lambda: not is_menu(desktop, 700, 200), 10)


def test_the_app_menu_quits_the_focused_app(desktop: LocalDesktop) -> None:
    desktop.reset(EMPTY)
    desktop.client.post_json("/setup/launch", {"command": ["xterm", "-T", "to-quit"]})
    assert wait_for(lambda: frame_of(desktop, "XTerm") is not None)
    assert wait_for(lambda: app_name_shown(desktop), 10)  # "XTerm" after Activities: its menu's button
    desktop.act("pyautogui.click(125, 13)")
    assert wait_for(lambda: is_menu(desktop, 250, FIRST_ROW + ROW // 2), 10)  # under the name: Quit
    desktop.act(f"pyautogui.click(150, {FIRST_ROW + ROW // 2})")
    assert wait_for(lambda: frame_of(desktop, "XTerm") is None), frames(desktop)
    assert wait_for(lambda: not is_menu(desktop, 250, FIRST_ROW + ROW // 2), 10)


def test_power_off_and_log_out_ask_and_end_nothing(desktop: LocalDesktop) -> None:
    """The system menu's Power Off… and Log Out bring GNOME's dialog; answering it leaves the desktop as it was."""
    desktop.reset(EMPTY)
    desktop.client.post_json("/setup/launch", {"command": ["xterm", "-T", "stays"]})
    assert wait_for(lambda: frame_of(desktop, "XTerm") is not None)
    for row, answer in ((POWER_OFF_ROW, "pyautogui.press('enter')"), (LOG_OUT_ROW, "pyautogui.press('escape')")):
        desktop.act(f"pyautogui.click({STATUS[0]}, {STATUS[1]})")
        assert wait_for(lambda: is_menu(desktop, 1700, FIRST_ROW + 60), 10)
        desktop.act(f"pyautogui.click(1700, {POWER_ROW})")  # its submenu opens under it
        assert wait_for(lambda: is_menu(desktop, 1890, row, SUBMENU_COLOUR), 10)  # noqa: B023
        desktop.act(f"pyautogui.click(1700, {row})")
        assert wait_for(lambda: is_menu(desktop, 760, 470) and not is_menu(desktop, 1700, FIRST_ROW + 60), 10)
        desktop.act(answer)  # "Power Off" (the focused answer) / Escape
        assert wait_for(lambda: not is_menu(desktop, 760, 470), 10)
    assert desktop.display.alive()
    assert frame_of(desktop, "XTerm") is not None  # the session and its apps go on
    desktop.act(f"pyautogui.click({STATUS[0]}, {STATUS[1]})")  # and so does the top bar
    assert wait_for(lambda: is_menu(desktop, 1700, FIRST_ROW + 60), 10)
    desktop.act("pyautogui.press('escape')")
