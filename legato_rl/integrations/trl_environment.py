"""TRL 1.16's ``environment_factory``: legato desktops driven by the model's tool calls.

:class:`DesktopEnvironments` is the factory and :class:`DesktopTools` one environment; the overview of both
TRL paths, and when to pick which, is in :mod:`legato_rl.integrations.trl` (import from there).

The path, as TRL 1.16 runs it (``GRPOTrainer._generate_and_score_completions``)::

    reset(**row)        once per completion, before generation: the row's task on this desktop; returns
                        the first screenshot and the instruction, appended to the row's last user message
    click(x=..., y=...) one tool call = one action on the desktop = one new screenshot in the completion
    ...                 (TRL masks tool results out of the loss; their image tokens keep their pixels)
    get_reward()        once per completion, after generation: the desktop's grade (None: not scorable)

TRL pools environment instances and calls ``environment_factory()`` once per concurrent completion (the
generation batch of one process), so :class:`DesktopEnvironments` needs as many desktops as that batch;
it hands out desktop 0, 1, ... and refuses more with a :class:`~legato_gym.errors.ConfigError` naming the
fix. TRL calls ``reset`` and the tools one environment after the other, so the desktops of a batch do not
step in parallel: real desktops' latency adds up over the batch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from legato_gym import ConfigError, DesktopConfig, DesktopError, StateError, Task
from legato_gym.actions import parse_action
from legato_rl.integrations.trl_tasks import TaskIndex

if TYPE_CHECKING:
    from legato_gym.vector import DesktopVectorEnv

__all__ = ["GRID", "DesktopEnvironments", "DesktopTools", "EpisodeLog"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Tool coordinates run from 0 to ``GRID`` on both axes (Qwen-VL's 0..999 grid, as legato's Qwen harness).
GRID = 999


@dataclass
class EpisodeLog:
    """What one environment's episode did, for logging and tests.

    Attributes:
        task_id: the task played.
        desktop: the desktop's index in the vector env.
        actions: the action strings sent to the desktop, in order.
        timings: each action's seconds by phase (the desktop's ``info["timings"]``: ``act_s``, ``wait_s``, ...).
        screenshots: images returned to the model (the reset's included).
        reward: legato's grade, ``None`` until graded or when the desktop failed.
        ended: the desktop ended the episode (``DONE``/``FAIL`` or the step limit).
        error: the desktop failure that made the episode unscorable, else ``None``.
    """

    task_id: str
    desktop: int
    actions: list[str] = field(default_factory=list)
    timings: list[dict[str, float]] = field(default_factory=list)
    screenshots: int = 0
    reward: float | None = None
    ended: bool = False
    error: str | None = None


class _Driver:
    """One thread running an event loop that drives the vector env (a vector env has one driving thread).

    TRL calls tools from its training thread, and async reward functions from a daemon loop of its own;
    every desktop call goes through this thread, so any caller thread works.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="legato-trl-desktops", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if self.loop.is_closed():
            coro.close()
            raise StateError("the desktops were closed (DesktopEnvironments.close()); make a new DesktopEnvironments")
        if threading.current_thread() is self._thread:
            coro.close()
            raise StateError("a desktop call was made from the desktops' own thread; call from the trainer's")
        future: Future[_T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class DesktopEnvironments:
    """The ``environment_factory`` for TRL's ``GRPOTrainer``: legato desktops driven by tool calls.

    Each call returns a new :class:`DesktopTools` bound to the next desktop of one shared
    :class:`~legato_gym.vector.DesktopVectorEnv` (worker processes, any backend).

    Args:
        tasks: the tasks a dataset row may name (``row["task_id"]``), and the vector env's suite.
        backend: the desktop backend (``fake``, ``local``, ``osworld`` or ``package.module:Class``).
        desktops: desktops started; at least the generation batch of one process
            (``per_device_train_batch_size * steps_per_generation``), as TRL keeps one environment per
            completion of a batch.
        max_steps: actions after which the desktop truncates the episode and grades it.
        desktop: how to build the desktops.
        env_retries: resets tried again on a fresh desktop when a desktop fails while resetting.
        vector_env: use this vector env instead of starting one (it is not closed by :meth:`close`).
            It must be driven only through this object from now on.

    Raises:
        ConfigError: two tasks share an id, or an argument is out of range.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        *,
        backend: str = "fake",
        desktops: int = 8,
        max_steps: int = 15,
        desktop: DesktopConfig | None = None,
        env_retries: int = 1,
        vector_env: DesktopVectorEnv | None = None,
    ) -> None:
        if env_retries < 0:
            raise ConfigError(f"env_retries={env_retries!r} must be 0 or more")
        self.tasks = TaskIndex(tasks)
        self.env_retries = env_retries
        self.episodes: list[EpisodeLog] = []
        self._handed_out = 0
        self._driver = _Driver()
        self._owns_env = vector_env is None
        try:
            if vector_env is None:
                from legato_gym.vector import DesktopVectorEnv

                config = desktop
                self.env = self._driver.run(
                    _call(lambda: DesktopVectorEnv(desktops, backend, config, max_steps=max_steps, tasks=tasks))
                )
            else:
                self.env = vector_env
        except BaseException:
            self._driver.stop()
            raise

    def __call__(self) -> DesktopTools:
        """A new environment on the next free desktop (TRL calls this once per concurrent completion).

        Raises:
            ConfigError: every desktop is already handed out.
        """
        if self._handed_out >= self.env.num_envs:
            raise ConfigError(
                f"TRL asked for environment {self._handed_out + 1} but only {self.env.num_envs} desktops were "
                "started; give DesktopEnvironments(desktops=...) at least per_device_train_batch_size * "
                "steps_per_generation (and per_device_eval_batch_size when evaluating)"
            )
        tools = DesktopTools(self, self._handed_out)
        self._handed_out += 1
        return tools

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run a coroutine on the desktops' thread and return its result (for the environments)."""
        return self._driver.run(coro)

    def close(self) -> None:
        """Stop the desktops (when this object started them) and the driving thread. Idempotent."""
        if self._owns_env and not self.env.closed:
            self._driver.run(_call(self.env.close))
        self._driver.stop()

    def __enter__(self) -> DesktopEnvironments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _call(function: Callable[[], _T]) -> _T:
    # a synchronous vector-env call (its constructor, close) made on the desktops' thread
    return function()


class DesktopTools:
    """One TRL environment: a legato desktop, its computer-use actions as tools, its grade as the reward.

    TRL exposes every public method but ``reset`` and ``get_reward`` as a tool, with the schema read from
    its signature and docstring. Coordinates are on a 0..999 grid over the screenshot (Qwen-VL's grid),
    mapped to the desktop's pixels as legato's Qwen harness maps them. Each action tool returns the new
    screenshot as an image block (the last one, after ``done``/``fail`` or the step limit, returns text);
    an action the desktop refuses raises :class:`~legato_gym.errors.ActionError`, which TRL shows the model
    as the tool's error.

    Made by :class:`DesktopEnvironments`; not meant to be built directly.
    """

    def __init__(self, owner: DesktopEnvironments, env_id: int) -> None:
        self._owner = owner
        self._env_id = env_id
        self._episode: EpisodeLog | None = None
        self._screen = owner.env.config.screen

    # -- TRL's protocol --------------------------------------------------------------------------------

    def reset(self, **row: Any) -> list[dict[str, Any]] | str:
        """Reset the desktop to the row's task; returns its first screenshot and the instruction.

        The task is ``row["task_id"]`` (one of the factory's tasks), or ``row["task"]`` (a task id, a
        :class:`~legato_gym.Task` or its JSON). A desktop that fails while resetting is replaced and tried
        again ``env_retries`` times; after that the episode is unscorable (``get_reward`` returns ``None``)
        and the text returned says so.

        Raises:
            ConfigError: the row names no task, or one the factory does not know.
        """
        task = self._owner.tasks.from_row(row)
        self._episode = EpisodeLog(task.task_id, self._env_id)
        self._owner.episodes.append(self._episode)
        env = self._owner.env
        for attempt in range(self._owner.env_retries + 1):
            try:
                obs, _ = self._owner.run(env.areset(self._env_id, task))
            except DesktopError as exc:
                log.warning("desktop %d failed to reset %s (try %d): %s", self._env_id, task.task_id, attempt, exc)
                self._episode.error = f"{type(exc).__name__}: {exc}"
                continue
            self._episode.error = None
            return self._observation(obs["screenshot"], f"Instruction: {task.instruction}")
        self._episode.ended = True
        return "The desktop could not be started; this episode is not graded."

    def get_reward(self) -> float | None:
        """legato's grade of the episode, in [0, 1]; ``None`` (left out of the GRPO group) if the desktop failed.

        An episode the model ended without ``done``/``fail`` is graded as the desktop stands.
        """
        episode = self._episode
        if episode is None or episode.error is not None:
            return None
        if not episode.ended:
            try:
                episode.reward, _ = self._owner.run(self._owner.env.atruncate(self._env_id))
            except DesktopError as exc:
                episode.error = f"{type(exc).__name__}: {exc}"
                return None
            episode.ended = True
        return episode.reward

    # -- tools (TRL reads their docstrings: keep the Args sections) ------------------------------------

    def click(self, x: int, y: int) -> list[dict[str, Any]] | str:
        """Left-click a point of the screen.

        Args:
            x: horizontal position, 0 (left edge) to 999 (right edge) of the screenshot.
            y: vertical position, 0 (top edge) to 999 (bottom edge) of the screenshot.
        """
        px, py = self._pixel(x, y)
        return self._act(f"pyautogui.click({px}, {py})")

    def double_click(self, x: int, y: int) -> list[dict[str, Any]] | str:
        """Double-click a point of the screen with the left button.

        Args:
            x: horizontal position, 0 (left edge) to 999 (right edge) of the screenshot.
            y: vertical position, 0 (top edge) to 999 (bottom edge) of the screenshot.
        """
        px, py = self._pixel(x, y)
        return self._act(f"pyautogui.doubleClick({px}, {py})")

    def right_click(self, x: int, y: int) -> list[dict[str, Any]] | str:
        """Right-click a point of the screen.

        Args:
            x: horizontal position, 0 (left edge) to 999 (right edge) of the screenshot.
            y: vertical position, 0 (top edge) to 999 (bottom edge) of the screenshot.
        """
        px, py = self._pixel(x, y)
        return self._act(f"pyautogui.rightClick({px}, {py})")

    def drag_to(self, x: int, y: int) -> list[dict[str, Any]] | str:
        """Press the left button where the pointer is, move to a point and release it.

        Args:
            x: horizontal position, 0 (left edge) to 999 (right edge) of the screenshot.
            y: vertical position, 0 (top edge) to 999 (bottom edge) of the screenshot.
        """
        px, py = self._pixel(x, y)
        return self._act(f"pyautogui.dragTo({px}, {py}, duration=0.5)")

    def scroll(self, clicks: int, x: int | None = None, y: int | None = None) -> list[dict[str, Any]] | str:
        """Turn the mouse wheel, where the pointer is or at a point.

        Args:
            clicks: notches to scroll; positive scrolls up, negative down.
            x: horizontal position, 0 to 999, or null for where the pointer is.
            y: vertical position, 0 to 999, or null for where the pointer is.
        """
        if (x is None) != (y is None):
            from legato_gym.errors import ActionError

            raise ActionError("scroll: give both x and y, or neither")
        if x is None or y is None:
            return self._act(f"pyautogui.scroll({int(clicks)})")
        px, py = self._pixel(x, y)
        return self._act(f"pyautogui.scroll({int(clicks)}, x={px}, y={py})")

    def type_text(self, text: str) -> list[dict[str, Any]] | str:
        """Type text on the keyboard (a newline presses Enter).

        Args:
            text: the text to type.
        """
        lines = str(text).replace("\r\n", "\n").split("\n")
        statements = []
        for index, line in enumerate(lines):
            if index:
                statements.append("pyautogui.press('enter')")
            if line:
                statements.append(f"pyautogui.typewrite({line!r})")
        return self._act("\n".join(statements) or "WAIT")

    def press(self, keys: list[str]) -> list[dict[str, Any]] | str:
        """Press keys one after the other (pyautogui key names such as "enter", "tab", "a").

        Args:
            keys: the keys, in order.
        """
        return self._act(f"pyautogui.press({[str(k) for k in keys]!r})")

    def hotkey(self, keys: list[str]) -> list[dict[str, Any]] | str:
        """Press keys together, as a chord (for example ["ctrl", "s"]).

        Args:
            keys: the keys, pressed in order and released in reverse order.
        """
        return self._act(f"pyautogui.hotkey({', '.join(repr(str(k)) for k in keys)})")

    def wait(self) -> list[dict[str, Any]] | str:
        """Do nothing for a moment and look at the screen again."""
        return self._act("WAIT")

    def done(self) -> list[dict[str, Any]] | str:
        """Declare the task complete; the desktop is graded and the episode ends."""
        return self._act("DONE")

    def fail(self) -> list[dict[str, Any]] | str:
        """Declare the task impossible; the desktop is graded and the episode ends."""
        return self._act("FAIL")

    # -- internals -------------------------------------------------------------------------------------

    def _pixel(self, x: Any, y: Any) -> tuple[int, int]:
        from legato_gym.errors import ActionError

        for name, value in (("x", x), ("y", y)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ActionError(f"{name}={value!r} must be a number from 0 to {GRID}")
        width, height = self._screen
        px = min(max(int(float(x) * width / GRID), 0), width - 1)
        py = min(max(int(float(y) * height / GRID), 0), height - 1)
        return px, py

    def _act(self, action: str) -> list[dict[str, Any]] | str:
        episode = self._episode
        if episode is None:
            raise StateError("a tool was called before reset(); TRL resets every environment first")
        if episode.ended:
            return "The episode is over; no more actions run."
        parse_action(action)  # an ActionError names what is wrong; TRL shows it to the model
        try:
            obs, reward, terminated, truncated, info = self._owner.run(self._owner.env.astep(self._env_id, action))
        except DesktopError as exc:
            episode.error = f"{type(exc).__name__}: {exc}"
            episode.ended = True
            raise
        episode.actions.append(action)
        timings = info.get("timings") or {}
        episode.timings.append({k: float(v) for k, v in timings.items() if isinstance(v, int | float)})
        if terminated or truncated:
            episode.reward = float(reward)
            episode.ended = True
            why = "the step limit was reached" if truncated and action not in ("DONE", "FAIL") else "it was ended"
            return f"The episode is over ({why}) and was graded."
        return self._observation(obs["screenshot"], None)

    def _observation(self, screenshot: Any, text: str | None) -> list[dict[str, Any]]:
        from PIL import Image

        assert self._episode is not None
        self._episode.screenshots += 1
        blocks: list[dict[str, Any]] = [{"type": "image", "image": Image.fromarray(screenshot)}]
        if text:
            blocks.append({"type": "text", "text": text})
        return blocks
