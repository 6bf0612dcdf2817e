"""OSWorld-format tasks graded through the accessibility tree, with their scripted right and wrong solutions.

Run *inside desktop-env's interpreter* by tests/gym/test_local_atspi.py (desktop-env grades them; its
getters read the tree from the desktop's ``/accessibility``):
``python atspi_scenarios.py '{"cache": DIR, "files": DIR, "tasks": ["editor", ...]}'``; prints one JSON line.

* ``editor``: text typed into mousepad, checked with ``check_accessibility_tree`` (the ``accessibility_tree``
  getter, a CSS selector with OSWorld's ``st`` namespace and an exact text), as OSWorld's Thunderbird and
  multi-app tasks check what an app shows;
* ``chrome``: the page Chrome shows, read from its address bar in the tree (``active_url_from_accessTree``,
  which looks for ``application[name=Google Chrome]``) and checked with ``is_expected_active_tab``;
* ``impress``: OSWorld's own task ef9d12bd (its setup closes Impress's slide pane; ``check_left_panel``
  looks for the pane in the tree), its JSON read from ``args["impress"]``; the right solution opens the pane
  again from the View menu, the wrong one does nothing.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop

SCREEN = (1280, 720)
PAGES = "/home/user/Desktop"


def editor() -> tuple[dict[str, Any], list[str], list[str]]:
    rule = {"selectors": ["application[name=mousepad] text[st|editable=true]"], "text": "Hello legato", "exact": True}
    config = {
        "id": "legato-atspi-editor-text",
        "snapshot": "os",
        "instruction": "Type 'Hello legato' into the text editor.",
        "source": "legato",
        "config": [{"type": "launch", "parameters": {"command": ["mousepad"]}}],
        "trajectory": "trajectories/",
        "related_apps": ["os"],
        "evaluator": {
            "func": "check_accessibility_tree",
            "result": {"type": "accessibility_tree"},
            "expected": {"type": "rule", "rules": [rule]},
        },
        "proxy": False,
    }
    return config, ["pyautogui.typewrite('Hello legato')"], ["pyautogui.typewrite('Hello world')"]


def chrome() -> tuple[dict[str, Any], list[str], list[str]]:
    pages = " && ".join(
        f"printf '<html><head><title>{name}</title></head><body>{name}</body></html>' > {PAGES}/{name}.html"
        for name in ("start", "target", "other")
    )
    target = f"file://{PAGES}/target.html"
    config = {
        "id": "legato-atspi-chrome-active-url",
        "snapshot": "chrome",
        "instruction": f"Open {target} in Chrome.",
        "source": "legato",
        "config": [
            {"type": "execute", "parameters": {"command": f"mkdir -p {PAGES} && {pages}", "shell": True}},
            {"type": "launch", "parameters": {"command": ["google-chrome", f"file://{PAGES}/start.html"]}},
        ],
        "trajectory": "trajectories/",
        "related_apps": ["chrome"],
        "evaluator": {
            "func": "is_expected_active_tab",
            "result": {"type": "active_url_from_accessTree", "goto_prefix": "file://"},  # the bar shows no scheme
            "expected": {"type": "rule", "rules": {"type": "url", "url": target}},
        },
        "proxy": False,
    }
    go = "pyautogui.hotkey('ctrl', 'l')"
    right = [go, f"pyautogui.typewrite('{target}\\n')"]
    wrong = [go, f"pyautogui.typewrite('file://{PAGES}/other.html\\n')"]
    return config, right, wrong


def impress(path: str) -> tuple[dict[str, Any], list[str], list[str]]:
    with open(path) as f:
        config: dict[str, Any] = json.load(f)
    # the keys the task's setup pressed to close the pane (View, its 11th item) open it again
    menu = "pyautogui.press('f10'); pyautogui.press('right', presses=2, interval=0.1)"
    right = [f"{menu}; time.sleep(0.3); pyautogui.press('down', presses=11, interval=0.1); pyautogui.press('enter')"]
    return config, right, []


TASKS: dict[str, Callable[[], tuple[dict[str, Any], list[str], list[str]]]] = {"editor": editor, "chrome": chrome}


def _run(desktop: LocalDesktop, task: Task, actions: list[str]) -> dict[str, Any]:
    desktop.reset(task)
    ready = desktop.wait_after_reset().ready
    for action in actions:
        desktop.act(action)
    desktop.wait_before_eval()
    return {"score": float(desktop.evaluate()), "ready": ready, "titles": [w.title for w in desktop.display.windows()]}


def main(args: dict[str, Any]) -> dict[str, Any]:
    config = DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        timeouts=Timeouts(reset=120, ready=60),
        options={"grader": "osworld", "download_cache": args["cache"], "file_cache": args["files"]},
    )
    out: dict[str, Any] = {}
    with LocalDesktop(config) as desktop:
        for name in args["tasks"]:
            task_config, right, wrong = impress(args["impress"]) if name == "impress" else TASKS[name]()
            task = Task(task_config["id"], task_config["instruction"], task_config, domain=task_config["snapshot"])
            out[name] = {"right": _run(desktop, task, right), "wrong": _run(desktop, task, wrong)}
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
