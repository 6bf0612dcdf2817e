"""The Ray cluster side of :class:`~legato_gym.vector.ray_env.RayDesktopVectorEnv`: joining it, and what fits.

:class:`RayPlacement` says where and how desktops go; :func:`check_fit` compares what the desktops need
(:meth:`RayPlacement.for_backend`) with what the alive nodes advertise and names what is missing;
:func:`init_ray` joins a cluster, failing within seconds where none answers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from legato_gym.backends import Backend, resolve_backend
from legato_gym.errors import ConfigError, MissingDependencyError
from legato_gym.vector.ray_host import Codec

__all__ = ["Fit", "RayPlacement", "check_fit", "desktop_needs", "desktops_per_node", "import_ray", "init_ray"]

logger = logging.getLogger(__name__)

GiB = 1024**3
#: How often the driver asks Ray which nodes are alive (to drop a dead node's desktops, and to place
#: desktops that had nowhere to go on a node that joined), in seconds.
NODE_POLL_S = 1.0
#: How long a node where one of our agents died is given no new desktops unless Ray says it is dead first
#: (Ray may notice a dead agent before it notices that the agent's node is gone), in seconds.
SUSPECT_S = 30.0


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

    def for_backend(self, backend: str | Backend) -> tuple[float, int, dict[str, float]]:
        """Per-desktop ``(cpus, memory, resources)``: the given values, else the backend's declared
        :attr:`~legato_gym.backends.Backend.ray_needs`.

        Raises:
            ConfigError: the backend declares no needs and this placement does not give both ``cpus`` and
                ``memory`` (an undeclared backend is never placed as if it needed nothing).
        """
        if self.cpus is not None and self.memory is not None:
            declared = resolve_backend(backend).ray_needs
            resources: Mapping[str, float] = declared.resources if declared is not None else {}
            return float(self.cpus), int(self.memory), dict(resources if self.resources is None else self.resources)
        needs = resolve_backend(backend).needs()
        return (
            needs.cpus if self.cpus is None else float(self.cpus),
            needs.memory if self.memory is None else int(self.memory),
            dict(needs.resources if self.resources is None else self.resources),
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


def desktop_needs(placement: RayPlacement, backend: str | Backend) -> dict[str, float]:
    """What one desktop asks of a node, as Ray resource name -> amount (only the amounts above zero)."""
    cpus, memory, resources = placement.for_backend(backend)
    wanted = {"CPU": cpus, "memory": float(memory)}
    wanted.update(resources)
    return {name: amount for name, amount in wanted.items() if amount > 0}


def _amount(name: str, amount: float) -> str:
    return f"{amount / GiB:g} GiB memory" if name == "memory" else f"{amount:g} {name}"


def check_fit(ray: Any, placement: RayPlacement, backend: str | Backend, num_envs: int) -> Fit:
    """Compare what ``num_envs`` desktops need with what the cluster's alive nodes advertise.

    Raises:
        ConfigError: no node can host a desktop, or (``placement.require_fit``) the nodes have room for fewer
            than ``num_envs``; the message names the resources missing and how to advertise them.
    """
    needs = desktop_needs(placement, backend)
    backend_name = backend if isinstance(backend, str) else backend.name
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
            f"no node of the Ray cluster ({len(nodes)} alive) can host a {backend_name!r} desktop, which needs {each}"
            f"{missing}; {advertise}"
        )
    total = sum(hosting)
    if total < num_envs:
        where = ", ".join(f"{name}: {count}" for name, count in per_node.items())
        message = (
            f"the Ray cluster has room for {total} of the {num_envs} {backend_name!r} desktops asked for (each needs "
            f"{each}; room by node: {where}); add hosts ({advertise}), or ask for {total} desktops (--desktops {total})"
        )
        if placement.require_fit:
            raise ConfigError(message + ", or wait for hosts to join with RayPlacement(require_fit=False)")
        logger.warning("%s; the others wait for hosts to join", message)
    return fit


def gcs_target(address: str | None) -> tuple[str, int] | None:
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


def init_ray(ray: Any, init: dict[str, Any], timeout: float) -> None:
    """``ray.init(**init)`` that fails within seconds when nothing answers at the address, and within
    ``timeout`` when the cluster answers but never accepts the driver (a Ray started here is not bounded).

    Raises:
        ConfigError: the cluster is unreachable, refused the driver, or did not accept it in time.
    """
    address = init.get("address")
    fix = "give --ray the head's address (HOST:6379, ray://HOST:10001, or 'auto' on a cluster node)"
    target = gcs_target(address)
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
