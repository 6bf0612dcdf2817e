"""A tiny desktop for the vector env's fault tests: actions that crash, hang, raise or spawn children.

Loaded by the workers as ``vector_toy:ToyDesktop`` (this directory on ``PYTHONPATH``).

* ``EXIT``: the worker process exits at once (``os._exit(3)``), as a crashed VM driver would.
* ``HANG``: blocks for an hour (the parent's deadline must end it).
* ``SLOW``: takes a second, well within the deadline.
* ``CRASH``: raises :class:`DesktopCrashed` (the worker reports it; the parent replaces the worker).
* ``BOOM``: raises ``ValueError`` (a backend bug: reported as a DesktopError, the worker is kept).
* a task with ``config["child_pid_file"]`` starts ``sleep 600`` in reset and writes its pid there.
* ``expect_next`` hints are kept in ``hints`` (the task ids, ``None`` for "not known"), in order.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np

from legato_gym.config import DesktopConfig
from legato_gym.contract import ActResult, Observation, Task, Waited
from legato_gym.errors import DesktopCrashed


def default_tasks(config: DesktopConfig) -> list[Task]:
    return [Task(f"toy-{i}", f"toy task {i}", {}) for i in range(3)]


class ToyDesktop:
    def __init__(self, config: DesktopConfig, *, seed: int | None = None) -> None:
        self.config = config
        self.seed = seed
        self.steps = 0
        self.task: Task | None = None
        self.last_action = ""
        self.children: list[subprocess.Popen[bytes]] = []
        self.hints: list[str | None] = []

    def expect_next(self, task: Task | None) -> None:
        self.hints.append(None if task is None else task.task_id)

    @property
    def screen_size(self) -> tuple[int, int]:
        return self.config.screen

    def reset(self, task: Task) -> None:
        self.task, self.steps, self.last_action = task, 0, ""
        pid_file = task.config.get("child_pid_file")
        if pid_file:
            child = subprocess.Popen(["sleep", "600"])
            self.children.append(child)
            Path(pid_file).write_text(str(child.pid))

    def wait_after_reset(self) -> Waited:
        return Waited(0.0, True)

    def observe(self) -> Observation:
        width, height = self.config.screen
        value = (self.steps * 37 + (self.seed or 0)) % 256
        assert self.task is not None
        return Observation(np.full((height, width, 3), value, np.uint8), self.task.instruction)

    def act(self, action: str) -> ActResult:
        if action == "EXIT":
            os._exit(3)
        if action == "HANG":
            time.sleep(3600)
        if action == "SLOW":
            time.sleep(1.0)
        if action == "CRASH":
            raise DesktopCrashed("toy desktop crashed on purpose")
        if action == "BOOM":
            raise ValueError("toy backend bug")
        self.steps += 1
        self.last_action = action
        return ActResult(act_s=0.0)

    def wait_before_eval(self) -> Waited:
        return Waited(0.0, True)

    def evaluate(self) -> float:
        return 1.0 if self.last_action == "DONE" else 0.0

    def ping(self, value: int) -> int:
        return value + (self.seed or 0)

    def close(self) -> None:
        for child in self.children:
            child.kill()
            child.wait()
        self.children.clear()
