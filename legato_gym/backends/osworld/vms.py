"""The machines behind the ``osworld`` backend: one VM (or stand-in) per desktop, started, reverted, closed.

A :class:`VM` gives an :class:`~legato_gym.desktopenv.session.Endpoint` where OSWorld's in-VM server
answers, and a snapshot revert. Providers:

* ``docker`` (:class:`DockerVM`): OSWorld's ``happysixd/osworld-docker`` image (QEMU inside Docker, KVM when
  ``/dev/kvm`` exists) with desktop-env's settings (4 vCPU, 4 GB, the qcow2 read-only, ``NET_ADMIN``), but
  legato's lifecycle: containers carry labels (:data:`LABEL`, owner pid, boot id), ports are published on
  loopback and chosen by Docker (no port scan under a global file lock, so desktops start in parallel),
  containers leaked by a killed run are removed at the next start, and a revert recreates the container.
* ``local`` (:class:`LocalStandInVM`): a sandboxed local desktop (:mod:`legato_gym.backends.local`) behind
  a loopback TCP forwarder, speaking the same protocol; a revert restarts it from its first-boot state. It
  is the stand-in VM of the integration tests and of machines without KVM.

Runs in desktop-env's interpreter (the docker provider needs the ``docker`` package installed there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import httpx

from legato_gym.backends.local.options import LocalOptions
from legato_gym.backends.osworld.options import DockerSettings, OSWorldOptions
from legato_gym.config import DesktopConfig
from legato_gym.desktopenv.session import Endpoint
from legato_gym.errors import DeadlineExceeded, DesktopCrashed, MissingDependencyError

__all__ = ["LABEL", "VM", "DockerSettings", "DockerVM", "LocalStandInVM", "sweep_leaked", "wait_server"]

logger = logging.getLogger(__name__)

#: Label on every container legato starts; its value is the image's role (``osworld``).
LABEL = "dev.legato.osworld"
OWNER_LABEL = "dev.legato.owner-pid"
BOOT_LABEL = "dev.legato.boot-id"
_POLL_S = 0.05


class VM(Protocol):
    """One machine: where its server is, whether it lives, and how to revert or end it."""

    @property
    def endpoint(self) -> Endpoint: ...

    def revert(self, deadline: float) -> None:
        """Back to the clean snapshot; the endpoint may change."""
        ...

    def alive(self) -> bool: ...

    def close(self) -> None: ...


def wait_server(endpoint: Endpoint, deadline: float, alive: Callable[[], bool] | None = None) -> None:
    """Poll ``GET /screenshot`` until it answers 200 (desktop-env's docker ready check), or the deadline.

    ``alive`` is asked between polls; a machine that died while booting fails at once.
    """
    with httpx.Client(timeout=5.0) as client:
        while True:
            if alive is not None and not alive():
                raise DesktopCrashed(f"the machine behind {endpoint.url} died while booting")
            try:
                if client.get(f"{endpoint.url}/screenshot").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(f"the desktop server at {endpoint.url} did not answer before the deadline")
            time.sleep(_POLL_S)


# ------------------------------------------------------------------------------------- local stand-in


class LocalStandInVM:
    """A local sandboxed desktop standing in for a VM (same protocol, over a loopback TCP forwarder).

    Args:
        config: the osworld backend's config; ``screen``, ``timeouts`` and ``ready_signal`` are passed on.
        local_options: options of the local backend (``OSWorldOptions.local``).
    """

    def __init__(self, config: DesktopConfig, local_options: LocalOptions) -> None:
        self._config = replace(config, options=local_options, fast_reset=True)
        self._desktop: Any = None
        self._endpoint: Endpoint | None = None
        self._start()

    def _start(self) -> None:
        from legato_gym.backends.local import LocalDesktop

        self._desktop = LocalDesktop(self._config)
        host, port = self._desktop.tcp_endpoint()
        self._endpoint = Endpoint(host, port)

    @property
    def endpoint(self) -> Endpoint:
        if self._endpoint is None:
            raise DesktopCrashed("the stand-in desktop is closed")
        return self._endpoint

    @property
    def pids(self) -> list[int]:
        """Host pids of the stand-in (for tests that kill it)."""
        return list(self._desktop.pids) if self._desktop is not None else []

    def revert(self, deadline: float) -> None:
        self.close()
        self._start()
        wait_server(self.endpoint, deadline)

    def alive(self) -> bool:
        desktop = self._desktop
        return desktop is not None and bool(desktop._processes.alive())

    def close(self) -> None:
        if self._desktop is not None:
            self._desktop.close()
        self._desktop = None
        self._endpoint = None


# --------------------------------------------------------------------------------------------- docker


def _docker_client() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise MissingDependencyError(
            "the docker provider needs the 'docker' package in desktop-env's interpreter; run `legato osworld setup`"
        ) from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise DesktopCrashed(
            f"cannot reach the Docker engine ({exc}); start dockerd, or set DOCKER_HOST to its socket"
        ) from exc
    return client


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def sweep_leaked(client: Any) -> list[str]:
    """Remove legato's containers whose owner process is gone (a killed run); their names."""
    removed = []
    boot = _boot_id()
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        labels = container.labels or {}
        try:
            owner = int(labels.get(OWNER_LABEL, "0"))
        except ValueError:
            owner = 0
        same_boot = labels.get(BOOT_LABEL) == boot
        if owner and same_boot and Path(f"/proc/{owner}").exists():
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
    if removed:
        logger.warning("removed %d container(s) leaked by a killed run: %s", len(removed), ", ".join(removed))
    return removed


class DockerVM:
    """One OSWorld VM in a Docker container, with labels, loopback ports chosen by Docker, and revert.

    Args:
        settings: image and resources.
        deadline: monotonic time by which the server must answer.
        client: a ``docker.DockerClient`` (default: ``docker.from_env()``).
    """

    def __init__(self, settings: DockerSettings, deadline: float, client: Any = None) -> None:
        self.settings = settings
        self.client = client or _docker_client()
        self.container: Any = None
        self._endpoint: Endpoint | None = None
        sweep_leaked(self.client)
        self._start(deadline)

    def _vm_path(self) -> str:
        if self.settings.vm_path:
            return os.path.abspath(os.path.expanduser(self.settings.vm_path))
        from desktop_env.providers.docker.manager import DockerVMManager

        return os.path.abspath(str(DockerVMManager().get_vm_path(os_type="Ubuntu", region=None)))

    def _start(self, deadline: float) -> None:
        s = self.settings
        kwargs: dict[str, Any] = {
            "detach": True,
            "labels": {LABEL: "osworld", OWNER_LABEL: str(os.getpid()), BOOT_LABEL: _boot_id()},
            # Docker picks free host ports (0) on loopback: no port scan, no global lock.
            "ports": {f"{port}/tcp": ("127.0.0.1", None) for port in s.ports},
        }
        if s.network:
            kwargs["network"] = s.network
        if s.command:
            kwargs["command"] = list(s.command)
        if s.volumes:
            kwargs["volumes"] = {host: {"bind": inside, "mode": "ro"} for host, inside in s.volumes.items()}
        if s.vm_image:
            environment = {"DISK_SIZE": s.disk, "RAM_SIZE": s.memory, "CPU_CORES": str(s.cpus)}
            devices = []
            if os.path.exists("/dev/kvm"):
                devices.append("/dev/kvm")
            else:
                environment["KVM"] = "N"
                logger.warning("no /dev/kvm: the VM runs without hardware acceleration (very slow)")
            kwargs.update(
                environment=environment,
                cap_add=["NET_ADMIN"],
                devices=devices,
                volumes={**kwargs.get("volumes", {}), self._vm_path(): {"bind": "/System.qcow2", "mode": "ro"}},
            )
        try:
            self.container = self.client.containers.run(s.image, **kwargs)
            self.container.reload()
            published = self.container.attrs["NetworkSettings"]["Ports"]
            host_ports = [int(published[f"{port}/tcp"][0]["HostPort"]) for port in s.ports]
        except Exception as exc:
            self._remove()
            raise DesktopCrashed(f"could not start a container from image {s.image!r}: {exc}") from exc
        self._endpoint = Endpoint("127.0.0.1", *host_ports)
        try:
            wait_server(self._endpoint, deadline, self.alive)
        except (DeadlineExceeded, DesktopCrashed):
            self._remove()
            raise

    @property
    def endpoint(self) -> Endpoint:
        if self._endpoint is None:
            raise DesktopCrashed("the VM container is gone")
        return self._endpoint

    @property
    def name(self) -> str:
        return str(self.container.name) if self.container is not None else ""

    def alive(self) -> bool:
        if self.container is None:
            return False
        try:
            self.container.reload()
        except Exception:
            return False
        return bool(self.container.status == "running")

    def revert(self, deadline: float) -> None:
        """Recreate the container: a fresh copy-on-write disk (the image's snapshot), new ports."""
        self._remove()
        self._start(deadline)

    def _remove(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
        self.container = None
        self._endpoint = None

    def close(self) -> None:
        self._remove()


def make_vm(options: OSWorldOptions, config: DesktopConfig, deadline: float) -> VM:
    """The VM of ``options.provider``: legato's docker lifecycle, the local stand-in, or a desktop-env
    provider class (:class:`~legato_gym.backends.osworld.providers.ProviderVM`)."""
    from legato_gym.backends.osworld.providers import ProviderVM, uses_desktop_env_provider

    if uses_desktop_env_provider(options):
        return ProviderVM(options, config, deadline)
    if options.provider == "local":
        return LocalStandInVM(config, options.local or LocalOptions())
    return DockerVM(options.docker or DockerSettings(), deadline)
