"""Desktops on Ray hosts: the host agents a driver places them on, and its handle on each desktop's worker.

:class:`Hosts` places desktops on :class:`~legato_gym.vector.ray_host.HostAgent` actors (one per group of
desktops), creates agents as needed, retires lost ones and polls Ray's node table. :class:`RayWorker` is the
:class:`~legato_gym.transport.handles.WorkerHandle` of one desktop hosted by an agent: replies arrive through
Ray futures, and a local socket pair wakes the pool's selector or event loop. :class:`RayLauncher` is the
:class:`~legato_gym.transport.handles.WorkerLauncher` a :class:`~legato_gym.vector.ray_env.RayDesktopVectorEnv`
gives its pool.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np
import numpy.typing as npt

from legato_gym.errors import DesktopCrashed
from legato_gym.transport.handles import Frame
from legato_gym.transport.process import STDERR_TAIL
from legato_gym.vector.ray_cluster import NODE_POLL_S, SUSPECT_S, GiB, RayPlacement, desktop_needs, desktops_per_node
from legato_gym.vector.ray_host import HostAgent, decode_screen

__all__ = ["Host", "Hosts", "RayLauncher", "RayWorker", "unwire"]

logger = logging.getLogger(__name__)


class Host:
    """One host agent: its actor handle, its capacity and the desktops it hosts."""

    def __init__(self, actor: Any, capacity: int, index: int) -> None:
        self.actor = actor
        self.capacity = capacity
        self.index = index
        self.keys: set[int] = set()
        self.lost = False  # no new desktops go here
        self.dead = False  # the actor, its node or the way to it failed: its desktops fail at once
        self.why = ""
        self.started = False  # a worker started on it: the actor was placed and runs
        self.node_id: str | None = None
        self.where: str | None = None  # "hostname (ip)" once the agent answered
        self.workers: dict[int, RayWorker] = {}  # by key: told at once when the agent or its node is lost

    def label(self) -> str:
        """The agent and the host it runs on, for messages: ``host agent 2 on gpu7 (10.0.0.7), node 3f2a...``."""
        where = self.where or "a host not known yet (the agent never answered)"
        return f"host agent {self.index} on {where}, node {(self.node_id or '?')[:12]}"

    def node_label(self) -> str:
        """The node this agent runs on, as ``nodes`` counts name it: ``gpu7 (10.0.0.7), node 3f2a...``."""
        return f"{self.where or '?'}, node {(self.node_id or '?')[:12]}"


class Hosts:
    """Places desktops on host agents, creates agents as needed and retires lost ones. Thread-safe."""

    def __init__(
        self, ray: Any, placement: RayPlacement, backend: str, agent_args: tuple[Any, ...], largest: int | None = None
    ) -> None:
        self.ray = ray
        self.placement = placement
        self.cpus, self.memory, self.resources = placement.for_backend(backend)
        self.agent_args = agent_args
        self.remote_cls = ray.remote(HostAgent)
        self.hosts: list[Host] = []
        self.lock = threading.Lock()
        self.expected = 0  # desktops about to be placed (sizes new agents)
        self.group = placement.group if largest is None else max(1, min(placement.group, largest))
        self.backend = backend
        self.needs = desktop_needs(placement, backend)
        # an autoscaling cluster (require_fit=False) adds hosts for agents Ray cannot place yet: those are made
        # anyway; otherwise a desktop with no room anywhere is unavailable (place() raises) until a node has room
        self.check_room = placement.require_fit and bool(self.needs)
        self.suspect: dict[str, float] = {}  # node id -> when one of our agents died there
        #: Desktops started and lost per node (:meth:`RayDesktopVectorEnv.nodes`).
        self.nodes: dict[str, dict[str, int]] = {}
        self._keys = 0
        self._agents = 0
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def place(self) -> tuple[Host, int]:
        """A host agent with room for one more desktop (a new agent if none has room), and a fresh key.

        Raises:
            DesktopCrashed: no live node has room for another desktop (the node that had it was lost).
        """
        with self.lock:
            for host in self.hosts:
                if not host.lost and len(host.keys) < host.capacity:
                    break
            else:
                capacity = max(1, min(self.group, self.expected))
                if self.check_room:
                    capacity = min(capacity, self._room())
                host = self._new_host(capacity)
            self._keys += 1
            host.keys.add(self._keys)
            self.expected = max(0, self.expected - 1)
            return host, self._keys

    def _room(self) -> int:
        """Desktops one new agent can host now: what the alive nodes advertise, less what our agents hold (an
        agent not placed yet holds room on some node). Called with the lock held.

        Raises:
            DesktopCrashed: there is no room.
        """
        try:
            nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        except Exception as exc:  # cannot tell: let Ray place it
            logger.warning("cannot list the Ray cluster's nodes to place a desktop: %s", exc)
            return self.group
        now = time.monotonic()
        free: dict[str, int] = {}
        for node in nodes:
            node_id = str(node.get("NodeID"))
            if now - self.suspect.get(node_id, -SUSPECT_S) >= SUSPECT_S:
                free[node_id] = desktops_per_node(node.get("Resources") or {}, self.needs) or 0
        starting = 0
        for host in self.hosts:
            if host.lost:
                continue
            if host.node_id is None:
                starting += host.capacity
            elif host.node_id in free:
                free[host.node_id] -= host.capacity
        room = min(max(free.values(), default=0), sum(max(0, n) for n in free.values()) - starting)
        if room >= 1:
            return room
        where = ", ".join(f"node {node_id[:12]}: {max(0, n)}" for node_id, n in free.items()) or "none"
        raise DesktopCrashed(
            f"no live node of the Ray cluster has room for another {self.backend!r} desktop (free room by node: "
            f"{where}; {starting} starting); its host was lost, and it starts again as soon as a node with room "
            "joins or frees it (add a host: ray start --address HEAD:6379 --resources ..., docs/ray.md)"
        )

    def watch(self, on_poll: Callable[[], None]) -> None:
        """Ask Ray every :data:`NODE_POLL_S` which nodes are alive: the desktops of a node Ray reports dead
        fail at once; ``on_poll`` runs after each poll (on the watcher thread) to place unavailable desktops."""
        if self._watcher is not None:
            return

        def run() -> None:
            while not self._stop.wait(NODE_POLL_S):
                try:
                    dead = {str(n.get("NodeID")) for n in self.ray.nodes() if not n.get("Alive")}
                except Exception as exc:  # e.g. the driver is disconnecting: try again next time
                    logger.debug("cannot list the Ray cluster's nodes: %s", exc)
                    continue
                with self.lock:
                    doomed = [h for h in self.hosts if not h.lost and h.node_id is not None and h.node_id in dead]
                for host in doomed:
                    self.lose(host, f"Ray reports its node {(host.node_id or '?')[:12]} dead", dead=True)
                with contextlib.suppress(Exception):
                    on_poll()

        self._watcher = threading.Thread(target=run, name="legato-ray-nodes", daemon=True)
        self._watcher.start()

    def started(self, host: Host) -> None:
        """A desktop started on ``host`` (counted for its node)."""
        with self.lock:
            counts = self.nodes.setdefault(host.node_label(), {"desktops": 0, "lost": 0})
            counts["desktops"] += 1

    def _new_host(self, capacity: int) -> Host:
        options: dict[str, Any] = {
            "num_cpus": self.cpus * capacity,
            "resources": {name: amount * capacity for name, amount in self.resources.items() if amount},
            "max_restarts": 0,
            "max_concurrency": max(16, 2 * capacity + 4),
            "scheduling_strategy": "SPREAD",
        }
        if self.memory:
            options["memory"] = self.memory * capacity
        if self.placement.namespace is not None:
            options["namespace"] = self.placement.namespace
        if self.placement.runtime_env is not None:
            options["runtime_env"] = dict(self.placement.runtime_env)
        actor = self.remote_cls.options(**options).remote(*self.agent_args, capacity)
        host = Host(actor, capacity, self._agents)
        self._agents += 1
        self.hosts.append(host)
        logger.info("host agent %d: %d desktops, %s per desktop", host.index, capacity, self._describe())
        return host

    def _describe(self) -> str:
        parts = [f"{self.cpus:g} CPU", f"{self.memory / GiB:g} GiB"] + [f"{k}={v:g}" for k, v in self.resources.items()]
        return ", ".join(parts)

    def lose(self, host: Host, why: str, *, dead: bool) -> None:
        """No more desktops go to ``host`` (``dead``: its desktops fail too); they will be replaced elsewhere."""
        with self.lock:
            was_dead, host.dead = host.dead, host.dead or dead
            if not host.lost:
                host.why = why
                host.lost = True
                self.expected += len(host.keys)
                if not host.started:  # it never ran: maybe no host fits a group this size
                    self.group = max(1, self.group // 2)
                logger.warning("%s lost: %s", host.label(), why)
            if not dead or was_dead:
                return
            if host.node_id is not None:
                self.suspect.setdefault(host.node_id, time.monotonic())
            if host.started:
                counts = self.nodes.setdefault(host.node_label(), {"desktops": 0, "lost": 0})
                counts["lost"] += sum(w.started for w in host.workers.values())
            workers = list(host.workers.values())
        text = f"{host.label()} lost: {host.why}"
        for worker in workers:  # its idle desktops too: none waits for its next request to find out
            worker.lose(text)

    def release(self, host: Host, key: int) -> None:
        """Desktop ``key`` left ``host``: kill its worker there; a lost agent with no desktops is killed."""
        with self.lock:
            host.keys.discard(key)
            host.workers.pop(key, None)
            drop = host.lost and not host.keys
            if drop and host in self.hosts:
                self.hosts.remove(host)
        if drop:
            with contextlib.suppress(Exception):
                self.ray.kill(host.actor, no_restart=True)
        elif not host.lost:
            with contextlib.suppress(Exception):
                host.actor.kill.remote(key)

    def shutdown(self) -> None:
        """Kill every agent (their workers die with them)."""
        self._stop.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=2 * NODE_POLL_S + 5)
        with self.lock:
            hosts, self.hosts = list(self.hosts), []
        refs = []
        for host in hosts:
            if not host.lost:
                with contextlib.suppress(Exception):
                    refs.append(host.actor.shutdown.remote())
        if refs:
            with contextlib.suppress(Exception):
                self.ray.wait(refs, num_returns=len(refs), timeout=10.0)
        for host in hosts:
            with contextlib.suppress(Exception):
                self.ray.kill(host.actor, no_restart=True)


class RayWorker:
    """The driver's handle on a desktop worker hosted by a :class:`~legato_gym.vector.ray_host.HostAgent`.

    Raises:
        DesktopCrashed: (on creation) no live node has room for the desktop.
    """

    def __init__(self, env_id: int, hosts: Hosts) -> None:
        self.host, self.key = hosts.place()  # first: raises when no node has room (nothing to clean up)
        self.env_id = env_id
        self.pid = -1
        self.alive = True
        self.shm_fd: int | None = None  # screenshots cross the network as framed bytes
        self.node_id: str | None = None
        self.bytes_in = 0  # encoded screenshot and reply bytes received (for the benchmark)
        self._hosts = hosts
        self._status: int | None = None
        self._stderr: deque[str] = deque()
        self._lock = threading.Lock()
        self._inbox: deque[tuple[dict[str, Any], bytes]] = deque()
        self._lost: str | None = None
        self._closed = False
        self._started = False
        self._killed = False
        self._closing: Future[Any] | None = None
        self._wake_read, self._wake = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake.setblocking(False)
        with hosts.lock:
            self.host.workers[self.key] = self
        self._watch(self.host.actor.start.remote(self.key))

    @property
    def name(self) -> str:
        """``worker PID on HOST (host agent N, node ID)`` (named in the pool's error messages)."""
        host = self.host
        where = f"{host.where or 'a host not known yet'} (host agent {host.index}, node {(host.node_id or '?')[:12]})"
        return f"worker {self.pid} on {where}"

    @property
    def exit_status(self) -> int | None:
        """The worker's exit status, once its host agent reported it."""
        return self._status

    @property
    def started(self) -> bool:
        """Whether this desktop's worker started on its host."""
        return self._started

    # ------------------------------------------------------------------ the WorkerHandle interface

    def fds(self) -> tuple[int, ...]:
        """The local end that a reply (or the loss of the host) makes readable."""
        return () if self._killed else (self._wake_read.fileno(),)

    def receive(self, fd: int) -> tuple[list[Frame], bool]:
        """The replies that arrived, and ``False`` once the worker or its host is lost."""
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_read.recv(4096):
                pass
        with self._lock:
            items = list(self._inbox)
            self._inbox.clear()
            lost = self._lost
        return [self._frame(message, payload) for message, payload in items], lost is None

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Relay one request to the worker; returns at once (the reply arrives through :meth:`receive`)."""
        if self._lost is not None or not self.alive or self.host.dead:
            why = f"{self.host.label()} lost: {self.host.why}"
            if not self._stderr:
                self._stderr.append(why)
            raise OSError(why)
        future = self._watch(self.host.actor.request.remote(self.key, dict(message)))
        if message.get("op") == "close":
            self._closing = future

    def screen(self, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
        """Never: a remote worker shares no memory with the driver."""
        raise ValueError(f"worker {self.pid} on a Ray host has no shared screenshot buffer here")

    def stderr_text(self) -> str:
        """What the host agent reported of the worker's stderr and of its loss."""
        return "".join(self._stderr)[-STDERR_TAIL:]

    def kill(self) -> None:
        """Stop the worker on its host (the agent kills its process group) and close the local ends."""
        if self._killed:
            return
        self._killed, self.alive = True, False
        with self._lock:
            self._closed = True
            for end in (self._wake_read, self._wake):
                end.close()
        if not self._started and self._lost is None and not self.host.started:
            # nothing ever started on this agent: it may be unplaceable (no host has its group's resources)
            self._hosts.lose(self.host, "no desktop started on it before its deadline", dead=False)
        self._hosts.release(self.host, self.key)

    def wait_exit(self, timeout: float) -> bool:
        """Wait for the worker to answer ``close`` (it exits on its host); then release it."""
        closing, ok = self._closing, False
        if closing is not None:
            with contextlib.suppress(Exception):
                closing.result(timeout=max(0.0, timeout))
                ok = True
        self._started = True  # a slow close is not the agent's failure
        self.kill()
        return ok

    # ------------------------------------------------------------------ internals

    def lose(self, why: str) -> None:
        """The host is gone (any thread): the pool reads the loss at once, as a dead worker's EOF."""
        with self._lock:
            if self._closed or self._lost is not None:
                return
            self._lost = why
            self._stderr.append(why)
            with contextlib.suppress(OSError):
                self._wake.send(b"\0")

    def _watch(self, ref: Any) -> Future[Any]:
        future: Future[Any] = ref.future()
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Any]) -> None:
        """Runs on a Ray thread: queue the reply (or the loss) and wake the pool."""
        lost: str | None = None
        try:
            value = future.result()
        except Exception as exc:  # a lost actor, node or object: the host is gone for this desktop
            lost = f"{self.host.label()} lost: {type(exc).__name__}: {exc}"
            self._hosts.lose(self.host, f"{type(exc).__name__}: {str(exc)[:200]}", dead=True)
        else:
            message, payload = value if isinstance(value, tuple) else (value, b"")
            if message.get("kind") == "eof":
                self.host.where = message.get("host") or self.host.where
                self.host.node_id = message.get("node_id") or self.host.node_id
                status = message.get("status")
                lost = (
                    str(message.get("stderr") or "") + f"\n(worker exited with status {status} on {self.host.label()})"
                )
                self._status = status
        with self._lock:
            if self._closed:
                return
            if lost is None:
                self._inbox.append((message, payload))
            elif self._lost is None:
                self._lost = lost
                self._stderr.append(lost)
            with contextlib.suppress(OSError):
                self._wake.send(b"\0")

    def _frame(self, message: dict[str, Any], payload: bytes) -> Frame:
        """A reply as the pool expects it from a worker: the screenshot decoded into a raw blob."""
        self.bytes_in += len(payload)
        if message.get("kind") == "hello":
            self._started = True
            self.host.started = True
            self.pid = int(message.get("pid", -1))
            self.node_id = self.host.node_id = message.get("node_id") or self.host.node_id
            self.host.where = message.get("host") or self.host.where
            self._hosts.started(self.host)
            return message, None
        result = message.get("result")
        obs = result.get("obs") if isinstance(result, dict) else None
        if isinstance(obs, dict) and "wire" in obs:
            return message, unwire(obs, payload)
        return message, bytearray(payload) if payload else None


def unwire(obs: dict[str, Any], payload: bytes) -> bytearray:
    """The worker's blob from a payload a :class:`HostAgent` encoded: raw pixels then its PNG if any, or the PNG
    alone (``where="png"``) when it stands for the pixels too; the vector env decodes those when they are read
    (``pixels="lazy"``) or at once."""
    shape = tuple(int(n) for n in obs["shape"])
    wire = str(obs.pop("wire"))
    if wire == "png-tail":
        obs["where"] = "png"
        return bytearray(payload)
    view = memoryview(payload)
    png_bytes = int(obs.get("png", 0) or 0)
    blob = decode_screen(view[: len(view) - png_bytes], shape, wire, extra=png_bytes)
    if png_bytes:
        blob[len(blob) - png_bytes :] = view[len(view) - png_bytes :]
    return blob


class RayLauncher:
    """Starts each desktop's worker on a Ray host agent (a :class:`~legato_gym.transport.handles.WorkerLauncher`).

    Args:
        hosts: the host agents the desktops are placed on.
        on_poll: runs on the node watcher's thread after each poll of Ray's node table (the env places
            unavailable desktops from it); the watcher starts with the first desktop.
    """

    def __init__(self, hosts: Hosts, on_poll: Callable[[], None]) -> None:
        self.hosts = hosts
        self.on_poll = on_poll

    def start(self, env_id: int) -> RayWorker:
        """Place desktop ``env_id`` on a host agent and start its worker there."""
        self.hosts.watch(self.on_poll)
        return RayWorker(env_id, self.hosts)

    def close(self) -> None:
        """Stop the host agents (their workers die with them)."""
        self.hosts.shutdown()
