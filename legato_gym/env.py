"""``DesktopEnv``: one desktop as a Gymnasium environment.

Example::

    import gymnasium as gym
    import legato_gym  # noqa: F401  (registers legato/FakeDesktop-v0)

    env = gym.make("legato/FakeDesktop-v0")
    obs, info = env.reset(seed=0)                       # a task from the backend's own suite
    obs, info = env.reset(options={"task": "fake-click-save"})
    obs, reward, terminated, truncated, info = env.step("pyautogui.click(100, 200)")
    obs, reward, terminated, truncated, info = env.step("DONE")   # graded: reward in [0, 1]
    env.close()

Step limits and ``TimeLimit``: an episode's reward is the grade of the desktop on the step that ends it, so
the env has to know on which step the episode ends. ``gymnasium.make(id, max_episode_steps=N)`` (and an
explicit ``gymnasium.wrappers.TimeLimit(env, N)``) wraps the env in a ``TimeLimit`` that the env is never told
about, so on every ``reset`` :class:`DesktopEnv` looks up the call stack for the ``TimeLimit`` wrappers whose
``reset`` is calling it and ends (and grades) its episodes on their step limit: the step that the wrapper
truncates is the graded one.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from legato_gym.backends import Backend, Finished, resolve_backend
from legato_gym.config import DesktopConfig
from legato_gym.contract import Desktop, Observation, Task, screen_size_of
from legato_gym.episode import Episode
from legato_gym.errors import ConfigError, StateError, UnknownTaskError
from legato_gym.registration import with_step_limit
from legato_gym.suggest import suggest
from legato_gym.tasks import task_from_config

if TYPE_CHECKING:
    from gymnasium.envs.registration import EnvSpec

__all__ = ["ACTION_MAX_LENGTH", "DEFAULT_MAX_STEPS", "INSTRUCTION_MAX_LENGTH", "TEXT_CHARSET", "DesktopEnv"]

_CHARSET_RANGES = (
    (0x20, 0x7F),  # ASCII
    (0xA0, 0x250),  # Latin-1, Latin Extended-A/B
    (0x370, 0x500),  # Greek, Cyrillic
    (0x2000, 0x2070),  # general punctuation (dashes, curly quotes)
    (0x20A0, 0x20D0),  # currency
    (0x2100, 0x2150),  # letterlike symbols
    (0x2190, 0x2300),  # arrows, mathematical operators
    (0x2500, 0x2600),  # box drawing, shapes
)

#: Characters of the instruction and action ``Text`` spaces: tab, newline and the printable characters of the
#: Latin, Greek and Cyrillic blocks plus common punctuation and symbols (Gymnasium's default is alphanumeric).
TEXT_CHARSET: str = "\t\n" + "".join(
    ch for lo, hi in _CHARSET_RANGES for ch in map(chr, range(lo, hi)) if ch.isprintable()
)
INSTRUCTION_MAX_LENGTH = 4096
ACTION_MAX_LENGTH = 8192
#: Steps after which an episode is truncated (and graded) when neither ``max_steps`` nor a ``TimeLimit`` says.
DEFAULT_MAX_STEPS = 15


def _time_limits(env: gym.Env[Any, Any]) -> list[int]:
    """The step limits of the ``TimeLimit`` wrappers around ``env`` whose ``reset`` is on the call stack.

    Gymnasium gives an env no handle on its wrappers, but a wrapper's ``reset`` calls the env's own, so the
    wrappers resetting ``env`` right now are the frames above this one whose ``self`` unwraps to ``env``.
    """
    limits: dict[int, int] = {}
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if "self" in frame.f_code.co_varnames:
                owner = frame.f_locals.get("self")
                if isinstance(owner, gym.wrappers.TimeLimit) and owner.unwrapped is env:
                    limit = getattr(owner, "_max_episode_steps", None)
                    if isinstance(limit, int):
                        limits[id(owner)] = limit
            frame = frame.f_back
    finally:
        del frame
    return list(limits.values())


class DesktopEnv(gym.Env[dict[str, Any], str]):
    """A desktop as a ``gymnasium.Env``: screenshot and instruction in, pyautogui actions out.

    The observation is ``{"screenshot": (H, W, 3) uint8 array, "instruction": str}``; the action is a string of
    pyautogui code or ``WAIT`` / ``DONE`` / ``FAIL``. ``DONE`` and ``FAIL`` terminate the episode and the step
    limit truncates it; either way the step that ends it is graded and its reward is the task's score.

    The step limit is ``max_steps``, or the ``max_episode_steps`` of a ``TimeLimit`` around the env
    (``gymnasium.make(id, max_episode_steps=N)`` or ``TimeLimit(env, N)``), whichever is smaller; the step
    that the ``TimeLimit`` truncates is graded like any other last step. ``spec.max_episode_steps`` is that
    limit. Reset the env through its wrappers (``env.reset()``, not ``env.unwrapped.reset()``), as Gymnasium
    requires for ``TimeLimit`` anyway.

    Args:
        backend: a backend name (``"fake"``, ...), ``"package.module:Class"``, or a resolved
            :class:`~legato_gym.backends.Backend`.
        config: desktop settings (screen size, waits, deadlines, the backend's options: its options class,
            or a mapping read into it once here), or settings already finished by
            :meth:`Backend.finish <legato_gym.backends.Backend.finish>`, carried as they are.
        max_steps: steps after which an episode is truncated (and graded); default: the ``TimeLimit``'s
            limit, or :data:`DEFAULT_MAX_STEPS` without one.
        tasks: the tasks ``reset()`` picks from when it is given none; default: the backend's own suite.
        desktop: an already-built desktop to drive instead of building one from ``backend`` (the env closes it).
        render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns the last screenshot).
        seed: seed for the desktop's own randomness (the fake backend's latencies and faults).

    Raises:
        ConfigError: bad arguments or options; UnsupportedTaskError when a task in ``tasks`` cannot run on the
            backend; BackendUnavailableError for an unknown backend.

    Example::

        env = gymnasium.make("legato/FakeDesktop-v0", max_episode_steps=2)
        env.reset(options={"task": "fake-click-save"})
        env.step("WAIT")
        _, reward, terminated, truncated, _ = env.step(click)  # a click that solves it: 1.0, truncated
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 1}  # noqa: RUF012
    _spec: EnvSpec | None = None

    def __init__(
        self,
        backend: str | Backend = "fake",
        config: DesktopConfig | Finished | None = None,
        *,
        max_steps: int | None = None,
        tasks: Sequence[Task] | None = None,
        desktop: Desktop | None = None,
        render_mode: str | None = None,
        seed: int | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        self.render_mode = render_mode
        self._closed = False
        self._desktop: Desktop | None = None
        resolved = resolve_backend(backend)
        #: The backend's name (``"fake"``, ``"package.module:Class"``).
        self.backend = resolved.name
        self._backend = resolved
        # finished once, here; the tasks given are checked all at once, before a boot (not when a desktop
        # of the caller's own is driven: it checks each task itself)
        finished = resolved.finish(config, tasks if desktop is None else None)
        self.config = finished.config
        if tasks is None and finished.tasks is not None:
            tasks = finished.tasks
        self._desktop = desktop if desktop is not None else resolved.make(finished, seed=seed)
        # the unit's per-desktop hooks are declared for its own desktop class, not for a desktop of another kind
        own = isinstance(self._desktop, resolved.desktop_class)
        self._check_task = resolved.check_task if own else None
        self._max_steps = max_steps
        self._episode = Episode(
            self._desktop,
            max_steps=DEFAULT_MAX_STEPS if max_steps is None else max_steps,
            expect_next=resolved.hint_next(self._desktop) if own else None,
        )
        self._tasks: list[Task] | None = None
        if tasks is not None:
            self._tasks = [self._check(t, f"tasks[{i}]") for i, t in enumerate(tasks)]
            if not self._tasks:
                raise ConfigError("tasks=[] gives reset() nothing to pick from; pass at least one task or None")
        self._last_screenshot: npt.NDArray[np.uint8] | None = None
        width, height = screen_size_of(self._desktop) or self.config.screen  # the first observation's otherwise
        self.observation_space = spaces.Dict(
            {
                "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
                "instruction": spaces.Text(INSTRUCTION_MAX_LENGTH, min_length=0, charset=TEXT_CHARSET),
            }
        )
        self.action_space = spaces.Text(ACTION_MAX_LENGTH, min_length=1, charset=TEXT_CHARSET)

    # -- properties --------------------------------------------------------------------------------------

    @property
    def desktop(self) -> Desktop:
        """The desktop this env drives."""
        if self._desktop is None:
            raise StateError("the env is closed; build a new DesktopEnv")
        return self._desktop

    @property
    def max_steps(self) -> int:
        """The step limit of the current episode (of the next one before the first reset)."""
        return self._episode.max_steps

    @property
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        """The spec ``gymnasium.make`` gave this env, with ``max_episode_steps`` the step limit it applies."""
        self._spec = with_step_limit(self._spec, self._episode.max_steps)
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self._spec = value

    @property
    def episode(self) -> Episode:
        """The current episode (steps taken, task, done)."""
        return self._episode

    @property
    def tasks(self) -> list[Task]:
        """The tasks ``reset()`` picks from when given none."""
        if self._tasks is None:
            self._tasks = [self._check(t, "default task") for t in self._backend.default_tasks(self.config)]
            if not self._tasks:
                raise ConfigError(
                    f'backend {self.backend!r} has no default tasks; pass tasks=[...] or reset(options={{"task": ...}})'
                )
        return self._tasks

    # -- gymnasium API -----------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode.

        Args:
            seed: seeds the env's ``np_random``, which picks the task when none is given.
            options: ``{"task": Task | task id | OSWorld task config dict | Task.to_json() dict}``, and
                ``"next_task"`` (the same kinds, or ``None``): the task of the reset after this one, if you
                know it (a GRPO group's next attempt on this env): a backend may prepare it during this
                episode (the local backend sets it up on the desktop it starts ahead). A hint only.

        Returns:
            ``(obs, info)``; ``info`` has ``task_id``, ``timings`` (``reset_s``, ``wait_after_reset_s``,
            ``obs_s``) and ``ready``.

        Raises:
            ConfigError: a bad option, or ``max_steps`` is below the limit of a ``TimeLimit`` around the env
                (its ``spec.max_episode_steps`` would then name a limit that never applies).
        """
        super().reset(seed=seed)
        self._check_open("reset")
        options = dict(options or {})
        unknown = sorted(set(options) - {"task", "next_task"})
        if unknown:
            raise ConfigError(
                f"reset(options=...): unknown option {unknown[0]!r}{suggest(unknown[0], ['next_task', 'task'])}; "
                "the options are 'task' and 'next_task'"
            )
        self._episode.max_steps = self._step_limit()
        if options.get("task") is not None:
            task = self._resolve(options["task"])
        else:
            tasks = self.tasks
            task = tasks[int(self.np_random.integers(len(tasks)))]
        if "next_task" in options:
            hint = options["next_task"]
            next_task = None if hint is None else self._resolve(hint)
            obs, info = self._episode.reset(task, next_task=next_task)
        else:
            obs, info = self._episode.reset(task)
        return self._to_gym(obs), info

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Run one action. Returns ``(obs, reward, terminated, truncated, info)``; see :class:`Episode`."""
        self._check_open("step")
        obs, reward, terminated, truncated, info = self._episode.step(action)
        return self._to_gym(obs), reward, terminated, truncated, info

    def render(self) -> npt.NDArray[np.uint8] | None:  # type: ignore[override]
        """The last screenshot (``render_mode="rgb_array"``), or ``None`` before the first reset."""
        if self.render_mode != "rgb_array" or self._last_screenshot is None:
            return None
        frame: npt.NDArray[np.uint8] = self._last_screenshot.copy()
        return frame

    def close(self) -> None:
        """Close the desktop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        desktop, self._desktop = self._desktop, None
        self._last_screenshot = None
        if desktop is not None:
            desktop.close()

    # -- helpers -----------------------------------------------------------------------------------------

    def _step_limit(self) -> int:
        wrapped = _time_limits(self)
        if not wrapped:
            return DEFAULT_MAX_STEPS if self._max_steps is None else self._max_steps
        limit = min(wrapped)
        if self._max_steps is not None and self._max_steps < limit:
            raise ConfigError(
                f"max_steps={self._max_steps} ends episodes before the TimeLimit(max_episode_steps={limit}) around "
                f"this env, whose spec would say {limit}; pass one limit (drop max_steps, or use "
                f"max_episode_steps={self._max_steps})"
            )
        return limit

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise StateError(f"{call}() called on a closed DesktopEnv; build a new one")

    def _check(self, task: Any, where: str) -> Task:
        if not isinstance(task, Task):
            raise ConfigError(f"{where} must be a legato_gym.Task (see legato_gym.load_tasks), not {task!r:.80}")
        if self._check_task is not None:
            self._check_task(self.desktop, task)
        return task

    def _resolve(self, value: Any) -> Task:
        if isinstance(value, Task):
            return self._check(value, 'options["task"]')
        if isinstance(value, str):
            known = {t.task_id: t for t in self.tasks}
            if value in known:
                return known[value]
            raise UnknownTaskError(
                f'options["task"]: unknown task id {value!r}{suggest(value, sorted(known))}; give one of this '
                "env's tasks, a Task, or an OSWorld task config dict"
            )
        if isinstance(value, Mapping):
            if "task_id" in value and "instruction" in value and "config" in value:
                task = Task.from_json(value)
            elif "task_id" in value and isinstance(value.get("config"), Mapping):
                task = task_from_config(
                    value["config"], task_id=value["task_id"], domain=value.get("domain"), where='options["task"]'
                )
            else:
                task = task_from_config(value, where='options["task"]')
            return self._check(task, 'options["task"]')
        raise ConfigError(f'options["task"]={value!r:.80} must be a Task, a task id, or an OSWorld task config dict')

    def _to_gym(self, obs: Observation) -> dict[str, Any]:
        if self.render_mode == "rgb_array":
            self._last_screenshot = obs.screenshot
        return {"screenshot": obs.screenshot, "instruction": obs.instruction}
