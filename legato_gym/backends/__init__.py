"""Desktop backends, looked up by name.

A backend is a class implementing :class:`legato_gym.contract.Desktop`, built as
``cls(config: DesktopConfig, *, seed: int | None = None)``, whose module also defines
``default_tasks(config: DesktopConfig) -> list[Task]``: the suite ``DesktopEnv.reset()`` picks from when it
is given no task. Modules are imported only when their backend is asked for, so a backend's heavy
dependencies cost nothing to users of another.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from legato_gym.config import DesktopConfig
from legato_gym.contract import Desktop, Task
from legato_gym.errors import BackendUnavailableError

__all__ = ["BACKENDS", "BackendSpec", "backend_names", "get_backend", "make_desktop"]


@dataclass(frozen=True)
class BackendSpec:
    """Where a backend lives: ``module:Class``."""

    name: str
    target: str

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def attr(self) -> str:
        return self.target.partition(":")[2]


#: Every backend legato knows, by name.
BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("fake", "legato_gym.backends.fake:FakeDesktop"),
        BackendSpec("local", "legato_gym.backends.local:LocalDesktop"),
        BackendSpec("osworld", "legato_gym.backends.osworld:OSWorldDesktop"),
    )
}


def backend_names() -> list[str]:
    """Names of the backends that are built in this installation."""
    names = []
    for name, spec in BACKENDS.items():
        if importlib.util.find_spec(spec.module) is not None:
            names.append(name)
    return names


def get_backend(name: str) -> tuple[type[Any], Callable[[DesktopConfig], Sequence[Task]]]:
    """The backend class and its ``default_tasks`` function, by name or ``module:Class``.

    Raises:
        BackendUnavailableError: unknown name, or a backend that is not built in this installation.
    """
    spec = BACKENDS.get(name)
    if spec is None and ":" in name:
        spec = BackendSpec(name, name)
    if spec is None:
        raise BackendUnavailableError(
            f"unknown backend {name!r}; choose one of {', '.join(backend_names())} "
            "or give your own as 'package.module:Class'"
        )
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if exc.name != spec.module:
            raise
        raise BackendUnavailableError(
            f"backend {name!r} is not built in this version of legato; available: {', '.join(backend_names())}"
        ) from exc
    try:
        cls = getattr(module, spec.attr)
    except AttributeError as exc:
        raise BackendUnavailableError(f"backend {name!r}: module {spec.module} has no {spec.attr!r}") from exc
    default_tasks = getattr(module, "default_tasks", None)
    if default_tasks is None:

        def default_tasks(config: DesktopConfig) -> Sequence[Task]:
            return []

    return cast(type[Any], cls), default_tasks


def make_desktop(name: str, config: DesktopConfig | None = None, *, seed: int | None = None) -> Desktop:
    """Build one desktop of the named backend."""
    cls, _ = get_backend(name)
    return cast(Desktop, cls(config or DesktopConfig(), seed=seed))
