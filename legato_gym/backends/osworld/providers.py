"""desktop-env's providers under the osworld backend: its own classes start, address, revert and stop the VM.

:class:`ProviderVM` is a :class:`~legato_gym.backends.osworld.vms.VM` whose machine is run by one of
desktop-env's ``Provider`` classes (``desktop_env.providers``: aws, azure, gcp, vmware, virtualbox, aliyun,
volcengine, docker) and its ``VMManager``, called as desktop-env's ``DesktopEnv`` calls them:

* start: ``manager.get_vm_path(os_type=, region=, screen_size=)`` (unless ``VMSettings.path_to_vm``), then
  ``provider.start_emulator(path, headless, os_type)`` and ``provider.get_ip_address(path)``
  (``ip[:server:chromium:vnc:vlc]``);
* revert: ``provider.revert_to_snapshot(path, snapshot_name)``; a new path (a cloud's new instance) is
  registered as DesktopEnv does (``delete_vm``, ``add_vm``, ``occupy_vm``), then started as above;
* stop: ``provider.stop_emulator(path)``.

legato keeps everything above the machine: fast reset in place, the ready signals in the VM, setup and grading
(:mod:`.desktop`); the provider is called only at boot, for a revert (``os`` and ``multi_apps`` tasks, an
unverifiable fast reset, a dead VM) and at close. A provider call that returns after the reset's deadline
fails the boot with :class:`~legato_gym.errors.DeadlineExceeded` (the calls take no deadline themselves).

A provider of your own (``OSWorldOptions.provider="package.module:Class"`` or ``VMSettings.provider_class``)
implements the same interface; it may name its ``VMManager`` as the class attribute ``vm_manager_class`` and
take legato's config through an optional ``legato_configure(config, local_options)`` (the stand-in provider
:mod:`.standin_provider` does both). Credentials are read by each provider from the environment
(:data:`PROVIDER_ENVIRONMENT`), never from options or the command line.

Runs in desktop-env's interpreter (its providers import boto3, azure, aliyun or volcengine SDKs there).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from legato_gym.backends.osworld.options import OSWorldOptions, VMSettings
from legato_gym.config import DesktopConfig
from legato_gym.desktopenv.session import Endpoint
from legato_gym.errors import ConfigError, DeadlineExceeded, DesktopCrashed, MissingDependencyError

__all__ = [
    "PROVIDER_ENVIRONMENT",
    "PROVIDER_PACKAGES",
    "ProviderVM",
    "load_provider",
    "parse_address",
    "uses_desktop_env_provider",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What each desktop-env provider reads from the environment (credentials, region, network, image), as
#: desktop-env 1.0.2 reads them; ``docs/osworld.md`` describes each.
PROVIDER_ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "aws": (
        "AWS_REGION",
        "AWS_SUBNET_ID",
        "AWS_SECURITY_GROUP_ID",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_INSTANCE_TYPE",
        "AWS_SCHEDULER_ROLE_ARN",
        "ENABLE_TTL",
        "DEFAULT_TTL_MINUTES",
    ),
    "azure": ("AZURE_SUBSCRIPTION_ID", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET"),
    "gcp": (),
    "vmware": ("HF_ENDPOINT",),
    "virtualbox": ("HF_ENDPOINT",),
    "aliyun": (
        "ALIYUN_ACCESS_KEY_ID",
        "ALIYUN_ACCESS_KEY_SECRET",
        "ALIYUN_REGION",
        "ALIYUN_IMAGE_ID",
        "ALIYUN_INSTANCE_TYPE",
        "ALIYUN_VSWITCH_ID",
        "ALIYUN_SECURITY_GROUP_ID",
        "ALIYUN_RESOURCE_GROUP_ID",
        "ALIYUN_USE_PRIVATE_IP",
    ),
    "volcengine": (
        "VOLCENGINE_ACCESS_KEY_ID",
        "VOLCENGINE_SECRET_ACCESS_KEY",
        "VOLCENGINE_REGION",
        "VOLCENGINE_ZONE_ID",
        "VOLCENGINE_IMAGE_ID",
        "VOLCENGINE_INSTANCE_TYPE",
        "VOLCENGINE_SUBNET_ID",
        "VOLCENGINE_SECURITY_GROUP_ID",
        "VOLCENGINE_DEFAULT_PASSWORD",
    ),
    "docker": ("DOCKER_HOST", "HF_ENDPOINT"),
}

#: The PyPI packages each desktop-env provider imports (``legato osworld setup`` installs none of them).
PROVIDER_PACKAGES: dict[str, tuple[str, ...]] = {
    "aws": ("boto3", "python-dotenv"),
    "azure": ("azure-identity", "azure-mgmt-compute", "azure-mgmt-network", "boto3"),
    "aliyun": ("alibabacloud_ecs20140526", "alibabacloud_tea_openapi", "alibabacloud_tea_util", "python-dotenv"),
    "volcengine": ("volcengine-python-sdk", "python-dotenv"),
    "docker": ("docker", "filelock"),
}
#: The region variable a provider falls back to when ``VMSettings.region`` is not set.
_REGION_VARIABLE = {"aws": "AWS_REGION", "aliyun": "ALIYUN_REGION", "volcengine": "VOLCENGINE_REGION"}
#: Providers whose machine starts dirty (a local VM kept between runs): DesktopEnv reverts before the first task.
_STARTS_DIRTY = frozenset({"vmware", "virtualbox"})


def uses_desktop_env_provider(options: OSWorldOptions) -> bool:
    """True when ``options`` run the VM through a desktop-env ``Provider`` class (:class:`ProviderVM`):
    every provider but ``local``, and ``docker`` only when ``VMSettings.provider_class`` is set."""
    if options.provider == "local":
        return False
    if options.provider == "docker":
        return options.vm is not None and options.vm.provider_class is not None
    return True


def _import(path: str, what: str) -> Any:
    module_name, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except ImportError as exc:
        raise ConfigError(f"cannot import the {what} {path!r} ({exc}); is its package installed in "
                          "desktop-env's interpreter (`legato osworld setup`)?") from exc  # fmt: skip
    except AttributeError as exc:
        raise ConfigError(f"module {module_name!r} has no {what} {name!r}") from exc


def load_provider(options: OSWorldOptions) -> tuple[Any, Any, str]:
    """``(manager, provider, name)`` for ``options``: desktop-env's factory for its provider names, else the
    classes named by import path. ``manager`` is None when none is named and ``VMSettings.path_to_vm`` is set.

    Raises:
        ConfigError: an unknown class path, a provider desktop-env 1.0.2 does not implement (gcp), or a custom
            provider with neither a manager nor ``path_to_vm``.
        MissingDependencyError: the provider's SDK is not installed in desktop-env's interpreter, or it refused
            to start for want of its environment variables (the message lists them).
    """
    settings = options.vm or VMSettings()
    custom = settings.provider_class or (options.provider if ":" in options.provider else None)
    name = options.provider if ":" not in options.provider else "custom"
    region = _region(name, settings)
    if custom is None:
        try:
            from desktop_env.providers import create_vm_manager_and_provider
        except ImportError as exc:
            raise MissingDependencyError(
                f"the {name} provider runs desktop-env's own provider classes: run `legato osworld setup`"
            ) from exc
        try:
            manager, provider = create_vm_manager_and_provider(name, region)
        except NotImplementedError as exc:
            raise ConfigError(
                f"desktop-env {_desktop_env_version()} has no {name} provider (its desktop_env/providers/{name} is "
                "empty and its factory refuses the name); use another provider, or give VMSettings.provider_class "
                "a class of your own implementing desktop-env's Provider interface"
            ) from exc
        except ImportError as exc:
            packages = " ".join(PROVIDER_PACKAGES.get(name, (exc.name or "",)))
            raise MissingDependencyError(
                f"desktop-env's {name} provider needs {exc.name or exc}, which desktop-env's interpreter lacks: "
                f"`{sys.executable} -m pip install {packages}` (docs/osworld.md, 'Providers')"
            ) from exc
        except (OSError, KeyError, ValueError) as exc:  # AWS_REGION unset, AZURE_SUBSCRIPTION_ID, ...
            wanted = ", ".join(PROVIDER_ENVIRONMENT.get(name, ())) or "its settings"
            raise MissingDependencyError(
                f"desktop-env's {name} provider refused to start ({exc}); set its environment variables ({wanted}) "
                "in the environment legato runs in, never on the command line (docs/osworld.md, 'Providers')"
            ) from exc
        return manager, provider, name
    provider_class = _import(custom, "provider class")
    provider = provider_class(region)
    manager_path = settings.manager_class
    manager_class = _import(manager_path, "VM manager class") if manager_path else None
    manager_class = manager_class or getattr(provider_class, "vm_manager_class", None)
    if manager_class is None and settings.path_to_vm is None:
        raise ConfigError(
            f"provider {custom!r} names no VMManager: give VMSettings.path_to_vm (the machine) or "
            "VMSettings.manager_class, or set the class attribute vm_manager_class"
        )
    return (manager_class() if manager_class is not None else None), provider, name


def _region(name: str, settings: VMSettings) -> str | None:
    if settings.region:
        return settings.region
    variable = _REGION_VARIABLE.get(name)
    return os.environ.get(variable) if variable else None


def _desktop_env_version() -> str:
    try:
        from importlib.metadata import version

        return version("desktop-env")
    except Exception:
        return "(unknown version)"


def parse_address(address: str) -> Endpoint:
    """An :class:`Endpoint` from ``get_ip_address``'s ``ip[:server:chromium:vnc:vlc]`` (OSWorld's ports else).

    Raises:
        DesktopCrashed: the provider answered no address, or ports that are not numbers.
    """
    parts = str(address or "").strip().split(":")
    if not parts[0]:
        raise DesktopCrashed(f"the provider gave no address for the VM ({address!r})")
    try:
        ports = [int(port) for port in parts[1:5]]
    except ValueError as exc:
        raise DesktopCrashed(f"the provider's VM address {address!r} is not ip[:server:chromium:vnc:vlc]") from exc
    return Endpoint(parts[0], *(ports or [5000]))  # no ports: OSWorld's (server 5000, chromium 9222, ...)


def _bounded(call: Callable[[], T], deadline: float, what: str) -> T:
    """``call()``, its failure as a :class:`~legato_gym.errors.DesktopCrashed` naming the step.

    desktop-env's provider calls take no deadline and run in the caller's thread (what they start may be tied
    to it: a sandbox started with ``--die-with-parent`` dies with the thread that made it); their own waits
    bound them (docker 300 s, the clouds' waiters). A call that returns past ``deadline`` fails the boot with
    :class:`~legato_gym.errors.DeadlineExceeded`; the server wait after the calls runs under the same deadline.
    """
    try:
        result = call()
    except (DesktopCrashed, DeadlineExceeded, ConfigError, MissingDependencyError):
        raise
    except Exception as exc:
        raise DesktopCrashed(f"the VM provider's {what} failed: {type(exc).__name__}: {exc}") from exc
    if time.monotonic() > deadline:
        raise DeadlineExceeded(f"the VM provider's {what} returned after the reset deadline")
    return result


class ProviderVM:
    """One VM run by a desktop-env provider (see the module docstring).

    Args:
        options: the backend's options (``provider``, ``vm``, ``local`` for a provider that takes it).
        config: the desktop config (``screen`` for ``get_vm_path``; passed to ``legato_configure``).
        deadline: monotonic time by which the VM's server must answer.
    """

    def __init__(self, options: OSWorldOptions, config: DesktopConfig, deadline: float) -> None:
        from legato_gym.backends.osworld.vms import wait_server

        self._wait_server = wait_server
        self.settings = options.vm or VMSettings()
        self.manager, self.provider, self.name = load_provider(options)
        configure = getattr(self.provider, "legato_configure", None)
        if callable(configure):
            configure(config, options.local)
        self.region = _region(self.name, self.settings)
        self.snapshot_name = self._snapshot_name(config)
        self._endpoint: Endpoint | None = None
        self._closed = False
        if self.settings.path_to_vm:
            self.path: str = self.settings.path_to_vm
        else:
            manager = self.manager
            self.path = str(
                _bounded(
                    lambda: manager.get_vm_path(
                        os_type=self.settings.os_type, region=self.region, screen_size=tuple(config.screen)
                    ),
                    deadline,
                    "get_vm_path",
                )
            )
        if self.name in _STARTS_DIRTY:  # a kept local VM: back to its snapshot first, as DesktopEnv does
            self.revert(deadline)
        else:
            self._start(deadline)

    def _snapshot_name(self, config: DesktopConfig) -> str:
        if self.settings.snapshot_name:
            return self.settings.snapshot_name
        if self.name == "aws":  # the AMI is the snapshot (OSWorld's run scripts pass IMAGE_ID_MAP's)
            from desktop_env.providers.aws.manager import IMAGE_ID_MAP

            try:
                return str(IMAGE_ID_MAP[self.region][tuple(config.screen)])
            except KeyError as exc:
                raise ConfigError(
                    f"desktop-env has no OSWorld AMI for region {self.region!r} at screen {config.screen}; give "
                    "VMSettings.snapshot_name (your AMI id) or a region of its IMAGE_ID_MAP"
                ) from exc
        return "init_state"

    def _start(self, deadline: float) -> None:
        path, settings = self.path, self.settings
        _bounded(lambda: self.provider.start_emulator(path, settings.headless, settings.os_type), deadline, "start")
        address = _bounded(lambda: self.provider.get_ip_address(path), deadline, "get_ip_address")
        self._endpoint = parse_address(address)
        logger.info("%s VM %s answers at %s", self.name, path, self._endpoint)
        self._wait_server(self._endpoint, deadline)

    @property
    def endpoint(self) -> Endpoint:
        if self._endpoint is None:
            raise DesktopCrashed(f"the {self.name} VM {self.path} is not running")
        return self._endpoint

    def revert(self, deadline: float) -> None:
        """``revert_to_snapshot``, the new machine registered with the manager as DesktopEnv does, then start."""
        old = self.path
        self._endpoint = None
        new = _bounded(lambda: self.provider.revert_to_snapshot(old, self.snapshot_name), deadline, "revert")
        if new and str(new) != old:
            self.path = str(new)
            if self.manager is not None:
                self.manager.delete_vm(old, self.region)
                self.manager.add_vm(self.path, self.region)
                self.manager.occupy_vm(self.path, os.getpid(), self.region)
        self._start(deadline)

    def alive(self) -> bool:
        """The VM's server answers (a provider has no liveness call): ``GET /platform``, no X connection."""
        if self._endpoint is None or self._closed:
            return False
        try:
            with httpx.Client(timeout=5.0) as client:
                return client.get(f"{self._endpoint.url}/platform").status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._endpoint = None
        try:
            self.provider.stop_emulator(self.path)
        except Exception as exc:  # closing must not raise; the machine may already be gone
            logger.warning("the %s provider could not stop VM %s: %s", self.name, self.path, exc)
