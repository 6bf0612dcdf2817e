"""Real OSWorld tasks run with ``DONE`` alone, graded by desktop-env: what the untouched desktop scores.

Run *inside desktop-env's interpreter* by tests/gym/test_download_free.py:
``python untouched_scenarios.py '{"cache": DIR, "files": DIR, "osworld": DIR, "tasks": [task id, ...]}'``;
prints one JSON line, ``{"scores": {task id: score}}``. A feasible task must score 0 here: a getter that
answers "solved" before the agent acts would be scored without the agent.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop

SCREEN = (1280, 720)


def main(args: dict[str, Any]) -> dict[str, Any]:
    config = DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        timeouts=Timeouts(reset=180, ready=60),
        options={"grader": "osworld", "download_cache": args["cache"], "file_cache": args["files"]},
    )
    examples = Path(args["osworld"]) / "evaluation_examples" / "examples"
    scores = {}
    with LocalDesktop(config) as desktop:
        for task_id in args["tasks"]:
            path = next(examples.glob(f"*/{task_id}.json"))
            task_config = json.loads(path.read_text())
            desktop.reset(Task(task_id, task_config["instruction"], task_config, domain=path.parent.name))
            desktop.wait_after_reset()
            desktop.act("DONE")
            desktop.wait_before_eval()
            scores[task_id] = float(desktop.evaluate())
    return {"scores": scores}


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
