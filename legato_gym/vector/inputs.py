"""What a vector env's callers pass, checked and read: seeds, reset masks, actions and tasks.

Each function raises :class:`~legato_gym.errors.ConfigError` (or :class:`~legato_gym.errors.ActionError`,
:class:`~legato_gym.errors.UnknownTaskError`) naming the value and the fix, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from legato_gym.contract import Task
from legato_gym.errors import ActionError, ConfigError, UnknownTaskError
from legato_gym.suggest import suggest
from legato_gym.tasks import task_from_config

__all__ = ["check_actions", "check_env_id", "pick_tasks", "reset_mask", "reset_seeds", "resolve_task"]


def check_env_id(env_id: int, num_envs: int) -> None:
    """Raise unless ``env_id`` names one of ``num_envs`` desktops."""
    if not 0 <= env_id < num_envs:
        raise ConfigError(f"env_id={env_id!r} is out of range; this vector env has {num_envs} desktops")


def check_actions(actions: Sequence[str], ids: list[int], check: Callable[[int], None]) -> list[str]:
    """One ``str`` action per desktop of ``ids`` (which may not repeat a desktop); ``check(i)`` runs after each."""
    if isinstance(actions, str):
        raise ActionError(f"actions={actions!r:.80} must be a sequence with one action per desktop, not a str")
    actions = list(actions)
    if len(actions) != len(ids):
        raise ActionError(f"got {len(actions)} actions for {len(ids)} desktops ({ids[:8]}...)")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"env_ids={ids!r} repeats a desktop")
    for i, action in zip(ids, actions, strict=True):
        if not isinstance(action, str):
            raise ActionError(f"action for env {i} must be a str (pyautogui code, WAIT, DONE or FAIL): {action!r:.80}")
        check(i)
    return [str(a) for a in actions]


def reset_seeds(seed: Any, num_envs: int) -> list[int | None]:
    """Per-desktop seeds, as Gymnasium's vector envs read ``reset(seed=...)``."""
    fix = "pass an int (desktop i gets seed + i), one seed or None per desktop, or None"
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        if seed < 0:
            raise ConfigError(f"reset(seed={seed!r}): a seed must be a non-negative int; {fix}")
        return [int(seed) + i for i in range(num_envs)]
    if isinstance(seed, str | bytes) or not isinstance(seed, Sequence | np.ndarray):
        raise ConfigError(f"reset(seed={seed!r:.80}) is not a seed; {fix}")
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ConfigError(
            f"reset(seed=...) got {len(seeds)} seeds for {num_envs} desktops; {fix} "
            f"(a list must have length num_envs={num_envs})"
        )
    for i, value in enumerate(seeds):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0):
            raise ConfigError(f"reset(seed=...): seed[{i}]={value!r:.80} must be a non-negative int or None")
    return [None if value is None else int(value) for value in seeds]


def reset_mask(mask: Any, num_envs: int) -> npt.NDArray[np.bool_]:
    """``options["reset_mask"]``: a bool array of shape ``(num_envs,)`` with a desktop selected (default all)."""
    if mask is None:
        return np.ones(num_envs, dtype=np.bool_)
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (num_envs,):
        raise ConfigError(f"options['reset_mask'] must be a bool numpy array of shape ({num_envs},), got {mask!r:.80}")
    if not mask.any():
        raise ConfigError("options['reset_mask'] selects no desktop; set at least one entry True")
    return mask


def pick_tasks(
    ids: list[int],
    options: Mapping[str, Any],
    tasks: Sequence[Task],
    rngs: Sequence[np.random.Generator],
    backend: str,
) -> dict[int, Task]:
    """The task of each desktop in ``ids``: ``options["tasks"][i]``, else ``options["task"]``, else one of
    ``tasks`` drawn with that desktop's generator."""
    unknown = set(options) - {"tasks", "task"}
    if unknown:
        raise ConfigError(f"unknown reset options {sorted(unknown)}; use 'tasks', 'task' or 'reset_mask'")
    given: Mapping[Any, Any] = options.get("tasks") or {}
    chosen: dict[int, Task] = {}
    for i in ids:
        check_env_id(i, len(rngs))
        value = given.get(i, options.get("task"))
        if value is None:
            if not tasks:
                raise ConfigError(f"backend {backend!r} has no default tasks; pass tasks= or options={{'tasks': ...}}")
            value = tasks[int(rngs[i].integers(len(tasks)))]
        chosen[i] = resolve_task(value, tasks)
    return chosen


def resolve_task(value: Task | Mapping[str, Any] | str, tasks: Sequence[Task]) -> Task:
    """A task from a :class:`Task`, a task config dict, or the id of one of ``tasks``."""
    if isinstance(value, Task):
        return value
    if isinstance(value, str):
        for task in tasks:
            if task.task_id == value:
                return task
        raise UnknownTaskError(f"unknown task id {value!r}{suggest(value, [t.task_id for t in tasks])}")
    if isinstance(value, Mapping):  # the same shapes DesktopEnv.reset accepts
        if "task_id" in value and "instruction" in value and "config" in value:
            return Task.from_json(value)
        if "task_id" in value and isinstance(value.get("config"), Mapping):
            return task_from_config(value["config"], task_id=value["task_id"], domain=value.get("domain"))
        return task_from_config(value)
    raise ConfigError(f"task {value!r:.80} must be a Task, a task config dict or a task id")
