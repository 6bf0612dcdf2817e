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

The package, one concern a module (every name below is importable from ``legato_gym.actions``)::

    commands.py    the typed commands (Click, TypeText, ..., Command), ParsedAction, KEY_NAMES
    signatures.py  the pyautogui functions of the action space: signatures and builders, PYAUTOGUI_FUNCTIONS
    parse.py       parse_action: the whitelist walk over the syntax tree, MAX_ACTION_CHARS
"""

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
    ParsedAction,
    Press,
    Scroll,
    Sleep,
    TypeText,
)
from legato_gym.actions.parse import MAX_ACTION_CHARS, parse_action
from legato_gym.actions.signatures import PYAUTOGUI_FUNCTIONS

__all__ = [
    "KEY_NAMES",
    "MAX_ACTION_CHARS",
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
