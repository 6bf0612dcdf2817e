"""The ``pyautogui`` functions of the action space: their signatures, and what each call becomes.

Each function is a stub with pyautogui's own signature (bound with :mod:`inspect`, so positional and keyword
forms both work) and a builder that checks the bound arguments and returns the :mod:`typed commands
<legato_gym.actions.commands>` the call stands for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from legato_gym.actions.commands import (
    KEY_NAMES,
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
from legato_gym.errors import ActionError

__all__ = ["FUNCTIONS", "PYAUTOGUI_FUNCTIONS", "SLEEP", "Builder"]

_MOUSE_BUTTONS = frozenset({"left", "right", "middle", "primary", "secondary"})


# --- pyautogui signatures (bound with inspect, so positional and keyword forms both work) -----------------
# The stubs mirror pyautogui 0.9.54; parameters that only shape timing (duration, tween, interval, _pause,
# logScreenshot) are accepted and ignored.


def _sig_click(
    x: Any = None,
    y: Any = None,
    clicks: Any = 1,
    interval: Any = 0.0,
    button: Any = "left",
    duration: Any = 0.0,
    tween: Any = None,
    logScreenshot: Any = None,
    _pause: Any = True,
) -> None: ...


def _sig_click_n(
    x: Any = None,
    y: Any = None,
    interval: Any = 0.0,
    button: Any = "left",
    duration: Any = 0.0,
    tween: Any = None,
    logScreenshot: Any = None,
    _pause: Any = True,
) -> None: ...


def _sig_click_fixed(
    x: Any = None,
    y: Any = None,
    duration: Any = 0.0,
    tween: Any = None,
    logScreenshot: Any = None,
    _pause: Any = True,
) -> None: ...


def _sig_move(
    x: Any = None,
    y: Any = None,
    duration: Any = 0.0,
    tween: Any = None,
    logScreenshot: Any = False,
    _pause: Any = True,
) -> None: ...


def _sig_drag(
    x: Any = None,
    y: Any = None,
    duration: Any = 0.0,
    tween: Any = None,
    button: Any = "left",
    logScreenshot: Any = None,
    _pause: Any = True,
    mouseDownUp: Any = True,
) -> None: ...


def _sig_mouse_button(
    x: Any = None,
    y: Any = None,
    button: Any = "left",
    duration: Any = 0.0,
    tween: Any = None,
    logScreenshot: Any = None,
    _pause: Any = True,
) -> None: ...


def _sig_scroll(clicks: Any, x: Any = None, y: Any = None, logScreenshot: Any = None, _pause: Any = True) -> None: ...


def _sig_type(message: Any, interval: Any = 0.0, logScreenshot: Any = None, _pause: Any = True) -> None: ...


def _sig_press(
    keys: Any, presses: Any = 1, interval: Any = 0.0, logScreenshot: Any = None, _pause: Any = True
) -> None: ...


def _sig_key(key: Any, logScreenshot: Any = None, _pause: Any = True) -> None: ...


def _sig_sleep(secs: Any) -> None: ...


def _coord(args: dict[str, Any], name: str, where: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ActionError(f"{where}: {name}={value!r} must be a number of pixels")
    return int(value)


def _xy(args: dict[str, Any], where: str, *, required: bool = False) -> tuple[int | None, int | None]:
    x = args.get("x")
    if isinstance(x, (tuple, list)):
        if len(x) != 2 or args.get("y") is not None:
            raise ActionError(f"{where}: give the position as x, y or as one (x, y) pair, not {x!r}")
        args = {**args, "x": x[0], "y": x[1]}
    px, py = _coord(args, "x", where), _coord(args, "y", where)
    if (px is None) != (py is None):
        raise ActionError(f"{where}: give both x and y, or neither (pointer position)")
    if required and px is None:
        raise ActionError(f"{where}: needs a target position x, y")
    return px, py


def _button(args: dict[str, Any], where: str) -> str:
    button = args.get("button", "left")
    if not isinstance(button, str) or button.lower() not in _MOUSE_BUTTONS:
        raise ActionError(f"{where}: button={button!r} is not one of {', '.join(sorted(_MOUSE_BUTTONS))}")
    button = button.lower()
    return {"primary": "left", "secondary": "right"}.get(button, button)


def _int(args: dict[str, Any], name: str, where: str) -> int:
    value = args[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ActionError(f"{where}: {name}={value!r} must be a number")
    return int(value)


def _key(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ActionError(f"{where}: key {value!r} must be a string such as 'enter' or 'a'")
    key = value.lower() if len(value) > 1 else value
    if key not in KEY_NAMES:
        raise ActionError(f"{where}: unknown key {value!r}; use pyautogui key names such as 'enter', 'ctrl', 'a'")
    return key


def _keys(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(_key(item, where) for item in value)
    return (_key(value, where),)


def _build_click(clicks: int | None, button: str | None) -> Callable[[dict[str, Any], str], list[Command]]:
    def build(args: dict[str, Any], where: str) -> list[Command]:
        x, y = _xy(args, where)
        n = _int(args, "clicks", where) if clicks is None else clicks
        if n < 0:
            raise ActionError(f"{where}: clicks={n} must be >= 0")
        return [Click(x, y, _button(args, where) if button is None else button, n)]

    return build


def _build_move(args: dict[str, Any], where: str) -> list[Command]:
    x, y = _xy(args, where, required=True)
    assert x is not None and y is not None
    return [MouseMove(x, y)]


def _build_drag(args: dict[str, Any], where: str) -> list[Command]:
    x, y = _xy(args, where, required=True)
    assert x is not None and y is not None
    return [Drag(x, y, _button(args, where))]


def _build_mouse(cls: type[MouseDown] | type[MouseUp]) -> Callable[[dict[str, Any], str], list[Command]]:
    def build(args: dict[str, Any], where: str) -> list[Command]:
        x, y = _xy(args, where)
        return [cls(x, y, _button(args, where))]

    return build


def _build_scroll(horizontal: bool) -> Callable[[dict[str, Any], str], list[Command]]:
    def build(args: dict[str, Any], where: str) -> list[Command]:
        x, y = _xy(args, where)
        return [Scroll(_int(args, "clicks", where), x, y, horizontal)]

    return build


def _build_type(args: dict[str, Any], where: str) -> list[Command]:
    message = args["message"]
    if isinstance(message, str):
        return [TypeText(message)]
    if isinstance(message, (list, tuple)):
        return [Press(_keys(message, where))]
    raise ActionError(f"{where}: message={message!r} must be a string, or a list of key names")


def _build_press(args: dict[str, Any], where: str) -> list[Command]:
    presses = _int(args, "presses", where)
    if presses < 0:
        raise ActionError(f"{where}: presses={presses} must be >= 0")
    return [Press(_keys(args["keys"], where), presses)]


def _build_key(cls: type[KeyDown] | type[KeyUp]) -> Callable[[dict[str, Any], str], list[Command]]:
    def build(args: dict[str, Any], where: str) -> list[Command]:
        return [cls(_key(args["key"], where))]

    return build


def _build_sleep(args: dict[str, Any], where: str) -> list[Command]:
    secs = args["secs"]
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or secs < 0:
        raise ActionError(f"{where}: time.sleep({secs!r}) needs a number of seconds >= 0")
    return [Sleep(float(secs))]


#: What a call becomes: its bound arguments and ``line N`` (for messages) in, its commands out.
Builder = Callable[[dict[str, Any], str], list[Command]]

#: Each pyautogui function of the action space: its signature and its builder.
FUNCTIONS: dict[str, tuple[Callable[..., None], Builder]] = {
    "click": (_sig_click, _build_click(None, None)),
    "leftClick": (_sig_click_fixed, _build_click(1, "left")),
    "doubleClick": (_sig_click_n, _build_click(2, None)),
    "tripleClick": (_sig_click_n, _build_click(3, None)),
    "rightClick": (_sig_click_fixed, _build_click(1, "right")),
    "middleClick": (_sig_click_fixed, _build_click(1, "middle")),
    "moveTo": (_sig_move, _build_move),
    "dragTo": (_sig_drag, _build_drag),
    "mouseDown": (_sig_mouse_button, _build_mouse(MouseDown)),
    "mouseUp": (_sig_mouse_button, _build_mouse(MouseUp)),
    "scroll": (_sig_scroll, _build_scroll(False)),
    "vscroll": (_sig_scroll, _build_scroll(False)),
    "hscroll": (_sig_scroll, _build_scroll(True)),
    "typewrite": (_sig_type, _build_type),
    "write": (_sig_type, _build_type),
    "press": (_sig_press, _build_press),
    "hotkey": (lambda *keys, **_: None, lambda args, where: [Hotkey(_keys(list(args["keys"]), where))]),
    "keyDown": (_sig_key, _build_key(KeyDown)),
    "keyUp": (_sig_key, _build_key(KeyUp)),
}

#: ``time.sleep``'s signature and builder.
SLEEP: tuple[Callable[..., None], Builder] = (_sig_sleep, _build_sleep)

#: The ``pyautogui`` functions an action may call.
PYAUTOGUI_FUNCTIONS: frozenset[str] = frozenset(FUNCTIONS)
