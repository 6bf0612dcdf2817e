"""The fake window's widget model: a text field and buttons that answer parsed actions as a real window would.

A click on the field focuses it, typing goes into the focused field, ``press('enter')`` submits it, a click on
a button presses it; modifiers held with ``keyDown`` make chords of later keys. The model changes state only;
it records which parts of the window changed (:meth:`Window.take_changed`) for the renderer to redraw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from legato_gym.actions import (
    Click,
    Command,
    Drag,
    Hotkey,
    KeyDown,
    KeyUp,
    MouseDown,
    MouseMove,
    MouseUp,
    Press,
    Scroll,
    Sleep,
    TypeText,
)
from legato_gym.backends.fake.layout import Layout

__all__ = ["FIELD", "Part", "Window", "WindowState"]

#: The widget id of the text field (buttons are known by their labels).
FIELD = "\0field"

#: A part of the window that the renderer redraws on its own.
Part = Literal["field", "buttons", "status"]

_MODIFIERS = frozenset(
    {"ctrl", "ctrlleft", "ctrlright", "alt", "altleft", "altright", "shift", "shiftleft", "shiftright"}
    | {"win", "winleft", "winright", "command", "option", "optionleft", "optionright", "fn"}
)
_MAX_FIELD_CHARS = 256
_TYPED_KEYS = {"\n": "enter", "\r": "enter", "\t": "tab"}


def _base_modifier(key: str) -> str:
    return key.removesuffix("left").removesuffix("right")


@dataclass
class WindowState:
    """What the window shows and holds: the pointer, focus, the field's text and what was pressed."""

    cursor: tuple[int, int]
    focused: bool = False
    select_all: bool = False
    field_text: str = ""
    submitted: list[str] = field(default_factory=list)
    pressed: list[str] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    mouse_down_on: str | None = None
    status: str = "READY"


class Window:
    """One task's window in its starting state, changed by :meth:`apply`.

    Args:
        layout: where the widgets are.
        screen: ``(width, height)``; the pointer starts at its centre and stays on it.
    """

    def __init__(self, layout: Layout, screen: tuple[int, int]) -> None:
        width, height = screen
        self.layout = layout
        self.screen = screen
        self.state = WindowState(cursor=(width // 2, height // 2))
        self._changed: set[Part] = set()

    def take_changed(self) -> set[Part]:
        """The parts changed since the last call (the renderer redraws those)."""
        changed, self._changed = self._changed, set()
        return changed

    def widget_at(self, x: int, y: int) -> str | None:
        """The widget under a point: :data:`FIELD`, a button label, or ``None``."""
        layout = self.layout
        if layout.field is not None and layout.field.contains(x, y):
            return FIELD
        for label, rect in layout.buttons:
            if rect.contains(x, y):
                return label
        return None

    def apply(self, command: Command) -> None:
        """Apply one parsed pyautogui command (scrolls and sleeps change nothing)."""
        state = self.state
        if isinstance(command, (Click, MouseDown, MouseUp, Scroll)) and command.x is not None:
            assert command.y is not None
            state.cursor = self._clamp(command.x, command.y)
        if isinstance(command, MouseMove):
            state.cursor = self._clamp(command.x, command.y)
        elif isinstance(command, Click):
            if command.button == "left" and command.clicks > 0:
                self._click(self.widget_at(*state.cursor), command.clicks)
        elif isinstance(command, MouseDown):
            state.mouse_down_on = self.widget_at(*state.cursor) if command.button == "left" else None
        elif isinstance(command, MouseUp):
            down, state.mouse_down_on = state.mouse_down_on, None
            if command.button == "left" and down is not None and down == self.widget_at(*state.cursor):
                self._click(down, 1)
        elif isinstance(command, Drag):
            # A drag presses where it starts and releases where it ends: it clicks only if both are the same widget.
            start = self.widget_at(*state.cursor)
            state.cursor = self._clamp(command.x, command.y)
            if command.button == "left" and start is not None and start == self.widget_at(*state.cursor):
                self._click(start, 1)
        elif isinstance(command, TypeText):
            for ch in command.text:
                self._key(_TYPED_KEYS.get(ch, ch))
        elif isinstance(command, Press):
            for _ in range(min(command.presses, 1000)):
                for key in command.keys:
                    self._key(key)
        elif isinstance(command, Hotkey):
            self._hotkey(command.keys)
        elif isinstance(command, KeyDown):
            if command.key in _MODIFIERS:
                state.held.add(command.key)
            else:
                self._key(command.key)
        elif isinstance(command, KeyUp):
            state.held.discard(command.key)
        elif isinstance(command, (Scroll, Sleep)):
            pass  # nothing scrolls in the fake window; sleeps inside an action are not slept

    def _clamp(self, x: int, y: int) -> tuple[int, int]:
        width, height = self.screen
        return min(max(x, 0), width - 1), min(max(y, 0), height - 1)

    def _click(self, widget: str | None, clicks: int) -> None:
        state = self.state
        was_focused = state.focused
        if widget == FIELD:
            state.focused = True
            state.select_all = clicks >= 2
        else:
            state.focused = state.select_all = False
            if widget is not None:
                state.pressed.append(widget)
                state.status = f"PRESSED: {widget}"
                self._changed |= {"buttons", "status"}
        if was_focused != state.focused or widget == FIELD:
            self._changed.add("field")

    def _hotkey(self, keys: Sequence[str]) -> None:
        state = self.state
        mods = {_base_modifier(k) for k in keys if k in _MODIFIERS}
        rest = [k for k in keys if k not in _MODIFIERS]
        if not rest:
            return
        key = rest[-1]
        if mods <= {"shift"}:
            self._key(key.upper() if len(key) == 1 else key, shifted=bool(mods))
        elif mods == {"ctrl"} and key in ("a", "A") and state.focused:
            state.select_all = True
            self._changed.add("field")
        elif mods == {"ctrl"} and key == "backspace" and state.focused:
            state.field_text = ""
            self._changed.add("field")

    def _key(self, key: str, *, shifted: bool = False) -> None:
        state = self.state
        held = {_base_modifier(k) for k in state.held}
        if held - {"shift"} and not shifted:
            self._hotkey([*sorted(held), key])
            return
        if "shift" in held and len(key) == 1:
            key = key.upper()
        if not state.focused:
            return
        if key in ("enter", "return"):
            state.submitted.append(state.field_text)
            state.status = f"SUBMITTED: {state.field_text}"
            state.field_text, state.select_all = "", False
            self._changed.add("status")
        elif key in ("backspace", "delete", "del"):
            state.field_text = "" if state.select_all else state.field_text[:-1]
            state.select_all = False
        elif key in ("escape", "esc", "tab"):
            state.focused = state.select_all = False
        elif key == "space" or len(key) == 1:
            ch = " " if key == "space" else key
            if state.select_all:
                state.field_text, state.select_all = "", False
            if len(state.field_text) < _MAX_FIELD_CHARS:
                state.field_text += ch
        else:
            return
        self._changed.add("field")
