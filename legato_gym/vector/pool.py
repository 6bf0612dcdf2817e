"""The worker pool: one worker per desktop, started by a launcher, with a deadline on every request.

The pool never blocks on a single desktop. A worker that dies, breaks the protocol or overruns a deadline
is killed (with everything it started) and replaced by a fresh desktop; the request it held fails with a
typed :class:`~legato_gym.errors.DesktopError` carrying its ``env_id``, and the other desktops carry on.
Workers are watched from a selector while a synchronous call waits (:meth:`WorkerPool.pump`) and from the
event loop once an asynchronous call attached one (:meth:`WorkerPool.attach`).

Each desktop's episode phase is an :class:`~legato_gym.vector.state.EpisodeState`; the pool reports to it
what happened to the desktop's requests and workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import selectors
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from legato_gym.errors import DeadlineExceeded, DesktopCrashed, DesktopError, LegatoError, StateError
from legato_gym.transport.handles import Frame, WorkerHandle, WorkerLauncher
from legato_gym.transport.protocol import PROTOCOL_VERSION, ProtocolError
from legato_gym.vector.requests import EPISODE_OPS, Deadlines, Request, Sink
from legato_gym.vector.results import Result, Screens, copy_error, read_reply, remote_error
from legato_gym.vector.state import EpisodeState, Event

if TYPE_CHECKING:
    from legato_gym.vector.ray_host import LazyScreenshot

__all__ = ["Slot", "WorkerPool", "desktop_seed", "kill_all"]

logger = logging.getLogger(__name__)


def desktop_seed(seed: int | None, env_id: int, generation: int) -> int | None:
    """Seed of a desktop's worker: ``seed + env_id`` for the first; a replacement gets a fresh one, so a
    desktop whose seeded faults killed it does not die the same way again forever."""
    if seed is None:
        return None
    if generation <= 1:
        return seed + env_id
    digest = hashlib.blake2b(f"{seed}:{env_id}:{generation}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class Slot:
    """One desktop: its current worker, the request in flight, and its episode's state."""

    def __init__(self, env_id: int) -> None:
        self.env_id = env_id
        self.worker: WorkerHandle | None = None
        self.generation = 0  # workers started for this desktop, the first one included
        self.ready = False
        self.current: Request | None = None
        self.waiting: deque[Request] = deque()
        self.episode = EpisodeState(env_id)
        self.busy: Request | None = None  # the user request whose result was not handed out yet
        self.idle_waiters: list[asyncio.Future[None]] = []  # idle() futures, done when busy clears
        # Why no worker can be started for this desktop now (its host is gone and no other has room); its
        # requests fail at once with it until a placement succeeds.
        self.unavailable: DesktopError | None = None
        self.available_waiters: list[asyncio.Future[None]] = []  # wait_available() futures
        self.unconsumed: Result | None = None
        self.last_screen: Screens | LazyScreenshot | None = None
        self.last_instruction = ""


class WorkerPool:
    """Workers for ``num_envs`` desktops, started by ``launcher``; requests in, :class:`Result` objects out.

    Args:
        num_envs: number of desktops.
        launcher: starts each desktop's worker (and its replacements).
        init: the ``init`` request's arguments every worker gets (``backend``, ``config``, ``max_steps``,
            ``png``); the pool adds ``env_id``, ``seed``, ``shm_fd`` and ``shm_size``.
        shape: the screenshot shape ``(height, width, 3)`` every desktop must have.
        screen: ``DesktopConfig.screen`` (named when a desktop's screen does not match).
        seed: seeds each desktop (:func:`desktop_seed`).
        deadlines: per-request deadlines.
        copy: results handed to futures own their screenshot (else a read-only view of the worker's buffer).
        pixels: ``"eager"`` decodes a screenshot that came as a PNG only at once; ``"lazy"`` when read.
    """

    def __init__(
        self,
        num_envs: int,
        launcher: WorkerLauncher,
        *,
        init: Mapping[str, Any],
        shape: tuple[int, int, int],
        screen: Any,
        seed: int | None,
        deadlines: Deadlines,
        copy: bool,
        pixels: Literal["eager", "lazy"],
    ) -> None:
        self.launcher = launcher
        self.init = dict(init)
        self.shape = shape
        self.screen = screen
        self.seed = seed
        self.deadlines = deadlines
        self.copy = copy
        self.pixels = pixels
        self.slots = [Slot(i) for i in range(num_envs)]
        self.workers: set[WorkerHandle] = set()
        self.closed = False
        self.finished: list[Result] = []  # results of "recv" requests not received yet
        self.outstanding = 0  # "recv" requests in flight
        self.recv_waiter: asyncio.Future[None] | None = None
        self.start_errors: dict[int, LegatoError] = {}
        self._selector = selectors.DefaultSelector()
        self._fds: dict[int, tuple[Slot, WorkerHandle]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start_all(self) -> None:
        """Start every desktop's worker and wait for them.

        Raises:
            LegatoError: the first desktop that did not start (what its worker reported, or why it died).
        """
        for slot in self.slots:
            self._spawn(slot)
        self.pump(lambda: all(s.current is None for s in self.slots), None)
        failed = [s for s in self.slots if not s.ready]
        if failed:
            env_id = failed[0].env_id
            raise self.start_errors.get(env_id) or DesktopCrashed("worker failed to start", env_id=env_id)
        self.start_errors.clear()

    # ------------------------------------------------------------------ requests

    def submit(
        self, env_id: int, op: str, args: dict[str, Any], sink: Sink, future: asyncio.Future[Result] | None = None
    ) -> Request:
        """Queue request ``op`` for desktop ``env_id``; its result goes to ``sink`` when it finishes."""
        slot = self.slots[env_id]
        request = Request(env_id, op, args, self.deadlines.for_op(op), sink)
        request.future = future
        if sink != "internal":
            slot.busy = request
        if sink == "recv":
            self.outstanding += 1
        if op == "reset":
            slot.episode.advance(Event.RESET_SENT)
        elif op in ("step", "truncate"):
            lost = slot.episode.advance(Event.LOSS_TAKEN)
            if lost is not None:  # the episode died between calls: this call fails as it would have
                self._complete(slot, request, Result(env_id, op, error=lost))
                return request
        if slot.worker is None:
            self._spawn(slot)
        if slot.unavailable is not None:  # nowhere to run it: fail now, not after a start deadline
            self._complete(slot, request, Result(env_id, op, error=copy_error(slot.unavailable)))
            return request
        slot.waiting.append(request)
        self._dispatch(slot)
        return request

    def _dispatch(self, slot: Slot) -> None:
        worker = slot.worker
        if worker is None or not slot.ready or slot.current is not None or not slot.waiting:
            return
        if slot.unconsumed is not None:
            slot.unconsumed.own_screen()
            slot.unconsumed = None
        request = slot.waiting.popleft()
        request.deadline = time.monotonic() + request.timeout
        slot.current = request
        self._arm_timer(request)
        message = {"kind": "request", "id": request.id, "op": request.op, "args": request.args}
        try:
            worker.send(message, request.deadline)
        except (OSError, TimeoutError) as exc:
            self._unwatch(worker)
            worker.kill()  # first: then its exit status is known
            self._fail_worker(
                slot,
                DesktopCrashed(
                    f"{worker.name} died (exit status {worker.exit_status}) before it got {request.op!r} ({exc})"
                ),
            )

    def _complete(self, slot: Slot, request: Request, result: Result) -> None:
        if request.timer is not None:
            request.timer.cancel()
            request.timer = None
        if request.op in EPISODE_OPS:
            if result.error is not None:
                slot.episode.advance(Event.REPLACED if slot.worker is None else Event.FAILED)
            elif request.op == "reset":
                slot.episode.advance(Event.RESET_DONE)
            elif request.op == "truncate" or result.terminated or result.truncated:
                slot.episode.advance(Event.ENDED)
            else:
                slot.episode.advance(Event.STEPPED)
        request.result = result
        if request.sink == "recv":
            self.outstanding -= 1
            self.finished.append(result)
            slot.unconsumed = result
            waiter = self.recv_waiter
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

    def _spawn(self, slot: Slot) -> None:
        try:
            worker = self.launcher.start(slot.env_id)
        except DesktopError as error:  # no host can take it now: the slot is unavailable, not starting
            error.env_id = slot.env_id
            if slot.unavailable is None:
                logger.warning("%s", error)
            slot.worker, slot.ready, slot.current, slot.unavailable = None, False, None, error
            self._start_failed(slot, error)
            return
        if slot.unavailable is not None:
            logger.info("desktop %d is available again", slot.env_id)
        slot.unavailable = None
        for waiter in slot.available_waiters:
            if not waiter.done():
                waiter.set_result(None)
        slot.available_waiters.clear()
        self.workers.add(worker)
        slot.worker, slot.ready = worker, False
        slot.generation += 1
        height, width, _ = self.shape
        args = {
            **self.init,
            "seed": desktop_seed(self.seed, slot.env_id, slot.generation),
            "env_id": slot.env_id,
            "shm_fd": worker.shm_fd,
            "shm_size": height * width * 3,
        }
        init = Request(slot.env_id, "init", args, self.deadlines.start, "internal")
        init.deadline = time.monotonic() + self.deadlines.start
        slot.current = init
        self._watch(slot, worker)
        self._arm_timer(init)

    def _on_fd(self, fd: int) -> None:
        entry = self._fds.get(fd)
        if entry is None:
            return
        slot, worker = entry
        frames, alive = worker.receive(fd)
        if alive and not frames and fd not in worker.fds():  # a stream that ended (stderr): the worker goes on
            self._unwatch_fd(fd)
        try:
            for message, blob in frames:
                if slot.worker is not worker:
                    return
                self._on_message(slot, worker, (message, blob))
        except (ProtocolError, KeyError, TypeError, ValueError, OSError) as exc:
            self._fail_worker(slot, DesktopCrashed(f"{worker.name} broke the protocol: {exc}"))
            return
        if not alive and slot.worker is worker:
            self._unwatch(worker)
            worker.kill()
            self._fail_worker(slot, DesktopCrashed(f"{worker.name} died (exit status {worker.exit_status})"))

    def _on_message(self, slot: Slot, worker: WorkerHandle, frame: Frame) -> None:
        message, blob = frame
        kind = message.get("kind")
        request = slot.current
        if kind == "hello":
            if message.get("protocol") != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"worker speaks protocol {message.get('protocol')!r}, this legato speaks {PROTOCOL_VERSION}; "
                    "install the same legato version in the workers' interpreter (DesktopConfig.worker_python)"
                )
            if request is not None and request.op == "init":
                worker.send(
                    {"kind": "request", "id": request.id, "op": "init", "args": request.args},
                    request.deadline or time.monotonic(),
                )
            return
        if kind != "response" or request is None or message.get("id") != request.id:
            raise ProtocolError(f"unexpected message {str(message)[:200]}")
        slot.current = None
        result = Result(slot.env_id, request.op)
        if not message.get("ok"):
            error = remote_error(slot.env_id, message.get("error") or {})
            result.error = error
            restart = request.op == "init" or isinstance(error, (DesktopCrashed, DeadlineExceeded))
            if restart:
                self._retire(slot, worker)
                if request.op not in EPISODE_OPS and request.op != "init" and isinstance(error, DesktopError):
                    slot.episode.advance(Event.LOST_IDLE, error)  # its desktop is replaced: the episode is gone
            if request.op == "init":
                self._start_failed(slot, error)
            self._complete(slot, request, result)
            if restart and request.op != "init":
                self._spawn(slot)
            self._dispatch(slot)
            return
        payload = message.get("result") or {}
        if request.op == "init":
            size = payload["screen_size"]  # None: the desktop has none, and the worker checks each observation
            width, height = size or (self.shape[1], self.shape[0])
            if (height, width, 3) != self.shape:
                error = DesktopCrashed(
                    f"desktop screen is {width}x{height} but config.screen={self.screen!r}; "
                    "make the backend honour DesktopConfig.screen",
                    env_id=slot.env_id,
                )
                self._retire(slot, worker)
                self._start_failed(slot, error)
                return
            slot.ready = True
            self._dispatch(slot)
            return
        read_reply(result, payload, blob, worker, self.pixels)
        self._complete(slot, request, result)
        self._dispatch(slot)

    def _fail_worker(self, slot: Slot, error: DesktopError) -> None:
        """Kill the slot's worker, fail its request with ``error``, and start a replacement."""
        worker = slot.worker
        if worker is None:
            return
        self._retire(slot, worker)
        request, slot.current = slot.current, None
        error.env_id = slot.env_id
        if request is None or request.sink == "internal":
            slot.episode.advance(Event.LOST_IDLE, error)
        else:
            slot.episode.advance(Event.REPLACED)
        if error.remote_traceback is None:
            error.remote_traceback = worker.stderr_text() or None
        logger.warning("%s; starting a fresh desktop", error)
        if request is not None and request.op == "init":
            self._start_failed(slot, error)
            return
        if request is not None:
            self._complete(slot, request, Result(slot.env_id, request.op, error=error))
        self._spawn(slot)
        self._dispatch(slot)

    def place_unavailable(self) -> None:
        """Try again to start a worker for every unavailable desktop (a host may have room now)."""
        if self.closed:
            return
        for slot in self.slots:
            if slot.unavailable is not None and slot.worker is None:
                self._spawn(slot)
                if slot.unavailable is not None:
                    return  # the others would not find room either

    def _start_failed(self, slot: Slot, error: LegatoError) -> None:
        """A worker could not be started: fail whatever waits for it; the next request tries again."""
        self.start_errors[slot.env_id] = error
        slot.episode.advance(Event.START_FAILED)
        while slot.waiting:
            request = slot.waiting.popleft()
            self._complete(slot, request, Result(slot.env_id, request.op, error=error))

    def _retire(self, slot: Slot, worker: WorkerHandle) -> None:
        """Stop watching ``worker``, kill it and everything it started, and detach it from ``slot``."""
        self._unwatch(worker)
        worker.kill()
        self.workers.discard(worker)
        if slot.worker is worker:
            slot.worker, slot.ready = None, False

    def close(self) -> None:
        """Close every desktop and stop its worker (kill what does not stop within ``deadlines.close``), then
        close the launcher."""
        try:
            self._close_workers()
        finally:
            self.launcher.close()

    def _close_workers(self) -> None:
        self.closed = True
        closing: list[WorkerHandle] = []
        end = time.monotonic() + self.deadlines.close
        for slot in self.slots:
            worker = slot.worker
            if worker is None:
                continue
            self._unwatch(worker)
            if slot.ready and slot.current is None and worker.alive:
                try:
                    worker.send({"kind": "request", "id": 0, "op": "close", "args": {}}, end)
                    closing.append(worker)
                    continue
                except (OSError, TimeoutError):
                    pass
            worker.kill()
        for worker in closing:
            worker.wait_exit(max(0.0, end - time.monotonic()))
        kill_all(self.workers)
        closed = StateError("the vector env was closed; create a new one")
        for slot in self.slots:
            for waiter in slot.available_waiters:
                waiter.cancel()
            slot.available_waiters.clear()
            for request in [slot.current, *slot.waiting]:
                if request is not None and request.future is not None and not request.future.done():
                    request.future.set_exception(closed)
            slot.current, slot.worker, slot.ready = None, None, False
            slot.waiting.clear()
        self._selector.close()
        self.detach()

    # ------------------------------------------------------------------ waiting: selector (sync) or event loop

    def _watch(self, slot: Slot, worker: WorkerHandle) -> None:
        for fd in worker.fds():
            self._fds[fd] = (slot, worker)
            self._selector.register(fd, selectors.EVENT_READ)
            if self._loop is not None:
                self._loop.add_reader(fd, self._on_fd, fd)

    def _unwatch(self, worker: WorkerHandle) -> None:
        for fd in [fd for fd, (_, w) in self._fds.items() if w is worker]:
            self._unwatch_fd(fd)

    def _unwatch_fd(self, fd: int) -> None:
        self._fds.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(fd)

    def attach(self) -> asyncio.AbstractEventLoop:
        """Watch the workers from the running event loop (the first async call on a loop does this)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return loop
        self.detach()
        self._loop = loop
        for fd in self._fds:
            loop.add_reader(fd, self._on_fd, fd)
        for slot in self.slots:
            if slot.current is not None:
                self._arm_timer(slot.current)
        return loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the workers are watched from, if any."""
        return self._loop

    def detach(self) -> None:
        """Stop watching the workers from the event loop."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            for fd in self._fds:
                loop.remove_reader(fd)

    def _arm_timer(self, request: Request) -> None:
        if request.timer is not None:
            request.timer.cancel()
            request.timer = None
        if self._loop is None or self._loop.is_closed() or request.deadline is None:
            return
        delay = max(0.0, request.deadline - time.monotonic())
        request.timer = self._loop.call_later(delay, self._check_deadlines)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            request = slot.current
            if request is not None and request.deadline is not None and now >= request.deadline:
                what = "start" if request.op == "init" else request.op
                who = "the worker" if slot.worker is None else slot.worker.name
                self._fail_worker(
                    slot,
                    DeadlineExceeded(
                        f"{what!r} overran its {request.timeout:g} s deadline; {who} was killed "
                        "(raise the deadline via DesktopConfig.timeouts or deadlines=)"
                    ),
                )

    def pump(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Read worker sockets (without an event loop) until ``done()`` or ``timeout``; returns ``done()``."""
        end = None if timeout is None else time.monotonic() + timeout
        while not done():
            self._check_deadlines()
            if done():
                break
            deadlines = [s.current.deadline for s in self.slots if s.current is not None and s.current.deadline]
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


def kill_all(workers: set[WorkerHandle]) -> None:
    """Kill every worker in ``workers`` (at interpreter exit too) and forget them."""
    for worker in list(workers):
        with contextlib.suppress(Exception):
            worker.kill()
    workers.clear()
