"""Pixels of the fake desktop: a panel, the task's window with its widgets, and a mouse pointer (numpy).

:func:`render` paints a whole frame once per reset; after each action :func:`redraw` repaints only the parts
of the window that changed, and :class:`Pointer` draws the pointer onto each screenshot's copy.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from legato_gym.backends.fake.font import GLYPH_HEIGHT, GLYPH_WIDTH, text_mask
from legato_gym.backends.fake.layout import RGB, Rect
from legato_gym.backends.fake.widgets import Part, Window

__all__ = ["Frame", "Pointer", "redraw", "render"]

Frame = npt.NDArray[np.uint8]

_CURSOR_ROWS = (
    "X.........",
    "XX........",
    "XWX.......",
    "XWWX......",
    "XWWWX.....",
    "XWWWWX....",
    "XWWWWWX...",
    "XWWWWWWX..",
    "XWWWWXXXX.",
    "XWXWWX....",
    "XX.XWWX...",
    "X...XWX...",
    ".....XX...",
)


def render(window: Window) -> Frame:
    """A full frame of the desktop showing ``window`` (without the pointer)."""
    layout = window.layout
    width, height = window.screen
    s = layout.scale
    frame = np.empty((height, width, 3), dtype=np.uint8)
    _fill(frame, Rect(0, 0, width, height), layout.background)
    _fill(frame, layout.panel, (32, 32, 36))
    _text(frame, "ACTIVITIES", 4 * s, (layout.panel.h - 7 * s) // 2, (230, 230, 230), s, layout.panel)
    _box(frame, layout.window, (236, 236, 236), (60, 60, 70), s)
    _fill(frame, layout.title_bar, (52, 92, 168))
    _centered_text(frame, layout.title, layout.title_bar, (255, 255, 255), s)
    redraw(frame, window, ("field", "buttons", "status"))
    return frame


def redraw(frame: Frame, window: Window, parts: Iterable[Part]) -> None:
    """Repaint ``parts`` of the window in ``frame`` from its current state (the parts never overlap)."""
    for part in parts:
        if part == "field":
            _draw_field(frame, window)
        elif part == "buttons":
            _draw_buttons(frame, window)
        else:
            _draw_status(frame, window)


class Pointer:
    """The mouse pointer's sprite at one pixel scale."""

    def __init__(self, scale: int) -> None:
        rows = np.array([list(r) for r in _CURSOR_ROWS])
        outline, inside = rows == "X", rows == "W"
        if scale > 1:
            outline = np.repeat(np.repeat(outline, scale, axis=0), scale, axis=1)
            inside = np.repeat(np.repeat(inside, scale, axis=0), scale, axis=1)
        self._outline, self._inside = outline, inside

    def draw(self, frame: Frame, at: tuple[int, int]) -> None:
        """Draw the pointer with its tip at ``at``, clipped to the frame."""
        x, y = at
        height, width = frame.shape[:2]
        h, w = min(self._outline.shape[0], height - y), min(self._outline.shape[1], width - x)
        region = frame[y : y + h, x : x + w]
        region[self._outline[:h, :w]] = (0, 0, 0)
        region[self._inside[:h, :w]] = (255, 255, 255)


def _draw_field(frame: Frame, window: Window) -> None:
    layout, state = window.layout, window.state
    if layout.field is None:
        return
    s, rect = layout.scale, layout.field
    border = (40, 110, 230) if state.focused else (120, 120, 128)
    _box(frame, rect, (255, 255, 255), border, 2 * s if state.focused else s)
    inner = Rect(rect.x + 3 * s, rect.y, rect.w - 6 * s, rect.h)
    cell = (GLYPH_WIDTH + 1) * s
    visible = state.field_text[-max(1, inner.w // cell - 1) :] if state.field_text else ""
    ty = rect.y + (rect.h - GLYPH_HEIGHT * s) // 2
    if state.select_all and visible:
        _fill(frame, Rect(inner.x, ty - s, len(visible) * cell, (GLYPH_HEIGHT + 2) * s), (170, 200, 250))
    _text(frame, visible, inner.x, ty, (20, 20, 20), s, inner)
    if state.focused:
        _fill(frame, Rect(inner.x + len(visible) * cell, ty - s, s, (GLYPH_HEIGHT + 2) * s), (20, 20, 20))


def _draw_buttons(frame: Frame, window: Window) -> None:
    layout, state = window.layout, window.state
    s = layout.scale
    last = state.pressed[-1] if state.pressed else None
    for label, rect in layout.buttons:
        fill = (190, 205, 230) if label == last else (250, 250, 250)
        _box(frame, rect, fill, (90, 90, 100), s)
        _centered_text(frame, label, rect, (20, 20, 20), s)


def _draw_status(frame: Frame, window: Window) -> None:
    layout, state = window.layout, window.state
    _fill(frame, layout.status, (236, 236, 236))
    _text(frame, state.status, layout.status.x, layout.status.y, (70, 70, 80), layout.scale, layout.status)


def _fill(frame: Frame, rect: Rect, color: RGB) -> None:
    region = frame[max(rect.y, 0) : max(rect.y + rect.h, 0), max(rect.x, 0) : max(rect.x + rect.w, 0)]
    if region.size:
        # Broadcasting one row is ~50x faster than broadcasting a 3-tuple over a large region.
        row = np.empty((region.shape[1], 3), dtype=np.uint8)
        row[:] = color
        region[:] = row


def _box(frame: Frame, rect: Rect, fill: RGB, border: RGB, thickness: int) -> None:
    _fill(frame, rect, border)
    t = thickness
    _fill(frame, Rect(rect.x + t, rect.y + t, rect.w - 2 * t, rect.h - 2 * t), fill)


def _text(frame: Frame, text: str, x: int, y: int, color: RGB, scale: int, clip: Rect) -> None:
    """Draw ``text`` with its top-left at ``(x, y)``, clipped to ``clip``."""
    if not text:
        return
    max_chars = max(0, (clip.x + clip.w - x) // ((GLYPH_WIDTH + 1) * scale))
    mask = text_mask(text[:max_chars], scale)
    h = min(mask.shape[0], clip.y + clip.h - y)
    w = min(mask.shape[1], clip.x + clip.w - x)
    if h <= 0 or w <= 0:
        return
    frame[y : y + h, x : x + w][mask[:h, :w]] = color


def _centered_text(frame: Frame, text: str, rect: Rect, color: RGB, scale: int) -> None:
    tw = (GLYPH_WIDTH + 1) * scale * len(text) - scale
    x = rect.x + max(0, (rect.w - tw) // 2)
    y = rect.y + (rect.h - GLYPH_HEIGHT * scale) // 2
    _text(frame, text, x, y, color, scale, rect)
