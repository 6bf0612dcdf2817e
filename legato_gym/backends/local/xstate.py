"""The X server state an agent can change and a fast reset must put back (the display outlives the sandbox).

Killing the sandbox ends every client the agent ran (the window manager included: it runs inside), but
the X server keeps what those clients changed in it: the keyboard layout (``setxkbmap``), root window
properties (``xprop -root -set``, ``xrdb``, cut buffers, and the window manager's own, from which the next
openbox takes its desktops), keys and buttons left pressed through XTest, Caps Lock, the root
background, windows of a client that set ``RetainPermanent``, selection owners (the clipboard), the
pointer, keyboard and pointer controls, the font path and the host access list.

The root's background is the X server's black, or a picture (:class:`Wallpaper`: the lookalike session's):
painted once by the host (:func:`prepare_display`), it stays in the X server across fast resets, and the
server repaints it by itself wherever a window goes away. A reset checks the screen it leaves against the
baseline's, every pixel, and paints the background again only when it differs (an agent can set the root's
background: ``xsetroot``, any X client).

:class:`XBaseline` records all of it from the host side, with no client of a sandbox connected;
:func:`restore`, called at the same point of every fast reset (the old sandbox dead, the new one not yet
started), puts it back and returns what is still different, so that the reset restarts the whole
display instead: a keymap that ``setxkbmap`` with the baseline's rules does not give back, the screen
size, per-key auto-repeat, or an X server that cannot be checked at all.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from legato_gym.errors import DesktopCrashed, MissingDependencyError

__all__ = ["Wallpaper", "XBaseline", "open_display", "prepare_display", "restore"]

logger = logging.getLogger(__name__)

SELECTIONS = ("PRIMARY", "SECONDARY", "CLIPBOARD")
#: What :meth:`XBaseline.differences` says when the screen's pixels differ (then the background is painted again).
SCREEN_DIFFERS = "the screen's pixels (root background or a window nothing lists)"

PropertyValue = tuple[str, int, bytes]


def _xlib() -> Any:
    try:
        import Xlib.display  # type: ignore[import-untyped]
        import Xlib.error  # type: ignore[import-untyped]
        import Xlib.ext.xtest  # type: ignore[import-untyped]
    except ImportError as exc:
        raise MissingDependencyError(
            "the local backend needs python-xlib on the host to check the X server at reset: "
            "`pip install 'legatolabs[local]'`"
        ) from exc
    return Xlib


_CONNECT_LOCK = threading.Lock()


def open_display(display_name: str) -> Any:
    """A python-xlib ``Display`` of one of legato's X servers (or any local one), through its abstract socket.

    python-xlib takes the file ``/tmp/.X11-unix/X<N>`` when one exists, and the host's may be a stale one
    left by another X server killed with that number: the abstract socket is always the live server's.
    """
    xlib = _xlib()
    from Xlib.support import unix_connect  # type: ignore[import-untyped]

    plain = unix_connect._get_unix_socket
    with _CONNECT_LOCK:
        unix_connect._get_unix_socket = lambda address: plain(address if address[:1] == "\0" else "\0" + address)
        try:
            return xlib.display.Display(display_name)
        finally:
            unix_connect._get_unix_socket = plain


@contextlib.contextmanager
def _connect(display_name: str) -> Iterator[Any]:
    """A python-xlib connection to one of legato's X servers, through its abstract socket.

    python-xlib takes the file ``/tmp/.X11-unix/X<N>`` when one exists, and the host's may be a stale one
    left by another X server killed with that number (legato's own keep their socket files in a folder of
    their own): the abstract socket is always the server's.
    """
    display = open_display(display_name)
    try:
        yield display
    finally:
        display.close()


def _properties(display: Any) -> dict[str, PropertyValue]:
    from Xlib import X

    root = display.screen().root
    result = {}
    for atom in root.list_properties():
        prop = root.get_full_property(atom, X.AnyPropertyType, sizehint=1 << 16)
        if prop is None:
            continue
        value = prop.value
        raw = value.encode("latin-1") if isinstance(value, str) else bytes(value) if prop.format == 8 else None
        if raw is None:
            raw = b"".join(int(v).to_bytes(4, "little") for v in value)
        result[display.get_atom_name(atom)] = (display.get_atom_name(prop.property_type), prop.format, raw)
    return result


@dataclass(frozen=True)
class Wallpaper:
    """A picture the root window shows as its background (the lookalike session's wallpaper).

    Attributes:
        width: its width in pixels (the screen's).
        height: its height.
        pixels: its rows as the X server's 24-bit ZPixmap (BGRX), zlib-compressed.
    """

    width: int
    height: int
    pixels: bytes


def prepare_display(display_name: str, wallpaper: Wallpaper | None) -> None:
    """Set up a new X server before any client of a desktop connects: its background and its keyboard's source.

    With ``wallpaper``, the picture becomes the root window's background and is painted (else the server's black
    stays). The X server keeps it after this connection closes (the pixmap's id is freed at once, as ``xsetroot``
    frees it) and repaints it by itself wherever a window goes away.

    Then Shift is pressed and released once through XTest. The first key event an X server gets from XTest makes
    its XTest keyboard the core keyboard's source: the server tells every client the keyboard changed, and GNOME
    Shell then loads its keymap and grabs its shortcuts again, losing a shortcut pressed meanwhile (the agent's
    first ctrl+alt+t did nothing in 8 of 17 fresh GNOME sessions, and in none of 6 with this Shift). Done here, that
    change is over before any session runs; the X baseline is taken after it.
    """
    xlib = _xlib()
    from Xlib import X
    from Xlib.ext import xtest

    try:
        with _connect(display_name) as display:
            if wallpaper is not None:
                _paint(display, wallpaper)
            shift = _keycode(display, 0xFFE1)  # XK_Shift_L
            if shift:
                xtest.fake_input(display, X.KeyPress, shift)
                xtest.fake_input(display, X.KeyRelease, shift)
            display.sync()
    except (xlib.error.XError, xlib.error.DisplayError, ConnectionError, OSError) as exc:
        raise DesktopCrashed(
            f"could not set up the X server {display_name} for a desktop: {type(exc).__name__}: {exc}"
        ) from exc


def _paint(display: Any, wallpaper: Wallpaper | None) -> None:
    from Xlib import X

    screen = display.screen()
    root = screen.root
    if wallpaper is None:
        # painted once, as a compositing window manager (GNOME Shell) leaves its last frame on the root, which a
        # background of None would keep
        root.change_attributes(background_pixel=screen.black_pixel)
        root.clear_area()
        root.change_attributes(background_pixmap=X.NONE)
        return
    pixmap = root.create_pixmap(wallpaper.width, wallpaper.height, screen.root_depth)
    gc = pixmap.create_gc(graphics_exposures=False)
    data = zlib.decompress(wallpaper.pixels)
    stride = wallpaper.width * 4
    rows = max(1, 200_000 // stride)  # strips under the core protocol's request size
    for top in range(0, wallpaper.height, rows):
        count = min(rows, wallpaper.height - top)
        chunk = data[top * stride : (top + count) * stride]
        pixmap.put_image(gc, 0, top, wallpaper.width, count, X.ZPixmap, screen.root_depth, 0, chunk)
    root.change_attributes(background_pixmap=pixmap)
    root.clear_area()
    gc.free()
    pixmap.free()


def _base(window: int, mask: int) -> int:
    """The client a resource id belongs to (its id base)."""
    return window & ~mask


@dataclass(frozen=True)
class XBaseline:
    """The X server's state at a moment, as far as an agent can change it.

    Attributes:
        properties: root window properties: name to ``(type name, format, bytes)``.
        keymap: the core keyboard mapping and the modifier mapping.
        controls: keyboard control, pointer control, screen saver, font path and access control.
        geometry: the root window's ``(width, height)``.
        clients: id bases of the clients owning the root's children then (none, with no sandbox running).
        pointer: the pointer position.
        screen: a digest of the screen's pixels (no window is up when it is taken), to see a changed root
            background or anything else drawn that the checks above miss.
        wallpaper: the root's background (``None``: the server's black), painted again when the screen differs.
    """

    properties: dict[str, PropertyValue]
    keymap: tuple[Any, ...]
    controls: tuple[Any, ...]
    geometry: tuple[int, int]
    clients: frozenset[int]
    pointer: tuple[int, int]
    screen: bytes
    wallpaper: Wallpaper | None = None

    @classmethod
    def capture(cls, display_name: str, screen: Callable[[], bytes], wallpaper: Wallpaper | None = None) -> XBaseline:
        """Record the state of the X server at ``display_name`` (``:N``); ``screen()`` digests its pixels.

        ``wallpaper`` is the root's background it shows (:func:`prepare_display`, painted before)."""
        with _connect(display_name) as display:
            return cls._read(display, screen, wallpaper)

    @classmethod
    def _read(cls, display: Any, screen: Callable[[], bytes], wallpaper: Wallpaper | None = None) -> XBaseline:
        root = display.screen().root
        mask = display.display.info.resource_id_mask
        geometry = root.get_geometry()
        pointer = root.query_pointer()
        return cls(
            properties=_properties(display),
            keymap=_keymap(display),
            controls=_controls(display),
            geometry=(geometry.width, geometry.height),
            clients=frozenset(_base(w.id, mask) for w in root.query_tree().children),
            pointer=(pointer.root_x, pointer.root_y),
            screen=screen(),
            wallpaper=wallpaper,
        )

    def differences(self, display: Any, screen: Callable[[], bytes]) -> list[str]:
        """What differs from this baseline on the live X server (an empty list: nothing)."""
        from Xlib import X

        display.sync()
        now = XBaseline._read(display, screen, self.wallpaper)
        found = []
        for name in sorted(set(self.properties) | set(now.properties)):
            if self.properties.get(name) != now.properties.get(name):
                found.append(f"root property {name}")
        if now.keymap != self.keymap:
            found.append("keyboard mapping")
        if now.controls != self.controls:
            found.append("keyboard/pointer controls, screen saver, font path or access control")
        if now.geometry != self.geometry:
            found.append(f"screen size {now.geometry} (baseline {self.geometry})")
        if now.pointer != self.pointer:
            found.append(f"pointer at {now.pointer}")
        if now.screen != self.screen:
            found.append(SCREEN_DIFFERS)
        held = _held_keys(display)
        if held:
            found.append(f"keys held down (keycodes {held})")
        state = display.screen().root.query_pointer().mask
        buttons = X.Button1Mask | X.Button2Mask | X.Button3Mask | X.Button4Mask | X.Button5Mask
        if state & buttons:
            found.append("mouse buttons held down")
        if state & X.LockMask:
            found.append("Caps Lock on")
        foreign = _foreign_windows(display, self.clients)
        if foreign:
            found.append(f"windows of clients that are gone (RetainPermanent): {[hex(w) for w in foreign]}")
        for selection in SELECTIONS:
            if display.get_selection_owner(display.intern_atom(selection)) != X.NONE:
                found.append(f"selection {selection} still owned")
        return found


def _keymap(display: Any) -> tuple[Any, ...]:
    first = display.display.info.min_keycode
    count = display.display.info.max_keycode - first + 1
    mapping = tuple(tuple(row) for row in display.get_keyboard_mapping(first, count))
    modifiers = tuple(tuple(row) for row in display.get_modifier_mapping())
    return mapping, modifiers


def _controls(display: Any) -> tuple[Any, ...]:
    keyboard = display.get_keyboard_control()
    pointer = display.get_pointer_control()
    saver = display.get_screen_saver()
    hosts = display.list_hosts()
    return (
        (keyboard.key_click_percent, keyboard.bell_percent, keyboard.bell_pitch, keyboard.bell_duration),
        (keyboard.led_mask, keyboard.global_auto_repeat, bytes(keyboard.auto_repeats)),
        (pointer.accel_num, pointer.accel_denom, pointer.threshold),
        (saver.timeout, saver.interval, saver.prefer_blanking, saver.allow_exposures),
        tuple(display.get_font_path()),
        (hosts.mode, tuple((h.family, bytes(h.name)) for h in hosts.hosts)),
    )


def _held_keys(display: Any) -> list[int]:
    keys = display.query_keymap()
    return [code for code in range(8, 256) if keys[code // 8] & (1 << (code % 8))]


def _keycode(display: Any, keysym: int) -> int:
    """The keycode of ``keysym`` in the server's current mapping (python-xlib's cache may be older)."""
    first = display.display.info.min_keycode
    mapping = display.get_keyboard_mapping(first, display.display.info.max_keycode - first + 1)
    return next((first + i for i, row in enumerate(mapping) if keysym in row), 0)


def _foreign_windows(display: Any, clients: frozenset[int]) -> list[int]:
    root = display.screen().root
    mask = display.display.info.resource_id_mask
    return [w.id for w in root.query_tree().children if _base(w.id, mask) not in clients]


#: How long a restore waits for the X server to match its baseline before the display is restarted.
_SETTLE_S = 1.0


def restore(display_name: str, baseline: XBaseline, screen: Callable[[], bytes]) -> list[str]:
    """Put the X server at ``display_name`` back to ``baseline`` as far as it safely can.

    Call it when no client of the episode is left. Releases held keys and buttons, turns Caps Lock off,
    kills clients that left windows or selections behind (``RetainPermanent``), deletes root properties
    the baseline does not have and writes back changed ones (before the next window manager reads
    them), loads the baseline keyboard layout again, restores the controls, the root background and the
    pointer.

    Returns what still differs afterwards (or why the X server could not be checked): the caller
    restarts the display for those. ``screen()`` digests the screen's pixels.

    The root is repainted with the background it has first (the server's own work, no picture sent), so that a
    background set during the episode shows in the pixels even where no window of it went away.
    """
    xlib = _xlib()
    try:
        with _connect(display_name) as display:
            display.set_error_handler(lambda error, request: logger.debug("X error while restoring: %s", error))
            display.screen().root.clear_area()
            found = baseline.differences(display, screen)
            if not found:
                return []
            logger.debug("X server state changed during the episode (%s); restoring it", "; ".join(found))
            if _keymap(display) != baseline.keymap:  # first: which key is Caps Lock depends on it
                _reload_keymap(display_name, baseline)
            _restore(display, baseline, repaint=SCREEN_DIFFERS in found)
            # The server repaints what the episode's windows covered once their clients are gone, which can
            # lag the kill by a moment: look again until the state matches or the grace runs out.
            deadline = time.monotonic() + _SETTLE_S
            while (found := baseline.differences(display, screen)) and time.monotonic() < deadline:
                time.sleep(0.02)  # a poll, bounded by the deadline
            return found
    except (xlib.error.XError, xlib.error.DisplayError, ConnectionError, OSError) as exc:
        return [f"the X server could not be checked: {type(exc).__name__}: {exc}"]


def _restore(display: Any, baseline: XBaseline, *, repaint: bool) -> None:
    from Xlib import X
    from Xlib.ext import xtest

    root = display.screen().root
    for keycode in _held_keys(display):
        xtest.fake_input(display, X.KeyRelease, keycode)
    state = root.query_pointer().mask
    for button, flag in enumerate((X.Button1Mask, X.Button2Mask, X.Button3Mask, X.Button4Mask, X.Button5Mask), 1):
        if state & flag:
            xtest.fake_input(display, X.ButtonRelease, button)
    if state & X.LockMask:
        caps = _keycode(display, 0xFFE5)  # XK_Caps_Lock
        if caps:
            xtest.fake_input(display, X.KeyPress, caps)
            xtest.fake_input(display, X.KeyRelease, caps)
    mask = display.display.info.resource_id_mask
    for window in _foreign_windows(display, baseline.clients):
        display.create_resource_object("window", window).kill_client()  # the retained client, all of it
    for selection in SELECTIONS:
        owner = display.get_selection_owner(display.intern_atom(selection))
        if owner != X.NONE and _base(owner.id, mask) not in baseline.clients:
            owner.kill_client()
    now = _properties(display)
    for name in set(now) - set(baseline.properties):
        root.delete_property(display.intern_atom(name))
    for name, (kind, fmt, raw) in baseline.properties.items():
        if now.get(name) != (kind, fmt, raw):
            data: Any = raw if fmt == 8 else [int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)]
            if fmt == 16:
                data = [int.from_bytes(raw[i : i + 2], "little") for i in range(0, len(raw), 2)]
            root.change_property(display.intern_atom(name), display.intern_atom(kind), fmt, data)
    keyboard, leds, pointer, saver, font_path, hosts = baseline.controls
    now_keyboard, now_leds, now_pointer, now_saver, now_font_path, now_hosts = _controls(display)
    if (now_keyboard, now_leds[1]) != (keyboard, leds[1]):
        display.change_keyboard_control(
            key_click_percent=keyboard[0],
            bell_percent=keyboard[1],
            bell_pitch=keyboard[2],
            bell_duration=keyboard[3],
            auto_repeat_mode=X.AutoRepeatModeOn if leds[1] else X.AutoRepeatModeOff,
        )
    if now_pointer != pointer:
        display.change_pointer_control(accel=(pointer[0], pointer[1]), threshold=pointer[2])
    if now_saver != saver:
        display.set_screen_saver(*saver)
    if now_font_path != font_path:
        display.set_font_path(list(font_path))
    if now_hosts != hosts:
        display.set_access_control(hosts[0])
        for family, name in set(now_hosts[1]) - set(hosts[1]):
            display.change_hosts(X.HostDelete, family, name)
        for family, name in set(hosts[1]) - set(now_hosts[1]):
            display.change_hosts(X.HostInsert, family, name)
    # the baseline's background again when the screen is not the baseline's (the server's black, or the wallpaper
    # sent again). The root's cursor stays the one the window manager set, as the baseline's kill left it.
    if repaint:
        _paint(display, baseline.wallpaper)
    root.warp_pointer(*baseline.pointer)


def _reload_keymap(display_name: str, baseline: XBaseline) -> None:
    """Load the baseline's layout again (the rules, model, layout, variant and options the server had)."""
    setxkbmap = shutil.which("setxkbmap")
    names = baseline.properties.get("_XKB_RULES_NAMES")
    if setxkbmap is None or names is None:
        return
    rules, model, layout, variant, options, *_ = [*names[2].split(b"\0"), b"", b"", b"", b"", b""]
    command = [setxkbmap, "-display", display_name, "-rules", rules.decode(), "-model", model.decode()]
    command += ["-layout", layout.decode(), "-variant", variant.decode(), "-option", ""]
    if options:
        command += ["-option", options.decode()]
    subprocess.run(command, capture_output=True, timeout=10, check=False)
