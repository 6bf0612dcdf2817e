"""The osworld backend's options (:class:`OSWorldOptions`, ``DesktopConfig.options``): the VM provider and
its settings, and the waits of reset and the ready signals.

Give them typed, or as the equivalent mapping (a YAML or JSON config), read once by
:meth:`~legato_gym.options.BackendOptions.from_mapping`::

    DesktopConfig(options=OSWorldOptions(provider="docker", docker=DockerSettings(vm_path="~/Ubuntu.qcow2")))
    DesktopConfig(options={"provider": "local", "local": {"memory_mb": 2048}})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from legato_gym.backends.local.options import LocalOptions
from legato_gym.options import BackendOptions, invalid, seconds
from legato_gym.suggest import suggest

__all__ = ["DESKTOP_ENV_PROVIDERS", "PROVIDERS", "REVERT_DOMAINS", "DockerSettings", "OSWorldOptions", "VMSettings"]

#: Domains whose tasks change system state that a home restore does not undo: snapshot revert.
REVERT_DOMAINS = frozenset({"os", "multi_apps"})

#: desktop-env's providers (``desktop_env.providers``), driven through its own provider classes
#: (:mod:`.providers`); ``docker`` runs legato's own container lifecycle unless ``VMSettings.provider_class``
#: names desktop-env's.
DESKTOP_ENV_PROVIDERS = ("aws", "azure", "gcp", "vmware", "virtualbox", "aliyun", "volcengine", "docker")
#: The VM providers: desktop-env's, or ``local`` (a local desktop standing in for a VM). ``provider`` may
#: also be ``package.module:Class``, a class implementing desktop-env's ``Provider`` interface.
PROVIDERS = (*DESKTOP_ENV_PROVIDERS, "local")


@dataclass(frozen=True)
class DockerSettings:
    """How :class:`~legato_gym.backends.osworld.vms.DockerVM` runs containers.

    Attributes:
        image: the VM image (OSWorld's ``happysixd/osworld-docker``).
        vm_path: the Ubuntu qcow2, bind-mounted read-only at ``/System.qcow2`` (``None``: desktop-env's
            ``DockerVMManager.get_vm_path`` finds it, downloading it once into ``./docker_vm_data``).
        cpus / memory / disk: the VM's ``CPU_CORES``, ``RAM_SIZE``, ``DISK_SIZE`` (desktop-env: 4, 4G, 32G).
        command: override of the container's command (stand-in images).
        vm_image: True for OSWorld's image (qcow2 mount, VM environment, ``NET_ADMIN``, ``/dev/kvm``);
            False for a plain image whose own process is the server (stand-ins).
        ports: container ports to publish: server, chromium, vnc, vlc.
        network: the Docker network to attach to (default: Docker's default bridge).
        volumes: extra read-only bind mounts, host path → container path (stand-ins).
    """

    image: str = "happysixd/osworld-docker"
    vm_path: str | None = None
    cpus: int = 4
    memory: str = "4G"
    disk: str = "32G"
    command: tuple[str, ...] | None = None
    vm_image: bool = True
    ports: tuple[int, ...] = (5000, 9222, 8006, 8080)
    network: str | None = None
    volumes: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or self.cpus < 1:
            invalid(self, "cpus", "must be an integer >= 1")
        if not self.ports:
            invalid(self, "ports", "must name at least the server's port, e.g. [5000]")


@dataclass(frozen=True)
class VMSettings:
    """Where and what a desktop-env provider starts (``OSWorldOptions.vm``; desktop-env's ``DesktopEnv``
    arguments of the same names). Credentials are never options: each provider reads them from the
    environment (``docs/osworld.md`` lists its variables).

    Attributes:
        region: the cloud region (aws ``us-east-1``; default: the provider's variable, e.g. ``$AWS_REGION``).
        path_to_vm: the machine: a ``.vmx``/VirtualBox VM path, ``RESOURCE_GROUP/VM_NAME`` on azure, an
            instance id on a cloud (default: the provider's ``VMManager.get_vm_path``, which may create one).
        snapshot_name: what a revert returns to: a snapshot name (vmware, virtualbox: ``init_state``), an image
            id (aws: the AMI, default desktop-env's ``IMAGE_ID_MAP[region][screen]``).
        provider_class: ``package.module:Class`` implementing desktop-env's ``Provider`` interface, used
            instead of desktop-env's class for ``provider`` (e.g. a provider of your own, or
            ``desktop_env.providers.docker.provider:DockerProvider`` for desktop-env's docker lifecycle).
        manager_class: ``package.module:Class`` implementing desktop-env's ``VMManager`` (default:
            desktop-env's for ``provider``, else the provider class's ``vm_manager_class`` attribute).
        headless: passed to ``start_emulator`` (vmware, virtualbox: no window on the host).
        os_type: passed to ``start_emulator`` and ``get_vm_path`` (desktop-env: ``Ubuntu``).
    """

    region: str | None = None
    path_to_vm: str | None = None
    snapshot_name: str | None = None
    provider_class: str | None = None
    manager_class: str | None = None
    headless: bool = True
    os_type: str = "Ubuntu"

    def __post_init__(self) -> None:
        for name in ("provider_class", "manager_class"):
            value = getattr(self, name)
            if value is not None and not _is_import_path(value):
                invalid(self, name, "must be 'package.module:Class'")


def _is_import_path(value: str) -> bool:
    module, _, name = value.partition(":")
    return bool(module) and bool(name) and all(part.isidentifier() for part in [*module.split("."), name])


@dataclass(frozen=True)
class OSWorldOptions(BackendOptions):
    """Options of the osworld backend (``DesktopConfig.options``).

    Attributes:
        provider: the machines: one of desktop-env's providers (``aws``, ``azure``, ``gcp``, ``vmware``,
            ``virtualbox``, ``aliyun``, ``volcengine``, ``docker``), ``"local"`` (a local desktop standing in
            for a VM), or ``package.module:Class`` (a class implementing desktop-env's ``Provider``).
            ``docker`` runs legato's own container lifecycle; the others go through desktop-env's provider
            classes for start, IP, snapshot revert and stop (:mod:`.providers`), in its interpreter.
        docker: the docker provider's settings (default: ``DockerSettings()``).
        vm: what a desktop-env provider starts and reverts to (region, machine, snapshot; default:
            ``VMSettings()``, the provider's own defaults).
        local: the local stand-in's options (provider ``local``; default: ``LocalOptions()``).
        download_cache: host cache for setup downloads, shared by all desktops, kept across runs.
        settle_s: the screen counts as settled when two frames this far apart are equal.
        window_timeout: how long to wait for the setup's windows to map before giving up on that signal.
        kill_timeout: how long fast reset waits for killed processes and their windows to be gone.
        revert_domains: task domains that always use a snapshot revert.
        client_password: the VM user's password (also for ``sudo systemctl restart osworld_server``).
        screenshot_budget: ``/screenshot`` calls a server start may answer: OSWorld's server leaks an X
            connection per screenshot and dies at about 250. A fast reset recycles the server once half of
            it is spent, and a screenshot that would exceed it recycles the server first (0: never).
    """

    backend: ClassVar[str] = "osworld"

    provider: str = "docker"
    docker: DockerSettings | None = None
    vm: VMSettings | None = None
    local: LocalOptions | None = None
    download_cache: str = "~/.cache/legato/osworld-downloads"
    settle_s: float = 0.2
    window_timeout: float = 20.0
    kill_timeout: float = 5.0
    revert_domains: tuple[str, ...] = tuple(sorted(REVERT_DOMAINS))
    client_password: str = "password"
    screenshot_budget: int = 150

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS and not _is_import_path(self.provider):
            invalid(
                self,
                "provider",
                f"is not a provider{suggest(str(self.provider), sorted(PROVIDERS))}; use one of desktop-env's "
                f"({', '.join(DESKTOP_ENV_PROVIDERS)}), 'local' (a "
                "local desktop standing in for a VM), or 'package.module:Class' (desktop-env's Provider interface)",
            )
        seconds(self, "settle_s", "window_timeout", "kill_timeout", positive=True)
        budget = self.screenshot_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            invalid(self, "screenshot_budget", "must be an integer >= 0 (0: never recycle the server)")
