"""The local backend's task suite (OSWorld format) and the real OSWorld tasks this desktop can run.

Every local task comes with a scripted correct solution and a wrong one (:func:`solution`), in the
``pyautogui`` action space, so tests can check that the grader gives 1 and 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from legato_gym.config import DesktopConfig
from legato_gym.contract import Task

__all__ = ["LOCAL_TASKS", "OSWORLD_OS_TASKS", "TASK_DATA", "default_tasks", "osworld_tasks", "solution"]

#: Gold files of the local tasks, by task id (copied into the task's cache dir at reset).
TASK_DATA = Path(__file__).with_name("task_data")

_CLICK_CENTRE = "pyautogui.click({x}, {y}); "


def _terminal_task(task_id: str, instruction: str, setup: list[dict[str, Any]], evaluator: dict[str, Any]) -> Task:
    config = {
        "id": task_id,
        "snapshot": "local",
        "instruction": instruction,
        "source": "legato",
        "config": [*setup, {"type": "launch", "parameters": {"command": ["xterm"]}}],
        "related_apps": ["terminal"],
        "evaluator": evaluator,
        "proxy": False,
    }
    return Task(task_id=task_id, instruction=instruction, config=config, domain="local")


def _local_tasks() -> list[Task]:
    editor_id = "local-editor-write-save"
    editor = {
        "id": editor_id,
        "snapshot": "local",
        "instruction": "In the text editor, type the line 'buy milk' into notes.txt and save the file.",
        "source": "legato",
        "config": [
            {
                "type": "execute",
                "parameters": {"command": "mkdir -p ~/Documents && : > ~/Documents/notes.txt", "shell": True},
            },
            {"type": "open", "parameters": {"path": "~/Documents/notes.txt"}},
        ],
        "related_apps": ["text editor"],
        "evaluator": {
            "func": "compare_text_file",
            "result": {"type": "vm_file", "path": "~/Documents/notes.txt", "dest": "notes.txt"},
            "expected": {"type": "cache_file", "path": "expected_notes.txt"},
            "options": {"ignore_blanks": True},
        },
        "proxy": False,
    }
    return [
        _terminal_task(
            "local-terminal-create-file",
            "Using the terminal, create a file hello.txt in your home folder that contains the line: Hello, legato!",
            [],
            {
                "func": "exact_match",
                "result": {"type": "vm_command_line", "command": "cat ~/hello.txt", "shell": True},
                "expected": {"type": "rule", "rules": {"expected": "Hello, legato!\n"}},
            },
        ),
        _terminal_task(
            "local-files-rename",
            "Rename the file draft.txt on the Desktop to final.txt.",
            [
                {
                    "type": "execute",
                    "parameters": {"command": "mkdir -p ~/Desktop && echo report > ~/Desktop/draft.txt", "shell": True},
                }
            ],
            {
                "func": "check_include_exclude",
                "result": {
                    "type": "vm_command_line",
                    "command": "ls ~/Desktop; cat ~/Desktop/final.txt",
                    "shell": True,
                },
                "expected": {"type": "rule", "rules": {"include": ["final.txt", "report"], "exclude": ["draft.txt"]}},
            },
        ),
        Task(task_id=editor_id, instruction=editor["instruction"], config=editor, domain="local"),  # type: ignore[arg-type]
    ]


LOCAL_TASKS: tuple[str, ...] = ("local-terminal-create-file", "local-files-rename", "local-editor-write-save")

#: Real OSWorld ``os`` tasks whose setup and grader need nothing this desktop lacks (no GNOME settings,
#: no sound, no downloads): a rename graded by ``exact_match`` over ``vm_command_line``, and five
#: infeasible tasks graded by the agent's final ``FAIL``.
OSWORLD_OS_TASKS: tuple[str, ...] = (
    "e0df059f-28a6-4169-924f-b9623e7184cc",
    "4783cc41-c03c-4e1b-89b4-50658f642bd5",
    "a462a795-fdc7-4b23-b689-e8b6df786b78",
    "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa",
    "c288e301-e626-4b98-a1ab-159dcb162af5",
    "fe41f596-a71b-4c2f-9b2f-9dcd40b568c3",
)


def osworld_tasks(osworld_path: Path) -> list[Task]:
    """The runnable OSWorld ``os`` tasks from a checkout (those of :data:`OSWORLD_OS_TASKS` present)."""
    tasks = []
    for task_id in OSWORLD_OS_TASKS:
        path = osworld_path / "evaluation_examples" / "examples" / "os" / f"{task_id}.json"
        if path.is_file():
            config = json.loads(path.read_text())
            tasks.append(
                Task(task_id=task_id, instruction=config["instruction"], config=config, domain="os", source=path)
            )
    return tasks


def default_tasks(config: DesktopConfig) -> list[Task]:
    """The local suite, plus the runnable OSWorld ``os`` tasks when ``config.osworld_path`` is set."""
    tasks = _local_tasks()
    if config.osworld_path is not None:
        tasks += osworld_tasks(config.osworld_path)
    return tasks


def solution(task_id: str, screen: tuple[int, int], *, correct: bool = True) -> list[str]:
    """A scripted action sequence for a task: the correct one, or a plausible wrong one.

    Raises:
        KeyError: no scripted solution for ``task_id``.
    """
    x, y = screen[0] // 2, screen[1] // 2
    click = _CLICK_CENTRE.format(x=x, y=y)
    if task_id == "local-terminal-create-file":
        text = "Hello, legato!" if correct else "Hello legato"
        command = f"echo {text!r} > ~/hello.txt\n"
        return [click + f"pyautogui.typewrite({command!r})", "DONE"]
    if task_id == "local-files-rename":
        verb = "mv" if correct else "cp"
        return [click + f"pyautogui.typewrite('{verb} ~/Desktop/draft.txt ~/Desktop/final.txt\\n')", "DONE"]
    if task_id == "local-editor-write-save":
        text = "buy milk" if correct else "buy bread"
        return [click + f"pyautogui.typewrite({text!r}); pyautogui.hotkey('ctrl', 's')", "DONE"]
    if task_id == "e0df059f-28a6-4169-924f-b9623e7184cc":
        target = "todo_list_Jan_2" if correct else "todo_list_Jan_3"
        return [
            "import os; home = os.path.expanduser('~/Desktop/'); "
            f"os.rename(home + 'todo_list_Jan_1', home + {target!r})",
            "DONE",
        ]
    if task_id in OSWORLD_OS_TASKS:  # the infeasible ones
        return ["FAIL"] if correct else ["DONE"]
    raise KeyError(f"no scripted solution for task {task_id!r}")
