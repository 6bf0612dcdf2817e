"""RayDesktopVectorEnv: the desktop vector env with its desktops on the hosts of a Ray cluster.

The same :class:`~legato_gym.vector.env.DesktopVectorEnv` (Gymnasium surface, partial batches, per-desktop
awaitables, deadlines, replacement of failed desktops), with one difference: a desktop's worker runs on a
Ray host, inside a long-lived :class:`~legato_gym.vector.ray_host.HostAgent` actor that hosts a group of
desktops, instead of as a child of this process. The scheduler, the policy client and the store stay on
the driver.

Placement: an agent asks Ray for its group's resources, per desktop ``cpus``, ``memory`` and the custom
resources a host advertises for the backend (:meth:`RayPlacement.for_backend`): ``{"legato_kvm": 1,
"legato_docker": 1}`` for osworld, ``{"legato_xvfb": 1}`` for local, none for fake. A host offers desktops by
advertising those resources, e.g. ``ray start --address HEAD:6379 --resources '{"legato_kvm": 16,
"legato_docker": 16}'`` for a host that runs 16 VMs (host setup and the reserve for the host itself:
docs/ray.md). Agents are spread over the hosts that fit (``SPREAD``), and never made larger than the
smallest host that runs a desktop. Demand the alive nodes cannot meet fails at once (:func:`check_fit`),
naming the resources missing, and an address where no cluster answers fails within seconds.

Failures: a lost agent, node or partition ends the requests in flight on it as a dead worker does
locally: :class:`~legato_gym.errors.DesktopCrashed` (or :class:`~legato_gym.errors.DeadlineExceeded` when
the network just stops answering) carrying ``env_id``; the driver polls Ray's node table
(:data:`NODE_POLL_S`) so the desktops of a node Ray reports dead fail at once, requests in flight or not. The
desktop is started again on a new agent on a live node with room, including a host that joined after the batch
started. When no live node has room, the desktop is *unavailable* (``env.available(i)`` is ``False``; its
requests fail at once) rather than waiting out its start deadline for an agent Ray cannot place, and every poll
tries again (docs/ray.md).

Example::

    from legato_gym.vector.ray_env import RayDesktopVectorEnv, RayPlacement

    env = RayDesktopVectorEnv(64, "fake", placement=RayPlacement(address="auto"))
    obs, info = env.reset()
    env.close()
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from legato_gym.errors import ConfigError, DesktopCrashed, MissingDependencyError
from legato_gym.vector.env import DesktopVectorEnv
from legato_gym.vector.process import WorkerProcess
from legato_gym.vector.protocol import FrameReader
from legato_gym.vector.ray_host import Codec, HostAgent, decode_screen

__all__ = ["Fit", "RayDesktopVectorEnv", "RayPlacement", "check_fit", "desktops_per_node", "import_ray"]

logger = logging.getLogger(__name__)

GiB = 1024**3
#: How often the driver asks Ray which nodes are alive (to drop a dead node's desktops, and to place
#: desktops that had nowhere to go on a node that joined), in seconds.
NODE_POLL_S = 1.0
#: How long a node where one of our agents died is given no new desktops unless Ray says it is dead first
#: (Ray may notice a dead agent before it notices that the agent's node is gone), in seconds.
SUSPECT_S = 30.0

#: Per-desktop requests by backend: (cpus, memory bytes, custom resources).
_BACKEND_NEEDS: dict[str, tuple[float, int, dict[str, float]]] = {
    "osworld": (4.0, 4 * GiB, {"legato_kvm": 1.0, "legato_docker": 1.0}),
    "local": (1.0, 1 * GiB, {"legato_xvfb": 1.0}),
    "fake": (0.0, 0, {}),
}


def import_ray() -> Any:
    """Import Ray, or say which extra installs it.

    Raises:
        MissingDependencyError: Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(
            "desktops on a Ray cluster need Ray: pip install 'legatolabs[ray]' (ray[default] on the driver and "
            f"on every host) ({exc})"
        ) from exc
    return ray


@dataclass(frozen=True)
class RayPlacement:
    """Where and how desktops are placed on a Ray cluster.

    Attributes:
        address: the cluster (``"auto"``, ``"HOST:6379"``, ``"ray://HOST:10001"``); ``None`` joins the Ray
            instance this process already runs, or starts a local one.
        group: desktops per host agent (one actor) at most; an agent asks for ``group`` times the per-desktop
            resources, so a host of 16 desktops runs two agents of 8. Agents are never made larger than the
            smallest host that can run a desktop (a cluster of 2-desktop hosts gets agents of 2).
        cpus: CPUs per desktop (``None``: the backend's default, 4 for osworld).
        memory: bytes of memory per desktop (``None``: the backend's default, 4 GiB for osworld).
        resources: custom resources per desktop (``None``: the backend's, e.g. ``{"legato_xvfb": 1}``).
        codec: how screenshots cross the network: ``"auto"`` sends the worker's PNG alone when the env asked
            for PNGs (``png=True``: it stands for the pixels too) and zlib-compressed pixels otherwise;
            ``"zlib"``, ``"png"`` or ``"raw"`` force one.
        hosting: ``"process"`` (a worker process per desktop) or ``"inproc"`` (desktops inside the agent;
            no hang can be killed: fake desktops and benchmarks only).
        namespace: the Ray namespace of the agents.
        runtime_env: Ray ``runtime_env`` of the agents (e.g. ``{"pip": ["legatolabs[ray]==0.1.0"]}``).
        require_fit: check at start that the cluster's nodes have room for every desktop and raise
            :class:`~legato_gym.errors.ConfigError` naming what is missing if not; ``False`` waits for hosts to
            join instead (an autoscaling cluster), up to the start deadline.
        connect_timeout: seconds to wait for the cluster to accept this driver (``ray.init``) before giving up.
    """

    address: str | None = None
    group: int = 8
    cpus: float | None = None
    memory: int | None = None
    resources: Mapping[str, float] | None = None
    codec: Codec = "auto"
    hosting: Literal["process", "inproc"] = "process"
    namespace: str | None = None
    runtime_env: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    require_fit: bool = True
    connect_timeout: float = 60.0

    def __post_init__(self) -> None:
        if not self.connect_timeout > 0:
            raise ConfigError(f"RayPlacement.connect_timeout={self.connect_timeout!r} must be > 0 seconds")
        if isinstance(self.group, bool) or not isinstance(self.group, int) or self.group < 1:
            raise ConfigError(f"RayPlacement.group={self.group!r} must be a positive number of desktops per agent")
        if self.cpus is not None and self.cpus < 0:
            raise ConfigError(f"RayPlacement.cpus={self.cpus!r} must be >= 0")
        if self.memory is not None and self.memory < 0:
            raise ConfigError(f"RayPlacement.memory={self.memory!r} must be >= 0 bytes")
        if self.codec not in ("auto", "zlib", "png", "raw"):
            raise ConfigError(f"RayPlacement.codec={self.codec!r}; choose 'auto', 'zlib', 'png' or 'raw'")
        if self.hosting not in ("process", "inproc"):
            raise ConfigError(f"RayPlacement.hosting={self.hosting!r}; choose 'process' or 'inproc'")
        for name, amount in (self.resources or {}).items():
            if not amount >= 0:
                raise ConfigError(f"RayPlacement.resources[{name!r}]={amount!r} must be >= 0")

    @classmethod
    def coerce(cls, value: RayPlacement | str) -> RayPlacement:
        """A placement from an address string (``--ray ADDRESS``) or a placement."""
        if isinstance(value, RayPlacement):
            return value
        if isinstance(value, str) and value:
            return cls(address=value)
        raise ConfigError(f"ray={value!r}: give a cluster address such as 'auto' or 'HEAD:6379', or a RayPlacement")

    def for_backend(self, backend: str) -> tuple[float, int, dict[str, float]]:
        """Per-desktop ``(cpus, memory, resources)``: the given values, else the backend's defaults."""
        cpus, memory, resources = _BACKEND_NEEDS.get(backend, _BACKEND_NEEDS["fake"])
        return (
            cpus if self.cpus is None else float(self.cpus),
            memory if self.memory is None else int(self.memory),
            dict(resources if self.resources is None else self.resources),
        )


@dataclass(frozen=True)
class Fit:
    """How many desktops of one kind the cluster's nodes have room for (by the resources they advertise).

    Attributes:
        per_node: desktops each alive node can host, by node address (``None``: the desktops need nothing).
        smallest: the fewest desktops a node that can host any can host (``None``: unknown or unbounded).
    """

    per_node: Mapping[str, int] | None
    smallest: int | None

    @property
    def total(self) -> int | None:
        """Desktops the whole cluster has room for (``None``: unbounded or unknown)."""
        return None if self.per_node is None else sum(self.per_node.values())


def desktops_per_node(node_resources: Mapping[str, float], needs: Mapping[str, float]) -> int | None:
    """How many desktops needing ``needs`` (Ray resource name -> amount) fit in ``node_resources``.

    ``None`` when the desktop needs nothing (fake desktops: no limit).

    Example::

        >>> desktops_per_node({"CPU": 8.0, "legato_xvfb": 2.0}, {"CPU": 1.0, "legato_xvfb": 1.0})
        2
    """
    counts = [int(float(node_resources.get(name, 0.0)) / amount + 1e-9) for name, amount in needs.items() if amount > 0]
    return min(counts) if counts else None


def _needs(placement: RayPlacement, backend: str) -> dict[str, float]:
    cpus, memory, resources = placement.for_backend(backend)
    needs = {"CPU": cpus, "memory": float(memory)}
    needs.update(resources)
    return {name: amount for name, amount in needs.items() if amount > 0}


def _amount(name: str, amount: float) -> str:
    return f"{amount / GiB:g} GiB memory" if name == "memory" else f"{amount:g} {name}"


def check_fit(ray: Any, placement: RayPlacement, backend: str, num_envs: int) -> Fit:
    """Compare what ``num_envs`` desktops need with what the cluster's alive nodes advertise.

    Raises:
        ConfigError: no node can host a desktop, or (``placement.require_fit``) the nodes have room for fewer
            than ``num_envs``; the message names the resources missing and how to advertise them.
    """
    needs = _needs(placement, backend)
    if not needs:
        return Fit(None, None)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception as exc:  # e.g. a client connection that cannot list nodes: Ray will place what it can
        logger.warning("cannot list the Ray cluster's nodes to check that the desktops fit: %s", exc)
        return Fit(None, None)
    per_node: dict[str, int] = {}
    for node in nodes:
        resources = node.get("Resources") or {}
        name = f"{node.get('NodeManagerAddress', '?')} (node {str(node.get('NodeID', '?'))[:12]})"
        per_node[name] = desktops_per_node(resources, needs) or 0
    hosting = [count for count in per_node.values() if count > 0]
    fit = Fit(per_node, min(hosting) if hosting else None)
    each = ", ".join(_amount(name, amount) for name, amount in needs.items())
    advertise = (
        "advertise them when starting each host, e.g. ray start --address HEAD:6379 --num-cpus 8 "
        "--resources '{\"legato_xvfb\": 6}' (docs/ray.md), or ask for less with RayPlacement(cpus=..., memory=..., "
        "resources=...)"
    )
    if not hosting:
        offered = {
            name: max((float((n.get("Resources") or {}).get(name, 0.0)) for n in nodes), default=0.0) for name in needs
        }
        short = [
            f"{_amount(name, needs[name])} (the most any node offers: {offered[name]:g})"
            for name in needs
            if offered[name] < needs[name]
        ]
        missing = (
            "; missing: " + ", ".join(short) if short else "; each is offered somewhere, but no node offers all of them"
        )
        raise ConfigError(
            f"no node of the Ray cluster ({len(nodes)} alive) can host a {backend!r} desktop, which needs {each}"
            f"{missing}; {advertise}"
        )
    total = sum(hosting)
    if total < num_envs:
        where = ", ".join(f"{name}: {count}" for name, count in per_node.items())
        message = (
            f"the Ray cluster has room for {total} of the {num_envs} {backend!r} desktops asked for (each needs "
            f"{each}; room by node: {where}); add hosts ({advertise}), or ask for {total} desktops (--desktops {total})"
        )
        if placement.require_fit:
            raise ConfigError(message + ", or wait for hosts to join with RayPlacement(require_fit=False)")
        logger.warning("%s; the others wait for hosts to join", message)
    return fit


def _gcs_target(address: str | None) -> tuple[str, int] | None:
    """The ``(host, port)`` a cluster address connects to first (GCS, or the Ray client server), if known."""
    from_env = os.environ.get("RAY_ADDRESS")
    if from_env and not (address or "").startswith("ray://"):
        address = from_env  # ray.init lets RAY_ADDRESS win over the address it is given
    if address is None:
        return None
    if address == "auto":
        address = ""
        with contextlib.suppress(OSError):  # where `ray start` records the cluster this machine belongs to
            address = Path(os.environ.get("RAY_TMPDIR", "/tmp"), "ray", "ray_current_cluster").read_text().strip()
        if not address or address == "auto":
            return None
    if "://" in address:
        scheme, _, address = address.partition("://")
        default = 10001 if scheme == "ray" else 6379
        if scheme not in ("ray", "gcs"):
            return None
    else:
        default = 6379
    host, colon, port = address.rpartition(":")
    if not colon:
        host, port = address, str(default)
    host = host.strip("[]")
    if not host or not port.isdigit():
        return None
    return host, int(port)


def _init_ray(ray: Any, init: dict[str, Any], timeout: float) -> None:
    """``ray.init(**init)`` that fails within seconds when nothing answers at the address, and within
    ``timeout`` when the cluster answers but never accepts the driver (a Ray started here is not bounded).

    Raises:
        ConfigError: the cluster is unreachable, refused the driver, or did not accept it in time.
    """
    address = init.get("address")
    fix = "give --ray the head's address (HOST:6379, ray://HOST:10001, or 'auto' on a cluster node)"
    target = _gcs_target(address)
    if target is not None:
        host, port = target
        try:
            socket.create_connection((host, port), timeout=min(5.0, timeout)).close()
        except OSError as exc:
            raise ConfigError(
                f"no Ray cluster answers at {address!r} ({host}:{port}: {exc.strerror or exc}); start its head "
                f"there (ray start --head --port {port}) or {fix}"
            ) from exc
    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            ray.init(**init)
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)
        finally:
            done.set()

    if address is None and target is None:  # starting a Ray of our own here: no cluster to wait for
        run()
    else:
        threading.Thread(target=run, name="legato-ray-init", daemon=True).start()
    if not done.wait(timeout):
        raise ConfigError(
            f"the Ray cluster at {address!r} answers but did not accept this driver within {timeout:g} s; check that "
            "the driver runs the cluster's Ray and Python versions (ray --version on the head) and can reach every "
            "node's ports, or raise RayPlacement.connect_timeout"
        )
    if failure:
        error = failure[0]
        if isinstance(error, (ConnectionError, ValueError, RuntimeError, TimeoutError)):
            raise ConfigError(f"cannot connect to the Ray cluster at {address!r}: {error}; {fix}") from error
        raise error


class _Host:
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


class _Hosts:
    """Places desktops on host agents, creates agents as needed and retires lost ones. Thread-safe."""

    def __init__(
        self, ray: Any, placement: RayPlacement, backend: str, agent_args: tuple[Any, ...], largest: int | None = None
    ) -> None:
        self.ray = ray
        self.placement = placement
        self.cpus, self.memory, self.resources = placement.for_backend(backend)
        self.agent_args = agent_args
        self.remote_cls = ray.remote(HostAgent)
        self.hosts: list[_Host] = []
        self.lock = threading.Lock()
        self.expected = 0  # desktops about to be placed (sizes new agents)
        self.group = placement.group if largest is None else max(1, min(placement.group, largest))
        self.backend = backend
        self.needs = _needs(placement, backend)
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

    def place(self) -> tuple[_Host, int]:
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

    def started(self, host: _Host) -> None:
        """A desktop started on ``host`` (counted for its node)."""
        with self.lock:
            counts = self.nodes.setdefault(host.node_label(), {"desktops": 0, "lost": 0})
            counts["desktops"] += 1

    def _new_host(self, capacity: int) -> _Host:
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
        host = _Host(actor, capacity, self._agents)
        self._agents += 1
        self.hosts.append(host)
        logger.info("host agent %d: %d desktops, %s per desktop", host.index, capacity, self._describe())
        return host

    def _describe(self) -> str:
        parts = [f"{self.cpus:g} CPU", f"{self.memory / GiB:g} GiB"] + [f"{k}={v:g}" for k, v in self.resources.items()]
        return ", ".join(parts)

    def lose(self, host: _Host, why: str, *, dead: bool) -> None:
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

    def release(self, host: _Host, key: int) -> None:
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


class _RemoteExit:
    """Stands in for ``Popen`` in the vector env's messages: the remote worker's exit status."""

    returncode: int | None = None


class RayWorker(WorkerProcess):
    """The driver's handle on a desktop worker hosted by a :class:`HostAgent`; a :class:`WorkerProcess` to
    the vector env. Replies arrive through Ray futures; a local socket pair wakes the env's selector or
    event loop, so the env watches it exactly as it watches a local worker."""

    def __init__(self, env_id: int, hosts: _Hosts, ray: Any) -> None:
        # Not a local process: WorkerProcess.__init__ is not called; the attributes the env reads are set here.
        self.host, self.key = hosts.place()  # first: raises when no node has room (nothing to clean up)
        self.env_id = env_id
        self.frames = FrameReader()
        self.stderr_tail: deque[bytes] = deque()
        self._stderr_bytes = 0
        self.screens = None
        self.shm_fd_in_child = None
        self.pid = -1
        self.alive = True
        self._reaped = False
        self.proc = cast("subprocess.Popen[bytes]", _RemoteExit())
        self.node_id: str | None = None
        self.bytes_in = 0  # encoded screenshot and reply bytes received (for the benchmark)
        self._ray = ray
        self._hosts = hosts
        self._lock = threading.Lock()
        self._inbox: deque[tuple[dict[str, Any], bytes]] = deque()
        self._lost: str | None = None
        self._closed = False
        self._started = False
        self._closing: Future[Any] | None = None
        self.sock, self._wake = socket.socketpair()
        self.sock.setblocking(False)
        self._wake.setblocking(False)
        read_end, write_end = os.pipe()
        os.close(write_end)  # the remote stderr arrives with a failure; this end reads EOF at once
        self.stderr_fd = read_end
        with hosts.lock:
            self.host.workers[self.key] = self
        self._watch(self.host.actor.start.remote(self.key))

    @property
    def where(self) -> str:
        """The host agent and host this desktop runs on (named in the vector env's error messages)."""
        host = self.host
        return f"{host.where or 'a host not known yet'} (host agent {host.index}, node {(host.node_id or '?')[:12]})"

    # ------------------------------------------------------------------ what the vector env calls

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Relay one request to the worker; returns at once (the reply arrives through :meth:`read`)."""
        if self._lost is not None or not self.alive or self.host.dead:
            why = f"{self.host.label()} lost: {self.host.why}"
            if not self.stderr_tail:
                self._tail(why)
            raise OSError(why)
        future = self._watch(self.host.actor.request.remote(self.key, dict(message)))
        if message.get("op") == "close":
            self._closing = future

    def read(self) -> bool:
        """Move the replies that arrived into :attr:`frames`; ``False`` once the worker or its host is lost."""
        with contextlib.suppress(BlockingIOError, OSError):
            while self.sock.recv(4096):
                pass
        with self._lock:
            items = list(self._inbox)
            self._inbox.clear()
            lost = self._lost
        for message, payload in items:
            self.frames.frames.append(self._frame(message, payload))
        return lost is None

    def read_stderr(self) -> bool:
        """Remote stderr arrives with a failure (:meth:`stderr_text`); the local pipe is at EOF."""
        return False

    def kill(self) -> None:
        """Stop the worker on its host (the agent kills its process group) and close the local ends."""
        if self._reaped:
            return
        self._reaped, self.alive = True, False
        with self._lock:
            self._closed = True
            for fd_owner in (self.sock, self._wake):
                fd_owner.close()
        with contextlib.suppress(OSError):
            os.close(self.stderr_fd)
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

    @property
    def started(self) -> bool:
        """Whether this desktop's worker started on its host."""
        return self._started

    def lose(self, why: str) -> None:
        """The host is gone (any thread): the env reads the loss at once, as a dead worker's EOF."""
        with self._lock:
            if self._closed or self._lost is not None:
                return
            self._lost = why
            self._tail(why)
            with contextlib.suppress(OSError):
                self._wake.send(b"\0")

    def _watch(self, ref: Any) -> Future[Any]:
        future: Future[Any] = ref.future()
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Any]) -> None:
        """Runs on a Ray thread: queue the reply (or the loss) and wake the env."""
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
                self.proc.returncode = status
        with self._lock:
            if self._closed:
                return
            if lost is None:
                self._inbox.append((message, payload))
            elif self._lost is None:
                self._lost = lost
                self._tail(lost)
            with contextlib.suppress(OSError):
                self._wake.send(b"\0")

    def _tail(self, text: str) -> None:
        self.stderr_tail.append(text.encode())

    def _frame(self, message: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytearray | None]:
        """A reply as the vector env expects it from a worker: the screenshot decoded into a raw blob."""
        self.bytes_in += len(payload)
        kind = message.get("kind")
        if kind == "hello":
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
            return message, _unwire(obs, payload)
        return message, bytearray(payload) if payload else None


def _unwire(obs: dict[str, Any], payload: bytes) -> bytearray:
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


class RayDesktopVectorEnv(DesktopVectorEnv):
    """:class:`DesktopVectorEnv` with its desktops on a Ray cluster; the same surface and the same failures.

    Args:
        num_envs, backend, config, ...: as :class:`DesktopVectorEnv` (``screenshots`` is always framed bytes).
        placement: the cluster and per-desktop resources (a :class:`RayPlacement`, or an address string).

    Raises:
        MissingDependencyError: Ray is not installed.
        ConfigError: no cluster answers at the address, or its nodes cannot host the desktops (what is missing
            is named; see :func:`check_fit`).

    Attributes:
        worker_nodes: the Ray node id of each desktop's current host (``None`` while it starts).
    """

    def __init__(self, num_envs: int, *args: Any, placement: RayPlacement | str = "auto", **kwargs: Any) -> None:
        ray = import_ray()
        self.placement = RayPlacement.coerce(placement)
        kwargs["screenshots"] = "blob"
        self._ray = ray
        self._owns_ray = False
        self._hosts: _Hosts | None = None
        if not ray.is_initialized():
            init: dict[str, Any] = {"address": self.placement.address, "log_to_driver": False}
            if self.placement.address is None:  # a Ray of our own on this machine: keep it on loopback
                init["_node_ip_address"] = "127.0.0.1"
            if self.placement.namespace is not None:
                init["namespace"] = self.placement.namespace
            _init_ray(ray, init, self.placement.connect_timeout)
            self._owns_ray = True
        backend = str(args[0] if args else kwargs.get("backend", "fake"))
        try:
            self._fits = check_fit(ray, self.placement, backend, num_envs)
        except BaseException:
            self._shutdown_ray()
            raise
        self._pending_expected = num_envs
        try:
            super().__init__(num_envs, *args, **kwargs)
        except BaseException:
            self._shutdown_ray()
            raise

    def _new_worker(self, env_id: int) -> WorkerProcess:
        if self._hosts is None:
            height, width, _ = self._shape
            shape = height * width * 3
            args = (self.placement.hosting, self.placement.codec, shape, self.config.python, self.worker_env)
            self._hosts = _Hosts(self._ray, self.placement, self.backend, args, self._fits.smallest)
            self._hosts.expected = self._pending_expected
            self._hosts.watch(self._polled)
        return RayWorker(env_id, self._hosts, self._ray)

    def _polled(self) -> None:
        """After each poll of the nodes (watcher thread): place unavailable desktops from the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and any(s.unavailable is not None for s in self._slots):
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._place_unavailable)

    @property
    def nodes(self) -> dict[str, dict[str, int]]:
        """Per node (``hostname (ip), node ID``): ``desktops`` started there and ``lost`` with their host agent
        or the node itself, over this env's life."""
        if self._hosts is None:
            return {}
        with self._hosts.lock:
            return {name: dict(counts) for name, counts in self._hosts.nodes.items()}

    @property
    def worker_nodes(self) -> list[str | None]:
        """The Ray node id of each desktop's current host, by env index (``None`` while none is running)."""
        nodes: list[str | None] = []
        for slot in self._slots:
            proc = slot.proc
            nodes.append(proc.node_id if isinstance(proc, RayWorker) and proc.alive else None)
        return nodes

    @property
    def bytes_received(self) -> int:
        """Encoded screenshot and reply bytes received from the current workers (for benchmarks)."""
        return sum(s.proc.bytes_in for s in self._slots if isinstance(s.proc, RayWorker))

    def close_extras(self, **kwargs: Any) -> None:
        """Close every desktop, then stop the host agents (and Ray, when this env started it)."""
        try:
            super().close_extras(**kwargs)
        finally:
            if self._hosts is not None:
                self._hosts.shutdown()
            self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        if self._owns_ray:
            self._owns_ray = False
            with contextlib.suppress(Exception):
                self._ray.shutdown()
