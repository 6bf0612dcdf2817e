"""How a TRL dataset row or prompt names its legato task, for both TRL paths (:mod:`legato_rl.integrations.trl`).

:class:`TaskIndex` finds a task by id (a row's ``task_id``, the ``environment_factory`` path) or by
instruction (a prompt's last user message, the ``rollout_func`` path); :func:`task_dataset` builds the
``datasets.Dataset`` whose rows name them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from legato_gym import ConfigError, Task

__all__ = ["TaskIndex", "task_dataset"]


class TaskIndex:
    """Tasks by id and by instruction: how a dataset row or a prompt names its task.

    Raises:
        ConfigError: two tasks share an id.
    """

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.by_id: dict[str, Task] = {}
        for task in tasks:
            if task.task_id in self.by_id:
                raise ConfigError(f"two tasks have the id {task.task_id!r}; task ids must be unique")
            self.by_id[task.task_id] = task
        self.by_instruction: dict[str, Task] = {}
        #: instructions that more than one task has (a prompt cannot name those tasks)
        self.shared: set[str] = set()
        for task in tasks:
            key = task.instruction.strip()
            if key in self.by_instruction:
                self.shared.add(key)
            self.by_instruction[key] = task

    def from_row(self, row: Mapping[str, Any]) -> Task:
        """The task a dataset row names: ``row["task"]`` (a Task, its JSON or an id) or ``row["task_id"]``.

        Raises:
            ConfigError: the row names no task, or an unknown one.
        """
        value = row.get("task", row.get("task_id"))
        if isinstance(value, Task):
            return value
        if isinstance(value, Mapping):
            return Task.from_json(value)
        if not isinstance(value, str):
            raise ConfigError(
                f"the dataset row has no task (keys {sorted(row)}); give each row a 'task_id' column "
                "(task_dataset(tasks) does)"
            )
        task = self.by_id.get(value)
        if task is None:
            from legato_gym.suggest import suggest

            raise ConfigError(f"unknown task id {value!r}{suggest(value, list(self.by_id))}")
        return task

    def from_prompt(self, prompt: Any) -> Task:
        """The task whose instruction is the prompt's last user message (the ``rollout_func`` path).

        Raises:
            ConfigError: no task has that instruction, or two tasks share it.
        """
        text = _last_user_text(prompt).strip()
        if text in self.shared:
            raise ConfigError(f"several tasks share the instruction {text[:80]!r}; the prompt cannot name one")
        task = self.by_instruction.get(text)
        if task is None:
            raise ConfigError(
                f"no task has the instruction {text[:80]!r}; make each prompt a task's instruction "
                "(task_dataset(tasks))"
            )
        return task


def _last_user_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    for message in reversed(list(prompt)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    raise ConfigError(f"prompt {str(prompt)[:80]!r} has no user message")


def task_dataset(tasks: Sequence[Task], repeat: int = 1, *, prompt: str | None = None) -> Any:
    """A ``datasets.Dataset`` with one conversational prompt and the ``task_id`` per task.

    Args:
        tasks: the tasks, one row each.
        repeat: how many times the rows repeat.
        prompt: the user message's text; ``None`` uses the task's instruction (the ``rollout_func`` path
            finds the task by it). With ``environment_factory`` pass ``""``: the environment's ``reset``
            appends the screenshot and the instruction.
    """
    from datasets import Dataset

    rows = [
        {"prompt": [{"role": "user", "content": t.instruction if prompt is None else prompt}], "task_id": t.task_id}
        for t in tasks
    ]
    return Dataset.from_list(rows * repeat)
