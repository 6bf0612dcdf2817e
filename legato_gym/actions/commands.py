"""The typed commands an action parses into, and the key names they may hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

__all__ = [
    "KEY_NAMES",
    "Click",
    "Command",
    "Drag",
    "Hotkey",
    "KeyDown",
    "KeyUp",
    "MouseDown",
    "MouseMove",
    "MouseUp",
    "ParsedAction",
    "Press",
    "Scroll",
    "Sleep",
    "TypeText",
]

_NAMED_KEYS = [
    "accept",
    "add",
    "alt",
    "altleft",
    "altright",
    "apps",
    "backspace",
    "browserback",
    "browserfavorites",
    "browserforward",
    "browserhome",
    "browserrefresh",
    "browsersearch",
    "browserstop",
    "capslock",
    "clear",
    "convert",
    "ctrl",
    "ctrlleft",
    "ctrlright",
    "decimal",
    "del",
    "delete",
    "divide",
    "down",
    "end",
    "enter",
    "esc",
    "escape",
    "execute",
    "final",
    "fn",
    "hanguel",
    "hangul",
    "hanja",
    "help",
    "home",
    "insert",
    "junja",
    "kana",
    "kanji",
    "launchapp1",
    "launchapp2",
    "launchmail",
    "launchmediaselect",
    "left",
    "modechange",
    "multiply",
    "nexttrack",
    "nonconvert",
    "numlock",
    "pagedown",
    "pageup",
    "pause",
    "pgdn",
    "pgup",
    "playpause",
    "prevtrack",
    "print",
    "printscreen",
    "prntscrn",
    "prtsc",
    "prtscr",
    "return",
    "right",
    "scrolllock",
    "select",
    "separator",
    "shift",
    "shiftleft",
    "shiftright",
    "sleep",
    "space",
    "stop",
    "subtract",
    "tab",
    "up",
    "volumedown",
    "volumemute",
    "volumeup",
    "win",
    "winleft",
    "winright",
    "yen",
    "command",
    "option",
    "optionleft",
    "optionright",
]

#: Key names pyautogui accepts (``pyautogui.KEYBOARD_KEYS``): printable characters and named keys.
KEY_NAMES: frozenset[str] = frozenset(
    [chr(c) for c in range(0x20, 0x7F)]
    + ["\t", "\n", "\r"]
    + _NAMED_KEYS
    + [f"f{i}" for i in range(1, 25)]
    + [f"num{i}" for i in range(10)]
)


@dataclass(frozen=True)
class MouseMove:
    """Move the pointer to ``(x, y)`` (``moveTo``)."""

    x: int
    y: int


@dataclass(frozen=True)
class Click:
    """Click ``clicks`` times with ``button`` at ``(x, y)``, or where the pointer is when they are ``None``."""

    x: int | None
    y: int | None
    button: str = "left"
    clicks: int = 1


@dataclass(frozen=True)
class Drag:
    """Press ``button`` where the pointer is, move to ``(x, y)`` and release (``dragTo``)."""

    x: int
    y: int
    button: str = "left"


@dataclass(frozen=True)
class MouseDown:
    """Press ``button`` at ``(x, y)`` (or where the pointer is)."""

    x: int | None
    y: int | None
    button: str = "left"


@dataclass(frozen=True)
class MouseUp:
    """Release ``button`` at ``(x, y)`` (or where the pointer is)."""

    x: int | None
    y: int | None
    button: str = "left"


@dataclass(frozen=True)
class Scroll:
    """Scroll ``clicks`` notches (positive: up / right) at ``(x, y)`` or where the pointer is."""

    clicks: int
    x: int | None = None
    y: int | None = None
    horizontal: bool = False


@dataclass(frozen=True)
class TypeText:
    """Type ``text`` character by character (``typewrite`` / ``write`` with a string)."""

    text: str


@dataclass(frozen=True)
class Press:
    """Press and release each key of ``keys`` in turn, ``presses`` times (``press``, ``typewrite`` with a list)."""

    keys: tuple[str, ...]
    presses: int = 1


@dataclass(frozen=True)
class Hotkey:
    """Press ``keys`` down in order and release them in reverse order (``hotkey``)."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class KeyDown:
    """Hold ``key`` down."""

    key: str


@dataclass(frozen=True)
class KeyUp:
    """Release ``key``."""

    key: str


@dataclass(frozen=True)
class Sleep:
    """Pause for ``seconds`` (``time.sleep``)."""

    seconds: float


Command = Union[MouseMove, Click, Drag, MouseDown, MouseUp, Scroll, TypeText, Press, Hotkey, KeyDown, KeyUp, Sleep]


@dataclass(frozen=True)
class ParsedAction:
    """One action, parsed.

    Attributes:
        source: the action string as given.
        special: ``"WAIT"``, ``"DONE"`` or ``"FAIL"`` for a special action, else ``None``.
        commands: the commands of a code action, in order (empty for special actions).
    """

    source: str
    special: str | None
    commands: tuple[Command, ...]
