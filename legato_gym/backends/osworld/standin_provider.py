"""A stand-in VM behind desktop-env's provider interface: a local sandboxed desktop run as a "machine".

:class:`StandInProvider` implements ``desktop_env.providers.base.Provider`` and :class:`StandInVMManager` its
``VMManager``, over local sandboxed desktops (:mod:`legato_gym.backends.local`) that look and answer like
OSWorld's Ubuntu VM: a GNOME Shell session (``LocalOptions(session="gnome")``) and the in-desktop server in
its ``osworld`` mode (the real server's leak, errors and routes). Each machine has a path (``standin-…``);
``revert_to_snapshot`` discards it and returns a new path, as a cloud provider returns a new instance, so the
manager's path bookkeeping runs too. It is what the provider delegation is tested with here, where no
cloud or KVM is reachable, and a VM-less way to run the osworld backend::

    legato rl collect --backend osworld --provider legato_gym.backends.osworld.standin_provider:StandInProvider ...

Its desktops take ``OSWorldOptions.local`` (default: GNOME, osworld server mode, 1920x1080 or the config's
screen). Runs in desktop-env's interpreter: it imports ``desktop_env.providers.base``.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from dataclasses import replace
from typing import Any

from desktop_env.providers.base import Provider, VMManager

from legato_gym.backends.local.options import LocalOptions
from legato_gym.config import DesktopConfig
from legato_gym.errors import DesktopCrashed

__all__ = ["StandInProvider", "StandInVMManager", "standin_options"]

logger = logging.getLogger(__name__)

_NUMBERS = itertools.count(1)


def _new_path() -> str:
    return f"standin-{os.getpid()}-{next(_NUMBERS)}"


def standin_options(local: LocalOptions | None) -> LocalOptions:
    """The stand-in desktop's options: ``local`` as given, else OSWorld's look (GNOME, the osworld server)."""
    if local is not None:
        return local if local.sandbox_python else replace(local, sandbox_python=sys.executable)
    return LocalOptions(session="gnome", server_mode="osworld", prestart=False, sandbox_python=sys.executable)


class StandInVMManager(VMManager):  # type: ignore[misc]  # desktop-env is untyped
    """desktop-env's ``VMManager`` for stand-in machines: an in-process registry of paths and owners."""

    def __init__(self, **kwargs: Any) -> None:
        self.registry: dict[str, int | None] = {}

    def initialize_registry(self, **kwargs: Any) -> None:
        self.registry.clear()

    def add_vm(self, vm_path: str, *args: Any, **kwargs: Any) -> None:
        self.registry[vm_path] = None

    def delete_vm(self, vm_path: str, *args: Any, **kwargs: Any) -> None:
        self.registry.pop(vm_path, None)

    def occupy_vm(self, vm_path: str, pid: int, *args: Any, **kwargs: Any) -> None:
        self.registry[vm_path] = pid

    def list_free_vms(self, *args: Any, **kwargs: Any) -> list[str]:
        return [path for path, pid in self.registry.items() if pid is None]

    def check_and_clean(self, *args: Any, **kwargs: Any) -> None:
        for path, pid in list(self.registry.items()):
            if pid is not None and not os.path.exists(f"/proc/{pid}"):
                self.registry[path] = None

    def get_vm_path(self, *args: Any, **kwargs: Any) -> str:
        """A new machine's path, registered to this process (machines start when the provider starts them)."""
        path = _new_path()
        self.registry[path] = os.getpid()
        return path


class StandInProvider(Provider):  # type: ignore[misc]  # desktop-env is untyped
    """desktop-env's ``Provider`` over local sandboxed desktops standing in for OSWorld VMs.

    Args:
        region: accepted as every provider does; unused.
    """

    vm_manager_class = StandInVMManager

    def __init__(self, region: str | None = None) -> None:
        super().__init__(region)
        self.config = DesktopConfig(fast_reset=True)
        self.local = standin_options(None)
        self.desktops: dict[str, Any] = {}
        #: Every call, in order, as ``(method, path, ...)`` (tests check the delegation with it).
        self.calls: list[tuple[Any, ...]] = []

    def legato_configure(self, config: DesktopConfig, local: LocalOptions | None) -> None:
        """legato's hook: the desktop config (screen, timeouts) and ``OSWorldOptions.local``."""
        self.local = standin_options(local)
        self.config = replace(config, options=self.local, fast_reset=True)

    def start_emulator(self, path_to_vm: str, headless: bool, *args: Any, **kwargs: Any) -> None:
        """Start the machine at ``path_to_vm`` (a no-op when it runs); returns once its server answers."""
        from legato_gym.backends.local import LocalDesktop

        self.calls.append(("start_emulator", path_to_vm, headless, *args))
        if path_to_vm not in self.desktops:
            self.desktops[path_to_vm] = LocalDesktop(self.config)

    def get_ip_address(self, path_to_vm: str) -> str:
        """``127.0.0.1:<server port>``: the desktop's server behind a loopback TCP forwarder."""
        self.calls.append(("get_ip_address", path_to_vm))
        desktop = self.desktops.get(path_to_vm)
        if desktop is None:
            raise DesktopCrashed(f"stand-in machine {path_to_vm} is not running")
        host, port = desktop.tcp_endpoint()
        return f"{host}:{port}"

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        raise NotImplementedError("a stand-in machine's only snapshot is its first boot")

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        """Discard the machine and return a new one's path (its first boot), as a cloud's new instance."""
        self.calls.append(("revert_to_snapshot", path_to_vm, snapshot_name))
        self._stop(path_to_vm)
        return _new_path()

    def stop_emulator(self, path_to_vm: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("stop_emulator", path_to_vm))
        self._stop(path_to_vm)

    def pids(self, path_to_vm: str) -> list[int]:
        """Host pids of a running machine (for tests that kill it)."""
        desktop = self.desktops.get(path_to_vm)
        return list(desktop.pids) if desktop is not None else []

    def _stop(self, path_to_vm: str) -> None:
        desktop = self.desktops.pop(path_to_vm, None)
        if desktop is not None:
            desktop.close()
