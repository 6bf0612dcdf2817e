"""The lookalike session's top bar and dock: one python-xlib process inside the sandbox (``session="lookalike"``).

Run inside as ``python panel.py FOLDER MARKER`` (:func:`.lookalike.write_lookalike_files` puts this file, its
pictures and its manifest in ``FOLDER``). It maps the wallpaper, a top bar and a dock as windows of its own that
the window manager does not manage (as GNOME Shell's: no window list shows them; openbox's ``<margins>``
keep maximized windows right of the dock and under the bar), and creates ``MARKER`` once the window manager's
work area says so. Then it sleeps in
``select`` and wakes for a click, a key, a change of the root's window list or active window (the dots, the
app's name), or the minute (the clock). It draws only by copying pre-drawn pictures (server-side pixmaps,
text as glyphs copied from a strip): it imports neither Pillow nor numpy, and an idle desktop costs it nothing.

Standalone on purpose (only the standard library and python-xlib): it runs from a file bound into the sandbox.
"""

from __future__ import annotations

import json
import logging
import select
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from Xlib import XK, X  # type: ignore[import-untyped]
from Xlib import display as xdisplay
from Xlib import error as xerror

logger = logging.getLogger("legato.panel")

#: Root properties whose change redraws the dock's dots and the top bar's app name, or restacks the panel.
WATCHED = ("_NET_CLIENT_LIST", "_NET_ACTIVE_WINDOW", "_NET_CLIENT_LIST_STACKING", "_NET_WORKAREA")
MENU_ROW = 32
MENU_WIDTH = 220
SEARCH = (320, 36)
MAX_DOTS = 4


def _matches(patterns: list[str], names: tuple[str, ...]) -> bool:
    for pattern in patterns:
        for name in names:
            if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                return True
    return False


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
        self.gc = self.root.create_gc()
        self.atoms = {
            name: self.d.intern_atom(name) for name in (*WATCHED, "_NET_WORKAREA", "_NET_CLIENT_LIST_STACKING")
        }
        self.pixmaps = {name: self._load(name, *spec) for name, spec in self.m["images"].items()}
        self.colours = {name: self._pixel(rgb) for name, rgb in self.m["colours"].items()}
        self.running: list[int] = [0] * len(self.m["launchers"])
        self.active_name = ""
        self.query = ""
        self.overview_tiles: list[tuple[int, int, int]] = []
        self.menu_items: list[tuple[str, Any]] = []
        self.menu_launcher = -1
        self.super_code = self.d.keysym_to_keycode(XK.XK_Super_L)
        # the wallpaper: the background of a desktop window under all others, which the X server repaints by
        # itself and which goes with the panel (the root's own background stays as a reset leaves it)
        self.desktop = self._panel_window(0, 0, self.width, self.height, self.pixmaps["wallpaper"])
        self.bar_pixmap = self._copy_of("bar", self.width, self.bar_h)
        self.dock_pixmap = self._copy_of("dock", self.dock_w, self.height - self.bar_h)
        self.bar = self._panel_window(0, 0, self.width, self.bar_h, self.bar_pixmap)
        self.dock = self._panel_window(0, self.bar_h, self.dock_w, self.height - self.bar_h, self.dock_pixmap)
        self.overview_pixmap: Any = None  # while the overview is shown (a screen's worth of the X server's memory)
        self.overview = self._popup(self.dock_w, self.bar_h, self.width - self.dock_w, self.height - self.bar_h)
        self.menu = self._popup(0, 0, MENU_WIDTH, MENU_ROW)
        self.menu_pixmap = self.root.create_pixmap(MENU_WIDTH, MENU_ROW * 3 + 12, self.depth)
        self.menu.change_attributes(background_pixmap=self.menu_pixmap)
        self.clock_minute = -1
        self.root.change_attributes(event_mask=X.PropertyChangeMask)
        self.root.grab_key(self.super_code, X.AnyModifier, False, X.GrabModeAsync, X.GrabModeAsync)
        self.desktop.map()
        self.bar.map()
        self.dock.map()
        self._restack()
        self._dots()
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

    def _copy_of(self, name: str, width: int, height: int) -> Any:
        pixmap = self.root.create_pixmap(width, height, self.depth)
        pixmap.copy_area(self.gc, self.pixmaps[name], 0, 0, width, height, 0, 0)
        return pixmap

    def _text(self, target: Any, style: str, text: str, x: int, y: int) -> int:
        """Copy ``text``'s glyphs of ``style`` onto ``target`` from ``x``; returns the x after it."""
        table = self.m["glyphs"][style]
        strip = self.pixmaps[f"glyphs_{style}"]
        for char in text:
            offset, advance = table["chars"].get(char, table["chars"]["?"])
            if advance:
                target.copy_area(self.gc, strip, offset, 0, advance, table["height"], x, y)
            x += advance
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
        for window in (self.bar, self.dock, self.overview, self.menu):
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

    def _dots(self) -> None:
        """A dot left of each launcher per window of its app (at most four), as the Ubuntu dock's."""
        counts = [0] * len(self.m["launchers"])
        for wid in self._clients():
            names = self._window_classes(wid)
            for i, launcher in enumerate(self.m["launchers"]):
                if names and _matches(launcher["classes"], names):
                    counts[i] += 1
                    break
        if counts == self.running:
            return
        self.running = counts
        height = self.height - self.bar_h
        self.dock_pixmap.copy_area(self.gc, self.pixmaps["dock"], 0, 0, 12, height, 0, 0)
        self.gc.change(foreground=self.colours["dot"])
        for launcher, count in zip(self.m["launchers"], counts, strict=True):
            shown = min(count, MAX_DOTS)
            for j in range(shown):
                centre = launcher["y"] - self.bar_h + round((j - (shown - 1) / 2) * 9)
                self.dock_pixmap.fill_arc(self.gc, 1, centre - 3, 7, 7, 0, 360 * 64)
        self.dock.clear_area(0, 0, 12, height)

    def _name_of(self, names: tuple[str, ...]) -> str:
        for launcher in self.m["launchers"]:
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
        if name == self.active_name:
            return
        self.active_name = name
        x = int(self.m["app_name_x"])
        room = self.width // 2 - 120 - x
        self.bar_pixmap.copy_area(self.gc, self.pixmaps["bar"], x, 0, room, self.bar_h, x, 0)
        self._text(self.bar_pixmap, "bar", name, x, int(self.m["text_y"]))
        self.bar.clear_area(x, 0, room, self.bar_h)

    def _clock(self) -> None:
        """The clock, centred: ``Mar 22  21:58`` as GNOME shows it with the date."""
        now = time.localtime()
        self.clock_minute = now.tm_min
        text = f"{time.strftime('%b', now)} {now.tm_mday}  {now.tm_hour:02d}:{now.tm_min:02d}"
        x0, span = self.width // 2 - 110, 220
        self.bar_pixmap.copy_area(self.gc, self.pixmaps["bar"], x0, 0, span, self.bar_h, x0, 0)
        self._text(
            self.bar_pixmap, "bold", text, self.width // 2 - self._text_width("bold", text) // 2, int(self.m["text_y"])
        )
        self.bar.clear_area(x0, 0, span, self.bar_h)

    # the overview: a search field and the app grid, over the work area

    def _matching_apps(self) -> list[int]:
        query = self.query.lower()
        return [
            i
            for i, app in enumerate(self.m["apps"])
            if not query or query in app["name"].lower() or (app["command"] and query in app["command"][0].lower())
        ]

    def _draw_overview(self) -> None:
        width, height = self.width - self.dock_w, self.height - self.bar_h
        self._fill(self.overview_pixmap, "overview", 0, 0, width, height)
        sx, sy = (width - SEARCH[0]) // 2, 24
        self._fill(self.overview_pixmap, "search", sx, sy, *SEARCH)
        text_y = sy + (SEARCH[1] - self.m["glyphs"]["search"]["height"]) // 2
        if self.query:
            self._text(self.overview_pixmap, "search", self.query, sx + 14, text_y)
        else:
            self._text(self.overview_pixmap, "hint", "Type to search", sx + 14, text_y)
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

    def _open_overview(self) -> None:
        self.query = ""
        self.overview_pixmap = self.root.create_pixmap(self.width - self.dock_w, self.height - self.bar_h, self.depth)
        self.overview.change_attributes(background_pixmap=self.overview_pixmap)
        self._draw_overview()
        self.overview.configure(stack_mode=X.Above)
        self.overview.map()
        self.overview.grab_keyboard(True, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)

    def _close_overview(self) -> None:
        self.overview.unmap()
        self.d.ungrab_keyboard(X.CurrentTime)
        self.overview.change_attributes(background_pixmap=X.NONE)
        if self.overview_pixmap is not None:
            self.overview_pixmap.free()
            self.overview_pixmap = None

    def _overview_shown(self) -> bool:
        return bool(self.overview.get_attributes().map_state == X.IsViewable)

    def _toggle_overview(self) -> None:
        if self._overview_shown():
            self._close_overview()
        else:
            self._open_overview()

    def _overview_key(self, event: Any) -> None:
        keysym = self.d.keycode_to_keysym(event.detail, 1 if event.state & X.ShiftMask else 0)
        if keysym == XK.XK_Escape:
            self._close_overview()
        elif keysym in (XK.XK_Return, XK.XK_KP_Enter):
            shown = self._matching_apps()
            if shown:
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
        tile_w, tile_h = self.m["tile"]["width"], self.m["tile"]["height"]
        for x, y, app in self.overview_tiles:
            if x <= event.event_x < x + tile_w and y <= event.event_y < y + tile_h:
                self._close_overview()
                self._launch(self.m["apps"][app]["command"])
                return
        self._close_overview()  # a click beside the apps leaves the overview, as GNOME's

    # the launcher's menu

    def _open_menu(self, index: int) -> None:
        launcher = self.m["launchers"][index]
        items: list[tuple[str, Any]] = []
        if launcher["command"]:
            items.append(("New Window" if index < len(self.m["launchers"]) - 1 else "Open", launcher["command"]))
        if self.running[index]:
            items.append(("Quit", index))
        if not items:
            return
        self.menu_items = items
        self.menu_launcher = index
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

    def _menu_click(self, event: Any) -> None:
        self.menu.unmap()
        self.d.ungrab_pointer(X.CurrentTime)
        inside = 0 <= event.event_x < MENU_WIDTH and 6 <= event.event_y < 6 + MENU_ROW * len(self.menu_items)
        if event.window.id != self.menu.id or not inside:
            return
        _, action = self.menu_items[(event.event_y - 6) // MENU_ROW]
        if isinstance(action, int):
            self._quit(action)
        else:
            self._launch(action)

    def _quit(self, index: int) -> None:
        close = self.d.intern_atom("_NET_CLOSE_WINDOW")
        from Xlib.protocol import event as xevent  # type: ignore[import-untyped]

        for wid in self._clients():
            if _matches(self.m["launchers"][index]["classes"], self._window_classes(wid)):
                message = xevent.ClientMessage(
                    window=self.d.create_resource_object("window", wid),
                    client_type=close,
                    data=(32, [X.CurrentTime, 2, 0, 0, 0]),
                )
                self.root.send_event(message, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)

    # actions

    def _launch(self, command: list[str]) -> None:
        """Run ``command`` in the sandbox, detached (its own session, reaped by the sandbox's init)."""
        if not command:
            return
        detach = '"$@" </dev/null >/dev/null 2>&1 &'
        try:
            subprocess.run(["/bin/sh", "-c", detach, "sh", *command], start_new_session=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("could not run %s: %s", command, exc)

    def _launcher_at(self, y: int) -> int | None:
        """The launcher (or Show Applications, -1) whose cell holds the dock's row ``y`` (screen coordinates)."""
        half = int(self.m["cell"]) // 2
        for i, launcher in enumerate(self.m["launchers"]):
            if abs(y - launcher["y"]) <= half:
                return i
        if abs(y - int(self.m["show_apps"])) <= half:
            return -1
        return None

    def _click(self, event: Any) -> None:
        window = event.window.id
        if self.menu_items:  # a launcher's menu is open (it holds the pointer): any click closes it
            self._menu_click(event)
            self.menu_items = []
            return
        if window == self.overview.id:
            self._overview_click(event)
        elif window == self.bar.id:
            start, end = self.m["activities"]
            if event.detail == 1 and start <= event.event_x < end:
                self._toggle_overview()
        elif window == self.dock.id:
            index = self._launcher_at(event.event_y + self.bar_h)
            if index is None:
                return
            if index == -1:
                if event.detail == 1:
                    self._toggle_overview()
                return
            if event.detail == 3:
                self._open_menu(index)
            elif event.detail == 1:
                if self._overview_shown():
                    self._close_overview()
                self._launch(self.m["launchers"][index]["command"])

    def handle(self, event: Any) -> None:
        if event.type == X.ButtonPress:
            self._click(event)
        elif event.type == X.PropertyNotify and event.window.id == self.root.id:
            if event.atom == self.atoms["_NET_CLIENT_LIST"]:
                self._dots()
            if event.atom in (self.atoms["_NET_ACTIVE_WINDOW"], self.atoms["_NET_CLIENT_LIST"]):
                self._app_name()
            if event.atom == self.atoms["_NET_CLIENT_LIST_STACKING"]:
                self._restack()
        elif event.type == X.KeyRelease and event.detail == self.super_code:
            self._toggle_overview()  # the Super key opens the overview, as GNOME's overlay key
        elif event.type == X.KeyPress and event.detail != self.super_code and self._overview_shown():
            self._overview_key(event)

    def _work_area_set(self) -> bool:
        prop = self.root.get_full_property(self.atoms["_NET_WORKAREA"], X.AnyPropertyType)
        expected = [self.dock_w, self.bar_h, self.width - self.dock_w, self.height - self.bar_h]
        return prop is not None and list(prop.value[:4]) == expected

    def run(self) -> None:
        """Serve until the X server goes away; create the ready marker once the work area is the VM's."""
        ready = False
        while True:
            while self.d.pending_events():
                self.handle(self.d.next_event())
            if not ready and self._work_area_set():
                self.marker.touch()
                ready = True
            if time.localtime().tm_min != self.clock_minute:
                self._clock()
            self.d.flush()
            wake = 60 - time.time() % 60 + 0.05
            select.select([self.d.fileno()], [], [], wake if ready else min(wake, 0.05))


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="legato-panel: %(message)s")
    panel = Panel(Path(argv[1]), Path(argv[2]))
    try:
        panel.run()
    except (xerror.ConnectionClosedError, OSError):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
