"""Where the fake window's widgets are: one deterministic layout per task id and screen size."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from legato_gym.backends.fake.font import GLYPH_WIDTH
from legato_gym.contract import Task
from legato_gym.errors import UnsupportedTaskError

__all__ = ["FAKE_WINDOW", "RGB", "Layout", "Rect", "WindowSpec", "layout_for", "ui_scale", "window_spec"]

#: Setup step type that describes the fake window: ``{"type": "fake_window", "parameters": {"title": str,
#: "buttons": [labels], "field": bool}}``. Tasks without one get a window with a field and OK / CANCEL.
FAKE_WINDOW = "fake_window"

RGB = tuple[int, int, int]


@dataclass(frozen=True)
class Rect:
    """A screen rectangle in pixels."""

    x: int
    y: int
    w: int
    h: int

    def contains(self, px: int, py: int) -> bool:
        """Whether the pixel ``(px, py)`` is inside."""
        return self.x <= px < self.x + self.w and self.y <= py < self.y + self.h

    @property
    def center(self) -> tuple[int, int]:
        """The middle pixel (where a scripted click aims)."""
        return self.x + self.w // 2, self.y + self.h // 2


@dataclass(frozen=True)
class WindowSpec:
    """What the task's window holds (from its ``fake_window`` setup step)."""

    title: str = "APPLICATION"
    buttons: tuple[str, ...] = ("OK", "CANCEL")
    field: bool = True


@dataclass(frozen=True)
class Layout:
    """Where everything is, for one task on one screen size."""

    scale: int
    background: RGB
    panel: Rect
    window: Rect
    title_bar: Rect
    title: str
    field: Rect | None
    buttons: tuple[tuple[str, Rect], ...]
    status: Rect

    def button(self, label: str) -> Rect | None:
        """The rectangle of the button labelled ``label``, or ``None`` when the window has none."""
        for name, rect in self.buttons:
            if name == label:
                return rect
        return None


def ui_scale(screen: tuple[int, int]) -> int:
    """The integer pixel scale of the window, the text and the pointer on a ``(width, height)`` screen."""
    width, height = screen
    return max(1, min(width // 640, height // 360))


def window_spec(task: Task) -> WindowSpec:
    """The task's window, from its ``fake_window`` setup step (a default window when it has none)."""
    for step in task.setup:
        if step.get("type") == FAKE_WINDOW:
            params = step.get("parameters") or {}
            buttons = params.get("buttons", ["OK", "CANCEL"])
            if not isinstance(buttons, list) or not all(isinstance(b, str) and b for b in buttons):
                raise UnsupportedTaskError(
                    f"task {task.task_id!r}: fake_window.parameters.buttons must be a list of labels, not {buttons!r}"
                )
            return WindowSpec(str(params.get("title", "APPLICATION")), tuple(buttons), bool(params.get("field", True)))
    return WindowSpec()


def _task_rng(task_id: str, screen: tuple[int, int]) -> np.random.Generator:
    digest = hashlib.sha256(f"{task_id}|{screen[0]}x{screen[1]}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def layout_for(task: Task, screen: tuple[int, int]) -> Layout:
    """The task's layout on a ``(width, height)`` screen: deterministic per task id and screen size.

    Raises:
        UnsupportedTaskError: the window does not fit on the screen.
    """
    spec = window_spec(task)
    width, height = screen
    s = ui_scale(screen)
    rng = _task_rng(task.task_id, screen)
    cell = GLYPH_WIDTH + 1
    longest = max((len(b) for b in spec.buttons), default=0)
    bw, bh, gap, pad = max(cell * longest + 8, 44) * s, 13 * s, 6 * s, 8 * s
    cols = min(3, max(1, len(spec.buttons)))
    rows = math.ceil(len(spec.buttons) / cols) if spec.buttons else 0
    inner_w = cols * bw + (cols - 1) * gap
    title_h, field_h, status_h, panel_h = 11 * s, 13 * s, 9 * s, 10 * s
    win_w = inner_w + 2 * pad
    win_h = title_h + pad + (field_h + pad if spec.field else 0) + rows * (bh + gap) + pad + status_h + pad
    if win_w > width or win_h > height - panel_h:
        raise UnsupportedTaskError(
            f"task {task.task_id!r}: its fake window ({win_w}x{win_h}) does not fit on a {width}x{height} screen; "
            "use a larger DesktopConfig.screen"
        )
    x0 = int(rng.integers(0, width - win_w + 1))
    y0 = int(rng.integers(panel_h, height - win_h + 1))
    hue = rng.integers(40, 150, size=3)
    background: RGB = (int(hue[0]), int(hue[1]), int(hue[2]))
    y = y0 + title_h + pad
    field_rect = None
    if spec.field:
        field_rect = Rect(x0 + pad, y, inner_w, field_h)
        y += field_h + pad
    order = rng.permutation(len(spec.buttons))
    buttons = []
    for slot, index in enumerate(order):
        row, col = divmod(slot, cols)
        buttons.append((spec.buttons[int(index)], Rect(x0 + pad + col * (bw + gap), y + row * (bh + gap), bw, bh)))
    y += rows * (bh + gap)
    return Layout(
        scale=s,
        background=background,
        panel=Rect(0, 0, width, panel_h),
        window=Rect(x0, y0, win_w, win_h),
        title_bar=Rect(x0, y0, win_w, title_h),
        title=spec.title,
        field=field_rect,
        buttons=tuple(buttons),
        status=Rect(x0 + pad, y + pad // 2, inner_w, status_h),
    )
