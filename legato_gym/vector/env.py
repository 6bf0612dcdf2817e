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

This module is the public surface; the workers, their deadlines and replacement are the pool's
(:mod:`~legato_gym.vector.pool`, given a :class:`~legato_gym.transport.handles.WorkerLauncher`), each desktop's
episode phase is :mod:`~legato_gym.vector.state`'s, and batching is :mod:`~legato_gym.vector.batch`'s.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from legato_gym.backends import Backend, Finished, resolve_backend
from legato_gym.config import DesktopConfig
from legato_gym.contract import Task
from legato_gym.env import ACTION_MAX_LENGTH, INSTRUCTION_MAX_LENGTH, TEXT_CHARSET
from legato_gym.episode import UNKNOWN, Unknown
from legato_gym.errors import ConfigError, StateError
from legato_gym.registration import with_step_limit
from legato_gym.transport.handles import WorkerLauncher
from legato_gym.transport.process import ProcessLauncher
from legato_gym.transport.protocol import config_to_json
from legato_gym.vector import inputs
from legato_gym.vector.batch import Batch, Obs, assemble, single_obs
from legato_gym.vector.pool import WorkerPool, kill_all
from legato_gym.vector.requests import Deadlines, Request
from legato_gym.vector.results import Result
from legato_gym.vector.spaces import UniformBox

if TYPE_CHECKING:
    from gymnasium.envs.registration import EnvSpec

__all__ = ["Deadlines", "DesktopVectorEnv"]


class DesktopVectorEnv(gymnasium.vector.VectorEnv):  # type: ignore[misc]
    """``num_envs`` desktops, each in its own worker process.

    Args:
        num_envs: number of desktops.
        backend: backend name (``"fake"``, ``"local"``, ``"osworld"``), ``"package.module:Class"``, or a
            resolved :class:`~legato_gym.backends.Backend`; the workers resolve it again by its name.
        config: how to build each desktop; ``config.worker_python`` is the workers' interpreter. Its ``options``
            are the backend's options class (a mapping is read into it once, here), sent to the workers typed.
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
    _pool: WorkerPool | None = None

    def __init__(
        self,
        num_envs: int,
        backend: str | Backend = "fake",
        config: DesktopConfig | Finished | None = None,
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
        resolved = resolve_backend(backend)
        #: The backend's name (``"fake"``, ``"package.module:Class"``): what the workers resolve.
        self.backend = resolved.name
        # finished once, here (or already, by collect()): the tasks given are checked all at once, before a
        # worker boots a desktop
        finished = resolved.finish(config, tasks)
        self.config = finished.config
        self.max_steps = max_steps
        self.deadlines = deadlines or Deadlines.from_timeouts(self.config.timeouts)
        self.worker_env = dict(worker_env or {})
        self.screenshots = screenshots
        self.png = bool(png)
        self.copy = bool(copy)
        self.pixels = pixels
        given = finished.tasks
        self.tasks: list[Task] = list(given) if given is not None else list(resolved.default_tasks(self.config))
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

        init = {"backend": self.backend, "config": config_to_json(self.config), "max_steps": max_steps, "png": self.png}
        pool = WorkerPool(
            num_envs,
            self._launcher(),
            init=init,
            shape=self._shape,
            screen=self.config.screen,
            seed=seed,
            deadlines=self.deadlines,
            copy=self.copy,
            pixels=pixels,
        )
        self._pool = pool
        self._finalizer = weakref.finalize(self, kill_all, pool.workers)
        self.closed = False
        try:
            pool.start_all()
        except BaseException:
            self.close()
            raise

    def _launcher(self) -> WorkerLauncher:
        """What starts this env's workers: processes on this host (``RayDesktopVectorEnv``: on Ray hosts)."""
        height, width, _ = self._shape
        return ProcessLauncher(
            python=self.config.worker_python,
            env=self.worker_env,
            screen_bytes=height * width * 3 if self.screenshots == "shm" else None,
        )

    @property
    def _workers(self) -> WorkerPool:
        pool = self._pool
        assert pool is not None  # set in __init__ before any call can reach it
        return pool

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
        self._spec = with_step_limit(self._spec, self.max_steps)
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self._spec = value

    @property
    def worker_pids(self) -> list[int]:
        """Process id of each desktop's current worker, by env index (``-1`` while none is running)."""
        return [s.worker.pid if s.worker is not None and s.worker.alive else -1 for s in self._workers.slots]

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
        seeds = inputs.reset_seeds(seed, self.num_envs)
        super().reset(seed=int(seed) if isinstance(seed, int | np.integer) else None)
        options = dict(options or {})
        mask = inputs.reset_mask(options.pop("reset_mask", None), self.num_envs)
        ids = [i for i in range(self.num_envs) if mask[i]]
        for i in ids:
            env_seed = seeds[i]
            if env_seed is not None:
                self._task_rngs[i] = seeding.np_random(env_seed)[0]
        tasks = self._tasks_for(ids, options)
        for i in ids:
            self._check_idle(i, "reset")
        pool = self._workers
        requests = [pool.submit(i, "reset", {"task": tasks[i].to_json()}, "wait") for i in ids]
        pool.pump(lambda: all(r.result is not None for r in requests), None)
        results: list[Result | None] = [None] * self.num_envs
        for request in requests:
            assert request.result is not None
            results[request.env_id] = request.result
            pool.slots[request.env_id].busy = None
        obs, _, _, _, infos = assemble(pool.slots, list(enumerate(results)), self._shape, full=True)
        return obs, infos

    def step(self, actions: Sequence[str]) -> Batch:
        """Step every desktop and wait for all of them.

        Raises:
            StateError: a desktop needs a reset (autoreset is disabled) or has a ``send`` in flight.
        """
        self._check_open()
        ids = list(range(self.num_envs))
        actions = self._check_actions(actions, ids)
        pool = self._workers
        requests = [pool.submit(i, "step", {"action": a}, "wait") for i, a in zip(ids, actions, strict=True)]
        pool.pump(lambda: all(r.result is not None for r in requests), None)
        pairs: list[tuple[int, Result | None]] = []
        for request in requests:
            pool.slots[request.env_id].busy = None
            pairs.append((request.env_id, request.result))
        return assemble(pool.slots, pairs, self._shape, full=True)

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
        if self._pool is not None:
            self._pool.close()
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
            self._workers.submit(i, "step", {"action": action}, "recv")

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
            self._workers.submit(i, "reset", {"task": chosen[i].to_json()}, "recv")

    def recv(self, timeout: float | None = None, min_results: int = 1) -> Batch:
        """Wait until ``min_results`` sent requests have finished (or ``timeout``), and return all finished ones.

        Returns:
            ``(obs, rewards, terminated, truncated, info)`` batched over the ``k`` finished desktops, with
            ``info["env_id"]`` naming them. After ``timeout`` it returns what finished, possibly nothing.

        Raises:
            StateError: nothing was sent.
        """
        self._check_open()
        need = self._recv_need(min_results)
        self._workers.pump(lambda: len(self._workers.finished) >= need, timeout)
        return self._take_finished()

    async def arecv(self, timeout: float | None = None, min_results: int = 1) -> Batch:
        """The awaitable form of :meth:`recv`: the event loop runs while the desktops work."""
        self._check_open()
        pool = self._workers
        loop = pool.attach()
        need = self._recv_need(min_results)
        end = None if timeout is None else loop.time() + timeout
        while len(pool.finished) < need:
            waiter: asyncio.Future[None] = loop.create_future()
            pool.recv_waiter = waiter
            try:
                await asyncio.wait_for(waiter, None if end is None else max(0.0, end - loop.time()))
            except asyncio.TimeoutError:
                break
            finally:
                pool.recv_waiter = None
        return self._take_finished()

    # ------------------------------------------------------------------ public: per-desktop awaitables

    async def areset(
        self, env_id: int, task: Task | Mapping[str, Any] | str, *, next_task: Task | Unknown | None = UNKNOWN
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset one desktop on ``task``; returns ``(obs, info)``.

        ``next_task``: the task this desktop's reset after this one will likely be for (``None``: not known),
        handed to its desktop's ``expect_next`` (:mod:`legato_gym.contract`) before the reset.

        Raises:
            DesktopError: the desktop failed (``env_id`` set); its worker is replaced in the background.
            StateError: the desktop has a request in flight.
        """
        self._check_open()
        chosen = self._tasks_for([env_id], {"tasks": {env_id: task}})[env_id]
        self._check_idle(env_id, "areset")
        args: dict[str, Any] = {"task": chosen.to_json()}
        if next_task is not UNKNOWN:
            args["next_task"] = next_task.to_json() if isinstance(next_task, Task) else None
        result = await self._await(env_id, "reset", args)
        return single_obs(self._workers.slots[env_id], result, self._shape), dict(result.info or {})

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
        obs = single_obs(self._workers.slots[env_id], result, self._shape)
        return obs, result.reward, result.terminated, result.truncated, info

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
        return self._workers.slots[env_id].unavailable is None

    def wait_available(self, env_id: int) -> asyncio.Future[None]:
        """A future done once desktop ``env_id`` is :meth:`available` again (at once if it is)."""
        self._check_open()
        future: asyncio.Future[None] = self._workers.attach().create_future()
        slot = self._workers.slots[env_id]
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
        future: asyncio.Future[None] = self._workers.attach().create_future()
        slot = self._workers.slots[env_id]
        if slot.busy is None:
            future.set_result(None)
        else:
            slot.idle_waiters.append(future)
        return future

    # ------------------------------------------------------------------ requests, checks

    async def _await(self, env_id: int, op: str, args: dict[str, Any]) -> Result:
        future: asyncio.Future[Result] = self._workers.attach().create_future()
        self._workers.submit(env_id, op, args, "future", future)
        result = await future
        if result.error is not None:
            raise result.error
        return result

    def _call_all(self, op: str, args: dict[str, Any]) -> tuple[Any, ...]:
        self._check_open()
        pool = self._workers
        requests: list[Request] = [pool.submit(i, op, args, "internal") for i in range(self.num_envs)]
        pool.pump(lambda: all(r.result is not None for r in requests), None)
        values = []
        for request in requests:
            assert request.result is not None
            if request.result.error is not None:
                raise request.result.error
            values.append(request.result.value)
        return tuple(values)

    def _check_open(self) -> None:
        if self.closed:
            raise StateError("the vector env is closed; create a new one")

    def _check_idle(self, env_id: int, call: str) -> None:
        inputs.check_env_id(env_id, self.num_envs)
        if self._workers.slots[env_id].busy is not None:
            raise StateError(f"{call}: env {env_id} has a request in flight; recv() or await its result first")

    def _check_running(self, env_id: int, call: str) -> None:
        self._check_idle(env_id, call)
        self._workers.slots[env_id].episode.require_steppable(call)

    def _check_actions(self, actions: Sequence[str], ids: list[int]) -> list[str]:
        return inputs.check_actions(actions, ids, lambda i: self._check_running(i, "step"))

    def _tasks_for(self, ids: list[int], options: Mapping[str, Any]) -> dict[int, Task]:
        return inputs.pick_tasks(ids, options, self.tasks, self._task_rngs, self.backend)

    def _recv_need(self, min_results: int) -> int:
        pending = self._workers.outstanding + len(self._workers.finished)
        if pending == 0:
            raise StateError("recv(): nothing is in flight; call send(actions, env_ids) first")
        return max(1, min(int(min_results), pending))

    def _take_finished(self) -> Batch:
        pool = self._workers
        finished, pool.finished = pool.finished, []
        for result in finished:
            pool.slots[result.env_id].busy = None
        return assemble(pool.slots, [(r.env_id, r) for r in finished], self._shape, full=False)
