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
smallest host that runs a desktop. Demand the alive nodes cannot meet fails at once
(:func:`~legato_gym.vector.ray_cluster.check_fit`), naming the resources missing, and an address where no
cluster answers fails within seconds.

Failures: a lost agent, node or partition ends the requests in flight on it as a dead worker does
locally: :class:`~legato_gym.errors.DesktopCrashed` (or :class:`~legato_gym.errors.DeadlineExceeded` when
the network just stops answering) carrying ``env_id``; the driver polls Ray's node table
(:data:`~legato_gym.vector.ray_cluster.NODE_POLL_S`) so the desktops of a node Ray reports dead fail at
once, requests in flight or not. The desktop is started again on a new agent on a live node with room,
including a host that joined after the batch started. When no live node has room, the desktop is
*unavailable* (``env.available(i)`` is ``False``; its requests fail at once) rather than waiting out its
start deadline for an agent Ray cannot place, and every poll tries again (docs/ray.md).

Where things are: joining the cluster and what fits in :mod:`~legato_gym.vector.ray_cluster`; the host agents
and the driver's handle on each remote worker (:class:`~legato_gym.vector.ray_hosts.RayWorker`, given to the
pool through :class:`~legato_gym.vector.ray_hosts.RayLauncher`) in :mod:`~legato_gym.vector.ray_hosts`; the
agent actor itself in :mod:`~legato_gym.vector.ray_host`.

Example::

    from legato_gym.vector.ray_env import RayDesktopVectorEnv, RayPlacement

    env = RayDesktopVectorEnv(64, "fake", placement=RayPlacement(address="auto"))
    obs, info = env.reset()
    env.close()
"""

from __future__ import annotations

import contextlib
from typing import Any

from legato_gym.backends import resolve_backend
from legato_gym.transport.handles import WorkerLauncher
from legato_gym.vector.env import DesktopVectorEnv
from legato_gym.vector.ray_cluster import Fit, RayPlacement, check_fit, desktops_per_node, import_ray, init_ray
from legato_gym.vector.ray_hosts import Hosts, RayLauncher, RayWorker

__all__ = ["Fit", "RayDesktopVectorEnv", "RayPlacement", "check_fit", "desktops_per_node", "import_ray"]


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
        self._hosts: Hosts | None = None
        if not ray.is_initialized():
            init: dict[str, Any] = {"address": self.placement.address, "log_to_driver": False}
            if self.placement.address is None:  # a Ray of our own on this machine: keep it on loopback
                init["_node_ip_address"] = "127.0.0.1"
            if self.placement.namespace is not None:
                init["namespace"] = self.placement.namespace
            init_ray(ray, init, self.placement.connect_timeout)
            self._owns_ray = True
        try:
            backend = resolve_backend(args[0] if args else kwargs.get("backend", "fake"))  # once, passed down
            if args:
                args = (backend, *args[1:])
            else:
                kwargs["backend"] = backend
            self._fits = check_fit(ray, self.placement, backend, num_envs)
        except BaseException:
            self._shutdown_ray()
            raise
        try:
            super().__init__(num_envs, *args, **kwargs)
        except BaseException:
            self._shutdown_ray()
            raise

    def _launcher(self) -> WorkerLauncher:
        height, width, _ = self._shape
        args = (
            self.placement.hosting,
            self.placement.codec,
            height * width * 3,
            self.config.worker_python,
            self.worker_env,
        )
        self._hosts = Hosts(self._ray, self.placement, self.backend, args, self._fits.smallest)
        self._hosts.expected = self.num_envs
        return RayLauncher(self._hosts, self._polled)

    def _polled(self) -> None:
        """After each poll of the nodes (watcher thread): place unavailable desktops from the event loop."""
        pool = self._pool
        loop = None if pool is None else pool.loop
        if loop is None or loop.is_closed() or pool is None:
            return
        if any(s.unavailable is not None for s in pool.slots):
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(pool.place_unavailable)

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
        for slot in self._workers.slots:
            worker = slot.worker
            nodes.append(worker.node_id if isinstance(worker, RayWorker) and worker.alive else None)
        return nodes

    @property
    def bytes_received(self) -> int:
        """Encoded screenshot and reply bytes received from the current workers (for benchmarks)."""
        workers = [slot.worker for slot in self._workers.slots]
        return sum(worker.bytes_in for worker in workers if isinstance(worker, RayWorker))

    def close_extras(self, **kwargs: Any) -> None:
        """Close every desktop, then stop the host agents (and Ray, when this env started it)."""
        try:
            super().close_extras(**kwargs)  # the pool closes its launcher: the host agents stop
        finally:
            self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        if self._owns_ray:
            self._owns_ray = False
            with contextlib.suppress(Exception):
                self._ray.shutdown()
