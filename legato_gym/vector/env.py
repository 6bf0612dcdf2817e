"""DesktopVectorEnv: N desktops in worker processes, with EnvPool's partial batches on Gymnasium's surface.

Each desktop runs in its own worker process (:mod:`legato_gym.vector.worker`). The parent never blocks on a
single desktop: every request has a deadline, a worker that dies or overruns is killed (with everything it
started) and replaced by a fresh desktop, and that desktop's caller gets a typed
:class:`~legato_gym.errors.DesktopError` carrying its ``env_id``. The other desktops carry on untouched.

Three ways to drive it, all on the same workers:

* Gymnasium's lock-step surface: ``reset`` (per-env tasks, ``reset_mask``), ``step``, ``call``,
  ``get_attr``, ``close``; autoreset is ``DISABLED``.
* EnvPool's partial batches: ``send(actions, env_ids)`` then ``recv()`` / ``await arecv()`` return
  whichever desktops finished, tagged ``info["env_id"]``.
* Per-desktop awaitables for asyncio schedulers: ``areset``, ``astep``, ``atruncate``.

In batched results a failed desktop's row has a zero screenshot, reward 0, ``truncated=True``, and its
error in ``info["error"]`` (mask ``info["_error"]``); that desktop then needs a reset.

With ``png=True`` every observation also comes with the screenshot PNG-encoded in ``info["screenshot_png"]``
(``bytes``), encoded in the worker process (or passed through from the backend, see
:attr:`Observation.png <legato_gym.contract.Observation.png>`), so a caller that sends screenshots to a model
spends no CPU of its own on compression.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import itertools
import logging
import selectors
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import gymnasium
import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from legato_gym import errors
from legato_gym.backends import get_backend
from legato_gym.config import DesktopConfig, Timeouts
from legato_gym.contract import Task
from legato_gym.env import ACTION_MAX_LENGTH, INSTRUCTION_MAX_LENGTH, TEXT_CHARSET
from legato_gym.errors import (
    ActionError,
    ConfigError,
    DeadlineExceeded,
    DesktopCrashed,
    DesktopError,
    LegatoError,
    StateError,
    UnknownTaskError,
)
from legato_gym.tasks import suggest, task_from_config
from legato_gym.vector.process import WorkerProcess
from legato_gym.vector.protocol import PROTOCOL_VERSION, ProtocolError, config_to_json
from legato_gym.vector.spaces import UniformBox

if TYPE_CHECKING:
    from gymnasium.envs.registration import EnvSpec

    from legato_gym.vector.ray_host import LazyScreenshot

__all__ = ["Deadlines", "DesktopVectorEnv"]

logger = logging.getLogger(__name__)

Screens = npt.NDArray[np.uint8]
Obs = dict[str, Any]
Sink = Literal["internal", "recv", "wait", "future"]


@dataclass(frozen=True)
class Deadlines:
    """How long the parent waits for each request before it kills the worker, in seconds.

    Attributes:
        start: start a worker and build its desktop.
        reset: ``reset`` (reset, wait for ready, observe).
        step: one step (act, settle, observe, and grading when the step ends the episode).
        truncate: grading without a step.
        call: ``call`` / ``get_attr``.
        close: closing a desktop before its worker is killed.
    """

    start: float
    reset: float
    step: float
    truncate: float
    call: float
    close: float

    def __post_init__(self) -> None:
        for name in ("start", "reset", "step", "truncate", "call", "close"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"Deadlines.{name}={value!r} must be a positive number of seconds")

    @classmethod
    def from_timeouts(cls, timeouts: Timeouts) -> Deadlines:
        """Request deadlines that cover the phases each request runs."""
        return cls(
            start=timeouts.reset,
            reset=timeouts.reset + 2 * timeouts.ready,
            step=timeouts.longest_step,
            truncate=timeouts.ready + timeouts.evaluate,
            call=timeouts.act,
            close=timeouts.ready,
        )


@dataclass
class _Result:
    env_id: int
    op: str
    screen: Screens | None = None
    instruction: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] | None = None
    value: Any = None
    error: LegatoError | None = None
    from_shm: bool = False
    png: bytes | None = None
    lazy: bool = False  # the screenshot (of ``shape``) is in ``png`` only; ``decode()`` makes ``screen``
    shape: tuple[int, ...] = ()

    def decode(self) -> Screens | None:
        """The screenshot's pixels, decoded from ``png`` first if it came as a PNG only."""
        if self.lazy and self.png is not None:
            from legato_gym.vector.ray_host import LazyScreenshot

            self.screen = LazyScreenshot(self.png, self.shape).array()
            self.lazy = False
        return self.screen

    def own_screen(self) -> None:
        """Copy the screenshot out of the worker's shared buffer (before the worker may overwrite it)."""
        if self.from_shm and self.screen is not None:
            self.screen = self.screen.copy()
            self.from_shm = False


_ids = itertools.count(1)


class _Request:
    __slots__ = ("args", "deadline", "env_id", "future", "id", "op", "result", "sink", "timeout", "timer")

    def __init__(self, env_id: int, op: str, args: dict[str, Any], timeout: float, sink: Sink) -> None:
        self.id = next(_ids)
        self.env_id = env_id
        self.op = op
        self.args = args
        self.timeout = timeout
        self.sink: Sink = sink
        self.deadline: float | None = None
        self.future: asyncio.Future[_Result] | None = None
        self.result: _Result | None = None
        self.timer: asyncio.TimerHandle | None = None


def _desktop_seed(seed: int | None, env_id: int, generation: int) -> int | None:
    """Seed of a desktop's worker: ``seed + env_id`` for the first; a replacement gets a fresh one, so a
    desktop whose seeded faults killed it does not die the same way again forever."""
    if seed is None:
        return None
    if generation <= 1:
        return seed + env_id
    digest = hashlib.blake2b(f"{seed}:{env_id}:{generation}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class _Slot:
    """One desktop: its current worker, the request in flight, and its episode's lifecycle state."""

    def __init__(self, env_id: int) -> None:
        self.env_id = env_id
        self.proc: WorkerProcess | None = None
        self.generation = 0  # workers started for this desktop, the first one included
        self.ready = False
        self.current: _Request | None = None
        self.waiting: deque[_Request] = deque()
        # "new": needs a reset; "running": can step; "ended": terminated, truncated or failed.
        self.phase: Literal["new", "running", "ended"] = "new"
        self.busy: _Request | None = None  # the user request whose result was not handed out yet
        # The failure that ended a running episode while no call of it was in flight (the worker died while
        # its caller waited on a model, say): the episode's next step or truncate gets it, not a StateError.
        self.lost: DesktopError | None = None
        self.idle_waiters: list[asyncio.Future[None]] = []  # idle() futures, done when busy clears
        # Why no worker can be started for this desktop now (its host is gone and no other has room); its
        # requests fail at once with it until a placement succeeds (:meth:`DesktopVectorEnv.available`).
        self.unavailable: DesktopError | None = None
        self.available_waiters: list[asyncio.Future[None]] = []  # wait_available() futures
        self.unconsumed: _Result | None = None
        self.last_screen: Screens | LazyScreenshot | None = None
        self.last_instruction = ""


def _worker_name(proc: WorkerProcess) -> str:
    """``worker PID``, plus the host it ran on for a remote worker (its ``where``, e.g. a Ray host agent)."""
    where = getattr(proc, "where", None)
    return f"worker {proc.pid} on {where}" if where else f"worker {proc.pid}"


def _copy_error(error: DesktopError) -> DesktopError:
    """A fresh exception like ``error`` (each request raises its own: tracebacks are not shared)."""
    return type(error)(*error.args, env_id=error.env_id, remote_traceback=error.remote_traceback)


def _kill_all(procs: set[WorkerProcess]) -> None:
    for proc in list(procs):
        with contextlib.suppress(Exception):
            proc.kill()
    procs.clear()


class DesktopVectorEnv(gymnasium.vector.VectorEnv):  # type: ignore[misc]
    """``num_envs`` desktops, each in its own worker process.

    Args:
        num_envs: number of desktops.
        backend: backend name (``"fake"``, ``"local"``, ``"osworld"``) or ``"package.module:Class"``.
        config: how to build each desktop; ``config.python`` is the workers' interpreter.
        max_steps: steps after which an episode is truncated (and graded).
        tasks: the tasks ``reset()`` picks from when not given one (default: the backend's suite).
        seed: seeds the task choice (env ``i`` uses ``seed + i``) and each desktop (``seed + i``).
        deadlines: per-request deadlines (default: from ``config.timeouts``).
        worker_env: extra environment variables for the worker processes.
        screenshots: ``"shm"`` (a shared-memory buffer per worker) or ``"blob"`` (framed bytes on the socket,
            for workers that cannot share memory with the parent).
        png: also deliver each observation's screenshot as PNG bytes in ``info["screenshot_png"]``, encoded
            in the worker (or the backend's own, see ``Observation.png``).
        copy: ``areset`` / ``astep`` return their own copy of the screenshot. ``False`` returns a read-only
            view of the worker's shared buffer instead (as Gymnasium's ``AsyncVectorEnv(copy=False)``): it
            stays valid until that desktop's next request, and saves a copy of the whole screen per step
            for callers that are done with it by then (``legato rl collect``). Batched results are always
            copies.
        pixels: ``"eager"`` (the default) decodes a screenshot that arrived as a PNG only (a desktop on a Ray
            host with ``png=True``) as soon as it arrives. ``"lazy"`` leaves it to the caller: ``areset`` /
            ``astep`` then return it as a :class:`~legato_gym.vector.ray_host.LazyScreenshot`, an array-like
            whose pixels are decoded when first read, for callers that send ``info["screenshot_png"]`` and
            rarely read the pixels (``legato rl collect``). Local desktops' screenshots and batched results are
            arrays either way.

    One thread drives a vector env (asyncio callers: the thread running the event loop). It is a context
    manager; ``close()`` is idempotent, and workers left running at interpreter exit are killed.

    Example::

        env = DesktopVectorEnv(4, "fake", seed=0)
        obs, info = env.reset()
        env.send(["WAIT"] * 4)
        obs, rewards, terminated, truncated, info = env.recv(min_results=2)
        print(info["env_id"])  # the desktops that finished first
        env.close()
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.DISABLED, "render_modes": []}  # noqa: RUF012
    _spec: EnvSpec | None = None

    def __init__(
        self,
        num_envs: int,
        backend: str = "fake",
        config: DesktopConfig | None = None,
        *,
        max_steps: int = 15,
        tasks: Sequence[Task] | None = None,
        seed: int | None = None,
        deadlines: Deadlines | None = None,
        worker_env: Mapping[str, str] | None = None,
        screenshots: Literal["shm", "blob"] = "shm",
        png: bool = False,
        copy: bool = True,
        pixels: Literal["eager", "lazy"] = "eager",
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ConfigError(f"num_envs={num_envs!r} must be a positive integer")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigError(f"max_steps={max_steps!r} must be a positive integer, e.g. 15")
        if screenshots not in ("shm", "blob"):
            raise ConfigError(f"screenshots={screenshots!r}; choose 'shm' (shared memory) or 'blob' (framed bytes)")
        if pixels not in ("eager", "lazy"):
            raise ConfigError(f"pixels={pixels!r}; choose 'eager' (decode at once) or 'lazy' (when read)")
        self.closed = True  # until the workers are up; close() is then a no-op
        self.num_envs = num_envs
        self.backend = backend
        self.config = config or DesktopConfig()
        self.max_steps = max_steps
        self.deadlines = deadlines or Deadlines.from_timeouts(self.config.timeouts)
        self.worker_env = dict(worker_env or {})
        self.screenshots = screenshots
        self.png = bool(png)
        self.copy = bool(copy)
        self.pixels = pixels
        _, default_tasks = get_backend(backend)
        self.tasks: list[Task] = list(tasks) if tasks is not None else list(default_tasks(self.config))
        self._config_json = config_to_json(self.config)
        self._seed = seed
        self._task_rngs = [seeding.np_random(None if seed is None else seed + i)[0] for i in range(num_envs)]

        width, height = self.config.screen
        self._shape = (height, width, 3)
        self.single_observation_space = spaces.Dict(
            {
                "screenshot": UniformBox(0, 255, self._shape, np.uint8),
                "instruction": spaces.Text(INSTRUCTION_MAX_LENGTH, min_length=0, charset=TEXT_CHARSET),
            }
        )
        self.single_action_space = spaces.Text(ACTION_MAX_LENGTH, min_length=1, charset=TEXT_CHARSET)
        # The batched spaces are built on first use: a batch of Text spaces is num_envs deep copies.
        self._observation_space: spaces.Space[Any] | None = None
        self._action_space: spaces.Space[Any] | None = None

        self._slots = [_Slot(i) for i in range(num_envs)]
        self._procs: set[WorkerProcess] = set()
        self._finalizer = weakref.finalize(self, _kill_all, self._procs)
        self._selector = selectors.DefaultSelector()
        self._fds: dict[int, tuple[_Slot, WorkerProcess, str]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finished: list[_Result] = []
        self._outstanding = 0
        self._recv_waiter: asyncio.Future[None] | None = None
        self._start_errors: dict[int, LegatoError] = {}
        self.closed = False
        try:
            for slot in self._slots:
                self._spawn(slot)
            self._pump(lambda: all(s.current is None for s in self._slots), None)
            failed = [s for s in self._slots if not s.ready]
            if failed:
                raise self._start_errors.get(failed[0].env_id) or DesktopCrashed(
                    "worker failed to start", env_id=failed[0].env_id
                )
        except BaseException:
            self.close()
            raise
        self._start_errors.clear()

    # ------------------------------------------------------------------ public: gymnasium surface

    @property
    def observation_space(self) -> spaces.Space[Any]:
        """The batched observation space (its screenshot bounds are views of two scalars, see ``UniformBox``)."""
        if self._observation_space is None:
            self._observation_space = batch_space(self.single_observation_space, self.num_envs)
        return self._observation_space

    @observation_space.setter
    def observation_space(self, space: spaces.Space[Any]) -> None:
        self._observation_space = space

    @property
    def action_space(self) -> spaces.Space[Any]:
        """The batched action space: one ``Text`` space per desktop."""
        if self._action_space is None:
            self._action_space = batch_space(self.single_action_space, self.num_envs)
        return self._action_space

    @action_space.setter
    def action_space(self, space: spaces.Space[Any]) -> None:
        self._action_space = space

    @property
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        """The spec ``gymnasium.make_vec`` gave this env, with ``max_episode_steps`` the step limit it applies."""
        spec = self._spec
        if spec is not None and spec.max_episode_steps != self.max_steps:
            spec = copy.copy(spec)
            spec.max_episode_steps = self.max_steps
            self._spec = spec
        return spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self._spec = value

    @property
    def worker_pids(self) -> list[int]:
        """Process id of each desktop's current worker, by env index (``-1`` while none is running)."""
        return [s.proc.pid if s.proc is not None and s.proc.alive else -1 for s in self._slots]

    @property
    def nodes(self) -> dict[str, dict[str, int]]:
        """Desktops started and lost per cluster node (``{}`` here: every desktop runs on this host; see
        :attr:`RayDesktopVectorEnv.nodes <legato_gym.vector.ray_env.RayDesktopVectorEnv.nodes>`)."""
        return {}

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset every desktop, or those in ``options["reset_mask"]``, and wait for them.

        Args:
            seed: reseeds the task choice, as Gymnasium's vector envs seed their envs: an int (env ``i`` uses
                ``seed + i``), a list of ``num_envs`` seeds (``None`` entries keep that env's generator), or
                ``None``. Seeds of desktops outside ``reset_mask`` are ignored.
            options: ``"tasks"``: ``{env_id: Task | dict | task_id}`` (others pick from :attr:`tasks`);
                ``"task"``: one task for every desktop being reset; ``"reset_mask"``: bool array of shape
                ``(num_envs,)`` selecting the desktops to reset (the others return their last observation).

        Returns:
            Batched observations of all desktops and infos (masks cover the desktops that were reset).

        Raises:
            ConfigError: a seed list whose length is not ``num_envs``, or a seed that is not a non-negative
                int or ``None``.
        """
        self._check_open()
        seeds = self._reset_seeds(seed)
        super().reset(seed=int(seed) if isinstance(seed, int | np.integer) else None)
        options = dict(options or {})
        mask = self._reset_mask(options.pop("reset_mask", None))
        ids = [i for i in range(self.num_envs) if mask[i]]
        for i in ids:
            env_seed = seeds[i]
            if env_seed is not None:
                self._task_rngs[i] = seeding.np_random(env_seed)[0]
        tasks = self._tasks_for(ids, options)
        for i in ids:
            self._check_idle(i, "reset")
        requests = [self._submit(i, "reset", {"task": tasks[i].to_json()}, "wait") for i in ids]
        self._pump(lambda: all(r.result is not None for r in requests), None)
        results: list[_Result | None] = [None] * self.num_envs
        for request in requests:
            assert request.result is not None
            results[request.env_id] = request.result
            self._slots[request.env_id].busy = None
        obs, _, _, _, infos = self._assemble(list(enumerate(results)), full=True)
        return obs, infos

    def step(self, actions: Sequence[str]) -> tuple[Obs, npt.NDArray[np.float64], Any, Any, dict[str, Any]]:
        """Step every desktop and wait for all of them.

        Raises:
            StateError: a desktop needs a reset (autoreset is disabled) or has a ``send`` in flight.
        """
        self._check_open()
        ids = list(range(self.num_envs))
        actions = self._check_actions(actions, ids)
        requests = [self._submit(i, "step", {"action": a}, "wait") for i, a in zip(ids, actions, strict=True)]
        self._pump(lambda: all(r.result is not None for r in requests), None)
        pairs: list[tuple[int, _Result | None]] = []
        for request in requests:
            self._slots[request.env_id].busy = None
            pairs.append((request.env_id, request.result))
        return self._assemble(pairs, full=True)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call a method of every desktop (arguments and results cross as JSON).

        As in Gymnasium's vector envs, when ``name`` is not callable (a plain attribute or a property) the
        result is its value on each desktop, and ``args`` are ignored.

        Raises:
            DesktopError: the first desktop that failed (the others' results are dropped).
        """
        return self._call_all("call", {"name": name, "args": list(args), "kwargs": kwargs})

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Read an attribute of every desktop (values cross as JSON)."""
        return self._call_all("get_attr", {"name": name})

    def render(self) -> None:
        """Desktops are not rendered; read the screenshots in the observations."""
        return None

    def close_extras(self, **kwargs: Any) -> None:
        """Close every desktop and stop its worker; kill what does not stop within ``Deadlines.close``."""
        closing: list[WorkerProcess] = []
        end = time.monotonic() + self.deadlines.close
        for slot in self._slots:
            proc = slot.proc
            if proc is None:
                continue
            self._unwatch(proc)
            if slot.ready and slot.current is None and proc.alive:
                try:
                    proc.send({"kind": "request", "id": 0, "op": "close", "args": {}}, end)
                    closing.append(proc)
                    continue
                except (OSError, TimeoutError):
                    pass
            proc.kill()
        for proc in closing:
            proc.wait_exit(max(0.0, end - time.monotonic()))
        _kill_all(self._procs)
        closed = StateError("the vector env was closed; create a new one")
        for slot in self._slots:
            for waiter in slot.available_waiters:
                waiter.cancel()
            slot.available_waiters.clear()
            for request in [slot.current, *slot.waiting]:
                if request is not None and request.future is not None and not request.future.done():
                    request.future.set_exception(closed)
            slot.current, slot.proc, slot.ready = None, None, False
            slot.waiting.clear()
        self._selector.close()
        self._detach()
        self._finalizer.detach()

    def __enter__(self) -> DesktopVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ public: EnvPool surface

    def send(self, actions: Sequence[str], env_ids: Iterable[int] | None = None) -> None:
        """Start one step on each of ``env_ids`` (default: all); returns at once. Collect with :meth:`recv`.

        Raises:
            StateError: a desktop needs a reset, or its previous result was not received yet.
        """
        self._check_open()
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in np.asarray(env_ids).ravel()]
        actions = self._check_actions(actions, ids)
        for i, action in zip(ids, actions, strict=True):
            self._submit(i, "step", {"action": action}, "recv")

    def send_reset(
        self, env_ids: Iterable[int] | None = None, *, tasks: Mapping[int, Task | Mapping[str, Any] | str] | None = None
    ) -> None:
        """Start a reset on each of ``env_ids`` (default: all); the results come back through :meth:`recv`.

        A reset's row has reward 0, ``terminated = truncated = False`` and ``info["task_id"]``.
        """
        self._check_open()
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in np.asarray(env_ids).ravel()]
        chosen = self._tasks_for(ids, {"tasks": tasks} if tasks else {})
        for i in ids:
            self._check_idle(i, "send_reset")
        for i in ids:
            self._submit(i, "reset", {"task": chosen[i].to_json()}, "recv")

    def recv(
        self, timeout: float | None = None, min_results: int = 1
    ) -> tuple[Obs, npt.NDArray[np.float64], Any, Any, dict[str, Any]]:
        """Wait until ``min_results`` sent requests have finished (or ``timeout``), and return all finished ones.

        Returns:
            ``(obs, rewards, terminated, truncated, info)`` batched over the ``k`` finished desktops, with
            ``info["env_id"]`` naming them. After ``timeout`` it returns what finished, possibly nothing.

        Raises:
            StateError: nothing was sent.
        """
        self._check_open()
        need = self._recv_need(min_results)
        self._pump(lambda: len(self._finished) >= need, timeout)
        return self._take_finished()

    async def arecv(
        self, timeout: float | None = None, min_results: int = 1
    ) -> tuple[Obs, npt.NDArray[np.float64], Any, Any, dict[str, Any]]:
        """The awaitable form of :meth:`recv`: the event loop runs while the desktops work."""
        self._check_open()
        loop = self._attach()
        need = self._recv_need(min_results)
        end = None if timeout is None else loop.time() + timeout
        while len(self._finished) < need:
            waiter: asyncio.Future[None] = loop.create_future()
            self._recv_waiter = waiter
            try:
                await asyncio.wait_for(waiter, None if end is None else max(0.0, end - loop.time()))
            except asyncio.TimeoutError:
                break
            finally:
                self._recv_waiter = None
        return self._take_finished()

    # ------------------------------------------------------------------ public: per-desktop awaitables

    async def areset(self, env_id: int, task: Task | Mapping[str, Any] | str) -> tuple[Obs, dict[str, Any]]:
        """Reset one desktop on ``task``; returns ``(obs, info)``.

        Raises:
            DesktopError: the desktop failed (``env_id`` set); its worker is replaced in the background.
            StateError: the desktop has a request in flight.
        """
        self._check_open()
        chosen = self._tasks_for([env_id], {"tasks": {env_id: task}})[env_id]
        self._check_idle(env_id, "areset")
        result = await self._await(env_id, "reset", {"task": chosen.to_json()})
        return self._single_obs(result), dict(result.info or {})

    async def astep(self, env_id: int, action: str) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        """Step one desktop; returns ``(obs, reward, terminated, truncated, info)``.

        Raises:
            DesktopError: the desktop failed (``env_id`` set); its worker is replaced in the background.
            StateError: the desktop needs a reset or has a request in flight.
        """
        self._check_open()
        (action,) = self._check_actions([action], [env_id])
        result = await self._await(env_id, "step", {"action": action})
        info = dict(result.info or {})
        return self._single_obs(result), result.reward, result.terminated, result.truncated, info

    async def atruncate(self, env_id: int) -> tuple[float, dict[str, Any]]:
        """Grade one desktop's episode now, without another action (a rollout timeout); returns ``(reward, info)``."""
        self._check_open()
        self._check_running(env_id, "atruncate")
        result = await self._await(env_id, "truncate", {})
        return result.reward, dict(result.info or {})

    def available(self, env_id: int) -> bool:
        """Whether desktop ``env_id`` has a worker running or starting.

        ``False`` when its worker could not be placed anywhere (a Ray desktop whose host was lost while no
        live host has room for it): its requests then fail at once with a :class:`DesktopError`, and a
        scheduler should give it no work until :meth:`wait_available` is done.
        """
        self._check_open()
        return self._slots[env_id].unavailable is None

    def wait_available(self, env_id: int) -> asyncio.Future[None]:
        """A future done once desktop ``env_id`` is :meth:`available` again (at once if it is)."""
        self._check_open()
        future: asyncio.Future[None] = self._attach().create_future()
        slot = self._slots[env_id]
        if slot.unavailable is None:
            future.set_result(None)
        else:
            slot.available_waiters.append(future)
        return future

    def idle(self, env_id: int) -> asyncio.Future[None]:
        """A future done once desktop ``env_id`` has no ``areset``/``astep``/``atruncate`` in flight.

        A caller whose task was cancelled while it awaited one of those leaves the desktop finishing that
        call (it cannot be taken back halfway); await this before giving the desktop its next call.
        """
        self._check_open()
        future: asyncio.Future[None] = self._attach().create_future()
        slot = self._slots[env_id]
        if slot.busy is None:
            future.set_result(None)
        else:
            slot.idle_waiters.append(future)
        return future

    # ------------------------------------------------------------------ requests

    def _submit(
        self, env_id: int, op: str, args: dict[str, Any], sink: Sink, future: asyncio.Future[_Result] | None = None
    ) -> _Request:
        slot = self._slots[env_id]
        timeout = {"reset": self.deadlines.reset, "step": self.deadlines.step, "truncate": self.deadlines.truncate}
        request = _Request(env_id, op, args, timeout.get(op, self.deadlines.call), sink)
        request.future = future
        if sink != "internal":
            slot.busy = request
        if sink == "recv":
            self._outstanding += 1
        if op == "reset":
            slot.lost = None
        elif op in ("step", "truncate") and slot.lost is not None:
            error, slot.lost = slot.lost, None  # the episode died between calls: this call fails as it would have
            self._complete(slot, request, _Result(env_id, op, error=error))
            return request
        if slot.proc is None:
            self._spawn(slot)
        if slot.unavailable is not None:  # nowhere to run it: fail now, not after a start deadline
            self._complete(slot, request, _Result(env_id, op, error=_copy_error(slot.unavailable)))
            return request
        slot.waiting.append(request)
        self._dispatch(slot)
        return request

    async def _await(self, env_id: int, op: str, args: dict[str, Any]) -> _Result:
        loop = self._attach()
        future: asyncio.Future[_Result] = loop.create_future()
        self._submit(env_id, op, args, "future", future)
        return self._raise_or_return(await future)

    @staticmethod
    def _raise_or_return(result: _Result) -> _Result:
        if result.error is not None:
            raise result.error
        return result

    def _call_all(self, op: str, args: dict[str, Any]) -> tuple[Any, ...]:
        self._check_open()
        requests = [self._submit(i, op, args, "internal") for i in range(self.num_envs)]
        self._pump(lambda: all(r.result is not None for r in requests), None)
        values = []
        for request in requests:
            assert request.result is not None
            if request.result.error is not None:
                raise request.result.error
            values.append(request.result.value)
        return tuple(values)

    def _dispatch(self, slot: _Slot) -> None:
        proc = slot.proc
        if proc is None or not slot.ready or slot.current is not None or not slot.waiting:
            return
        if slot.unconsumed is not None:
            slot.unconsumed.own_screen()
            slot.unconsumed = None
        request = slot.waiting.popleft()
        request.deadline = time.monotonic() + request.timeout
        slot.current = request
        self._arm_timer(slot, request)
        message = {"kind": "request", "id": request.id, "op": request.op, "args": request.args}
        try:
            proc.send(message, request.deadline)
        except (OSError, TimeoutError) as exc:
            self._unwatch(proc)
            proc.kill()
            self._fail_worker(
                slot,
                DesktopCrashed(
                    f"{_worker_name(proc)} died (exit status {proc.proc.returncode}) before it got "
                    f"{request.op!r} ({exc})"
                ),
            )

    def _complete(self, slot: _Slot, request: _Request, result: _Result) -> None:
        if request.timer is not None:
            request.timer.cancel()
            request.timer = None
        if request.op in ("reset", "step", "truncate"):
            if result.error is not None:
                slot.phase = "new" if slot.proc is None else "ended"
            elif request.op == "reset":
                slot.phase = "running"
            elif request.op == "truncate" or result.terminated or result.truncated:
                slot.phase = "ended"
        request.result = result
        if request.sink == "recv":
            self._outstanding -= 1
            self._finished.append(result)
            slot.unconsumed = result
            waiter = self._recv_waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif request.sink == "wait":
            slot.unconsumed = result
        elif request.sink == "future":
            if self.copy:
                result.own_screen()
            elif result.screen is not None:
                result.screen = result.screen.view()
                result.screen.flags.writeable = False  # the worker's buffer: reading it is all a caller may do
            slot.busy = None
            future = request.future
            if future is not None and not future.done():
                future.set_result(result)
            for waiter in slot.idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            slot.idle_waiters.clear()

    # ------------------------------------------------------------------ workers

    def _new_worker(self, env_id: int) -> WorkerProcess:
        """Start a worker for desktop ``env_id``. :class:`~legato_gym.vector.ray_env.RayDesktopVectorEnv`
        overrides this to start it on a Ray host instead; everything else (deadlines, replacement) is shared."""
        height, width, _ = self._shape
        return WorkerProcess(
            env_id,
            python=self.config.python,
            env=self.worker_env,
            screen_bytes=height * width * 3 if self.screenshots == "shm" else None,
        )

    def _spawn(self, slot: _Slot) -> None:
        height, width, _ = self._shape
        try:
            proc = self._new_worker(slot.env_id)
        except DesktopError as error:  # no host can take it now: the slot is unavailable, not starting
            error.env_id = slot.env_id
            if slot.unavailable is None:
                logger.warning("%s", error)
            slot.proc, slot.ready, slot.current, slot.unavailable = None, False, None, error
            self._start_failed(slot, error)
            return
        if slot.unavailable is not None:
            logger.info("desktop %d is available again", slot.env_id)
        slot.unavailable = None
        for waiter in slot.available_waiters:
            if not waiter.done():
                waiter.set_result(None)
        slot.available_waiters.clear()
        self._procs.add(proc)
        slot.proc, slot.ready = proc, False
        slot.generation += 1
        args = {
            "backend": self.backend,
            "config": self._config_json,
            "seed": _desktop_seed(self._seed, slot.env_id, slot.generation),
            "env_id": slot.env_id,
            "max_steps": self.max_steps,
            "shm_fd": proc.shm_fd_in_child,
            "shm_size": height * width * 3,
            "png": self.png,
        }
        init = _Request(slot.env_id, "init", args, self.deadlines.start, "internal")
        init.deadline = time.monotonic() + self.deadlines.start
        slot.current = init
        self._watch(slot, proc)
        self._arm_timer(slot, init)

    def _on_fd(self, fd: int) -> None:
        entry = self._fds.get(fd)
        if entry is None:
            return
        slot, proc, kind = entry
        if kind == "stderr":
            if not proc.read_stderr():
                self._unwatch_fd(fd)
            return
        alive = proc.read()
        frames = list(proc.frames.frames)
        proc.frames.frames.clear()
        try:
            for message, blob in frames:
                if slot.proc is not proc:
                    return
                self._on_message(slot, proc, message, blob)
        except (ProtocolError, KeyError, TypeError, ValueError, OSError) as exc:
            self._fail_worker(slot, DesktopCrashed(f"{_worker_name(proc)} broke the protocol: {exc}"))
            return
        if not alive and slot.proc is proc:
            self._unwatch(proc)
            proc.kill()
            self._fail_worker(slot, DesktopCrashed(f"{_worker_name(proc)} died (exit status {proc.proc.returncode})"))

    def _on_message(self, slot: _Slot, proc: WorkerProcess, message: dict[str, Any], blob: bytearray | None) -> None:
        kind = message.get("kind")
        request = slot.current
        if kind == "hello":
            if message.get("protocol") != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"worker speaks protocol {message.get('protocol')!r}, this legato speaks {PROTOCOL_VERSION}; "
                    "install the same legato version in the workers' interpreter (DesktopConfig.python)"
                )
            if request is not None and request.op == "init":
                proc.send(
                    {"kind": "request", "id": request.id, "op": "init", "args": request.args},
                    request.deadline or time.monotonic(),
                )
            return
        if kind != "response" or request is None or message.get("id") != request.id:
            raise ProtocolError(f"unexpected message {str(message)[:200]}")
        slot.current = None
        result = _Result(slot.env_id, request.op)
        if not message.get("ok"):
            error = self._remote_error(slot, message.get("error") or {})
            result.error = error
            restart = request.op == "init" or isinstance(error, (DesktopCrashed, DeadlineExceeded))
            if restart:
                self._retire(slot, proc)
            if request.op == "init":
                self._start_failed(slot, error)
            self._complete(slot, request, result)
            if restart and request.op != "init":
                self._spawn(slot)
            self._dispatch(slot)
            return
        payload = message.get("result") or {}
        if request.op == "init":
            width, height = payload["screen_size"]
            if (height, width, 3) != self._shape:
                error = DesktopCrashed(
                    f"desktop screen is {width}x{height} but config.screen={self.config.screen!r}; "
                    "make the backend honour DesktopConfig.screen",
                    env_id=slot.env_id,
                )
                self._retire(slot, proc)
                self._start_failed(slot, error)
                return
            slot.ready = True
            self._dispatch(slot)
            return
        obs = payload.get("obs")
        if obs is not None:
            shape = tuple(obs["shape"])
            data = memoryview(blob if blob is not None else b"")
            png_bytes = int(obs.get("png", 0))
            if png_bytes:
                if not 0 < png_bytes <= len(data):
                    raise ProtocolError(f"observation announces {png_bytes} PNG bytes in a {len(data)}-byte blob")
                result.png = bytes(data[len(data) - png_bytes :])
                data = data[: len(data) - png_bytes]
            if obs["where"] == "shm":
                assert proc.screens is not None
                result.screen, result.from_shm = proc.screens.array(shape), True
            elif obs["where"] == "png":  # a remote worker sent its PNG alone: the pixels are decoded from it
                if result.png is None:
                    raise ProtocolError("observation says its pixels are in its PNG but has no PNG")
                result.lazy, result.shape = True, shape
                if self.pixels == "eager":
                    result.decode()
            else:
                result.screen = np.frombuffer(data, dtype=np.uint8).reshape(shape)
            result.instruction = str(obs["instruction"])
        result.reward = float(payload.get("reward", 0.0))
        result.terminated = bool(payload.get("terminated", False))
        result.truncated = bool(payload.get("truncated", False))
        result.info = payload.get("info")
        if result.png is not None:
            result.info = {**(result.info or {}), "screenshot_png": result.png}
        result.value = payload.get("value")
        self._complete(slot, request, result)
        self._dispatch(slot)

    def _remote_error(self, slot: _Slot, data: Mapping[str, Any]) -> LegatoError:
        name, message = str(data.get("type", "Exception")), str(data.get("message", ""))
        tb = data.get("traceback")
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, DesktopError):
            return cls(message, env_id=slot.env_id, remote_traceback=tb)
        if isinstance(cls, type) and issubclass(cls, LegatoError):
            error = cls(f"[env {slot.env_id}] {message}")
            error.env_id = slot.env_id  # type: ignore[attr-defined]
            error.remote_traceback = tb  # type: ignore[attr-defined]
            return error
        return DesktopError(f"{name}: {message}", env_id=slot.env_id, remote_traceback=tb)

    def _fail_worker(self, slot: _Slot, error: DesktopError) -> None:
        """Kill the slot's worker, fail its request with ``error``, and start a replacement."""
        proc = slot.proc
        if proc is None:
            return
        self._retire(slot, proc)
        request, slot.current = slot.current, None
        if slot.phase == "running" and (request is None or request.sink == "internal"):
            slot.lost = error
        slot.phase = "new"
        error.env_id = slot.env_id
        if error.remote_traceback is None:
            error.remote_traceback = proc.stderr_text() or None
        logger.warning("%s; starting a fresh desktop", error)
        if request is not None and request.op == "init":
            self._start_failed(slot, error)
            return
        if request is not None:
            self._complete(slot, request, _Result(slot.env_id, request.op, error=error))
        self._spawn(slot)
        self._dispatch(slot)

    def _place_unavailable(self) -> None:
        """Try again to start a worker for every unavailable desktop (a host may have room now)."""
        if self.closed:
            return
        for slot in self._slots:
            if slot.unavailable is not None and slot.proc is None:
                self._spawn(slot)
                if slot.unavailable is not None:
                    return  # the others would not find room either

    def _start_failed(self, slot: _Slot, error: LegatoError) -> None:
        """A worker could not be started: fail whatever waits for it; the next request tries again."""
        self._start_errors[slot.env_id] = error
        slot.phase = "new"
        while slot.waiting:
            request = slot.waiting.popleft()
            self._complete(slot, request, _Result(slot.env_id, request.op, error=error))

    def _retire(self, slot: _Slot, proc: WorkerProcess) -> None:
        """Stop watching ``proc``, kill its process group and detach it from ``slot``."""
        self._unwatch(proc)
        proc.kill()
        self._procs.discard(proc)
        if slot.proc is proc:
            slot.proc, slot.ready = None, False

    # ------------------------------------------------------------------ waiting: selector (sync) or event loop

    def _watch(self, slot: _Slot, proc: WorkerProcess) -> None:
        for fd, kind in ((proc.sock.fileno(), "sock"), (proc.stderr_fd, "stderr")):
            self._fds[fd] = (slot, proc, kind)
            self._selector.register(fd, selectors.EVENT_READ)
            if self._loop is not None:
                self._loop.add_reader(fd, self._on_fd, fd)

    def _unwatch(self, proc: WorkerProcess) -> None:
        for fd in [fd for fd, (_, p, _) in self._fds.items() if p is proc]:
            self._unwatch_fd(fd)

    def _unwatch_fd(self, fd: int) -> None:
        self._fds.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(fd)

    def _attach(self) -> asyncio.AbstractEventLoop:
        """Watch the workers from the running event loop (the first async call on a loop does this)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return loop
        self._detach()
        self._loop = loop
        for fd in self._fds:
            loop.add_reader(fd, self._on_fd, fd)
        for slot in self._slots:
            if slot.current is not None:
                self._arm_timer(slot, slot.current)
        return loop

    def _detach(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            for fd in self._fds:
                loop.remove_reader(fd)

    def _arm_timer(self, slot: _Slot, request: _Request) -> None:
        if request.timer is not None:
            request.timer.cancel()
            request.timer = None
        if self._loop is None or self._loop.is_closed() or request.deadline is None:
            return
        delay = max(0.0, request.deadline - time.monotonic())
        request.timer = self._loop.call_later(delay, self._check_deadlines)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            request = slot.current
            if request is not None and request.deadline is not None and now >= request.deadline:
                what = "start" if request.op == "init" else request.op
                who = "the worker" if slot.proc is None else _worker_name(slot.proc)
                self._fail_worker(
                    slot,
                    DeadlineExceeded(
                        f"{what!r} overran its {request.timeout:g} s deadline; {who} was killed "
                        "(raise the deadline via DesktopConfig.timeouts or deadlines=)"
                    ),
                )

    def _pump(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Read worker sockets (without an event loop) until ``done()`` or ``timeout``; returns ``done()``."""
        end = None if timeout is None else time.monotonic() + timeout
        while not done():
            self._check_deadlines()
            if done():
                break
            deadlines = [s.current.deadline for s in self._slots if s.current is not None and s.current.deadline]
            if not deadlines:
                return done()
            now = time.monotonic()
            wait = min(deadlines) - now
            if end is not None:
                if now >= end:
                    return False
                wait = min(wait, end - now)
            for key, _ in self._selector.select(max(0.0, wait)):
                self._on_fd(int(key.fd))
        return True

    # ------------------------------------------------------------------ checks and batching

    def _check_open(self) -> None:
        if self.closed:
            raise StateError("the vector env is closed; create a new one")

    def _check_idle(self, env_id: int, call: str) -> None:
        if not 0 <= env_id < self.num_envs:
            raise ConfigError(f"env_id={env_id!r} is out of range; this vector env has {self.num_envs} desktops")
        if self._slots[env_id].busy is not None:
            raise StateError(f"{call}: env {env_id} has a request in flight; recv() or await its result first")

    def _check_running(self, env_id: int, call: str) -> None:
        self._check_idle(env_id, call)
        slot = self._slots[env_id]
        phase = slot.phase
        if phase != "running" and slot.lost is None:
            why = "its episode ended" if phase == "ended" else "it was not reset (or its desktop was replaced)"
            raise StateError(
                f"{call}: env {env_id} needs a reset because {why}; "
                "call reset(options={'reset_mask': mask}), send_reset([env_id]) or areset(env_id, task)"
            )

    def _check_actions(self, actions: Sequence[str], ids: list[int]) -> list[str]:
        if isinstance(actions, str):
            raise ActionError(f"actions={actions!r:.80} must be a sequence with one action per desktop, not a str")
        actions = list(actions)
        if len(actions) != len(ids):
            raise ActionError(f"got {len(actions)} actions for {len(ids)} desktops ({ids[:8]}...)")
        if len(set(ids)) != len(ids):
            raise ConfigError(f"env_ids={ids!r} repeats a desktop")
        for i, action in zip(ids, actions, strict=True):
            if not isinstance(action, str):
                raise ActionError(
                    f"action for env {i} must be a str (pyautogui code, WAIT, DONE or FAIL): {action!r:.80}"
                )
            self._check_running(i, "step")
        return [str(a) for a in actions]

    def _reset_seeds(self, seed: Any) -> list[int | None]:
        """Per-desktop seeds, as Gymnasium's vector envs read ``reset(seed=...)``."""
        fix = "pass an int (desktop i gets seed + i), one seed or None per desktop, or None"
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            if seed < 0:
                raise ConfigError(f"reset(seed={seed!r}): a seed must be a non-negative int; {fix}")
            return [int(seed) + i for i in range(self.num_envs)]
        if isinstance(seed, str | bytes) or not isinstance(seed, Sequence | np.ndarray):
            raise ConfigError(f"reset(seed={seed!r:.80}) is not a seed; {fix}")
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ConfigError(
                f"reset(seed=...) got {len(seeds)} seeds for {self.num_envs} desktops; {fix} "
                f"(a list must have length num_envs={self.num_envs})"
            )
        for i, value in enumerate(seeds):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0):
                raise ConfigError(f"reset(seed=...): seed[{i}]={value!r:.80} must be a non-negative int or None")
        return [None if value is None else int(value) for value in seeds]

    def _reset_mask(self, mask: Any) -> npt.NDArray[np.bool_]:
        if mask is None:
            return np.ones(self.num_envs, dtype=np.bool_)
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
            raise ConfigError(
                f"options['reset_mask'] must be a bool numpy array of shape ({self.num_envs},), got {mask!r:.80}"
            )
        if not mask.any():
            raise ConfigError("options['reset_mask'] selects no desktop; set at least one entry True")
        return mask

    def _tasks_for(self, ids: list[int], options: Mapping[str, Any]) -> dict[int, Task]:
        unknown = set(options) - {"tasks", "task"}
        if unknown:
            raise ConfigError(f"unknown reset options {sorted(unknown)}; use 'tasks', 'task' or 'reset_mask'")
        given: Mapping[Any, Any] = options.get("tasks") or {}
        chosen: dict[int, Task] = {}
        for i in ids:
            if not 0 <= i < self.num_envs:
                raise ConfigError(f"env_id={i!r} is out of range; this vector env has {self.num_envs} desktops")
            value = given.get(i, options.get("task"))
            if value is None:
                if not self.tasks:
                    raise ConfigError(
                        f"backend {self.backend!r} has no default tasks; pass tasks= or options={{'tasks': ...}}"
                    )
                value = self.tasks[int(self._task_rngs[i].integers(len(self.tasks)))]
            chosen[i] = self._resolve_task(value)
        return chosen

    def _resolve_task(self, value: Task | Mapping[str, Any] | str) -> Task:
        if isinstance(value, Task):
            return value
        if isinstance(value, str):
            ids = [t.task_id for t in self.tasks]
            for task in self.tasks:
                if task.task_id == value:
                    return task
            raise UnknownTaskError(f"unknown task id {value!r}{suggest(value, ids)}")
        if isinstance(value, Mapping):  # the same shapes DesktopEnv.reset accepts
            if "task_id" in value and "instruction" in value and "config" in value:
                return Task.from_json(value)
            if "task_id" in value and isinstance(value.get("config"), Mapping):
                return task_from_config(value["config"], task_id=value["task_id"], domain=value.get("domain"))
            return task_from_config(value)
        raise ConfigError(f"task {value!r:.80} must be a Task, a task config dict or a task id")

    def _recv_need(self, min_results: int) -> int:
        pending = self._outstanding + len(self._finished)
        if pending == 0:
            raise StateError("recv(): nothing is in flight; call send(actions, env_ids) first")
        return max(1, min(int(min_results), pending))

    def _take_finished(self) -> tuple[Obs, npt.NDArray[np.float64], Any, Any, dict[str, Any]]:
        finished, self._finished = self._finished, []
        for result in finished:
            self._slots[result.env_id].busy = None
        return self._assemble([(r.env_id, r) for r in finished], full=False)

    def _single_obs(self, result: _Result) -> Obs:
        screen: Any
        if result.lazy and result.png is not None:
            from legato_gym.vector.ray_host import LazyScreenshot

            screen = LazyScreenshot(result.png, result.shape)
        else:
            screen = result.screen if result.screen is not None else np.zeros(self._shape, np.uint8)
        slot = self._slots[result.env_id]
        slot.last_screen, slot.last_instruction = screen, result.instruction
        return {"screenshot": screen, "instruction": result.instruction}

    def _assemble(
        self, rows: list[tuple[int, _Result | None]], *, full: bool
    ) -> tuple[Obs, npt.NDArray[np.float64], Any, Any, dict[str, Any]]:
        """Batch results; a ``None`` result (not reset) repeats the desktop's last observation."""
        count = len(rows)
        screens = np.empty((count, *self._shape), dtype=np.uint8)
        instructions: list[str] = []
        rewards = np.zeros(count, dtype=np.float64)
        terminated = np.zeros(count, dtype=np.bool_)
        truncated = np.zeros(count, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for row, (env_id, result) in enumerate(rows):
            slot = self._slots[env_id]
            if result is None:
                if slot.last_screen is not None:
                    screens[row] = np.asarray(slot.last_screen)
                else:
                    screens[row] = 0
                instructions.append(slot.last_instruction)
                continue
            screen = result.decode() if result.error is None else None
            if screen is not None:
                screens[row] = screen
            else:
                screens[row] = 0
            result.from_shm, result.screen = False, None
            if slot.unconsumed is result:
                slot.unconsumed = None
            instructions.append(result.instruction)
            rewards[row] = result.reward
            terminated[row] = result.terminated
            truncated[row] = result.truncated or result.error is not None
            info = dict(result.info or {})
            info["env_id"] = env_id
            if result.error is not None:
                info["error"] = result.error
            _add_info(infos, info, row, count)
            # Keep a view for reset(reset_mask) only from full batches: a row of a partial batch would keep
            # that whole batch alive for as long as its desktop stays busy.
            slot.last_screen = screens[row] if full else None
            slot.last_instruction = result.instruction
        obs = {"screenshot": screens, "instruction": tuple(instructions)}
        return obs, rewards, terminated, truncated, infos


def _add_info(infos: dict[str, Any], info: Mapping[str, Any], row: int, count: int) -> dict[str, Any]:
    """Gymnasium's ``VectorEnv._add_info`` for a batch of ``count`` rows (partial batches included)."""
    for key, value in info.items():
        if isinstance(value, dict):
            array: Any = _add_info(infos.get(key, {}), value, row, count)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    array = np.zeros(count, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((count, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(count, fill_value=None, dtype=object)
            array[row] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(count, dtype=np.bool_)
        mask[row] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos
