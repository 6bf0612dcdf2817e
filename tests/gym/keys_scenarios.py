"""One-action keyboard solutions of app_scenarios.py's tasks, run again and again: do keys reach the app in order?

Each solution is one action that moves the cursor and then types, as a policy would write it. Keys that reach
the app out of order (the typing before the cursor keys) or before it takes input score 0. Run *inside
desktop-env's interpreter* (it makes the documents and grades them) by benchmarks/keys_in_order.py
(tests/gym/test_local_apps.py runs ONE_ACTION through app_scenarios.py's ``one_action_runs``):
``python keys_scenarios.py '{"cache": DIR, "files": DIR, "apps": ["calc", ...], "runs": N, "options": {...}}'``;
prints one JSON line: per app, each run's score, ready flag and what the document held.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from app_scenarios import SCREEN, TASKS, _run

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop
from legato_gym.backends.local.file_cache import FileCache

#: ``app: the one action`` (the task's right answer in one action of several pyautogui calls).
ONE_ACTION = {
    # the Calc solution: top left, down to the row under the numbers, the formula
    "calc": "pyautogui.hotkey('ctrl', 'home'); pyautogui.press('down', presses=3); "
    "pyautogui.typewrite('=SUM(A2:A3)\\n')",
    "writer": "pyautogui.hotkey('ctrl', 'end'); pyautogui.typewrite('\\nThanks for all')",
    "impress": "pyautogui.press('tab'); pyautogui.press('enter'); pyautogui.hotkey('ctrl', 'a'); "
    "pyautogui.typewrite('Quarterly review'); pyautogui.press('esc'); pyautogui.press('esc')",
    "chrome": "pyautogui.hotkey('ctrl', 'l'); pyautogui.typewrite('file:///home/user/Desktop/hello.html\\n')",
}


def main(args: dict[str, Any]) -> dict[str, Any]:
    files = FileCache(args["files"])
    options = {"grader": "osworld", "download_cache": args["cache"], "file_cache": args["files"]}
    config = DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        timeouts=Timeouts(reset=120, ready=60),
        options={**options, **args.get("options", {})},
    )
    out: dict[str, Any] = {}
    with LocalDesktop(config) as desktop:
        for name in args["apps"]:
            task_config, _, _ = TASKS[name](files)
            task = Task(task_config["id"], task_config["instruction"], task_config, domain=task_config["snapshot"])
            out[name] = []
            for i in range(int(args["runs"])):
                out[name].append(_run(desktop, task, [ONE_ACTION[name]]))
                print(f"{name} run {i + 1}: score {out[name][-1]['score']}", file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
