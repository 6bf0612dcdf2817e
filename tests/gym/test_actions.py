"""The pyautogui action parser: typed commands out, anything outside the whitelist rejected, nothing executed."""

from __future__ import annotations

from pathlib import Path

import pytest

from legato_gym.actions import (
    Click,
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
    parse_action,
)
from legato_gym.errors import ActionError, LegatoError


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("pyautogui.click(10, 20)", Click(10, 20)),
        ("pyautogui.click(x=10, y=20, button='right')", Click(10, 20, "right")),
        ("pyautogui.click((10, 20))", Click(10, 20)),
        ("pyautogui.click()", Click(None, None)),
        ("pyautogui.click(10.7, 20.2, clicks=2)", Click(10, 20, "left", 2)),
        ("pyautogui.doubleClick(5, 6)", Click(5, 6, "left", 2)),
        ("pyautogui.tripleClick(5, 6)", Click(5, 6, "left", 3)),
        ("pyautogui.rightClick(5, 6)", Click(5, 6, "right")),
        ("pyautogui.middleClick(5, 6)", Click(5, 6, "middle")),
        ("pyautogui.moveTo(7, 8, duration=0.5)", MouseMove(7, 8)),
        ("pyautogui.dragTo(7, 8, duration=0.5)", Drag(7, 8)),
        ("pyautogui.dragTo(7, 8, button='right')", Drag(7, 8, "right")),
        ("pyautogui.mouseDown(1, 2)", MouseDown(1, 2)),
        ("pyautogui.mouseUp(button='left')", MouseUp(None, None)),
        ("pyautogui.scroll(-5)", Scroll(-5)),
        ("pyautogui.scroll(3, x=10, y=11)", Scroll(3, 10, 11)),
        ("pyautogui.hscroll(2)", Scroll(2, horizontal=True)),
        ("pyautogui.typewrite('hello world')", TypeText("hello world")),
        ("pyautogui.typewrite('it\\'s', interval=0.03)", TypeText("it's")),
        ("pyautogui.write('x')", TypeText("x")),
        ("pyautogui.typewrite(['a', 'enter'])", Press(("a", "enter"))),
        ("pyautogui.press('Enter')", Press(("enter",))),
        ("pyautogui.press('A')", Press(("A",))),
        ("pyautogui.press(['tab', 'tab'], presses=2)", Press(("tab", "tab"), 2)),
        ("pyautogui.hotkey('ctrl', 'shift', 't')", Hotkey(("ctrl", "shift", "t"))),
        ("pyautogui.keyDown('shift')", KeyDown("shift")),
        ("pyautogui.keyUp('shift')", KeyUp("shift")),
        ("time.sleep(0.5)", Sleep(0.5)),
    ],
)
def test_each_function_parses_to_its_command(source: str, expected: object) -> None:
    parsed = parse_action(source)
    assert parsed.special is None
    assert parsed.commands == (expected,)
    assert parsed.source == source


def test_osworld_prefix_and_several_statements() -> None:
    source = (
        "import pyautogui; import time; pyautogui.FAILSAFE = False; pyautogui.click(1, 2)\n"
        "time.sleep(1)\npyautogui.typewrite('ab')\npyautogui.press('enter')"
    )
    assert parse_action(source).commands == (Click(1, 2), Sleep(1.0), TypeText("ab"), Press(("enter",)))


@pytest.mark.parametrize("special", ["WAIT", "DONE", "FAIL", " DONE\n"])
def test_special_actions(special: str) -> None:
    parsed = parse_action(special)
    assert parsed.special == special.strip()
    assert parsed.commands == ()


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("import os; os.system('rm -rf /')", "import of os"),
        ("os.system('ls')", "os.system"),
        ("__import__('os').system('ls')", "not allowed"),
        ("eval('1')", "not allowed"),
        ("pyautogui.screenshot()", "pyautogui.screenshot is not in the action space"),
        ("pyautogui.click(x, 2)", "not a literal"),
        ("pyautogui.click(1)", "both x and y"),
        ("pyautogui.click(1, 2, button='nose')", "button='nose'"),
        ("pyautogui.press('foo')", "unknown key 'foo'"),
        ("pyautogui.hotkey()", "at least one key"),
        ("pyautogui.click(*args)", "*args"),
        ("pyautogui.typewrite(123)", "must be a string"),
        ("pyautogui.click(1, 2, nonsense=3)", "bad arguments"),
        ("x = 1", "not allowed"),
        ("for i in range(9): pyautogui.click(1, 2)", "not allowed"),
        ("pyautogui.FAILSAFE = True; pyautogui.PAUSE = 0", "not allowed"),
        ("import pyautogui as p", "import of pyautogui"),
        ("time.time()", "time.time"),
        ("pyautogui.click(1, 2", "not valid Python"),
        ("", "empty action"),
        ("time.sleep(-1)", "seconds >= 0"),
    ],
)
def test_rejected_actions_name_the_problem(source: str, fragment: str) -> None:
    with pytest.raises(ActionError) as info:
        parse_action(source)
    assert fragment in str(info.value)
    assert isinstance(info.value, LegatoError)


def test_rejected_statement_is_located_by_line() -> None:
    with pytest.raises(ActionError, match="line 2"):
        parse_action("pyautogui.click(1, 2)\nopen('/etc/passwd')")


def test_non_string_action_is_rejected() -> None:
    with pytest.raises(ActionError, match="must be a str"):
        parse_action(b"DONE")  # type: ignore[arg-type]


def test_parser_never_executes_code(tmp_path: object) -> None:
    marker = "legato_parse_marker"
    with pytest.raises(ActionError):
        parse_action(f"import builtins; setattr(builtins, {marker!r}, 1)")
    import builtins

    assert not hasattr(builtins, marker)


def test_actions_package_names_stay_importable_and_its_modules_short() -> None:
    import legato_gym.actions as actions

    kinds = {"Click", "Drag", "Hotkey", "KeyDown", "KeyUp", "MouseDown", "MouseMove", "MouseUp", "Press", "Scroll"}
    kinds |= {"Sleep", "TypeText", "Command", "ParsedAction", "KEY_NAMES", "PYAUTOGUI_FUNCTIONS", "parse_action"}
    assert kinds <= set(actions.__all__) and actions.MAX_ACTION_CHARS == 100_000
    assert all(hasattr(actions, name) for name in actions.__all__)
    counts = [len(f.read_text().splitlines()) for f in Path(actions.__file__).parent.glob("*.py")]
    assert len(counts) > 1 and max(counts) <= 600, counts
