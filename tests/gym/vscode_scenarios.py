"""OSWorld-format VS Code tasks with files made here, and their scripted right and wrong solutions.

Run *inside desktop-env's interpreter* by tests/gym/test_local_vscode.py (desktop-env grades them):
``python vscode_scenarios.py '{"cache": DIR, "files": DIR, "osworld": DIR, "tasks": ["settings", ...]}'``; prints
one JSON line (``osworld``: the OSWorld checkout, for the real tasks in :data:`REAL`).

The tasks are built as OSWorld's vs_code tasks are: ``code`` launched by the setup, the window activated by
its title, the user's ``settings.json`` read by ``vm_file`` and checked by ``check_json_settings``, or a
file downloaded, opened with ``code FILE``, saved by the post-config's ``ctrl+s`` and compared with a gold
file by ``compare_text_file`` (its files come from the file cache under made-up URLs).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.backends.local.sandbox.lookalike import layout

SCREEN = (1280, 720)
URL = "https://files.legato.invalid/vscode/"
SETTINGS = "/home/user/.config/Code/User/settings.json"
WINDOW = "Visual Studio Code"


#: The maximized window's frame: the work area right of the default session's dock, under its top bar (x 70,
#: y 27, 1210 x 693 at 1280x720). The palette is drawn centred in the window, at a fixed depth below its top.
_LEFT, _TOP, _WIDTH, _ = layout(SCREEN).work_area
#: Where VS Code's command palette draws its first rows: blank until it opens.
PALETTE_ROWS = (_LEFT + _WIDTH // 2 - 240, _TOP + 60, 400, 100)
#: Where it draws its tenth row and below (over the empty editor's watermark): what is typed changes it.
PALETTE_MORE = (_LEFT + _WIDTH // 2 - 240, _TOP + 220, 400, 40)


def _until(action: str, region: tuple[int, int, int, int], until: str) -> str:
    """``action``, then wait (as a user watching the screen) until ``region`` shows its effect.

    ``until``: ``"drawn"`` (the blank region shows something) or ``"changed"`` (it differs from before).
    """
    grab = f"_root.get_image(*{region!r}, X.ZPixmap, 0xFFFFFFFF).data"
    waiting = f"len(set(memoryview({grab}).cast('I'))) < 2" if until == "drawn" else f"{grab} == _before"
    return (
        "from Xlib import X, display\n_root = display.Display().screen().root\n"
        f"_before = {grab}\n{action}\n_deadline = time.monotonic() + 60\n"
        f"while {waiting} and time.monotonic() < _deadline:\n    time.sleep(0.05)"
    )


def _until_title(action: str, title: str) -> str:
    """``action``, then wait until the active window's title contains ``title``."""
    active = "['xdotool', 'getactivewindow', 'getwindowname']"
    return (
        f"import subprocess\n{action}\n_deadline = time.monotonic() + 60\n"
        f"while {title!r} not in subprocess.run({active}, capture_output=True, text=True).stdout"
        " and time.monotonic() < _deadline:\n    time.sleep(0.05)"
    )


def _palette(command: str, title: str) -> list[str]:
    """Run a command from VS Code's command palette, as a user types it; it opens an editor titled ``title``.

    Each step waits for what the user would see before the next: the palette's list drawn, the list
    narrowed to the command typed, the editor's title.
    """
    return [
        _until("pyautogui.hotkey('ctrl', 'shift', 'p')", PALETTE_ROWS, "drawn"),
        _until(f"pyautogui.typewrite({command!r})", PALETTE_MORE, "changed"),
        _until_title("pyautogui.press('enter')", title),
    ]


def settings(cache: FileCache) -> tuple[dict[str, Any], list[str], list[str]]:
    """The user's line length for word wrapping set to 50 in settings.json (check_json_settings)."""
    config = {
        "id": "legato-vscode-wrap-column",
        "snapshot": "vscode",
        "instruction": "Please help me set the current user's line length for code wrapping to 50 characters in "
        "VS Code.",
        "source": "legato",
        "config": [
            {"type": "launch", "parameters": {"command": ["code"]}},
            {"type": "activate_window", "parameters": {"window_name": WINDOW}},
        ],
        "trajectory": "trajectories/",
        "related_apps": ["vscode"],
        "evaluator": {
            "func": "check_json_settings",
            "expected": {"type": "rule", "rules": {"expected": {"editor.wordWrapColumn": 50}}},
            "result": {"type": "vm_file", "path": SETTINGS, "dest": "settings.json"},
        },
        "proxy": False,
    }

    def solution(column: int) -> list[str]:
        # the new file's "{}" replaced; the editor adds closing quotes and brackets of its own as the text is
        # typed (it does not always type over them): what it added after the cursor is deleted
        text = f'{{"editor.wordWrapColumn": {column}}}'
        return [
            *_palette("Preferences: Open User Settings (JSON)", "settings.json"),
            "pyautogui.hotkey('ctrl', 'a')",
            f"pyautogui.typewrite({text!r})",
            "pyautogui.press('escape')",
            "pyautogui.hotkey('shift', 'end')",
            "pyautogui.press('delete')",
            "pyautogui.hotkey('ctrl', 's')",
        ]

    return config, solution(50), solution(60)


def edit(cache: FileCache) -> tuple[dict[str, Any], list[str], list[str]]:
    """A line appended to a text file opened with ``code FILE``, saved by the post-config (compare_text_file)."""
    cache.put(URL + "notes.txt", b"first line\n")
    cache.put(URL + "gold-notes.txt", b"first line\nsecond line\n")
    path = "/home/user/Desktop/notes.txt"
    save = "import pyautogui; import time; pyautogui.hotkey('ctrl', 's'); time.sleep(0.5);"
    config = {
        "id": "legato-vscode-append-line",
        "snapshot": "vscode",
        "instruction": "Add a line that says 'second line' at the end of notes.txt.",
        "source": "legato",
        "config": [
            {"type": "download", "parameters": {"files": [{"url": URL + "notes.txt", "path": path}]}},
            {"type": "launch", "parameters": {"command": ["code", path]}},
            {"type": "activate_window", "parameters": {"window_name": WINDOW}},
        ],
        "trajectory": "trajectories/",
        "related_apps": ["vscode"],
        "evaluator": {
            "postconfig": [
                {"type": "activate_window", "parameters": {"window_name": f"notes.txt - {WINDOW}"}},
                {"type": "sleep", "parameters": {"seconds": 0.5}},
                {"type": "execute", "parameters": {"command": ["python", "-c", save]}},
                {"type": "sleep", "parameters": {"seconds": 0.5}},
            ],
            "func": "compare_text_file",
            "expected": {"type": "cloud_file", "path": URL + "gold-notes.txt", "dest": "gold-notes.txt"},
            "result": {"type": "vm_file", "path": path, "dest": "notes.txt"},
        },
        "proxy": False,
    }

    # ctrl+end: after the file's last newline, on the empty last line; escape closes the word suggestions the
    # editor may show for "line" (an Enter would accept one rather than end the line)
    def solution(text: str) -> list[str]:
        return [
            "pyautogui.hotkey('ctrl', 'end')",
            f"pyautogui.typewrite({text!r})",
            "pyautogui.press('escape')",
            "pyautogui.press('enter')",
        ]

    return config, solution("second line"), solution("2nd line")


TASKS: dict[str, Callable[[FileCache], tuple[dict[str, Any], list[str], list[str]]]] = {
    "settings": settings,
    "edit": edit,
}


def _color_theme(label: str) -> list[str]:
    """Pick a color theme in the palette's "Preferences: Color Theme" (second in the list it narrows to)."""
    return [
        _until("pyautogui.hotkey('ctrl', 'shift', 'p')", PALETTE_ROWS, "drawn"),
        _until("pyautogui.typewrite('Preferences: Color Theme')", PALETTE_MORE, "changed"),
        "pyautogui.press('down')",  # below "Preferences: Browse Color Themes in Marketplace"
        _until("pyautogui.press('enter')", PALETTE_MORE, "changed"),  # the list of themes
        _until(f"pyautogui.typewrite({label!r})", PALETTE_MORE, "changed"),
        "pyautogui.press('enter')",
    ]


#: Real OSWorld vs_code tasks that need no download: ``name -> (task id, right actions, wrong actions)``.
#: 982d12a5: its setup writes ``{"workbench.colorTheme": "Red"}``; ``compare_config`` wants the file's text to
#: be exactly the same object with "Visual Studio Dark", as VS Code's in-place edit of settings.json leaves it.
REAL: dict[str, tuple[str, list[str], list[str]]] = {
    "theme": (
        "982d12a5-beab-424f-8d38-d2a48429e511",
        _color_theme("Dark (Visual Studio)"),
        _color_theme("Light (Visual Studio)"),
    ),
}


def _run(desktop: LocalDesktop, task: Task, actions: list[str]) -> dict[str, Any]:
    desktop.reset(task)
    waited = desktop.wait_after_reset()
    titles = [w.title for w in desktop.display.windows()]
    for action in actions:
        desktop.act(action)
    desktop.wait_before_eval()
    score = float(desktop.evaluate())
    result = task.evaluator["result"]
    saved = desktop.client.file(str(result["path"]))
    return {
        "score": score,
        "ready": waited.ready,
        "titles": titles,
        "saved": None if saved is None else saved.decode(errors="replace"),
        "kind": desktop.last_reset_kind,
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    files = FileCache(args["files"])
    config = DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        timeouts=Timeouts(reset=180, ready=120),
        options={
            "grader": "osworld",
            "download_cache": args["cache"],
            "file_cache": args["files"],
            "window_timeout": 120.0,  # the editor's window on a busy machine: code-server, Chromium, the workbench
        },
    )
    out: dict[str, Any] = {}
    with LocalDesktop(config) as desktop:
        for name in args["tasks"]:
            if name in REAL:
                task_id, right, wrong = REAL[name]
                path = Path(args["osworld"], "evaluation_examples", "examples", "vs_code", f"{task_id}.json")
                task_config = json.loads(path.read_text())
            else:
                task_config, right, wrong = TASKS[name](files)
            task = Task(task_config["id"], task_config["instruction"], task_config, domain="vs_code")
            out[name] = {"right": _run(desktop, task, right), "wrong": _run(desktop, task, wrong)}
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
