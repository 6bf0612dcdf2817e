"""The pointer in screenshots, read and pasted as OSWorld's server does; standard library only (``ctypes``).

OSWorld's ``/screenshot`` reads the pointer's image with XFixes (``pyxcursor.Xcursor``), takes the screen
with ``pyautogui``, and pastes the image with its top-left corner at the pointer's position (the image's
hotspot is not subtracted) through its own alpha. pyxcursor reads each 64-bit ARGB pixel's first four bytes
in memory order (blue, green, red, alpha) as red, green, blue, alpha, so red and blue trade places; the
paste here does the same, so the pixels agree. Both the in-desktop server's ``/screenshot`` and the local
desktops' observations (``legato_gym.backends.local.display``) paste it with :func:`paste_pointer`.

pyxcursor opens an X connection per screenshot and never closes it: :func:`read_pointer` with
``leak=True`` does the same (the server's ``server_mode="osworld"``), else it closes its connection.

Example::

    pointer = read_pointer(":1")
    if pointer is not None:
        paste_pointer(rgb_rows, width, height, pointer)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Any, NamedTuple

__all__ = ["Pointer", "paste_pointer", "read_pointer"]


class _CursorImage(ctypes.Structure):
    _fields_ = [
        ("x", ctypes.c_short),
        ("y", ctypes.c_short),
        ("width", ctypes.c_ushort),
        ("height", ctypes.c_ushort),
        ("xhot", ctypes.c_ushort),
        ("yhot", ctypes.c_ushort),
        ("cursor_serial", ctypes.c_ulong),
        ("pixels", ctypes.c_void_p),
        ("atom", ctypes.c_ulong),
        ("name", ctypes.c_char_p),
    ]


class Pointer(NamedTuple):
    """The pointer: where it is, and its image as pyxcursor hands it to the paste.

    Attributes:
        x, y: the pointer's position on the screen (where the image's top-left corner goes).
        width, height: the image's size.
        hotspot: the image's hotspot (OSWorld's paste ignores it; kept for callers that want it).
        rgba: ``width * height`` pixels of 4 bytes: the pixel's blue, green, red, alpha bytes, which the
            paste uses as red, green, blue, alpha (pyxcursor's order).
    """

    x: int
    y: int
    width: int
    height: int
    hotspot: tuple[int, int]
    rgba: bytes


_LOCK = threading.Lock()
_LIBS: list[Any] = []


def _libs() -> tuple[Any, Any] | None:
    """libX11 and libXfixes through ctypes, loaded once; ``None`` when either is missing."""
    with _LOCK:
        if not _LIBS:
            x11_name, fixes_name = ctypes.util.find_library("X11"), ctypes.util.find_library("Xfixes")
            for name, fallback in ((x11_name, "libX11.so.6"), (fixes_name, "libXfixes.so.3")):
                try:
                    _LIBS.append(ctypes.CDLL(name or fallback))
                except OSError:
                    _LIBS.append(None)
            x11, fixes = _LIBS
            if x11 is not None and fixes is not None:
                x11.XOpenDisplay.restype = ctypes.c_void_p
                x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
                x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
                x11.XFree.argtypes = [ctypes.c_void_p]
                fixes.XFixesGetCursorImage.restype = ctypes.POINTER(_CursorImage)
                fixes.XFixesGetCursorImage.argtypes = [ctypes.c_void_p]
        x11, fixes = _LIBS
    if x11 is None or fixes is None:
        return None
    return x11, fixes


def read_pointer(display: str | None = None, *, leak: bool = False) -> Pointer | None:
    """The pointer of X display ``display`` (default ``$DISPLAY``), or ``None`` when it cannot be read.

    ``None`` when libX11 or libXfixes is missing, or the X server refused the connection (every client
    slot taken). ``leak``: keep the connection open, as OSWorld's server does on every screenshot.
    """
    libs = _libs()
    if libs is None:
        return None
    x11, fixes = libs
    connection = x11.XOpenDisplay(display.encode() if display else None)
    if not connection:
        return None
    try:
        image = fixes.XFixesGetCursorImage(connection)
        if not image:
            return None
        try:
            c = image[0]
            count = int(c.width) * int(c.height)
            raw = ctypes.string_at(c.pixels, count * ctypes.sizeof(ctypes.c_ulong)) if count else b""
            step = ctypes.sizeof(ctypes.c_ulong)
            rgba = bytearray(4 * count)
            for channel in range(4):  # the first 4 bytes of each (little-endian) word: B, G, R, A
                rgba[channel::4] = raw[channel::step]
            return Pointer(int(c.x), int(c.y), int(c.width), int(c.height), (int(c.xhot), int(c.yhot)), bytes(rgba))
        finally:
            x11.XFree(image)
    finally:
        if not leak:
            x11.XCloseDisplay(connection)


def paste_pointer(rgb: bytearray | memoryview, width: int, height: int, pointer: Pointer) -> None:
    """Paste ``pointer`` into ``rgb`` (``height`` rows of ``width`` RGB pixels, changed in place) as OSWorld's
    server does: the image's top-left corner at the pointer's position, clipped to the screen, each pixel
    blended by its alpha (``PIL.Image.paste`` with the image as its own mask)."""
    buf = memoryview(rgb).cast("B") if isinstance(rgb, memoryview) else rgb
    src = pointer.rgba
    for row in range(pointer.height):
        y = pointer.y + row
        if not 0 <= y < height:
            continue
        for col in range(pointer.width):
            x = pointer.x + col
            if not 0 <= x < width:
                continue
            s = 4 * (row * pointer.width + col)
            alpha = src[s + 3]
            if alpha == 0:
                continue
            d = 3 * (y * width + x)
            for k in range(3):
                buf[d + k] = (src[s + k] * alpha + buf[d + k] * (255 - alpha) + 127) // 255
