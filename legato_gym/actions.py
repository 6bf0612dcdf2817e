"""Parse OSWorld ``pyautogui`` actions into typed commands, without running them.

An action is either one of the special strings ``WAIT``, ``DONE`` and ``FAIL``, or Python source made of
statements from a small whitelist:

* ``import pyautogui``, ``import time`` and ``pyautogui.FAILSAFE = False`` (the prefix OSWorld adds);
* ``pyautogui.<function>(<literal arguments>)`` for the functions in :data:`PYAUTOGUI_FUNCTIONS`;
* ``time.sleep(<number>)``.

Arguments must be literals (numbers, strings, lists, tuples, ``None``, booleans); they are read with
:func:`ast.literal_eval` and bound to the real pyautogui signatures, so ``click(100, 200)``,
``click(x=100, y=200, button="right")`` and ``click((100, 200))`` all parse. Anything else (other calls, other
names, attribute access outside ``pyautogui``, loops, assignments) raises :class:`~legato_gym.errors.ActionError`
naming the offending statement. The parser never evaluates code, so it is safe on untrusted model output.

Example::

    >>> from legato_gym.actions import parse_action
    >>> parse_action("import pyautogui; pyautogui.click(10, 20); pyautogui.typewrite('hi')").commands
    (Click(x=10, y=20, button='left', clicks=1), TypeText(text='hi'))
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from legato_gym.contract import SPECIAL_ACTIONS
from legato_gym.errors import ActionError

__all__ = [
    "KEY_NAMES",
    "PYAUTOGUI_FUNCTIONS",
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
    "parse_action",
]

#: Longest action source accepted, in characters.
MAX_ACTION_CHARS = 100_000

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

_MOUSE_BUTTONS = frozenset({"left", "right", "middle", "primary", "secondary"})


# --- typed commands ---------------------------------------------------------------------------------------


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


_Builder = Callable[[dict[str, Any], str], list[Command]]

_FUNCTIONS: dict[str, tuple[Callable[..., None], _Builder]] = {
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

#: The ``pyautogui`` functions an action may call.
PYAUTOGUI_FUNCTIONS: frozenset[str] = frozenset(_FUNCTIONS)

_ALLOWED_IMPORTS = frozenset({"pyautogui", "time"})


def _snippet(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.dump(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _literal(source: str, node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ActionError(
            f"{where}: argument {_snippet(source, node)!r} is not a literal; pass numbers and strings directly"
        ) from exc


def _parse_call(source: str, call: ast.Call, where: str) -> list[Command]:
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        raise ActionError(
            f"{where}: {_snippet(source, call)!r} is not allowed; call pyautogui.<function>(...) or time.sleep(...)"
        )
    module, name = func.value.id, func.attr
    signature: Callable[..., None]
    build: _Builder
    if module == "time" and name == "sleep":
        signature, build = _sig_sleep, _build_sleep
    elif module == "pyautogui" and name in _FUNCTIONS:
        signature, build = _FUNCTIONS[name]
    elif module == "pyautogui":
        raise ActionError(
            f"{where}: pyautogui.{name} is not in the action space; use one of {', '.join(sorted(_FUNCTIONS))}"
        )
    else:
        raise ActionError(
            f"{where}: {module}.{name}(...) is not allowed; only pyautogui.<function>(...) and time.sleep(...)"
        )
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(kw.arg is None for kw in call.keywords):
        raise ActionError(f"{where}: *args and **kwargs are not allowed in {module}.{name}(...)")
    args = [_literal(source, arg, where) for arg in call.args]
    kwargs = {kw.arg: _literal(source, kw.value, where) for kw in call.keywords if kw.arg is not None}
    try:
        bound = inspect.signature(signature).bind(*args, **kwargs)
    except TypeError as exc:
        raise ActionError(f"{where}: bad arguments for {module}.{name}: {exc}") from exc
    bound.apply_defaults()
    values = dict(bound.arguments)
    if name == "hotkey" and module == "pyautogui" and not values.get("keys"):
        raise ActionError(f"{where}: pyautogui.hotkey() needs at least one key, e.g. hotkey('ctrl', 'c')")
    return build(values, where)


def _is_failsafe_assignment(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return False
    target = node.targets[0]
    return (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "pyautogui"
        and target.attr == "FAILSAFE"
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, bool)
    )


def parse_action(action: str) -> ParsedAction:
    """Parse one action string.

    Args:
        action: ``WAIT``, ``DONE``, ``FAIL``, or pyautogui source (see the module docstring).

    Returns:
        The parsed action; ``commands`` lists what the code does, in order.

    Raises:
        ActionError: the action is not a string, is not valid Python, or uses anything outside the whitelist.
            The message names the statement (``line N``) and what is allowed instead.
    """
    if not isinstance(action, str):
        raise ActionError(f"an action must be a str (pyautogui code, WAIT, DONE or FAIL), not {type(action).__name__}")
    stripped = action.strip()
    if stripped in SPECIAL_ACTIONS:
        return ParsedAction(action, stripped, ())
    if not stripped:
        raise ActionError("empty action; send pyautogui code, or WAIT, DONE or FAIL")
    if len(action) > MAX_ACTION_CHARS:
        raise ActionError(f"action of {len(action)} characters is longer than the limit of {MAX_ACTION_CHARS}")
    try:
        tree = ast.parse(stripped, mode="exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        line = f"line {exc.lineno}: " if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise ActionError(
            f"{line}action is not valid Python ({detail}): {stripped[:80]!r}; send pyautogui code, or WAIT, DONE "
            "or FAIL"
        ) from exc
    commands: list[Command] = []
    for node in tree.body:
        where = f"line {node.lineno}"
        if isinstance(node, ast.Import):
            bad = [alias.name for alias in node.names if alias.name not in _ALLOWED_IMPORTS or alias.asname]
            if bad:
                raise ActionError(f"{where}: import of {', '.join(bad)} is not allowed; only 'import pyautogui, time'")
        elif _is_failsafe_assignment(node) or isinstance(node, ast.Pass):
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            commands.extend(_parse_call(stripped, node.value, where))
        else:
            raise ActionError(
                f"{where}: {_snippet(stripped, node)!r} is not allowed; an action is a sequence of "
                "pyautogui.<function>(...) and time.sleep(...) calls"
            )
    return ParsedAction(action, None, tuple(commands))
