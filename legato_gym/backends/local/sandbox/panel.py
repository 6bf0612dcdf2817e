"""The lookalike session's top bar and dock: one python-xlib process inside the sandbox (``session="lookalike"``).

Run inside as ``python panel.py FOLDER MARKER`` (:func:`.lookalike.write_lookalike_files` puts this file, its
pictures and its manifest in ``FOLDER``). Over the wallpaper (the root window's background, which the host
paints) it maps a top bar and a dock as windows of its own that the window manager does not manage (as GNOME
Shell's: no window list shows them; openbox's ``<margins>`` keep maximized windows right of the dock and under
the bar), and creates ``MARKER`` once the window manager's work area says so. Then it sleeps in ``select`` and
wakes for a click, a key, a change of the root's window list or active window (the dots, the
app's name), a change of the favourites (its ``gsettings monitor`` child says it: the dock's launchers), or the
minute (the clock). The top bar's buttons open GNOME 42's menus (the app menu, the date
menu, the system menu and its end-session dialogs, which end nothing: :data:`DIALOGS`), the dock's launchers a
menu of their own (the app's windows, Pin to Dash or Unpin, which write the favourites with ``gsettings``),
Activities and Super the overview's window picker (:func:`picker_slots`), Show Applications its app grid, a
right-click on a window's title bar (or alt+space) GNOME's window menu, whose rows it asks of the window manager. It
draws only by copying pre-drawn pictures (server-side pixmaps, text as glyphs copied from a strip), filling
rectangles and, while the window picker opens, reading the windows' pixels back from the X server a strip at a
time: it imports neither Pillow nor numpy, and an idle desktop costs it nothing.

Standalone on purpose (only the standard library and python-xlib): it runs from a file bound into the sandbox.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import math
import operator
import os
import re
import select
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import Xlib.ext  # type: ignore[import-untyped]
from Xlib import XK, X  # type: ignore[import-untyped]
from Xlib import display as xdisplay
from Xlib import error as xerror

#: The X extensions whose modules python-xlib loads for the panel's display: only the one it uses (the menus'
#: rounded corners); all of them, as by default, cost the panel 0.4 MiB.
EXTENSIONS = [("SHAPE", "shape")]


def warn(message: str) -> None:
    """Say what went wrong on the panel's standard error (the logging module costs the panel 1 MiB)."""
    sys.stderr.write(f"legato-panel: {message}\n")
    sys.stderr.flush()


#: Root properties whose change redraws the dock's dots and the top bar's app name, restacks the panel or
#: publishes the work area again.
WATCHED = ("_NET_CLIENT_LIST", "_NET_ACTIVE_WINDOW", "_NET_CLIENT_LIST_STACKING", "_NET_WORKAREA")
#: The atoms the panel reads or sends of windows it does not own.
WINDOW_ATOMS = (
    "_NET_SUPPORTING_WM_CHECK", "_NET_WM_WINDOW_TYPE", "_NET_WM_WINDOW_TYPE_NORMAL", "_NET_WM_STATE",
    "_NET_WM_STATE_MAXIMIZED_VERT", "_NET_WM_STATE_MAXIMIZED_HORZ", "_NET_WM_STATE_ABOVE", "_NET_WM_STATE_STICKY",
    "_NET_WM_ALLOWED_ACTIONS", "_NET_WM_ACTION_MINIMIZE", "_NET_WM_ACTION_MAXIMIZE_HORZ", "_NET_WM_ACTION_MOVE",
    "_NET_WM_ACTION_RESIZE", "_NET_WM_ACTION_CLOSE", "_NET_WM_DESKTOP", "_NET_NUMBER_OF_DESKTOPS",
    "_NET_WM_MOVERESIZE", "_NET_MOVERESIZE_WINDOW", "_NET_CLOSE_WINDOW", "_NET_ACTIVE_WINDOW", "WM_CHANGE_STATE",
    "_NET_WM_NAME", "_NET_REQUEST_FRAME_EXTENTS", "_NET_FRAME_EXTENTS",
)  # fmt: skip
#: EWMH's ``_NET_WM_MOVERESIZE`` directions: a resize and a move with the keyboard.
SIZE_KEYBOARD, MOVE_KEYBOARD = 9, 10
NORTH_WEST_GRAVITY = 1  # X's: a position given is the frame's top left corner
#: GTK's double-click time and drag threshold, which mutter's title bars take (ms, px).
DOUBLE_CLICK_MS = 400
DRAG_THRESHOLD = 8
#: Take Screenshot's wait for the window to draw again where its menu was (s).
SCREENSHOT_DELAY = 0.3
XA_CARDINAL = 6  # Xlib.Xatom.CARDINAL
XA_WINDOW = 33  # Xlib.Xatom.WINDOW
MENU_ROW = 32
MENU_WIDTH = 220
#: The overview's search entry, a pill (Yaru's ``.search-entry``: 320 px of text, 9 px of padding and a 1 px
#: border each side, 38 px tall, measured on the ``gnome`` session), 24 px under the bar.
SEARCH = (340, 38)
MAX_DOTS = 4
#: The top bar's menus (GNOME Shell 42 with Yaru's stylesheet): 6 px of padding in a 1 px border, 15 px corners,
#: items 36 px tall (9 px above and below the text), separators 13 px (6 px around a line), at least 15em wide;
#: they hang 6 px under the bar (the box pointer's rise). A modal dialog has 9 px corners and 52 px buttons.
PAD = 6
ROW = 36
SEPARATOR = 13
CORNER = 15
GAP = 6
MIN_WIDTH = 220
DIALOG_CORNER = 9
DIALOG_BUTTON = 52
#: The system menu (Ubuntu 22.04's): the volume, the wired network, Settings, Lock, and Power Off / Log Out,
#: whose submenu's entries open the end-session dialogs. Each row: ``(label, icon, action, submenu)``.
SYSTEM_MENU: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...] = (
    ("", "volume", "slider", ()),
    ("-", "", "", ()),
    ("Wired Connected", "network", "submenu", (("Turn Off", "none"), ("Wired Settings", "none"))),
    ("-", "", "", ()),
    ("Settings", "settings", "none", ()),
    ("Lock", "lock", "none", ()),
    (
        "Power Off / Log Out",
        "power",
        "submenu",
        (("Suspend", "none"), ("Restart…", "restart"), ("Power Off…", "power-off"), ("-", ""), ("Log Out", "log-out")),
    ),
)
#: GNOME's end-session dialogs (its ``endSessionDialog``): title, text, buttons. Here every button, Enter and
#: Escape only close the dialog: nothing ends the session, restarts or powers off (the desktop belongs to legato).
DIALOGS = {
    "power-off": (
        "Power Off",
        "The system will power off automatically in 60 seconds.",
        ("Cancel", "Restart", "Power Off"),
    ),
    "restart": ("Restart", "The system will restart automatically in 60 seconds.", ("Cancel", "Restart")),
    "log-out": ("Log Out", "user will be logged out automatically in 60 seconds.", ("Cancel", "Log Out")),
}


def wait_for_input(display: Any, files: list[Any], timeout: float) -> list[Any]:
    """Send what ``display`` holds, then sleep until the X server sends something, one of ``files`` can be read,
    or ``timeout`` passes; returns those of ``display`` (events to handle) and ``files`` that can be read.

    Returns at once when python-xlib already holds events: it reads whatever the server sent while it flushed
    (a redraw takes a while on a loaded machine) or waited for a reply into a queue of its own, which select()
    on the socket does not see. Sleeping then left those events (the click that comes right after a hover's
    motion) unhandled until the next event or the minute."""
    display.flush()
    if display.pending_events():
        return [display]
    readable, _, _ = select.select([display, *files], [], [], timeout)
    return list(readable)


#: A desktop file's Exec field codes (the files or URLs to open, the icon, ...): a launch with none leaves them out.
FIELD_CODE = re.compile(r"%[fFuUdDnNickvm]")
#: The most rows the dock's menu has room for (an app's windows are left out past it, its other rows never).
MENU_ROWS = 12
#: The setting the dock shows (GNOME Shell's favourites), read and written with ``gsettings`` as GNOME does.
FAVORITES = ("org.gnome.shell", "favorite-apps")


def desktop_file(desktop_id: str) -> Path | None:
    """Where the installed desktop file ``desktop_id`` (``org.gnome.Terminal``) is, found as GLib finds it: in the
    user's data folder first, then in each of ``XDG_DATA_DIRS``."""
    home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    dirs = os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    for folder in (home, *dirs.split(":")):
        path = Path(folder) / "applications" / f"{desktop_id}.desktop"
        if folder and path.is_file():
            return path
    return None


def exec_argv(line: str) -> list[str]:
    """A desktop file's Exec line as the program and its arguments, launched with no file (field codes left out)."""
    import shlex  # at a launch only: its import costs the idle panel memory

    try:
        words = shlex.split(line)
    except ValueError:
        return []
    argv = [FIELD_CODE.sub("", word).replace("%%", "%") for word in words if not FIELD_CODE.fullmatch(word)]
    return [word for word in argv if word]


#: One string of a GVariant string array as GLib prints it: quoted with ``'`` (or ``"`` when it holds a ``'``),
#: backslash escapes inside, then the array's next comma or its end.
_GVARIANT_STRING = re.compile(r"""\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*(,|\]\s*$)""", re.DOTALL)
_GVARIANT_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_GVARIANT_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "a": "\a"}


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        return chr(int(code[1:], 16)) if code[0] in "uU" and len(code) > 1 else _GVARIANT_ESCAPES.get(code, code)

    return _GVARIANT_ESCAPE.sub(one, text)


def parse_favorites(text: str) -> list[str] | None:
    """The desktop ids of a GVariant string array as ``gsettings`` prints it (``['a.desktop', 'b.desktop']``,
    ``@as []``); ``None`` when it is not one. (Parsed here: Python's ``ast`` would cost the panel 1 MiB.)"""
    text = text.strip()
    text = text[len("@as ") :] if text.startswith("@as ") else text
    if not text.startswith("["):
        return None
    if text[1:].strip() == "]":
        return []
    ids, at = [], 1
    while at < len(text):
        match = _GVARIANT_STRING.match(text, at)
        if match is None:
            return None
        single, double, end = match.groups()
        ids.append(_unescape(single if single is not None else double))
        at = match.end()
        if end != ",":
            return ids if at == len(text) else None
    return None


def format_favorites(ids: list[str]) -> str:
    """``ids`` as the GVariant string array ``gsettings set`` takes."""
    quoted = ("'" + item.replace("\\", "\\\\").replace("'", "\\'") + "'" for item in ids)
    return "[" + ", ".join(quoted) + "]" if ids else "@as []"


def desktop_groups(path: Path) -> dict[str, dict[str, str]]:
    """A desktop file's groups (``Desktop Entry``, ``Desktop Action new-window``), each its keys' values (the
    first of a key; ``Name[de]`` is a key of its own); none when it cannot be read."""
    groups: dict[str, dict[str, str]] = {}
    group: dict[str, str] = {}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            group = groups.setdefault(line[1:-1], {})
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            group.setdefault(key.strip(), value.strip())
    return groups


def desktop_actions(desktop_id: str) -> list[tuple[str, str, list[str]]]:
    """The desktop actions of the installed app ``desktop_id`` (its file's ``Actions=``, in that order), each as
    its id, its name and its Exec line's program and arguments, as GNOME's app menu lists them; none when the
    app has no desktop file here."""
    path = desktop_file(desktop_id)
    groups = desktop_groups(path) if path is not None else {}
    found = []
    for action in groups.get("Desktop Entry", {}).get("Actions", "").split(";"):
        fields = groups.get(f"Desktop Action {action}", {})
        argv = exec_argv(fields.get("Exec", ""))
        if action and fields.get("Name") and argv:
            found.append((action, fields["Name"], argv))
    return found


def _today() -> tuple[int, int, int]:
    now = time.localtime()
    return now.tm_year, now.tm_mon, now.tm_mday


def _month_later(date: tuple[int, int, int], step: int) -> tuple[int, int, int]:
    """``date`` ``step`` months later (earlier if negative), its day kept or the month's last, as GNOME's arrows."""
    year, month = divmod(date[0] * 12 + date[1] - 1 + step, 12)
    return year, month + 1, min(date[2], _days_in(year, month + 1))


def _days_in(year: int, month: int) -> int:
    """The number of days of ``month`` (1-12) in ``year``, Gregorian (as ``calendar.monthrange``, not imported:
    it costs the panel memory for one number)."""
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


#: GNOME 43's window picker (its ``workspace.js``): no preview is over 95 % of its window's size, and a window's
#: height over the screen's, h, gives it 1.5 - 0.5 h times the others' scale (small windows stay legible).
PREVIEW_MAX_SCALE = 0.95


def _window_scale(box: tuple[float, float, float, float], screen_height: int) -> float:
    return 1.5 - 0.5 * box[3] / screen_height


def _picker_rows(
    boxes: list[tuple[float, float, float, float]], count: int, screen_height: int
) -> list[tuple[list[int], float, float]]:
    """The windows in ``count`` rows as GNOME's unaligned layout fills them: top to bottom by their centres, a
    row taking windows while its width gets nearer the ideal (the total over ``count``), left to right in it.
    Each row: its windows' indices, its width and height at full size (each window at its own scale)."""
    scale = [_window_scale(box, screen_height) for box in boxes]
    ideal = sum(box[2] * s for box, s in zip(boxes, scale, strict=True)) / count
    order = sorted(range(len(boxes)), key=lambda i: boxes[i][1] + boxes[i][3] / 2)
    rows: list[tuple[list[int], float, float]] = []
    n = 0
    for r in range(count):
        members: list[int] = []
        width = height = 0.0
        while n < len(order):
            i = order[n]
            w, h = boxes[i][2] * scale[i], boxes[i][3] * scale[i]
            height = max(height, h)  # as GNOME's: the next row's first window counts here too
            nearer = abs(1 - (width + w) / ideal) < abs(1 - width / ideal)
            if width + w <= ideal or nearer or r == count - 1:
                members.append(i)
                width += w
                n += 1
            else:
                break
        members.sort(key=lambda i: boxes[i][0] + boxes[i][2] / 2)
        rows.append((members, width, height))
    return rows


def picker_slots(
    boxes: list[tuple[int, int, int, int]],
    work_area: tuple[int, int],
    area: tuple[int, int, int, int],
    screen_height: int,
    spacing: float,
) -> list[tuple[float, float, float, float]]:
    """Where GNOME 43's window picker puts windows of frames ``boxes`` (``x, y, width, height`` on the screen)
    in ``area`` (the workspace's card): each window's preview ``(x, y, width, height)``, in the order of
    ``boxes``.

    As its ``UnalignedLayoutStrategy``: one row, then one more while the rows' scale and filled space in the
    ``work_area`` (its width and height) get better (by GNOME's weights); that scale (at most 95 %) holds in
    ``area`` too, unless a row does not fit there; each row centred, one row's windows centred on its middle,
    several rows' on their bottom; ``spacing`` between windows and rows. Example: one window of half the work
    area's size, alone, is shown at 95 % of its size in the card's middle."""
    if not boxes:
        return []
    fboxes = [(float(x), float(y), float(w), float(h)) for x, y, w, h in boxes]
    ww, wh = work_area
    ax, ay, aw, ah = area
    best: tuple[list[tuple[list[int], float, float]], float] | None = None
    best_space = 0.0
    columns = -1
    for count in range(1, len(boxes) + 1):
        if -(-len(boxes) // count) == columns:
            break
        rows = _picker_rows(fboxes, count, screen_height)
        widest = max(rows, key=lambda row: row[1])
        grid_w, grid_h = widest[1], sum(row[2] for row in rows)
        h_spacing, v_spacing = (len(widest[0]) - 1) * spacing, (count - 1) * spacing
        scale = min((ww - h_spacing) / grid_w, (wh - v_spacing) / grid_h, PREVIEW_MAX_SCALE)
        space = (grid_w * scale + h_spacing) * (grid_h * scale + v_spacing) / (ww * wh)
        if best is not None:
            gain_scale, gain_space = scale - best[1], (space - best_space) * 0.1
            better = (
                (scale > best[1] and space > best_space)
                or (scale > best[1] and gain_scale > gain_space)
                or (scale <= best[1] and space > best_space and gain_space > gain_scale)
            )
            if not better:
                break
        best, best_space, columns = (rows, scale), space, -(-len(boxes) // count)
    assert best is not None
    rows, scale = best
    heights = [row[2] * scale for row in rows]
    v_spacing = (len(rows) - 1) * spacing
    fit_v = min(1.0, (ah - v_spacing) / sum(heights))
    placed: list[tuple[float, float, float, list[int]]] = []  # each row's x, y, extra scale, windows
    compensation, y = 0.0, 0.0
    for (members, width, _), height in zip(rows, heights, strict=True):
        h_spacing = (len(members) - 1) * spacing
        fit = min(fit_v, min(1.0, (aw - h_spacing) / (width * scale)))
        if fit < fit_v:
            compensation += (fit_v - fit) * height
        row_x = ax + max(aw - (width * scale * fit + h_spacing), 0) / 2
        placed.append((row_x, ay + max(ah - (sum(heights) + v_spacing), 0) / 2 + y, fit, members))
        y += height * fit + spacing
    slots: dict[int, tuple[float, float, float, float]] = {}
    for (row_x, row_y, fit, members), height in zip(placed, heights, strict=True):
        top, x = row_y + compensation / 2, row_x
        for i in members:
            s = scale * _window_scale(fboxes[i], screen_height) * fit
            cell_w, cell_h = fboxes[i][2] * s, fboxes[i][3] * s
            shown = min(s, PREVIEW_MAX_SCALE)
            w, h = fboxes[i][2] * shown, fboxes[i][3] * shown
            y_at = top + (height * fit - h) / 2 if len(rows) == 1 else top + height * fit - cell_h
            slots[i] = (float(math.floor(x + (cell_w - w) / 2)), float(math.floor(y_at)), w, h)
            x += cell_w + spacing
    return [slots[i] for i in range(len(boxes))]


def _give_back_memory() -> None:
    """Return the C library's free heap to the system (``malloc_trim``): the window picker's strips of pixels
    come and go in blocks the allocator would otherwise keep, a few MiB of the panel's PSS after some opens."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not glibc
        ctypes.CDLL(None).malloc_trim(0)


def _matches(patterns: list[str], names: tuple[str, ...]) -> bool:
    for pattern in patterns:
        for name in names:
            if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                return True
    return False


def _styled(style: str, state: str) -> str:
    """The glyphs (or colour) of ``style`` on a bar's button in ``state`` (``""``, ``"lit"``, ``"hover"``)."""
    return f"{style}_{state}" if state else style


class Panel:
    """The top bar, the dock, the overview and the launcher menus of one desktop (see the module's text)."""

    def __init__(self, folder: Path, marker: Path) -> None:
        self.folder = folder
        self.marker = marker
        self.m: dict[str, Any] = json.loads((folder / "panel.json").read_text())
        self.d = xdisplay.Display()
        self.d.set_error_handler(lambda *args: None)  # windows gone between a listing and a query
        screen = self.d.screen()
        self.root = screen.root
        self.depth = screen.root_depth
        geometry = self.root.get_geometry()
        self.width, self.height = geometry.width, geometry.height
        self.bar_h = int(self.m["bar_height"])
        self.dock_w = int(self.m["dock_width"])
        self.gc = self.root.create_gc(graphics_exposures=False)  # no NoExpose event per copy
        self.atoms = {name: self.d.intern_atom(name) for name in (*WATCHED, *WINDOW_ATOMS)}
        self.pixmaps = {name: self._load(name, *spec) for name, spec in self.m["images"].items()}
        self.colours = {name: self._pixel(rgb) for name, rgb in self.m["colours"].items()}
        self.dock_m: dict[str, Any] = self.m["dock"]
        self.known = {app["id"]: app for app in self.dock_m["apps"]}
        self.launchers: list[dict[str, Any]] = []  # what the dock shows, top to bottom, with each one's y
        self.running: list[int] = []  # its windows, per launcher
        self.dock_shown: Any = None
        self.icon_mask = self._load_mask()
        self.active_name = ""
        self.query = ""
        self.overview_tiles: list[tuple[int, int, int]] = []
        self.menu_items: list[tuple[str, Any]] = []
        self.super_code = self.d.keysym_to_keycode(XK.XK_Super_L)
        # the wallpaper is the root window's background, painted by the host and kept by the X server across
        # resets (:func:`.lookalike.wallpaper`); a window under all others that draws nothing takes the clicks on it
        self.desktop = self.root.create_window(
            0, 0, self.width, self.height, 0, 0, X.InputOnly, X.CopyFromParent,
            override_redirect=True, event_mask=X.ButtonPressMask,
        )  # fmt: skip
        self.bar_pixmap = self._copy_of("bar", self.width, self.bar_h)
        self.dock_pixmap = self._copy_of("dock", self.dock_w, self.height - self.bar_h)
        self.bar = self._panel_window(0, 0, self.width, self.bar_h, self.bar_pixmap)
        self.dock = self._panel_window(0, self.bar_h, self.dock_w, self.height - self.bar_h, self.dock_pixmap)
        # the bar's buttons light under the pointer: the bar follows it
        self.bar.change_attributes(
            event_mask=X.ButtonPressMask | X.PointerMotionMask | X.EnterWindowMask | X.LeaveWindowMask
        )
        self.overview_open = False
        self.overview_mode = "windows"  # the window picker; "apps": the app grid (Show Applications)
        #: the picker's previews while it is shown: where each is, its window, its pixmap (the X server's memory)
        self.previews: list[tuple[tuple[int, int, int, int], int, Any]] = []
        self.overview_pixmap: Any = None  # while the overview is shown (a screen's worth of the X server's memory)
        self.overview = self._popup(self.dock_w, self.bar_h, self.width - self.dock_w, self.height - self.bar_h)
        self.overview.change_attributes(
            event_mask=X.ButtonPressMask | X.KeyPressMask | X.KeyReleaseMask | X.PointerMotionMask
        )
        self.hovered = -1  # the window picker's preview under the pointer (its caption shown)
        self.menu = self._popup(0, 0, MENU_WIDTH, MENU_ROW)
        self.menu_pixmap = self.root.create_pixmap(MENU_WIDTH, MENU_ROW * MENU_ROWS + 12, self.depth)
        self.menu.change_attributes(background_pixmap=self.menu_pixmap)
        self.clock_minute = -1
        #: notifications not seen yet: Ubuntu's bell right of the clock says so. The VM's snapshot, which OSWorld
        #: reverts to before every task, has some; opening the date menu marks them seen, as GNOME's does (each
        #: reset starts a new panel: the bell is back)
        self.unseen = True
        self.clock_span = (self.width, 0)  # the date menu's button on the bar, once the clock is drawn
        self.active_wid = 0
        self.active_classes: tuple[str, ...] = ()
        # the top bar's menus and the end-session dialog: one window, its picture drawn when it opens
        self.popover = self._popup(0, 0, MENU_WIDTH, MENU_ROW)
        self.popover_pixmap: Any = None
        self.popover_kind = ""  # "app", "calendar", "system" or "dialog:<kind>" while one is open
        self.popover_size = (0, 0)
        self.rows: list[dict[str, Any]] = []  # the open menu's rows, with their y and height
        self.focus = -1  # the row the keyboard is on
        self.expanded = ""  # the system menu's open submenu
        self.lit = ""  # the top bar's button whose menu is open
        self.hover = ""  # the top bar's button under the pointer
        self.month_shown = 0  # the date menu's month, from today's
        self.selected: tuple[int, int, int] | None = None  # the date menu's selected day (None: today)
        self.do_not_disturb = False
        #: the system menu's volume (percent): the sound server's, read with pactl when the menu opens and set
        #: with it when the slider is let go, where PulseAudio is installed (the desktop's apps start it on
        #: demand); else only the slider's
        self.volume = int(self.m.get("volume", 50))
        self.pactl = shutil.which("pactl")
        self.volume_reader: subprocess.Popen[bytes] | None = None
        self.volume_answer = b""
        self.exited: list[subprocess.Popen[bytes]] = []  # pactl that answered, to reap
        self.sliding = False  # the slider's knob is held
        self.volume_moved = False  # by the pointer, since the menu opened (a late reading leaves it)
        self.has_shape = self.d.has_extension("SHAPE")
        #: the favourites the dock shows, as the session's dconf holds them; ``gsettings monitor`` says each change
        self.gsettings = shutil.which("gsettings")
        self.favorites: list[str] = self._read_favorites()
        self.favorites_monitor = self._watch_favorites()
        self.monitor_answer = b""
        # new top-level windows (CreateNotify): those of the apps that open maximized are maximized once mapped
        self.root.change_attributes(event_mask=X.PropertyChangeMask | X.SubstructureNotifyMask)
        self.maximized = [str(p).lower() for p, how in self.m.get("windows", {}).items() if how == "maximized"]
        self.fresh: set[int] = set()  # windows created and not mapped yet, of the apps (not override-redirect)
        #: each frame's title bar (xfwm4's title window, and the blank button left of it) to its client: a
        #: right-click there opens the window menu (:meth:`_grab_title`)
        self.titles: dict[int, int] = {}
        self.frames: dict[int, int] = {}  # each frame so watched to its client
        #: the window manager's check window the panel asked for frame extents on :attr:`probe`, and the one it has
        #: given a time after its start-up focus (:meth:`_wm_clock_set`)
        self.wm_asked = 0
        self.wm_clock = 0
        self.probe = self.root.create_window(
            -1, -1, 1, 1, 0, self.depth, override_redirect=True, event_mask=X.PropertyChangeMask
        )  # never mapped
        self.menu_client = 0  # the window whose window menu is open
        self.menu_at = (0, 0)  # where it opened (the pointer, or the window's corner for alt+space)
        self.last_press = (0, 0)  # the time and the client of the last press on a title bar's blank button
        #: where the blank button is held, its client and the frame's corner then; whether it is being dragged
        self.pressed: tuple[int, int, int, int, int] | None = None
        self.dragging = False
        self.screenshot_due: tuple[float, int] | None = None  # when to take Take Screenshot's, and of which window
        self.pressed_row: dict[str, Any] | None = None  # the window menu's row pressed, acted on when released
        self.root.grab_key(self.super_code, X.AnyModifier, False, X.GrabModeAsync, X.GrabModeAsync)
        # ctrl+alt+t opens the terminal, as the VM's settings daemon does (the window manager runs no programs)
        self.terminal: list[str] = list(self.m.get("terminal") or [])
        self.terminal_code = self.d.keysym_to_keycode(XK.XK_t)
        if self.terminal:
            for extra in (0, X.LockMask, X.Mod2Mask, X.LockMask | X.Mod2Mask):  # Caps Lock, Num Lock
                self.root.grab_key(
                    self.terminal_code, X.ControlMask | X.Mod1Mask | extra, False, X.GrabModeAsync, X.GrabModeAsync
                )
        # alt+space opens the focused window's menu, as mutter's activate-window-menu
        self.space_code = self.d.keysym_to_keycode(XK.XK_space)
        for extra in (0, X.LockMask, X.Mod2Mask, X.LockMask | X.Mod2Mask):
            self.root.grab_key(self.space_code, X.Mod1Mask | extra, False, X.GrabModeAsync, X.GrabModeAsync)
        self.desktop.map()
        self.bar.map()
        self.dock.map()
        self._restack()
        self._dock()
        self._app_name()
        self._clock()
        self.d.flush()

    # drawing helpers

    def _pixel(self, rgb: list[int]) -> int:
        return (int(rgb[0]) << 16) | (int(rgb[1]) << 8) | int(rgb[2])

    def _load(self, name: str, width: int, height: int, file: str) -> Any:
        """A server-side pixmap of picture ``name``, sent in strips under the core protocol's request size.

        The picture's pixels are freed once sent (a screen's worth is one allocation, which goes back to the
        system): the panel's memory stays that of python-xlib."""
        pixmap = self.root.create_pixmap(width, height, self.depth)
        stride = width * 4
        rows = max(1, 200_000 // stride)
        data = zlib.decompress((self.folder / file).read_bytes())
        for top in range(0, height, rows):
            count = min(rows, height - top)
            chunk = data[top * stride : (top + count) * stride]
            pixmap.put_image(self.gc, 0, top, width, count, X.ZPixmap, self.depth, 0, chunk)
        del data
        self.d.flush()
        return pixmap

    def _load_mask(self) -> Any:
        """The dock icons' mask (:func:`.lookalike._dock_icons`) as a depth-1 pixmap, its bits in the X server's
        order; ``None`` without one (the icons are then copied whole)."""
        width, height = self.m["images"]["dock_icons"][:2]
        try:
            data = zlib.decompress((self.folder / self.dock_m["mask"]).read_bytes())
        except (OSError, zlib.error):
            return None
        if self.d.display.info.bitmap_format_bit_order != X.LSBFirst:
            data = data.translate(bytes(int(f"{b:08b}"[::-1], 2) for b in range(256)))
        mask = self.root.create_pixmap(width, height, 1)
        gc = mask.create_gc(foreground=1, background=0)
        mask.put_image(gc, 0, 0, width, height, X.ZPixmap, 1, 0, data)
        gc.free()
        return mask

    def _copy_of(self, name: str, width: int, height: int) -> Any:
        pixmap = self.root.create_pixmap(width, height, self.depth)
        pixmap.copy_area(self.gc, self.pixmaps[name], 0, 0, width, height, 0, 0)
        return pixmap

    def _text(self, target: Any, style: str, text: str, x: int, y: int) -> int:
        """Copy ``text``'s glyphs of ``style`` onto ``target`` from ``x``; returns the x after it.

        Right to left: a glyph's ink right of its advance (an "f"'s hook) is copied after the next glyph's cell,
        over its side bearing, rather than cut off by it."""
        table = self.m["glyphs"][style]
        strip = self.pixmaps[f"glyphs_{style}"]
        placed = []
        for char in text:
            offset, advance, ink = table["chars"].get(char, table["chars"]["?"])
            placed.append((x, offset, ink))
            x += advance
        for at, offset, ink in reversed(placed):
            if ink:
                target.copy_area(self.gc, strip, offset, 0, ink, table["height"], at, y)
        return x

    def _text_width(self, style: str, text: str) -> int:
        chars = self.m["glyphs"][style]["chars"]
        return sum(chars.get(c, chars["?"])[1] for c in text)

    def _fill(self, target: Any, colour: str, x: int, y: int, width: int, height: int) -> None:
        self.gc.change(foreground=self.colours[colour])
        target.fill_rectangle(self.gc, x, y, width, height)

    # windows

    def _panel_window(self, x: int, y: int, width: int, height: int, pixmap: Any) -> Any:
        """A window of the shell's own, as GNOME Shell's are: not managed by the window manager, so in no
        window list (``wmctrl -l``, ``_NET_CLIENT_LIST``), its background a pre-drawn picture."""
        return self.root.create_window(
            x,
            y,
            width,
            height,
            0,
            self.depth,
            X.InputOutput,
            X.CopyFromParent,
            background_pixmap=pixmap,
            override_redirect=True,
            event_mask=X.ButtonPressMask,
        )

    def _popup(self, x: int, y: int, width: int, height: int) -> Any:
        return self.root.create_window(
            x,
            y,
            width,
            height,
            0,
            self.depth,
            X.InputOutput,
            X.CopyFromParent,
            override_redirect=True,
            event_mask=X.ButtonPressMask | X.KeyPressMask | X.KeyReleaseMask,
        )

    def _restack(self) -> None:
        """The wallpaper under every window, the bar and the dock over them (and the overview, a menu over
        those), again after each restack of the window manager's (it stacks only the windows it manages)."""
        self.desktop.configure(stack_mode=X.Below)
        for window in (self.bar, self.dock, self.overview, self.menu, self.popover):
            window.configure(stack_mode=X.Above)

    # what the panel shows

    def _window_classes(self, wid: int) -> tuple[str, ...]:
        try:
            window = self.d.create_resource_object("window", wid)
            cls = window.get_wm_class()
        except xerror.XError:
            return ()
        return tuple(part.lower() for part in cls) if cls else ()

    def _clients(self) -> list[int]:
        prop = self.root.get_full_property(self.atoms["_NET_CLIENT_LIST"], X.AnyPropertyType)
        own = {self.bar.id, self.dock.id, self.desktop.id}
        return [wid for wid in (prop.value if prop is not None else []) if wid not in own]

    # the dock: the favourites, the running apps that are not, Trash

    def _read_favorites(self) -> list[str]:
        """The favourites as ``gsettings get`` says them, else (no ``gsettings``, no schema) the VM's."""
        default = list(self.dock_m["favorites"])
        if self.gsettings is None:
            return default
        try:
            proc = subprocess.run(
                [self.gsettings, "get", *FAVORITES], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            warn(f"could not read the favourites: {exc}")
            return default
        found = parse_favorites(proc.stdout) if proc.returncode == 0 else None
        return default if found is None else found

    def _watch_favorites(self) -> subprocess.Popen[bytes] | None:
        """``gsettings monitor`` of the favourites: it sleeps until dconf says the setting changed (its signal on
        the session bus, as GNOME Shell's settings hear it) and prints the new value; it ends with the panel."""
        if self.gsettings is None:
            return None

        def end_with_the_panel() -> None:  # PR_SET_PDEATHSIG: SIGTERM once the panel is gone
            ctypes.CDLL(None, use_errno=True).prctl(1, 15, 0, 0, 0)

        try:
            return subprocess.Popen(
                [self.gsettings, "monitor", *FAVORITES],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                preexec_fn=end_with_the_panel,  # safe: the panel has no threads
            )
        except OSError as exc:
            warn(f"could not watch the favourites: {exc}")
            return None

    def _favorites_said(self) -> None:
        """Take ``gsettings monitor``'s lines (``favorite-apps: [...]``): the dock shows the last one."""
        monitor = self.favorites_monitor
        assert monitor is not None and monitor.stdout is not None
        chunk = os.read(monitor.stdout.fileno(), 65536)
        if not chunk:  # it ended: the dock keeps what it shows
            monitor.stdout.close()
            self.exited.append(monitor)
            self.favorites_monitor = None
            return
        self.monitor_answer += chunk
        *lines, self.monitor_answer = self.monitor_answer.split(b"\n")
        for line in lines:
            _, _, value = line.decode(errors="replace").partition(":")
            found = parse_favorites(value)
            if found is not None:
                self.favorites = found
        self._dock()

    def _set_favorites(self, ids: list[str]) -> None:
        """Write the favourites with ``gsettings set``, inside the sandbox, as GNOME's Pin and Unpin do; the dock
        shows them at once (the monitor then says the same)."""
        self.favorites = ids
        if self.gsettings is not None:
            self._launch([self.gsettings, "set", *FAVORITES, format_favorites(ids)])
        self._dock()

    def _favourite(self, desktop_id: str) -> dict[str, Any] | None:
        """The app of the favourite ``desktop_id`` (``vim.desktop``): one the host drew, else one whose desktop
        file the sandbox has (the generic icon); ``None`` for neither, which GNOME's dash leaves out too."""
        key = desktop_id.removesuffix(".desktop")
        if key in self.known:
            return dict(self.known[key])
        path = desktop_file(key) if key and "/" not in key else None
        entry = desktop_groups(path).get("Desktop Entry", {}) if path is not None else {}
        if not entry or entry.get("Hidden") == "true":
            return None
        wm_class = (entry.get("StartupWMClass") or key).lower()
        command = exec_argv(entry.get("Exec", ""))
        if command and entry.get("Terminal") == "true":  # in a terminal, as the host's desktop files' apps
            terminal = shutil.which("gnome-terminal")
            command = [terminal, "--", *command] if terminal else ["xterm", "-e", *command]
        return {"name": entry.get("Name") or key, "id": key, "command": command, "classes": [wm_class], "icon": 0}

    def _fits(self, favourites: int) -> int:
        """How many launchers the dock has room for above Show Applications, after ``favourites`` favourites."""
        half, n = int(self.m["cell"]) // 2, 0
        while self._centre(n, favourites) + half <= int(self.m["show_apps"]) - half:
            n += 1
        return n

    def _centre(self, index: int, favourites: int) -> int:
        """The y of launcher ``index``'s centre (:meth:`.lookalike.Layout.launcher_centre`)."""
        gap = 0 if index < favourites or not favourites else int(self.dock_m["gap"])
        return int(self.dock_m["first_centre"]) + int(self.m["cell"]) * index + gap

    def _dock(self) -> None:
        """The dock as the Ubuntu dock's: the favourites whose app is known, then, after a separator, the running
        apps that are not favourites (in the order their first windows came) and Trash, each with a dot per window
        of its app at its left (at most four). Redrawn only when what it shows changes."""
        launchers = [dict(app, favourite=True) for f in self.favorites if (app := self._favourite(f)) is not None]
        favourites = len(launchers)
        counts = [0] * favourites
        for wid in self._clients():
            names = self._window_classes(wid)
            if not names:
                continue
            hit = next((i for i, app in enumerate(launchers) if _matches(app["classes"], names)), -1)
            if hit == -1:
                known = next((app for app in self.dock_m["apps"] if _matches(app["classes"], names)), None)
                app = known or {
                    "name": self._name_of(names),
                    "id": "",
                    "command": [],
                    "classes": [names[-1]],
                    "icon": 0,
                }
                launchers.append(dict(app, favourite=False))
                counts.append(0)
                hit = len(launchers) - 1
            counts[hit] += 1
        room = self._fits(favourites) - 1
        launchers = [*launchers[:room], dict(self.dock_m["trash"], favourite=False)]
        counts = [*counts[:room], 0]
        favourites = min(favourites, room)
        for i, launcher in enumerate(launchers):
            launcher["y"] = self._centre(i, favourites)
        shown = ([(app["id"], app["icon"], app["classes"]) for app in launchers], counts, favourites)
        self.launchers, self.running = launchers, counts
        if shown == self.dock_shown:
            return
        self.dock_shown = shown
        height, size = self.height - self.bar_h, int(self.dock_m["icon"])
        self.dock_pixmap.copy_area(self.gc, self.pixmaps["dock"], 0, 0, self.dock_w, height, 0, 0)
        x = self.dock_w // 2 - size // 2
        for launcher in launchers:
            y, source = launcher["y"] - self.bar_h - size // 2, launcher["icon"] * size
            if self.icon_mask is not None:  # the band shows around the icon
                self.gc.change(clip_mask=self.icon_mask, clip_x_origin=x - source, clip_y_origin=y)
            self.dock_pixmap.copy_area(self.gc, self.pixmaps["dock_icons"], source, 0, size, size, x, y)
            self.gc.change(clip_mask=X.NONE)
        if favourites:  # the separator between the favourites and the rest
            cell = int(self.m["cell"])
            y = self._centre(favourites, favourites) - cell // 2 - cell // 8 - self.bar_h
            self.gc.change(foreground=self._pixel(self.dock_m["separator"]))
            self.dock_pixmap.fill_rectangle(self.gc, 14, y, self.dock_w - 28, 1)
        self.gc.change(foreground=self.colours["dot"])
        for launcher, count in zip(launchers, counts, strict=True):
            shown_dots = min(count, MAX_DOTS)
            for j in range(shown_dots):
                centre = launcher["y"] - self.bar_h + round((j - (shown_dots - 1) / 2) * 9)
                self.dock_pixmap.fill_arc(self.gc, 1, centre - 3, 7, 7, 0, 360 * 64)
        self.dock.clear_area(0, 0, self.dock_w, height)

    def _name_of(self, names: tuple[str, ...]) -> str:
        for launcher in self.dock_m["apps"]:
            if _matches(launcher["classes"], names):
                return str(launcher["name"])
        for name in names:
            if name in self.m["names"]:
                return str(self.m["names"][name])
        return names[-1].capitalize() if names else ""

    def _app_name(self) -> None:
        """The focused window's app, after Activities, as GNOME's top bar names it."""
        prop = self.root.get_full_property(self.atoms["_NET_ACTIVE_WINDOW"], X.AnyPropertyType)
        wid = prop.value[0] if prop is not None and len(prop.value) else 0
        name = (
            self._name_of(self._window_classes(wid))
            if wid and wid not in (self.bar.id, self.dock.id, self.desktop.id)
            else ""
        )
        self.active_wid = wid if name else 0
        self.active_classes = self._window_classes(wid) if name else ()
        if name == self.active_name:
            return
        self.active_name = name
        self._paint_app_name()

    def _paint_app_name(self) -> None:
        """Draw the app's icon and name on the bar, on its button's lit pill while the app menu is open."""
        x, icon_x = int(self.m["app_name_x"]), int(self.m["app_icon_x"])
        left = int(self.m["activities"][1])  # its button: from Activities' on, the icon, the name and 12 px
        room = self.width // 2 - 120 - left
        self.bar_pixmap.copy_area(self.gc, self.pixmaps["bar"], left, 0, room, self.bar_h, left, 0)
        state = self._state("app") if self.active_name else ""
        if state:  # inside the button's 3 px border
            self._pill(left + 3, x - left + self._text_width("bar", self.active_name) + 6, state)
        if self.active_name:
            icons = self.m["app_icons"]
            size, place = int(icons["size"]), int(icons["index"].get(self.active_name, 0))
            strip = self.pixmaps[_styled("app_icons", state)]
            self.bar_pixmap.copy_area(self.gc, strip, place * size, 0, size, size, icon_x, int(icons["y"]))
        self._text(self.bar_pixmap, _styled("bar", state), self.active_name, x, int(self.m["text_y"]))
        self.bar.clear_area(left, 0, room, self.bar_h)

    def _paint_activities(self) -> None:
        """Activities, on its pill while the overview is open (GNOME's ``:overview``) or under the pointer."""
        start, end = self.m["activities"]
        self.bar_pixmap.copy_area(self.gc, self.pixmaps["bar"], start, 0, end - start, self.bar_h, start, 0)
        state = self._state("activities")
        if state:  # the label's 12 px each side, as the other buttons' pills
            x = int(self.m["activities_x"])
            self._pill(x - 12, self._text_width("bar", "Activities") + 24, state)
            self._text(self.bar_pixmap, _styled("bar", state), "Activities", x, int(self.m["text_y"]))
        self.bar.clear_area(start, 0, end - start, self.bar_h)

    def _state(self, item: str) -> str:
        """How the bar's button ``item`` is drawn: ``"lit"`` while its menu (Activities: the overview) is open,
        ``"hover"`` under the pointer, else ``""``."""
        if item and (item == self.lit or (item == "activities" and self.overview_open)):
            return "lit"
        return "hover" if item and item == self.hover else ""

    def _pill(self, x: int, width: int, state: str) -> None:
        """A button's pill on the bar in ``state``'s colour (GNOME's ``.panel-button`` checked or hovered: round
        ends inside a 3 px border)."""
        height = self.bar_h - 6
        self.gc.change(foreground=self.colours[_styled("bar", state)])
        for left in (x, x + width - height):
            self.bar_pixmap.fill_arc(self.gc, left, 3, height, height, 0, 360 * 64)
        self.bar_pixmap.fill_rectangle(self.gc, x + height // 2, 3, width - height, height)

    def _paint_status(self) -> None:
        """The status icons, on their button's lit pill while the system menu is open."""
        width = self.m["images"]["status_lit"][0]
        state = self._state("system")
        source = (self.pixmaps[f"status_{state}"], 0) if state else (self.pixmaps["bar"], self.width - width)
        self.bar_pixmap.copy_area(self.gc, source[0], source[1], 0, width, self.bar_h, self.width - width, 0)
        self.bar.clear_area(self.width - width, 0, width, self.bar_h)

    def _light(self, item: str) -> None:
        """Light the top bar's button ``item`` while its menu is open (``""``: none), as GNOME's."""
        self._mark("lit", item)

    def _hover(self, item: str) -> None:
        """Light the top bar's button ``item`` under the pointer (``""``: none), as GNOME's ``:hover``."""
        self._mark("hover", item)

    def _mark(self, which: str, item: str) -> None:
        """Move the ``lit`` or ``hover`` mark to ``item``, repainting the button it leaves and the one it takes."""
        before = getattr(self, which)
        if item == before:
            return
        setattr(self, which, item)
        for button in (before, item):
            self._repaint(button)

    def _repaint(self, item: str) -> None:
        if item == "activities":
            self._paint_activities()
        elif item == "app":
            self._paint_app_name()
        elif item == "calendar":
            self._clock()
        elif item == "system":
            self._paint_status()

    def _date_button(self, label: int) -> tuple[int, int, int]:
        """The date menu's button for a clock label ``label`` px wide, as GNOME lays it out: the label's x and the
        button's left and right ends (its 12 px of padding each side).

        GNOME centres the button on the work area (right of the dock: x 995 at 1920 px), and while notifications
        are unseen puts their bell right of the label and a pad as wide left of it: the label stays where it is
        when the bell goes, the button narrows about it."""
        x = (self.width + self.dock_w - label + 1) // 2
        size, gap, _ = self.m["clock"]["indicator"]
        side = 12 + (gap + size if self.unseen or self.do_not_disturb else 0)
        return x, x - side, x + label + side

    def _clock(self) -> None:
        """The clock, ``Mar 22  21:58`` as GNOME shows it with the date (an en space before the time), and the bell
        of unseen notifications right of it (Do Not Disturb's struck-through one while that is on), on the date
        menu's button (:meth:`_date_button`)."""
        now = time.localtime()
        self.clock_minute = now.tm_min
        date, hour = f"{time.strftime('%b', now)} {now.tm_mday}", f"{now.tm_hour:02d}:{now.tm_min:02d}"
        gap, y = int(self.m["clock"]["gap"]), int(self.m["text_y"])
        label = self._text_width("bar", date) + gap + self._text_width("bar", hour)
        x, left, right = self._date_button(label)
        x0, x1 = min(left, self.clock_span[0]), max(right, self.clock_span[1])  # the button as it was, too
        self.clock_span = (left, right)
        self.bar_pixmap.copy_area(self.gc, self.pixmaps["bar"], x0, 0, x1 - x0, self.bar_h, x0, 0)
        state = self._state("calendar")
        if state:  # its menu open or under the pointer: the button's pill
            self._pill(left, right - left, state)
        style = _styled("bar", state)
        self._text(self.bar_pixmap, style, hour, self._text(self.bar_pixmap, style, date, x, y) + gap, y)
        if self.unseen or self.do_not_disturb:  # Do Not Disturb's struck-through bell while it is on, as GNOME 42's
            size, space, top = self.m["clock"]["indicator"]
            bell = self.pixmaps[_styled("indicator_off" if self.do_not_disturb else "indicator", state)]
            self.bar_pixmap.copy_area(self.gc, bell, 0, 0, size, size, x + label + space, top)
        self.bar.clear_area(x0, 0, x1 - x0, self.bar_h)

    # the overview: Activities and Super show the window picker (the open windows, scaled down, over the
    # workspace); typing, or Show Applications, the app grid and its search

    def _matching_apps(self) -> list[int]:
        query = self.query.lower()
        return [
            i
            for i, app in enumerate(self.m["apps"])
            if not query or query in app["name"].lower() or (app["command"] and query in app["command"][0].lower())
        ]

    def _draw_search(self, width: int, y: int) -> None:
        sx = (width - SEARCH[0]) // 2
        self.gc.change(foreground=self.colours["search"])
        for left in (sx, sx + SEARCH[0] - SEARCH[1]):
            self.overview_pixmap.fill_arc(self.gc, left, y, SEARCH[1], SEARCH[1], 0, 360 * 64)
        self.overview_pixmap.fill_rectangle(self.gc, sx + SEARCH[1] // 2, y, SEARCH[0] - SEARCH[1], SEARCH[1])
        text_y = y + (SEARCH[1] - self.m["glyphs"]["search"]["height"]) // 2
        if self.query:
            self._text(self.overview_pixmap, "search", self.query, sx + 14, text_y)
        else:
            self._text(self.overview_pixmap, "hint", "Type to search", sx + 14, text_y)

    def _draw_overview(self) -> None:
        width, height = self.width - self.dock_w, self.height - self.bar_h
        if self.overview_mode == "windows" and not self.query:
            self._draw_picker()
            self.overview.clear_area(0, 0, width, height)
            return
        self._fill(self.overview_pixmap, "overview", 0, 0, width, height)
        self._draw_search(width, 24)
        tile_w, tile_h = self.m["tile"]["width"], self.m["tile"]["height"]
        shown = self._matching_apps()
        columns = max(1, min(8, (width - 80) // tile_w))
        left = (width - min(columns, max(1, len(shown))) * tile_w) // 2
        self.overview_tiles = []
        for n, app in enumerate(shown):
            x, y = left + (n % columns) * tile_w, 100 + (n // columns) * tile_h
            if y + tile_h > height:
                break
            self.overview_pixmap.copy_area(self.gc, self.pixmaps["tiles"], app * tile_w, 0, tile_w, tile_h, x, y)
            self.overview_tiles.append((x, y, app))
        self.overview.clear_area(0, 0, width, height)

    def _draw_picker(self) -> None:
        """The window picker: the workspace (the wallpaper's card, pre-drawn), the search entry over it, and each
        captured window's preview where GNOME's layout puts it."""
        picker = self.m["picker"]
        width, height, file = picker["background"]
        self._put_compressed(self.overview_pixmap, self.folder / file, width, height)
        self._draw_search(width, int(picker["search_y"]))
        icons_w, size, icons_file = picker["icons"]
        icons = zlib.decompress((self.folder / icons_file).read_bytes())
        for n, ((x, y, w, h), wid, pixmap) in enumerate(self.previews):
            self.overview_pixmap.copy_area(self.gc, pixmap, 0, 0, w, h, x, y)
            self._draw_icon(icons, icons_w, size, self._icon_of(wid), x + (w - size) // 2, y + h - size * 7 // 10)
            if n == self.hovered:
                self._draw_caption(self._title_of(wid), x + w // 2, y + h + size * 3 // 10 + 6, w)

    def _title_of(self, wid: int) -> str:
        """Window ``wid``'s title (``_NET_WM_NAME``, else ``WM_NAME``), as GNOME's caption and dock menu show it."""
        try:
            window = self.d.create_resource_object("window", wid)
            name = window.get_full_property(self.d.intern_atom("_NET_WM_NAME"), X.AnyPropertyType)
            if name is not None and name.value:
                value = name.value
                return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            return str(window.get_wm_name() or "")
        except xerror.XError:
            return ""

    def _draw_caption(self, title: str, centre: int, top: int, room: int) -> None:
        """The title caption (Yaru's ``.window-caption``: a pill in a 1 px border) centred on ``centre`` from
        ``top``, at most ``room`` wide, the title cut with an ellipsis to fit."""
        title = self._fit("caption", title, max(room, 40) - 26)
        height = self.m["glyphs"]["caption"]["height"] + 14
        width = self._text_width("caption", title) + 26
        x = centre - width // 2
        for colour, inset in (("caption_border", 0), ("caption", 1)):
            self.gc.change(foreground=self.colours[colour])
            d = height - 2 * inset
            for left in (x + inset, x + width - inset - d):
                self.overview_pixmap.fill_arc(self.gc, left, top + inset, d, d, 0, 360 * 64)
            self.overview_pixmap.fill_rectangle(self.gc, x + height // 2, top + inset, width - height, d)
        self._text(self.overview_pixmap, "caption", title, x + 13, top + 7)

    def _overview_motion(self, event: Any) -> None:
        """The window picker's caption follows the pointer, from preview to preview, as GNOME's overlay."""
        if self.overview_mode != "windows" or self.query:
            return
        under = next(
            (
                n
                for n, ((x, y, w, h), _, _) in enumerate(self.previews)
                if x <= event.event_x < x + w and y <= event.event_y < y + h
            ),
            -1,
        )
        if under != self.hovered:
            self.hovered = under
            self._draw_overview()

    def _icon_of(self, wid: int) -> int:
        """Which of the picker's icons is the app's of window ``wid`` (the last: none of them)."""
        names = self._window_classes(wid)
        table = self.m["picker"]["icon_classes"]
        return next((i for i, classes in enumerate(table) if names and _matches(classes, names)), len(table))

    def _draw_icon(self, icons: bytes, icons_w: int, size: int, index: int, x: int, y: int) -> None:
        """Blend icon ``index`` of the strip ``icons`` (BGRA rows) over the overview at ``(x, y)`` by its alpha:
        what is there is read back from the X server, mixed here and sent again (a few thousand pixels)."""
        x0, y0 = max(0, x), max(0, y)
        x1 = min(self.width - self.dock_w, x + size)
        y1 = min(self.height - self.bar_h, y + size)
        if x1 <= x0 or y1 <= y0:
            return
        w = x1 - x0
        under = bytearray(self.overview_pixmap.get_image(x0, y0, w, y1 - y0, X.ZPixmap, 0xFFFFFFFF).data)
        for row in range(y1 - y0):
            source = ((y0 - y + row) * icons_w + index * size + x0 - x) * 4
            target = row * w * 4
            for n in range(0, w * 4, 4):
                alpha = icons[source + n + 3]
                if alpha:
                    for c in range(3):
                        at = target + n + c
                        under[at] = (icons[source + n + c] * alpha + under[at] * (255 - alpha)) // 255
        self.overview_pixmap.put_image(self.gc, x0, y0, w, y1 - y0, X.ZPixmap, self.depth, 0, bytes(under))

    def _put_compressed(self, target: Any, path: Path, width: int, height: int) -> None:
        """Send the picture in ``path`` (zlib-compressed ZPixmap rows) onto ``target``, a strip at a time as it is
        decompressed, each sent before the next: the panel never holds the whole picture (a screen's worth, which
        the C library keeps for the process once freed: it raises its threshold for giving blocks back)."""
        stream = zlib.decompressobj()
        tail = path.read_bytes()
        stride = width * 4
        rows = max(1, 200_000 // stride)
        for y in range(0, height, rows):
            count = min(rows, height - y)
            chunk = b""
            while len(chunk) < count * stride:
                more = stream.decompress(tail, count * stride - len(chunk))
                tail = stream.unconsumed_tail
                if not more:
                    return
                chunk += more
            target.put_image(self.gc, 0, y, width, count, X.ZPixmap, self.depth, 0, chunk)
            self.d.flush()  # python-xlib would hold every strip until the next flush

    def _frame(self, wid: int) -> tuple[int, int, int, int] | None:
        """The on-screen box ``(x, y, width, height)`` of client ``wid``'s frame (its ancestor under the root),
        clipped to the screen; None when it is not shown (minimized, on no screen, gone)."""
        try:
            window = self.d.create_resource_object("window", wid)
            if window.get_attributes().map_state != X.IsViewable:
                return None
            top = window
            while True:
                parent = top.query_tree().parent
                if parent.id == self.root.id:
                    break
                top = parent
            geometry = top.get_geometry()
        except xerror.XError:
            return None
        x0, y0 = max(0, geometry.x), max(0, geometry.y)
        x1 = min(self.width, geometry.x + geometry.width + 2 * geometry.border_width)
        y1 = min(self.height, geometry.y + geometry.height + 2 * geometry.border_width)
        return (x0, y0, x1 - x0, y1 - y0) if x1 > x0 and y1 > y0 else None

    def _picker_windows(self) -> list[tuple[int, tuple[int, int, int, int]]]:
        """The windows the picker shows, oldest first as GNOME sorts them: each normal window's id and frame."""
        normal = self.d.intern_atom("_NET_WM_WINDOW_TYPE_NORMAL")
        kind_atom = self.d.intern_atom("_NET_WM_WINDOW_TYPE")
        shown = []
        for wid in self._clients():
            try:
                window = self.d.create_resource_object("window", wid)
                kind = window.get_full_property(kind_atom, X.AnyPropertyType)
                transient = window.get_wm_transient_for()
            except xerror.XError:
                continue
            if (kind is not None and normal not in kind.value) or transient is not None:
                continue  # docks, the desktop, and dialogs (GNOME shows a dialog within its parent's preview)
            box = self._frame(wid)
            if box is not None:
                shown.append((wid, box))
        return shown

    def _capture(self, box: tuple[int, int, int, int], width: int, height: int) -> Any:
        """A pixmap of ``width`` x ``height`` with what the screen shows in ``box``, scaled down (the nearest
        pixel): read from the X server a strip of rows at a time, so the panel never holds a whole window."""
        x, y, w, h = box
        columns = [min(w - 1, (2 * i + 1) * w // (2 * width)) for i in range(width)]
        pick = operator.itemgetter(*columns)
        pixmap = self.root.create_pixmap(width, height, self.depth)
        strip = max(1, 100_000 // (w * 4))  # rows read at a time; as many sent at a time:
        per_put = max(1, 100_000 // (width * 4))  # no block the C library would keep once freed
        top, rows = -strip, memoryview(b"")
        out = array.array("I")
        for j in range(height):
            source = min(h - 1, (2 * j + 1) * h // (2 * height))
            if not top <= source < top + strip:
                top = source
                image = self.root.get_image(x, y + top, w, min(strip, h - top), X.ZPixmap, 0xFFFFFFFF)
                rows = memoryview(image.data).cast("I")
            line = pick(rows[(source - top) * w : (source - top + 1) * w])
            out.extend(line if width > 1 else (line,))
            if (j + 1) % per_put == 0 or j == height - 1:
                count = len(out) // width
                pixmap.put_image(self.gc, 0, j + 1 - count, width, count, X.ZPixmap, self.depth, 0, out.tobytes())
                self.d.flush()
                out = array.array("I")
        return pixmap

    def _capture_windows(self) -> None:
        """Capture the picker's previews before the overview covers the windows (see :func:`picker_slots`)."""
        picker = self.m["picker"]
        windows = self._picker_windows()
        work_area = (self.width - self.dock_w, self.height - self.bar_h)
        ax, ay, aw, ah = (int(v) for v in picker["area"])
        boxes = [box for _, box in windows]
        slots = picker_slots(boxes, work_area, (ax, ay, aw, ah), self.height, float(picker["spacing"]))
        self.previews = []
        for (wid, box), (x, y, w, h) in zip(windows, slots, strict=True):
            size = (max(1, round(w)), max(1, round(h)))
            self.previews.append(((int(x), int(y), *size), wid, self._capture(box, *size)))

    def _free_previews(self) -> None:
        for _, _, pixmap in self.previews:
            pixmap.free()
        self.previews = []
        self.hovered = -1

    def _open_overview(self, mode: str = "windows") -> None:
        self.query = ""
        self.overview_mode = mode
        self._capture_windows()
        self.overview_pixmap = self.root.create_pixmap(self.width - self.dock_w, self.height - self.bar_h, self.depth)
        self.overview.change_attributes(background_pixmap=self.overview_pixmap)
        self._draw_overview()
        self.overview.configure(stack_mode=X.Above)
        self.overview.map()
        self.overview.grab_keyboard(True, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)
        self.overview_open = True
        self._paint_activities()

    def _close_overview(self) -> None:
        self.overview.unmap()
        self.d.ungrab_keyboard(X.CurrentTime)
        self.overview.change_attributes(background_pixmap=X.NONE)
        if self.overview_pixmap is not None:
            self.overview_pixmap.free()
            self.overview_pixmap = None
        self._free_previews()
        self.overview_open = False
        self._paint_activities()
        _give_back_memory()

    def _overview_shown(self) -> bool:
        return bool(self.overview.get_attributes().map_state == X.IsViewable)

    def _toggle_overview(self) -> None:
        if self._overview_shown():
            self._close_overview()
        else:
            self._open_overview()

    def _show_apps(self) -> None:
        """Show Applications: the app grid; pressed again, back to the window picker (as GNOME's toggle)."""
        if not self._overview_shown():
            self._open_overview("apps")
            return
        self.overview_mode = "windows" if self.overview_mode == "apps" else "apps"
        self.query = ""
        self._draw_overview()

    def _activate_window(self, wid: int) -> None:
        """Ask the window manager to focus and raise ``wid``, as a pager does (``_NET_ACTIVE_WINDOW``, source 2)."""
        self._ask_wm(wid, "_NET_ACTIVE_WINDOW", [2, X.CurrentTime])

    def _overview_key(self, event: Any) -> None:
        keysym = self.d.keycode_to_keysym(event.detail, 1 if event.state & X.ShiftMask else 0)
        if keysym == XK.XK_Escape:
            self._close_overview()
        elif keysym in (XK.XK_Return, XK.XK_KP_Enter):
            shown = self._matching_apps()
            if shown and (self.query or self.overview_mode == "apps"):
                self._close_overview()
                self._launch(self.m["apps"][shown[0]]["command"])
        elif keysym == XK.XK_BackSpace:
            self.query = self.query[:-1]
            self._draw_overview()
        else:
            char = XK.keysym_to_string(keysym)
            if char and len(char) == 1 and char.isprintable():
                self.query += char
                self._draw_overview()

    def _overview_click(self, event: Any) -> None:
        if self.overview_mode == "windows" and not self.query:
            for (x, y, w, h), wid, _ in self.previews:
                if x <= event.event_x < x + w and y <= event.event_y < y + h:
                    self._close_overview()
                    self._activate_window(wid)
                    return
            self._close_overview()  # a click beside the windows leaves the overview, as GNOME's
            return
        tile_w, tile_h = self.m["tile"]["width"], self.m["tile"]["height"]
        for x, y, app in self.overview_tiles:
            if x <= event.event_x < x + tile_w and y <= event.event_y < y + tile_h:
                self._close_overview()
                self._launch(self.m["apps"][app]["command"])
                return
        self._close_overview()  # a click beside the apps leaves the overview, as GNOME's

    # the launcher's menu

    def _open_menu(self, index: int) -> None:
        """Launcher ``index``'s menu, as the Ubuntu dock's: the app's windows by title, New Window (unless a desktop
        action is one), its desktop actions, Pin to Dash or Unpin, Show Details, and Quit while it runs; Trash's
        opens it."""
        launcher = self.launchers[index]
        trash = launcher is self.launchers[-1]
        items: list[tuple[str, Any]] = []
        actions = [] if trash or not launcher["id"] else desktop_actions(launcher["id"])
        if launcher["command"] and not any(action == "new-window" for action, _, _ in actions):
            items.append(("Open" if trash else "New Window", ("launch", launcher["command"])))
        items.extend((name, ("launch", argv)) for _, name, argv in actions)
        if not trash and launcher["id"]:
            pin = (
                ("Unpin", ("unpin", launcher["id"]))
                if launcher["favourite"]
                else ("Pin to Dash", ("pin", launcher["id"]))
            )
            items.append(pin)
            items.append(("Show Details", ("details",)))  # GNOME Software's page of the app: not here (_menu_rows)
        windows = self._windows_of(launcher) if launcher["classes"] else []
        if windows:
            items.append(("Quit", ("quit", launcher)))
        titles = [(self._fit("menu", self._title_of(wid), MENU_WIDTH - 32), ("window", wid)) for wid in windows]
        items = [*titles[: MENU_ROWS - len(items)], *items]
        if not items:
            return
        self.menu_items = items
        height = MENU_ROW * len(items) + 12
        y = max(self.bar_h, min(launcher["y"] - height // 2, self.height - height))
        self.menu.configure(x=self.dock_w + 6, y=y, width=MENU_WIDTH, height=height, stack_mode=X.Above)
        self._fill(self.menu_pixmap, "menu", 0, 0, MENU_WIDTH, height)
        glyph_y = (MENU_ROW - self.m["glyphs"]["menu"]["height"]) // 2
        for n, (label, _) in enumerate(items):
            self._text(self.menu_pixmap, "menu", label, 16, 6 + n * MENU_ROW + glyph_y)
        self.menu.map()
        self.menu.clear_area(0, 0, MENU_WIDTH, height)
        self.menu.grab_pointer(True, X.ButtonPressMask, X.GrabModeAsync, X.GrabModeAsync, X.NONE, X.NONE, X.CurrentTime)

    def _windows_of(self, launcher: dict[str, Any]) -> list[int]:
        """The windows of ``launcher``'s app, in the window manager's order."""
        return [wid for wid in self._clients() if _matches(launcher["classes"], self._window_classes(wid))]

    def _fit(self, style: str, text: str, width: int) -> str:
        """``text`` cut to ``width`` pixels of ``style``'s glyphs, an ellipsis ending it where it was cut."""
        if self._text_width(style, text) <= width:
            return text
        text = text[: max(width, 0) // 2]  # no glyph is narrower than 2 px: the rest would not show
        while text and self._text_width(style, text + "…") > width:
            text = text[:-1]
        return text + "…"

    def _menu_click(self, event: Any) -> None:
        self.menu.unmap()
        self.d.ungrab_pointer(X.CurrentTime)
        inside = 0 <= event.event_x < MENU_WIDTH and 6 <= event.event_y < 6 + MENU_ROW * len(self.menu_items)
        if event.window.id != self.menu.id or not inside:
            return
        _, action = self.menu_items[(event.event_y - 6) // MENU_ROW]
        if action[0] == "quit":
            self._quit(action[1])
        elif action[0] == "launch":
            self._launch(action[1])
        elif action[0] == "window":
            self._activate_window(action[1])
        elif action[0] == "pin":  # appended, as GNOME's Pin to Dash
            self._set_favorites([*self.favorites, f"{action[1]}.desktop"])
        elif action[0] == "unpin":
            self._set_favorites([f for f in self.favorites if f.removesuffix(".desktop") != action[1]])

    def _quit(self, launcher: dict[str, Any]) -> None:
        for wid in self._windows_of(launcher):
            self._ask_wm(wid, "_NET_CLOSE_WINDOW", [X.CurrentTime, 2])

    # the window menu: a right-click on a title bar, or alt+space

    def _ask_wm(self, wid: int, message_type: str, data: list[int]) -> None:
        """Send the window manager an EWMH request ``message_type`` about window ``wid`` (as a pager does)."""
        from Xlib.protocol import event as xevent  # type: ignore[import-untyped]

        message = xevent.ClientMessage(
            window=self.d.create_resource_object("window", wid),
            client_type=self.atoms[message_type],
            data=(32, [*data, 0, 0, 0, 0, 0][:5]),
        )
        self.root.send_event(message, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
        self.d.flush()

    def _grab_title(self, client: Any) -> None:
        """Take right-clicks on ``client``'s title bar, and any press on the blank button left of its title.

        The window manager draws the bar and opens no menu of mutter's, so the panel, as GNOME Shell, does: the
        parts of the frame at its top as tall as the bar (xfwm4's title window, and the blank button that centres
        the title as mutter's, which would otherwise stick the window to every workspace). The bar's real
        buttons keep their clicks; the title keeps its left clicks (a move, a double-click's maximize).

        Asked again as the window manager lays the frame's parts out (their ``ConfigureNotify``): when the client
        is mapped, they may not have their places yet."""
        try:
            frame = client.query_tree().parent
            if frame.id == self.root.id:
                return
            if frame.id not in self.frames:
                frame.change_attributes(event_mask=X.SubstructureNotifyMask)
                self.frames[frame.id] = client.id
            origin = client.get_geometry()
            parts = [(w, w.get_geometry()) for w in frame.query_tree().children if w.id != client.id]
        except xerror.XError:
            return
        bar = [(w, g) for w, g in parts if g.y == 0 and g.height == origin.y and g.width > 0]
        if not bar:
            return
        title, title_geometry = max(bar, key=lambda part: part[1].width)  # under the buttons, the bar's width
        middle = title_geometry.x + title_geometry.width // 2
        blank = [w for w, g in bar if w.id != title.id and g.x + g.width <= middle]  # the buttons at its left
        for window in (title, *blank):
            buttons = (1, 3) if window is not title else (3,)
            for button in buttons:
                window.grab_button(
                    button, X.AnyModifier, False, X.ButtonPressMask | X.ButtonReleaseMask | X.ButtonMotionMask,
                    X.GrabModeAsync, X.GrabModeAsync, X.NONE, X.NONE,
                )  # fmt: skip
            self.titles[window.id] = client.id

    def _title_press(self, event: Any) -> None:
        """A press taken from a title bar: the window comes forward, as a click on mutter's bar brings it; a
        right-click opens its menu under the pointer. On the blank button a left press is the bar's: a double-click
        maximizes or restores the window, and a drag (once past GTK's threshold, :meth:`_title_drag`) moves it."""
        client = self.titles[event.window.id]
        self._activate_window(client)
        if event.detail != 1:
            self.d.ungrab_pointer(event.time)
            if event.detail == 3:
                self._open_window_menu(client, event.root_x, event.root_y)
            return
        then, before = self.last_press
        self.last_press = (event.time, client)
        if before == client and 0 <= event.time - then <= DOUBLE_CLICK_MS:
            self.last_press = (0, 0)
            self.d.ungrab_pointer(event.time)
            self._window_action("restore" if self._maximized(client) else "maximize", client)
            return
        try:  # the button is held: the pointer stays the panel's until it is let go
            frame = self.d.create_resource_object("window", client).query_tree().parent.get_geometry()
        except xerror.XError:
            return
        self.pressed = (event.root_x, event.root_y, client, frame.x, frame.y)
        self.dragging = False

    def _title_drag(self, event: Any) -> None:
        """The pointer moved with the blank button held: once past GTK's drag threshold, the window follows it, as
        mutter's bar moves it (asked of the window manager with ``_NET_MOVERESIZE_WINDOW``: the frame's corner
        where it was plus the pointer's way; xfwm4 puts a window a title bar too low for a client's corner given
        with ``StaticGravity``)."""
        if self.pressed is None:
            return
        x, y, client, left, top = self.pressed
        dx, dy = event.root_x - x, event.root_y - y
        if not self.dragging and max(abs(dx), abs(dy)) < DRAG_THRESHOLD:
            return
        self.dragging = True
        flags = NORTH_WEST_GRAVITY | 1 << 8 | 1 << 9 | 2 << 12  # x and y given, from a pager
        self._ask_wm(client, "_NET_MOVERESIZE_WINDOW", [flags, left + dx, top + dy])

    def _open_window_menu(self, client: int, x: int, y: int) -> None:
        """Open ``client``'s window menu hanging from ``(x, y)``, its first row the keyboard's, as GNOME's."""
        self.menu_client, self.menu_at = client, (x, y)
        self._open_popover("window")

    def _keyboard_window_menu(self) -> None:
        """alt+space: the focused window's menu, hanging from its client's top left corner (under the title bar),
        as mutter opens it."""
        prop = self.root.get_full_property(self.atoms["_NET_ACTIVE_WINDOW"], X.AnyPropertyType)
        client = int(prop.value[0]) if prop is not None and len(prop.value) else 0
        if not client or client not in self._clients() or self._frame(client) is None:
            return
        try:
            corner = self.root.translate_coords(self.d.create_resource_object("window", client), 0, 0)
        except xerror.XError:
            return
        self._open_window_menu(client, corner.x, corner.y)

    def _states(self, client: int) -> set[int]:
        try:
            window = self.d.create_resource_object("window", client)
            prop = window.get_full_property(self.atoms["_NET_WM_STATE"], X.AnyPropertyType)
        except xerror.XError:
            return set()
        return set(prop.value) if prop is not None else set()

    def _maximized(self, client: int) -> bool:
        states = self._states(client)
        return {self.atoms["_NET_WM_STATE_MAXIMIZED_VERT"], self.atoms["_NET_WM_STATE_MAXIMIZED_HORZ"]} <= states

    def _cardinal(self, wid: int, name: str) -> int | None:
        try:
            prop = self.d.create_resource_object("window", wid).get_full_property(self.atoms[name], X.AnyPropertyType)
        except xerror.XError:
            return None
        return int(prop.value[0]) if prop is not None and len(prop.value) else None

    def _window_rows(self, row: Any) -> None:
        """The window menu's rows, as GNOME 43's ``windowMenu.js`` builds them for :attr:`menu_client`: what the
        window manager does not allow (``_NET_WM_ALLOWED_ACTIONS``) is there but insensitive; Always on Top only
        while not maximized; the workspace's rows while the window is on one workspace of several (GNOME's
        dynamic workspaces always have an empty one after the last)."""
        client = self.menu_client
        states = self._states(client)
        try:
            window = self.d.create_resource_object("window", client)
            prop = window.get_full_property(self.atoms["_NET_WM_ALLOWED_ACTIONS"], X.AnyPropertyType)
        except xerror.XError:
            prop = None
        allowed = set(prop.value) if prop is not None else set()

        def action(label: str, name: str, allowed_by: str = "", checked: bool = False) -> None:
            able = not allowed_by or self.atoms[allowed_by] in allowed
            row("item" if able else "insensitive", label, action=("window", name), checked=checked)

        maximized = self._maximized(client)
        above = self.atoms["_NET_WM_STATE_ABOVE"] in states
        sticky = self.atoms["_NET_WM_STATE_STICKY"] in states
        action("Take Screenshot", "screenshot")
        action("Hide", "hide", "_NET_WM_ACTION_MINIMIZE")
        if maximized:
            action("Restore", "restore", "_NET_WM_ACTION_MAXIMIZE_HORZ")
        else:
            action("Maximize", "maximize", "_NET_WM_ACTION_MAXIMIZE_HORZ")
        action("Move", "move", "_NET_WM_ACTION_MOVE")
        action("Resize", "resize", "_NET_WM_ACTION_RESIZE")
        row("item" if not maximized else "insensitive", "Always on Top", action=("window", "above"), checked=above)
        action("Always on Visible Workspace", "sticky", checked=sticky)
        desktop = self._cardinal(client, "_NET_WM_DESKTOP")
        count = self._cardinal(self.root.id, "_NET_NUMBER_OF_DESKTOPS") or 1
        if not sticky and desktop is not None:
            if desktop > 0:
                action("Move to Workspace Left", "left")
            if desktop + 1 < count:
                action("Move to Workspace Right", "right")
        row("separator")
        action("Close", "close", "_NET_WM_ACTION_CLOSE")

    def _window_action(self, name: str, client: int) -> None:
        """Do the window menu's ``name`` to ``client``, asking the window manager as GNOME asks mutter."""
        vert, horz = self.atoms["_NET_WM_STATE_MAXIMIZED_VERT"], self.atoms["_NET_WM_STATE_MAXIMIZED_HORZ"]
        x, y = self.menu_at
        if name == "screenshot":  # once the window has drawn again where the menu was (no compositor keeps it)
            self.screenshot_due = (time.monotonic() + SCREENSHOT_DELAY, client)
        elif name == "hide":  # ICCCM's iconify request
            self._ask_wm(client, "WM_CHANGE_STATE", [3])
        elif name in ("maximize", "restore"):
            self._ask_wm(client, "_NET_WM_STATE", [1 if name == "maximize" else 0, vert, horz, 2])
        elif name in ("move", "resize"):  # moved or resized with the arrow keys, Return or a click ends it
            self._ask_wm(client, "_NET_WM_MOVERESIZE", [x, y, MOVE_KEYBOARD if name == "move" else SIZE_KEYBOARD, 0, 2])
        elif name in ("above", "sticky"):
            self._ask_wm(client, "_NET_WM_STATE", [2, self.atoms[f"_NET_WM_STATE_{name.upper()}"], 0, 2])
        elif name in ("left", "right"):
            desktop = self._cardinal(client, "_NET_WM_DESKTOP") or 0
            self._ask_wm(client, "_NET_WM_DESKTOP", [desktop + (1 if name == "right" else -1), 2])
        elif name == "close":
            self._ask_wm(client, "_NET_CLOSE_WINDOW", [X.CurrentTime, 2])

    def _screenshot(self, client: int) -> None:
        """Take Screenshot: the window with its title bar, as a PNG in ``~/Pictures/Screenshots`` named as GNOME
        names it, read from the X server a strip at a time."""
        box = self._frame(client)
        if box is None:
            return
        x, y, width, height = box
        folder = Path.home() / "Pictures" / "Screenshots"
        name = time.strftime("Screenshot from %Y-%m-%d %H-%M-%S.png")
        packer = zlib.compressobj(6)
        body = bytearray()
        step = max(1, 65536 // (4 * width))
        for top in range(y, y + height, step):
            rows = min(step, y + height - top)
            data = self.root.get_image(x, top, width, rows, X.ZPixmap, 0xFFFFFFFF).data
            pixels = memoryview(bytes(data)).cast("B")
            for r in range(rows):
                line = bytearray(3 * width)
                bgrx = pixels[4 * width * r : 4 * width * (r + 1)]
                line[0::3], line[1::3], line[2::3] = bgrx[2::4], bgrx[1::4], bgrx[0::4]
                body += packer.compress(b"\0" + bytes(line))
        body += packer.flush()

        def chunk(kind: bytes, payload: bytes) -> bytes:
            return len(payload).to_bytes(4, "big") + kind + payload + zlib.crc32(kind + payload).to_bytes(4, "big")

        header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", bytes(body)) + chunk(b"IEND", b"")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(png)
        except OSError as exc:
            warn(f"could not save the screenshot in {folder}: {exc}")

    # the top bar's menus: the app menu, the calendar, the system menu; and the end-session dialogs

    def bar_item(self, x: int) -> str:
        """What the top bar has at column ``x``: ``"activities"``, ``"app"`` (the focused app's name),
        ``"calendar"`` (the clock), ``"system"`` (the status icons) or ``""``."""
        start, end = self.m["activities"]
        if start <= x < end:
            return "activities"
        name_x = int(self.m["app_name_x"])
        if self.active_name and end <= x < name_x + self._text_width("bar", self.active_name) + 12:
            return "app"
        if self.clock_span[0] <= x < self.clock_span[1]:  # the clock, and the bell while it shows
            return "calendar"
        left, right = self.m["status"]
        if left <= x < right:
            return "system"
        return ""

    def _menu_rows(self, kind: str) -> list[dict[str, Any]]:
        """The rows of menu ``kind``: ``{"kind": "item" | "insensitive" | "separator" | "slider", "label", "icon",
        "action", "sub", "checked"}`` (``sub``: a row of an open submenu; ``checked``: ticked)."""
        rows: list[dict[str, Any]] = []

        def row(
            kind: str, label: str = "", icon: str = "", action: Any = "none", sub: bool = False, checked: bool = False
        ) -> None:
            rows.append({"kind": kind, "label": label, "icon": icon, "action": action, "sub": sub, "checked": checked})

        if kind == "window":
            self._window_rows(row)
            return rows
        if kind == "app":  # as GNOME's: New Window unless an action is, the app's actions, Show Details, Quit
            entry = self._app_entry()
            command = list(entry["command"]) if entry else []
            actions = desktop_actions(entry.get("id", "")) if entry else []
            if command and not any(action == "new-window" for action, _, _ in actions):
                row("item", "New Window", action=("launch", command))
            for _, name, argv in actions:
                row("item", name, action=("launch", argv))
            if rows:
                row("separator")
            # GNOME asks GNOME Software (Ubuntu Software on the VM) to show the app's page; neither is installed
            # here, so it closes the menu and opens nothing, as the dock's Ubuntu Software launcher
            row("item", "Show Details", action="details")
            row("separator")
            row("item", "Quit", action=("quit", self.active_classes))
            return rows
        for label, icon, action, submenu in SYSTEM_MENU:
            if label == "-":
                row("separator")
            elif action == "slider":
                row("slider", icon=icon, action="none")
            elif action == "submenu":
                row("item", label, icon, ("submenu", label))
                if self.expanded == label:
                    for sub_label, sub_action in submenu:
                        if sub_label == "-":
                            row("separator", sub=True)
                        else:
                            row("item", sub_label, action=sub_action, sub=True)
            else:
                row("item", label, icon, action)
        return rows

    def _app_entry(self) -> dict[str, Any] | None:
        """The focused window's app: the dock's launcher of its classes, else the app grid's app of its name."""
        for launcher in self.dock_m["apps"]:
            if self.active_classes and _matches(launcher["classes"], self.active_classes):
                return dict(launcher)
        return next((dict(app) for app in self.m["apps"] if app["name"] == self.active_name), None)

    def _rounded(self, target: Any, width: int, height: int, radius: int, fill: str, border: str) -> None:
        """A rounded box filling ``target`` (the window's shape cuts the corners off): ``fill`` in a 1 px
        ``border``."""
        self._fill(target, border, 0, 0, width, height)
        self._fill(target, fill, 1, radius, width - 2, height - 2 * radius)
        self._fill(target, fill, radius, 1, width - 2 * radius, height - 2)
        d = 2 * radius
        for x, y in ((1, 1), (width - d - 1, 1), (1, height - d - 1), (width - d - 1, height - d - 1)):
            target.fill_arc(self.gc, x, y, d, d, 0, 360 * 64)

    def _shape(self, window: Any, width: int, height: int, radius: int) -> None:
        """Cut ``window``'s corners round (the SHAPE extension), as GNOME's popovers are drawn."""
        if not self.has_shape:
            return
        from Xlib.ext import shape  # type: ignore[import-untyped]

        rects = [(0, radius, width, max(0, height - 2 * radius))]
        for dy in range(radius):
            inset = round(radius - (radius**2 - (radius - dy - 0.5) ** 2) ** 0.5)
            rects.append((inset, dy, width - 2 * inset, 1))
            rects.append((inset, height - 1 - dy, width - 2 * inset, 1))
        window.shape_rectangles(shape.SO.Set, shape.SK.Bounding, X.Unsorted, 0, 0, rects)

    def _icon(self, target: Any, name: str, hot: bool, x: int, y: int) -> None:
        table = self.m["menu_icons"]
        size = int(table["size"])
        strip = self.pixmaps["menu_icons_hot" if hot else "menu_icons"]
        target.copy_area(self.gc, strip, table["names"].index(name) * size, 0, size, size, x, y)

    def _draw_menu(self) -> None:
        """Draw the open menu's rows (the keyboard's row highlighted) and fit the window to them."""
        width = MIN_WIDTH
        for r in self.rows:
            if r["kind"] in ("item", "insensitive"):
                width = max(width, self._text_width("menu", r["label"]) + 2 * PAD + 80)
        if self.popover_kind == "system":
            width = max(width, 300)
        height = 2 * PAD + sum(ROW if r["kind"] != "separator" else SEPARATOR for r in self.rows)
        self._resize_popover(width, height)
        self._rounded(self.popover_pixmap, width, height, CORNER, "menu", "menu_border")
        y = PAD
        for n, r in enumerate(self.rows):
            r["y"] = y
            r["h"] = ROW if r["kind"] != "separator" else SEPARATOR
            self._draw_row(n, show=False)
            y += r["h"]
        self.popover.clear_area(0, 0, width, height)

    def _draw_row(self, n: int, show: bool = True) -> None:
        """Draw the open menu's row ``n`` (lit if it is the keyboard's or the pointer's); ``show``: on the screen
        now (a hover redraws only the rows it changes)."""
        r, target = self.rows[n], self.popover_pixmap
        text_h = self.m["glyphs"]["menu"]["height"]
        icon = int(self.m["menu_icons"]["size"])
        y = r["y"]
        left, inner = PAD + 1, self.popover_size[0] - 2 * PAD - 2
        self._fill(target, "submenu" if r["sub"] else "menu", left, y, inner, r["h"])
        if r["kind"] == "separator":
            self._fill(target, "separator", left + (12 if not r["sub"] else 24), y + 6, inner - 36, 1)
        elif r["kind"] == "slider":
            self._icon(target, r["icon"], False, left + 12, y + (ROW - icon) // 2)
            track_x, track_w, mid = left + 44, inner - 44 - 18, y + ROW // 2
            self._fill(target, "separator", track_x, mid - 2, track_w, 4)
            level = track_x + track_w * self.volume // 100
            self._fill(target, "today", track_x, mid - 2, level - track_x, 4)
            self.gc.change(foreground=0xF7F7F7)  # the knob
            target.fill_arc(self.gc, level - 9, mid - 9, 18, 18, 0, 360 * 64)
        else:
            hot = n == self.focus
            style = "menu_hot" if hot else ("submenu" if r["sub"] else "menu")
            if r["kind"] == "insensitive":  # GNOME's :insensitive: dimmed, never lit
                hot, style = False, "menu_dim"
            if hot:
                self._fill(target, "menu_hot", left, y, inner, ROW)
            x = left + (12 if not r["sub"] else 40)
            if r["icon"]:
                self._icon(target, r["icon"], hot, x, y + (ROW - icon) // 2)
                x += icon + 12
            self._text(target, style, r["label"], x, y + (ROW - text_h) // 2)
            if isinstance(r["action"], tuple) and r["action"][0] == "submenu":
                arrow = "down" if self.expanded == r["label"] else "right"
                self._icon(target, arrow, hot, left + inner - icon - 12, y + (ROW - icon) // 2)
            elif r.get("checked"):
                self._icon(target, "check", hot, left + inner - icon - 12, y + (ROW - icon) // 2)
        if show:
            self.popover.clear_area(left, y, inner, r["h"])

    def _resize_popover(self, width: int, height: int) -> None:
        """Give the popover a fresh picture of ``width`` x ``height`` and put it where its kind hangs."""
        if self.popover_size != (width, height) or self.popover_pixmap is None:
            if self.popover_pixmap is not None:
                self.popover_pixmap.free()
            self.popover_pixmap = self.root.create_pixmap(width, height, self.depth)
            self.popover.change_attributes(background_pixmap=self.popover_pixmap)
            self.popover_size = (width, height)
        kind = self.popover_kind
        if kind == "app":
            x = int(self.m["activities"][1])
        elif kind == "calendar":  # centred under the date menu's button
            x = (self.width + self.dock_w) // 2 - width // 2
        elif kind == "system":
            x = self.width - width - 4
        elif kind == "window":  # its left edge at the pointer, as GNOME's box pointer hangs it
            x = min(self.menu_at[0], self.width - width)
        else:  # a dialog, centred on the screen
            x = (self.width - width) // 2
        y = self.bar_h + GAP if not kind.startswith("dialog") else (self.height - height) // 2
        if kind == "window":  # under the pointer; above it where it would not fit below (measured on GNOME 43)
            below = self.menu_at[1] + 1 + GAP
            y = below if below + height <= self.height else max(0, self.menu_at[1] - GAP - height)
        self.popover.configure(x=max(0, x), y=y, width=width, height=height, stack_mode=X.Above)
        radius = DIALOG_CORNER if kind.startswith("dialog") else CORNER
        self._shape(self.popover, width, height, radius)

    def _draw_calendar(self) -> None:
        """GNOME's date menu: the notification list (empty) left, today and a month's calendar right (the month
        :attr:`month_shown` away from today's; its arrows go from one to the next). Its clickable parts are its
        rows: the arrows, the Do Not Disturb switch and Clear."""
        width, height = 720, 420
        self._resize_popover(width, height)
        target = self.popover_pixmap
        self._rounded(target, width, height, CORNER, "menu", "menu_border")
        glyphs = self.m["glyphs"]
        # left: the notifications (none: Clear leaves none), Do Not Disturb and Clear at the bottom
        split = 420
        bell = self.m["images"]["bell"]
        target.copy_area(self.gc, self.pixmaps["bell"], 0, 0, bell[0], bell[1], split // 2 - bell[0] // 2, 130)
        label = "No Notifications"
        self._text(
            target, "title_dim", label, split // 2 - self._text_width("title_dim", label) // 2, 130 + bell[1] + 12
        )
        bottom = height - PAD - 12 - 36
        self._text(target, "menu", "Do Not Disturb", 24, bottom + (36 - glyphs["menu"]["height"]) // 2)
        switch_x = 24 + self._text_width("menu", "Do Not Disturb") + 14
        self._switch(target, switch_x, bottom + 6, self.do_not_disturb)
        clear_w = self._text_width("button", "Clear") + 32  # insensitive: there is nothing to clear
        self._fill(target, "button_off", split - 12 - clear_w, bottom, clear_w, 36)
        self._text(
            target, "button_off", "Clear", split - 12 - clear_w + 16, bottom + (36 - glyphs["button"]["height"]) // 2
        )
        self._fill(target, "separator", split, PAD + 6, 1, height - 2 * PAD - 12)
        # right: the day and the date, the month shown, its weeks (Sunday first, as the VM's en_US locale)
        now = time.localtime()
        x0, right = split + 18, width - PAD - 12
        self._text(target, "menu_bold", time.strftime("%A", now), x0, PAD + 12)
        date = f"{time.strftime('%B', now)} {now.tm_mday} {now.tm_year}"
        self._text(target, "title", date, x0, PAD + 12 + glyphs["menu_bold"]["height"] + 2)
        top = PAD + 80
        months = now.tm_year * 12 + now.tm_mon - 1 + self.month_shown
        year, month = divmod(months, 12)
        first = time.mktime((year, month + 1, 1, 12, 0, 0, 0, 0, -1))
        title = time.strftime("%B" if year == now.tm_year else "%B %Y", time.localtime(first))  # as GNOME's
        self._text(target, "menu_bold", title, (x0 + right) // 2 - self._text_width("menu_bold", title) // 2, top)
        self._icon(target, "right", False, right - 20, top + 2)
        self._text(target, "menu_bold", "<", x0 + 4, top)
        self.rows = [
            {"kind": "month", "step": -1, "x": x0 - 4, "w": 32, "y": top - 8, "h": 32},
            {"kind": "month", "step": 1, "x": right - 28, "w": 32, "y": top - 8, "h": 32},
            {"kind": "do-not-disturb", "x": 12, "w": switch_x + 48 + 6 - 12, "y": bottom, "h": 36},
            {"kind": "clear", "x": split - 12 - clear_w, "w": clear_w, "y": bottom, "h": 36},
        ]
        cell_w, cell_h = (right - x0) // 7, 32
        top += 32
        for i, day in enumerate("SMTWTFS"):
            self._text(
                target, "small_dim", day, x0 + i * cell_w + cell_w // 2 - self._text_width("small_dim", day) // 2, top
            )
        top += 24
        start = (time.localtime(first).tm_wday + 1) % 7  # Sunday 0
        day_seconds = 86400
        today = (now.tm_year, now.tm_mon, now.tm_mday)
        selected = self.selected or today
        for cell in range(42):
            when = time.localtime(first + (cell - start) * day_seconds)
            shown = (when.tm_year, when.tm_mon, when.tm_mday)
            text = str(when.tm_mday)
            cx, cy = x0 + (cell % 7) * cell_w + cell_w // 2, top + (cell // 7) * cell_h
            middle = cy + glyphs["small"]["height"] // 2
            style = "small" if when.tm_mon == month + 1 else "small_dim"
            if shown in (today, selected):  # today's circle, orange; the selected day's, grey (Yaru's)
                style = "today" if shown == today else "small_selected"
                self.gc.change(foreground=self.colours["today" if shown == today else "day_selected"])
                target.fill_arc(self.gc, cx - 14, middle - 14, 28, 28, 0, 360 * 64)
            self._text(target, style, text, cx - self._text_width(style, text) // 2, cy)
            self.rows.append(
                {
                    "kind": "day",
                    "date": shown,
                    "x": cx - cell_w // 2,
                    "w": cell_w,
                    "y": middle - cell_h // 2,
                    "h": cell_h,
                }
            )
        self.popover.clear_area(0, 0, width, height)

    def _select(self, date: tuple[int, int, int]) -> None:
        """Select the date menu's day ``date`` and show its month."""
        now = time.localtime()
        self.selected = date
        self.month_shown = date[0] * 12 + date[1] - (now.tm_year * 12 + now.tm_mon)

    def _switch(self, target: Any, x: int, y: int, on: bool) -> None:
        """A 48 x 24 switch as Yaru's: grey with its knob left when off, orange with its knob right when on."""
        self.gc.change(foreground=self.colours["today" if on else "separator"])
        target.fill_arc(self.gc, x, y, 24, 24, 90 * 64, 180 * 64)
        target.fill_arc(self.gc, x + 24, y, 24, 24, 270 * 64, 180 * 64)
        target.fill_rectangle(self.gc, x + 12, y, 24, 24)
        self.gc.change(foreground=0xF7F7F7)
        target.fill_arc(self.gc, x + (26 if on else 2), y + 2, 20, 20, 0, 360 * 64)

    def _draw_dialog(self) -> None:
        """An end-session dialog as GNOME's: its title and text centred, its buttons side by side at the bottom."""
        title, text, buttons = DIALOGS[self.popover_kind.split(":", 1)[1]]
        glyphs = self.m["glyphs"]
        width = max(440, self._text_width("menu", text) + 80)
        height = 40 + glyphs["title"]["height"] + 18 + glyphs["menu"]["height"] + 40 + DIALOG_BUTTON
        self._resize_popover(width, height)
        target = self.popover_pixmap
        self._rounded(target, width, height, DIALOG_CORNER, "menu", "menu_border")
        y = 40
        self._text(target, "title", title, width // 2 - self._text_width("title", title) // 2, y)
        y += glyphs["title"]["height"] + 18
        self._text(target, "menu", text, width // 2 - self._text_width("menu", text) // 2, y)
        top = height - DIALOG_BUTTON
        self._fill(target, "menu_border", 1, top - 1, width - 2, 1)
        self.rows = []
        span = (width - 2) // len(buttons)
        for i, label in enumerate(buttons):
            x = 1 + i * span
            w = span - 1 if i < len(buttons) - 1 else width - 2 - x
            self._fill(target, "button", x, top, w, DIALOG_BUTTON - 1)  # the window's shape rounds its outer corners
            self._text(target, "button", label, x + w // 2 - self._text_width("button", label) // 2, top + 16)
            self.rows.append({"kind": "button", "label": label, "x": x, "w": w, "y": top, "h": DIALOG_BUTTON})
        self.popover.clear_area(0, 0, width, height)

    def _open_popover(self, kind: str) -> None:
        """Open the top bar's menu ``kind`` (or dialog ``"dialog:<name>"``), holding the pointer and the keyboard
        until it closes, as GNOME Shell's grab does (a click elsewhere only closes it)."""
        self.popover_kind = kind
        self.focus = -1
        if kind == "calendar":
            self.month_shown, self.selected = 0, None  # GNOME's date menu opens on today, selected
            self.unseen = False  # its notification list shown: the bell goes (:meth:`_light` redraws the clock)
            self._draw_calendar()
        elif kind.startswith("dialog:"):
            self._draw_dialog()
        else:
            self.expanded = ""
            self.rows = self._menu_rows(kind)
            if kind == "window":  # drawn once, lit: a screenshot never catches it unlit
                self.focus = next((i for i, r in enumerate(self.rows) if r["kind"] == "item"), -1)
            self._draw_menu()
            if kind == "system":
                self._read_volume()
        self._light(kind if kind in ("app", "calendar", "system") else "")
        self.popover.map()
        self.popover.clear_area(0, 0, *self.popover_size)
        self.popover.grab_pointer(
            True,
            X.ButtonPressMask | X.ButtonReleaseMask | X.PointerMotionMask,
            X.GrabModeAsync,
            X.GrabModeAsync,
            X.NONE,
            X.NONE,
            X.CurrentTime,
        )
        self.popover.grab_keyboard(True, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)

    def _close_popover(self) -> None:
        if self.sliding:
            self._slid()
        self.pressed_row = None
        self.popover.unmap()
        self._light("")
        self.popover_kind = ""
        self.rows = []
        self.d.ungrab_pointer(X.CurrentTime)
        self.d.ungrab_keyboard(X.CurrentTime)
        self.popover.change_attributes(background_pixmap=X.NONE)
        if self.popover_pixmap is not None:
            self.popover_pixmap.free()
            self.popover_pixmap = None
        if self._overview_shown():  # back to the overview's search, as before the menu
            self.overview.grab_keyboard(True, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)

    def _activate(self, row: dict[str, Any]) -> None:
        """Do what a menu's row says (a dialog's buttons only close it)."""
        action = row.get("action", "none")
        kind = self.popover_kind
        if row["kind"] in ("month", "day", "do-not-disturb", "clear"):  # the date menu's: it stays open
            if row["kind"] == "month":  # as GNOME's: the selected day goes a month on (or back), and the month shown
                self._select(_month_later(self.selected or _today(), row["step"]))
            elif row["kind"] == "day":  # selected; a day of the month before or after shows its month, as GNOME's
                self._select(row["date"])
            elif row["kind"] == "do-not-disturb":
                self.do_not_disturb = not self.do_not_disturb
                self._clock()  # its bell on the bar
            # Clear: the notification list is empty (nothing here sends notifications) and Clear insensitive, as
            # GNOME's then: it stays so
            self._draw_calendar()
            return
        if row["kind"] in ("button", "separator", "slider", "insensitive"):
            if row["kind"] == "button":
                self._close_popover()
            return
        if isinstance(action, tuple) and action[0] == "submenu":
            self.expanded = "" if self.expanded == action[1] else action[1]
            self.rows = self._menu_rows(kind)
            self.focus = next((i for i, r in enumerate(self.rows) if r.get("label") == action[1]), -1)
            self._draw_menu()
            return
        self._close_popover()
        if isinstance(action, tuple) and action[0] == "launch":
            self._launch(action[1])
        elif isinstance(action, tuple) and action[0] == "quit":
            self._close_windows(action[1])
        elif isinstance(action, tuple) and action[0] == "window":
            self._window_action(action[1], self.menu_client)
        elif action in DIALOGS:
            self._open_popover(f"dialog:{action}")

    def _popover_click(self, event: Any) -> None:
        if event.window.id == self.popover.id:
            x, y = event.event_x, event.event_y
            width, height = self.popover_size
            if not (0 <= x < width and 0 <= y < height):
                if not self.popover_kind.startswith("dialog"):
                    self._close_popover()
                return  # a modal dialog holds the screen until it is answered
            for row in self.rows:
                if row["y"] <= y < row["y"] + row["h"] and row.get("x", 0) <= x < row.get("x", 0) + row.get("w", width):
                    if row["kind"] == "slider" and event.detail == 1:  # the knob goes where it was pressed
                        self.sliding = True
                        self._slide(x)
                    elif self.popover_kind == "window":  # on the release, as GNOME's: Move and Resize then take
                        self.pressed_row = row  # the pointer, which a button still held would end at once
                    else:
                        self._activate(row)
                    return
            return
        if self.popover_kind.startswith("dialog"):
            return
        open_kind = self.popover_kind
        self._close_popover()
        if event.window.id == self.bar.id and event.detail == 1:
            item = self.bar_item(event.event_x)
            if item != open_kind:  # another of the bar's buttons: its own menu (or the overview)
                self._bar_click(item)

    def _popover_motion(self, event: Any) -> None:
        """The menu's row under the pointer is lit, as GNOME's hover (the keyboard's row goes with it); off the
        menu, none is. Only the two rows that change are redrawn."""
        if self.popover_kind not in ("app", "system", "window") or event.window.id != self.popover.id:
            return
        if self.sliding:  # the knob follows the pointer while held
            self._slide(event.event_x)
            return
        x, y = event.event_x, event.event_y
        width, height = self.popover_size
        row = -1
        if 0 <= x < width and 0 <= y < height:
            row = next((i for i, r in enumerate(self.rows) if r["y"] <= y < r["y"] + r["h"]), -1)
        if row != -1 and self.rows[row]["kind"] != "item":
            row = -1
        if row != self.focus:
            before, self.focus = self.focus, row
            for n in (before, row):
                if n != -1:
                    self._draw_row(n)

    def _track(self) -> tuple[int, int]:
        """The volume slider's track: its left end and its width in the popover."""
        left, inner = PAD + 1, self.popover_size[0] - 2 * PAD - 2
        return left + 44, inner - 44 - 18

    def _slide(self, x: int) -> None:
        """Put the volume where the pointer is on the slider's track (0 to 100 %), and redraw the slider."""
        track_x, track_w = self._track()
        volume = max(0, min(100, round((x - track_x) * 100 / track_w)))
        self.volume_moved = True
        if volume != self.volume:
            self.volume = volume
            self._draw_row(next(i for i, r in enumerate(self.rows) if r["kind"] == "slider"))

    def _slid(self) -> None:
        """The slider let go: the sound server's volume is the slider's (pactl, inside the sandbox)."""
        self.sliding = False
        if self.pactl:
            self._launch([self.pactl, "set-sink-volume", "@DEFAULT_SINK@", f"{self.volume}%"])

    def _read_volume(self) -> None:
        """Ask the sound server for its volume, without waiting: :meth:`_volume_read` takes the answer."""
        self.volume_moved = False
        if not self.pactl or self.volume_reader is not None:
            return
        try:
            self.volume_reader = subprocess.Popen(
                [self.pactl, "get-sink-volume", "@DEFAULT_SINK@"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            warn(f"could not read the volume with {self.pactl}: {exc}")

    def _volume_read(self) -> None:
        """The sound server's volume (``Volume: front-left: 32768 /  50% / ...``) on the slider, unless the
        pointer moved it meanwhile. Read as it comes, never waiting: the answer's line, or the end of pactl's
        output, ends the reading (pactl is reaped later if it has not exited yet)."""
        reader = self.volume_reader
        assert reader is not None and reader.stdout is not None
        chunk = os.read(reader.stdout.fileno(), 4096)
        self.volume_answer += chunk
        if chunk and b"\n" not in self.volume_answer:
            return
        self.volume_reader, out, self.volume_answer = None, self.volume_answer.decode(errors="replace"), b""
        reader.stdout.close()
        if reader.poll() is None:
            self.exited.append(reader)
        found = re.search(r"(\d+)%", out)
        if found is None or self.volume_moved:
            return
        self.volume = min(100, int(found.group(1)))
        if self.popover_kind == "system":
            self._draw_row(next(i for i, r in enumerate(self.rows) if r["kind"] == "slider"))

    def _popover_key(self, event: Any) -> None:
        keysym = self.d.keycode_to_keysym(event.detail, 0)
        if keysym == XK.XK_Escape:
            self._close_popover()
            return
        active = [i for i, r in enumerate(self.rows) if r["kind"] in ("item", "button")]
        if not active:
            return
        if keysym in (XK.XK_Down, XK.XK_Up, XK.XK_Tab, XK.XK_Right, XK.XK_Left):
            forward = keysym in (XK.XK_Down, XK.XK_Tab, XK.XK_Right)
            if self.focus not in active:
                self.focus = active[0] if forward else active[-1]
            else:
                self.focus = active[(active.index(self.focus) + (1 if forward else -1)) % len(active)]
            if not self.popover_kind.startswith("dialog"):
                self._draw_menu()
        elif keysym in (XK.XK_Return, XK.XK_KP_Enter, XK.XK_space):
            if self.popover_kind.startswith("dialog"):
                self._close_popover()  # whichever button: nothing more
            elif self.focus in active:
                self._activate(self.rows[self.focus])

    def _bar_click(self, item: str) -> None:
        if item == "activities":
            self._toggle_overview()
        elif item in ("app", "calendar", "system"):
            self._open_popover(item)

    def _close_windows(self, classes: tuple[str, ...]) -> None:
        """Ask each window of the app of ``classes`` to close (``_NET_CLOSE_WINDOW``), as GNOME's Quit does."""
        if not classes:
            return
        for wid in self._clients():
            if self._window_classes(wid) == classes:
                self._ask_wm(wid, "_NET_CLOSE_WINDOW", [X.CurrentTime, 2])

    # actions

    def _launch(self, command: list[str]) -> None:
        """Run ``command`` in the sandbox, detached (its own session, reaped by the sandbox's init)."""
        if not command:
            return
        detach = '"$@" </dev/null >/dev/null 2>&1 &'
        try:
            subprocess.run(["/bin/sh", "-c", detach, "sh", *command], start_new_session=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            warn(f"could not run {command}: {exc}")

    def _launcher_at(self, y: int) -> int | None:
        """The launcher (or Show Applications, -1) whose cell holds the dock's row ``y`` (screen coordinates)."""
        half = int(self.m["cell"]) // 2
        for i, launcher in enumerate(self.launchers):
            if abs(y - launcher["y"]) <= half:
                return i
        if abs(y - int(self.m["show_apps"])) <= half:
            return -1
        return None

    def _click(self, event: Any) -> None:
        window = event.window.id
        if self.popover_kind:  # a top bar's menu or a dialog is open (it holds the pointer)
            self._popover_click(event)
            return
        if self.menu_items:  # a launcher's menu is open (it holds the pointer): any click closes it
            self._menu_click(event)
            self.menu_items = []
            return
        if window in self.titles:
            self._title_press(event)
        elif window == self.overview.id:
            self._overview_click(event)
        elif window == self.bar.id:
            if event.detail == 1:
                self._bar_click(self.bar_item(event.event_x))
        elif window == self.dock.id:
            index = self._launcher_at(event.event_y + self.bar_h)
            if index is None:
                return
            if index == -1:
                if event.detail == 1:
                    self._show_apps()
                return
            if event.detail == 3:
                self._open_menu(index)
            elif event.detail == 1:
                if self._overview_shown():
                    self._close_overview()
                self._launch(self.launchers[index]["command"])

    def handle(self, event: Any) -> None:
        if event.type == X.CreateNotify and event.parent.id == self.root.id:
            if not event.override:
                self.fresh.add(event.window.id)
                event.window.change_attributes(event_mask=X.StructureNotifyMask)
        elif event.type == X.MapNotify and event.window.id in self.fresh:
            self.fresh.discard(event.window.id)
            if self._opens_maximized(event.window):
                self._maximize(event.window)
            self._grab_title(event.window)
        elif event.type == X.ConfigureNotify and event.event.id in self.frames:  # a part of a frame laid out
            self._grab_title(self.d.create_resource_object("window", self.frames[event.event.id]))
        elif event.type == X.DestroyNotify:
            self.fresh.discard(event.window.id)
            if event.window.id in self.frames.values():
                self.titles = {part: client for part, client in self.titles.items() if client != event.window.id}
                self.frames = {frame: client for frame, client in self.frames.items() if client != event.window.id}
        elif event.type == X.PropertyNotify and event.window.id == self.probe.id:
            if event.atom == self.atoms["_NET_FRAME_EXTENTS"] and event.state == X.PropertyNewValue:
                self._wm_answered()
        elif event.type == X.KeyPress and event.detail == self.terminal_code and self.terminal:
            self._launch(self.terminal)
        elif event.type == X.KeyPress and event.detail == self.space_code and not self.popover_kind:
            if event.state & X.Mod1Mask and not self._overview_shown():
                self._keyboard_window_menu()
        elif event.type == X.ButtonPress:
            self._click(event)
        elif event.type == X.MotionNotify and event.window.id in self.titles:
            self._title_drag(event)
        elif event.type == X.ButtonRelease and event.window.id in self.titles:
            self.pressed = None
            self.d.ungrab_pointer(event.time)
        elif event.type in (X.MotionNotify, X.EnterNotify) and event.window.id == self.bar.id:
            self._hover(self.bar_item(event.event_x))
        elif event.type == X.LeaveNotify and event.window.id == self.bar.id:
            self._hover("")
        elif event.type == X.MotionNotify and event.window.id == self.overview.id:
            self._overview_motion(event)
        elif event.type == X.MotionNotify and self.popover_kind:
            self._popover_motion(event)
        elif event.type == X.ButtonRelease and self.sliding:
            self._slid()
        elif event.type == X.ButtonRelease and self.pressed_row is not None:
            row, self.pressed_row = self.pressed_row, None
            if event.window.id == self.popover.id and row["y"] <= event.event_y < row["y"] + row["h"]:
                self._activate(row)  # released on the row it was pressed on
        elif event.type == X.PropertyNotify and event.window.id == self.root.id:
            if event.atom == self.atoms["_NET_CLIENT_LIST"]:
                if event.state == X.PropertyDelete:
                    self._keep_client_lists()
                self._dock()
            if event.atom in (self.atoms["_NET_ACTIVE_WINDOW"], self.atoms["_NET_CLIENT_LIST"]):
                self._app_name()
            if event.atom == self.atoms["_NET_WORKAREA"]:
                self._work_area_set()
            if event.atom == self.atoms["_NET_SUPPORTING_WM_CHECK"]:  # a window manager (re)started
                self._wm_clock_set()
            if event.atom == self.atoms["_NET_CLIENT_LIST_STACKING"]:
                self._restack()
        elif event.type == X.KeyRelease and event.detail == self.super_code:
            if self.popover_kind.startswith("dialog"):
                return
            if self.popover_kind:
                self._close_popover()
            self._toggle_overview()  # the Super key opens the overview, as GNOME's overlay key
        elif event.type == X.KeyPress and event.detail != self.super_code and self.popover_kind:
            self._popover_key(event)
        elif event.type == X.KeyPress and event.detail != self.super_code and self._overview_shown():
            self._overview_key(event)

    def _wm_check(self) -> int:
        """The running window manager's check window (``_NET_SUPPORTING_WM_CHECK``), or 0 when none runs. The root
        keeps the property of the last one, killed with the last sandbox, whose window is gone."""
        prop = self.root.get_full_property(self.atoms["_NET_SUPPORTING_WM_CHECK"], X.AnyPropertyType)
        if prop is None or not len(prop.value):
            return 0
        try:
            self.d.create_resource_object("window", int(prop.value[0])).get_geometry()
        except xerror.XError:
            return 0
        return int(prop.value[0])

    def _wm_clock_set(self) -> bool:
        """Whether the window manager has read a time later than its start-up focus; asked to as soon as it runs.

        xfwm4 focuses its check window at the server's time as it starts (three times, a millisecond apart), then
        each new window at the time of the last event it read. Until it reads an event later than its start, that
        time is older than the focus's and the X server ignores the new focus: the first window opened after it
        started (at each reset, or once the agent killed it) stayed unfocused, with no app's name on the bar and
        grey title buttons, one time in 30. So once it runs, the panel asks it for frame extents (an unmapped
        window's, :attr:`probe`), which it answers from its event loop, after its start; at the answer the panel
        writes the work area anew (the same value: xfwm4 takes only its time), and is ready. Other window managers
        (openbox, GNOME's) focus at the server's time: nothing to wait for."""
        check = self._wm_check()
        if not check:
            return False
        if check == self.wm_clock:
            return True
        try:
            name = self.d.create_resource_object("window", check).get_full_property(
                self.atoms["_NET_WM_NAME"], X.AnyPropertyType
            )
        except xerror.XError:
            return False
        if name is None or name.value != b"Xfwm4":
            self.wm_clock = check
            return True
        if check != self.wm_asked:
            self.wm_asked = check
            self.probe.delete_property(self.atoms["_NET_FRAME_EXTENTS"])
            self._ask_wm(self.probe.id, "_NET_REQUEST_FRAME_EXTENTS", [])
        return False

    def _wm_answered(self) -> None:
        """The window manager answered from its event loop (:meth:`_wm_clock_set`): give it a time after its start."""
        self.wm_clock = self.wm_asked
        expected = [self.dock_w, self.bar_h, self.width - self.dock_w, self.height - self.bar_h]
        self.root.change_property(self.atoms["_NET_WORKAREA"], XA_CARDINAL, 32, expected)
        self.d.flush()

    def _work_area_set(self) -> bool:
        """Whether the work area is the VM's, once a window manager runs; published here when not.

        openbox's margins make it so; xfwm4 keeps its margins (the same rows and columns, where it maximizes and
        places windows) out of ``_NET_WORKAREA``, which the apps read to size and place their windows, and would
        put a window reserving them into the window list. GNOME Shell publishes the work area without the bar
        and the dock, so the panel, as the shell, does: again each time the window manager rewrites it."""
        if not self._wm_check():
            return False
        self._keep_client_lists()
        prop = self.root.get_full_property(self.atoms["_NET_WORKAREA"], X.AnyPropertyType)
        expected = [self.dock_w, self.bar_h, self.width - self.dock_w, self.height - self.bar_h]
        if prop is not None and list(prop.value[:4]) == expected:
            return True
        self.root.change_property(self.atoms["_NET_WORKAREA"], XA_CARDINAL, 32, expected)
        self.d.flush()
        return False

    def _keep_client_lists(self) -> None:
        """An empty window list where the window manager removed it (xfwm4 deletes ``_NET_CLIENT_LIST`` and its
        stacking order while no window is managed, and sets neither before the first): mutter and openbox keep
        them, empty, and readers of the VM's list (``xprop -root _NET_CLIENT_LIST``) take a missing one for no
        window manager at all."""
        for name in ("_NET_CLIENT_LIST", "_NET_CLIENT_LIST_STACKING"):
            if self.root.get_full_property(self.atoms[name], X.AnyPropertyType) is None:
                self.root.change_property(self.atoms[name], XA_WINDOW, 32, [])
        self.d.flush()

    def _opens_maximized(self, window: Any) -> bool:
        """Whether ``window`` opens maximized (the table's ``"maximized"`` classes, case-insensitively; ``*`` at
        the end matches any rest), as GNOME's extension decides: a normal window only, not a dialog (one with no
        type is normal unless it is transient for another)."""
        try:
            cls = window.get_wm_class()
            kind = window.get_full_property(self.atoms["_NET_WM_WINDOW_TYPE"], X.AnyPropertyType)
            transient = window.get_wm_transient_for()
        except xerror.XError:
            return False
        if kind is not None and len(kind.value):
            if int(kind.value[0]) != self.atoms["_NET_WM_WINDOW_TYPE_NORMAL"]:
                return False
        elif transient:
            return False
        name = (cls[1] if cls else "").lower()
        return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in self.maximized)

    def _maximize(self, window: Any) -> None:
        """Ask the window manager to maximize ``window`` (EWMH ``_NET_WM_STATE``, add both)."""
        vert, horz = self.atoms["_NET_WM_STATE_MAXIMIZED_VERT"], self.atoms["_NET_WM_STATE_MAXIMIZED_HORZ"]
        self._ask_wm(window.id, "_NET_WM_STATE", [1, vert, horz, 1])

    def run(self) -> None:
        """Serve until the X server goes away; create the ready marker once the work area is the VM's."""
        ready = False
        while True:
            while self.d.pending_events():
                self.handle(self.d.next_event())
            if not ready and self._work_area_set() and self._wm_clock_set():
                self.marker.touch()
                ready = True
                _give_back_memory()  # the pictures' decompressed buffers, sent to the X server and freed
            if time.localtime().tm_min != self.clock_minute:
                self._clock()
            wake = 60 - time.time() % 60 + 0.05
            if self.screenshot_due is not None:
                due, client = self.screenshot_due
                if time.monotonic() >= due:
                    self.screenshot_due = None
                    self._screenshot(client)
                else:
                    wake = min(wake, due - time.monotonic())
            reader = [self.volume_reader.stdout] if self.volume_reader is not None else []
            monitor = [self.favorites_monitor.stdout] if self.favorites_monitor is not None else []
            readable = wait_for_input(self.d, [*reader, *monitor], wake if ready else min(wake, 0.05))
            if reader and reader[0] in readable:
                self._volume_read()
            if monitor and monitor[0] in readable:
                self._favorites_said()
            self.exited = [child for child in self.exited if child.poll() is None]


def main(argv: list[str]) -> int:
    Xlib.ext.__extensions__ = EXTENSIONS  # in the panel's own process only (it is imported by tests too)
    panel = Panel(Path(argv[1]), Path(argv[2]))
    try:
        panel.run()
    except (xerror.ConnectionClosedError, OSError):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
