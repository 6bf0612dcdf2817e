"""Episode semantics, in one place: what reset and step do to a desktop, and when an episode is graded.

:class:`Episode` drives one :class:`~legato_gym.contract.Desktop` through the contract's call order and times
each phase. ``DesktopEnv`` and the vector env's workers both use it, so their episodes cannot drift apart.

This module imports only the standard library and legato's own stdlib-only modules: it runs inside desktop
worker processes, which may use another interpreter.

Example::

    episode = Episode(desktop, max_steps=15)
    obs, info = episode.reset(task)
    obs, reward, terminated, truncated, info = episode.step("pyautogui.click(10, 20)")
    obs, reward, terminated, truncated, info = episode.step("DONE")   # graded: reward in [0, 1]
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Any, Final

from legato_gym.contract import Desktop, Observation, Task, screen_size_of
from legato_gym.errors import ActionError, AgentFault, ConfigError, LegatoError, StateError

__all__ = ["END_ACTIONS", "UNKNOWN", "Episode", "Unknown"]


class Unknown(enum.Enum):
    """The type of :data:`UNKNOWN`: no word on the next task (as opposed to ``None``, "not known")."""

    UNKNOWN = "unknown"


#: ``Episode.reset(next_task=...)`` not given: the desktop's ``expect_next`` is not called.
UNKNOWN: Final = Unknown.UNKNOWN

#: Actions that end an episode (``terminated``); it is then graded.
END_ACTIONS = ("DONE", "FAIL")


class Episode:
    """One desktop's episodes: reset, steps, and grading on the step that ends the episode.

    Args:
        desktop: the desktop to drive.
        max_steps: steps after which the episode is truncated (and still graded).
        expect_next: the desktop's hint of the task after the next reset, bound to it
            (:meth:`Backend.hint_next <legato_gym.backends.Backend.hint_next>`); ``None``: it takes none.

    Attributes:
        max_steps: the step limit; a new value applies from the next ``reset`` (``DesktopEnv`` sets it to the
            limit of a ``TimeLimit`` around it).
        steps: steps taken in the current episode.
        task: the current task, or ``None`` before the first reset.
        done: the current episode has ended (graded, or broken by a desktop error).
        last_info: the info dict of the last ``reset``, ``step`` or ``truncate`` (``truncate`` puts its
            timings there).
    """

    def __init__(
        self, desktop: Desktop, *, max_steps: int = 15, expect_next: Callable[[Task | None], None] | None = None
    ) -> None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigError(f"max_steps={max_steps!r} must be a positive integer, e.g. 15")
        self.desktop = desktop
        self._expect_next = expect_next
        self.max_steps = max_steps
        self.steps = 0
        self._screen: tuple[int, int] = (0, 0)  # (height, width) of the reset's observation
        self.task: Task | None = None
        self.done = False
        self.last_info: dict[str, Any] = {}
        self._broken = False

    def reset(self, task: Task, *, next_task: Task | Unknown | None = UNKNOWN) -> tuple[Observation, dict[str, Any]]:
        """Start an episode on ``task``: ``reset``, ``wait_after_reset``, ``observe``.

        ``next_task``, when given (``None`` included), is passed first to the desktop's ``expect_next``, if its
        backend declares one: the task of the reset after this one, as far as the caller knows (see :mod:`.contract`).

        Returns:
            The first observation and ``info = {"task_id", "timings": {"reset_s", "wait_after_reset_s",
            "obs_s"}, "ready", "reset_kind"}`` (how the desktop was reset, in its backend's word, or ``None``).
        """
        self.task = None
        self.done = False
        self.steps = 0
        self._broken = True  # until the reset completes
        if next_task is not UNKNOWN and self._expect_next is not None:
            self._expect_next(next_task)
        t0 = time.perf_counter()
        kind = self.desktop.reset(task)
        t1 = time.perf_counter()
        waited = self.desktop.wait_after_reset()
        t2 = time.perf_counter()
        obs = self.desktop.observe()
        t3 = time.perf_counter()
        self._screen = obs.screenshot.shape[:2]
        self.task = task
        self._broken = False
        info: dict[str, Any] = {
            "task_id": task.task_id,
            "timings": {"reset_s": t1 - t0, "wait_after_reset_s": t2 - t1, "obs_s": t3 - t2},
            "ready": bool(waited.ready),
            "reset_kind": kind if isinstance(kind, str) and kind else None,
        }
        self.last_info = info
        return obs, info

    def _check_running(self, call: str) -> None:
        if self.task is None:
            what = "a failed reset" if self._broken else "reset(task)"
            raise StateError(f"{call} called before {what}; call reset(task) first")
        if self._broken:
            raise StateError(f"{call} called after the desktop failed during this episode; call reset(task)")
        if self.done:
            raise StateError(f"{call} called after the episode ended; call reset(task) to start the next one")

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run one action; grade the episode when it ends.

        ``DONE`` and ``FAIL`` terminate the episode; reaching ``max_steps`` truncates it. Either way the desktop
        is graded (``wait_before_eval`` then ``evaluate``) and the score is the reward; other steps give 0.
        A desktop that raises :class:`~legato_gym.errors.AgentFault` (the agent's actions destroyed or
        exhausted it) terminates the episode with reward 0 and ``info["agent_fault"] = {"cause", "message"}``.

        Returns:
            ``(obs, reward, terminated, truncated, info)`` with ``info = {"step", "action", "timings": {"act_s",
            "ready_s", "wait_s", "obs_s"} (+ "wait_before_eval_s", "eval_s" when graded)}``.

        Raises:
            StateError: before ``reset`` or after the episode ended.
            ActionError: ``action`` is not a string.
        """
        self._check_running("step()")
        if not isinstance(action, str):
            raise ActionError(f"an action must be a str (pyautogui code, WAIT, DONE or FAIL), not {action!r:.80}")
        self._broken = True  # until the step completes
        t0 = time.perf_counter()
        try:
            result = self.desktop.act(action)
        except AgentFault as fault:
            self.steps += 1
            return self._agent_fault(fault, action, {"act_s": time.perf_counter() - t0})
        t1 = time.perf_counter()
        self.steps += 1
        terminated = action in END_ACTIONS
        truncated = not terminated and self.steps >= self.max_steps
        ready_s, wait_s = float(result.ready_s), float(result.wait_s)
        timings: dict[str, float] = {"act_s": max(0.0, (t1 - t0) - ready_s - wait_s), "ready_s": ready_s}
        timings["wait_s"] = wait_s
        reward = 0.0
        try:
            if terminated or truncated:
                reward, grading = self._grade()
                timings.update(grading)
            t2 = time.perf_counter()
            obs = self.desktop.observe()
        except AgentFault as fault:
            return self._agent_fault(fault, action, timings)
        timings["obs_s"] = time.perf_counter() - t2
        self._broken = False
        self.done = terminated or truncated
        info: dict[str, Any] = {"step": self.steps, "action": action, "timings": timings}
        self.last_info = info
        return obs, reward, terminated, truncated, info

    def _agent_fault(
        self, fault: AgentFault, action: str, timings: dict[str, float]
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """End the episode as the agent's failure: terminated, reward 0, the cause in ``info["agent_fault"]``.

        The observation is the screen if the desktop still shows one, else a black screen.
        """
        self._broken = False
        self.done = True
        info: dict[str, Any] = {
            "step": self.steps,
            "action": action,
            "timings": timings,
            "agent_fault": {"cause": fault.cause, "message": str(fault)},
        }
        self.last_info = info
        return self._last_screen(), 0.0, True, False, info

    def _last_screen(self) -> Observation:
        task = self.task
        assert task is not None
        try:
            return self.desktop.observe()
        except LegatoError:
            import numpy as np  # only here: workers have numpy (their screenshots are arrays)

            size = screen_size_of(self.desktop)  # else the size the reset's observation had
            height, width = self._screen if size is None else (size[1], size[0])
            return Observation(screenshot=np.zeros((height, width, 3), np.uint8), instruction=task.instruction)

    def truncate(self) -> float:
        """Grade the episode now, without another action (a rollout timeout), and end it.

        Returns:
            The grader's score. Its timings are in ``last_info["timings"]``.
        """
        self._check_running("truncate()")
        self._broken = True
        try:
            reward, timings = self._grade()
        except AgentFault as fault:  # the grading found the desktop destroyed by the agent: its failure
            reward, timings = 0.0, {}
            self.last_info = {"agent_fault": {"cause": fault.cause, "message": str(fault)}}
        else:
            self.last_info = {}
        self._broken = False
        self.done = True
        self.last_info |= {"step": self.steps, "timings": timings, "truncated": True}
        return reward

    def _grade(self) -> tuple[float, dict[str, float]]:
        t0 = time.perf_counter()
        self.desktop.wait_before_eval()
        t1 = time.perf_counter()
        reward = float(self.desktop.evaluate())
        t2 = time.perf_counter()
        return reward, {"wait_before_eval_s": t1 - t0, "eval_s": t2 - t1}
