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
import os
import sys
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
        BackendUnavailableError: unknown name, a backend that is not built in this installation, or a
            ``module:Class`` whose module cannot be imported (the message says why) or has no such class.
    """
    spec = BACKENDS.get(name)
    custom = spec is None
    if spec is None and ":" in name:
        spec = BackendSpec(name, name)
    if spec is None or not spec.module or not spec.attr:
        raise BackendUnavailableError(
            f"unknown backend {name!r}; choose one of {', '.join(backend_names())} "
            "or give your own as 'package.module:Class'"
        )
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if custom:
            raise BackendUnavailableError(_import_failure(spec, exc)) from exc
        if exc.name != spec.module:
            raise
        raise BackendUnavailableError(
            f"backend {name!r} is not built in this version of legato; available: {', '.join(backend_names())}"
        ) from exc
    except Exception as exc:  # a custom module that fails while importing: say so instead of a traceback
        if not custom:
            raise
        raise BackendUnavailableError(_import_failure(spec, exc)) from exc
    try:
        cls = getattr(module, spec.attr)
    except AttributeError as exc:
        classes = sorted(n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_"))
        from legato_gym.tasks import suggest

        raise BackendUnavailableError(
            f"backend {name!r}: module {spec.module} has no {spec.attr!r}{suggest(spec.attr, classes)}"
            + (f" (its classes: {', '.join(classes)})" if classes else "")
        ) from exc
    default_tasks = getattr(module, "default_tasks", None)
    if default_tasks is None:

        def default_tasks(config: DesktopConfig) -> Sequence[Task]:
            return []

    return cast(type[Any], cls), default_tasks


def _import_failure(spec: BackendSpec, exc: BaseException) -> str:
    """Why the module of a custom backend did not import, and how to fix it."""
    head = f"backend {spec.target!r}: cannot import module {spec.module!r}"
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    own = missing is not None and (spec.module == missing or spec.module.startswith(missing + "."))
    if not own:  # the module was found, and failed while it was being imported
        return f"{head}: importing it raised {type(exc).__name__}: {exc}; fix that module (or install what it needs)"
    top = spec.module.split(".")[0]
    cwd = os.getcwd()
    on_path = any(os.path.abspath(p or os.curdir) == cwd for p in sys.path)
    here = os.path.exists(os.path.join(cwd, f"{top}.py")) or os.path.isdir(os.path.join(cwd, top))
    if here and not on_path:
        why = (
            f"{top!r} is in the current folder, but the current folder is not on the import path of the legato command"
        )
    else:
        why = f"no module named {missing!r} on the import path" + (
            "" if on_path else " (the current folder is not on it)"
        )
    return (
        f"{head}: {why}; install your package (pip install -e .) or add its folder to PYTHONPATH "
        "(e.g. PYTHONPATH=. legato rl collect ...)"
    )


def make_desktop(name: str, config: DesktopConfig | None = None, *, seed: int | None = None) -> Desktop:
    """Build one desktop of the named backend."""
    cls, _ = get_backend(name)
    return cast(Desktop, cls(config or DesktopConfig(), seed=seed))
