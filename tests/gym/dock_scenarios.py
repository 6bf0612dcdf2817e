"""OSWorld's ec4e3f68 ("remove vim from favorites") on a lookalike desktop, graded by desktop-env: its setup sets
the favourites with ``gsettings``, the dock shows them, and its grader reads them back with ``gsettings``.

Run *inside desktop-env's interpreter* by tests/gym/test_local_lookalike.py:
``python dock_scenarios.py '{"cache": DIR, "files": DIR, "osworld": DIR}'``; prints one JSON line,
``{"untouched": score, "unpinned": score}``: the score of ``DONE`` alone, and of a right-click on Vim's launcher
and its menu's Unpin, as an agent does it on the VM. With ``"grader": "local"`` (called in the tests' own
interpreter) legato's built-in grader grades instead.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop, LocalOptions
from legato_gym.backends.local.sandbox.lookalike import layout
from legato_gym.backends.local.sandbox.panel import MENU_ROW

SCREEN = (1280, 720)
TASK = "ec4e3f68-9ea4-4c18-a5c9-69f89d1178b3"


def main(args: dict[str, Any]) -> dict[str, Any]:
    grader = args.get("grader", "osworld")
    options = LocalOptions(
        session="lookalike", grader=grader, download_cache=args["cache"], file_cache=args["files"], prestart=False
    )
    config = DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=180, ready=60), options=options)
    path = next((Path(args["osworld"]) / "evaluation_examples" / "examples").glob(f"*/{TASK}.json"))
    task_config = json.loads(path.read_text())
    task = Task(TASK, task_config["instruction"], task_config, domain=path.parent.name)
    # the setup's favourites: Thunderbird, Vim, Chrome; Vim's menu: New Window, Unpin, Show Details
    spot = layout(SCREEN)
    vim = spot.first_centre + spot.cell  # the second launcher
    unpin = vim - (MENU_ROW * 3 + 12) // 2 + 6 + MENU_ROW + MENU_ROW // 2
    episodes = {
        "untouched": ["DONE"],
        "unpinned": [f"pyautogui.rightClick(35, {vim})", f"pyautogui.click(150, {unpin})"],
    }
    scores = {}
    with LocalDesktop(config) as desktop:
        for name, actions in episodes.items():
            desktop.reset(task)
            desktop.wait_after_reset()
            for action in actions:
                desktop.act(action)
            desktop.wait_before_eval()
            scores[name] = float(desktop.evaluate())
    return scores


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
