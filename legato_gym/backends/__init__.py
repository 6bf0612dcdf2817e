"""Desktop backends, resolved once by name.

A backend is a class implementing :class:`legato_gym.contract.Desktop`, built as
``cls(config: DesktopConfig, *, seed: int | None = None)``, whose module also defines
``default_tasks(config: DesktopConfig) -> list[Task]``: the suite ``DesktopEnv.reset()`` picks from when it
is given no task, and whose options are a frozen dataclass (:class:`~legato_gym.options.BackendOptions`)
named by its :class:`BackendSpec`. Modules are imported only when their backend is asked for, so a backend's
heavy dependencies cost nothing to users of another.

Each public entry point (``DesktopEnv``, ``DesktopVectorEnv``, ``legato_rl.collect``, ``legato rl collect``)
calls :func:`resolve_backend` once and passes the :class:`Backend` down; :meth:`Backend.configure` reads
``DesktopConfig.options`` given as a mapping into the backend's options class there, once. A worker process
resolves the backend again by its :attr:`Backend.name` (a class does not cross a process boundary)::

    backend = resolve_backend("fake")
    config = backend.configure(DesktopConfig(options={"faults": {"crash": 0.01}}))
    config.options  # FakeOptions(latency={}, faults=Faults(crash=0.01, ...))
    desktop = backend.make(config, seed=0)
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from legato_gym.config import DesktopConfig
from legato_gym.contract import Desktop, Task
from legato_gym.errors import BackendUnavailableError
from legato_gym.options import BackendOptions, typed_options, wrong_options

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendSpec",
    "backend_names",
    "get_backend",
    "make_desktop",
    "resolve_backend",
]


@dataclass(frozen=True)
class BackendSpec:
    """Where a backend lives: ``module:Class``, and its options class, ``module:Class`` (``None``: none)."""

    name: str
    target: str
    options: str | None = None

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
        BackendSpec("fake", "legato_gym.backends.fake:FakeDesktop", "legato_gym.backends.fake.options:FakeOptions"),
        BackendSpec(
            "local", "legato_gym.backends.local:LocalDesktop", "legato_gym.backends.local.options:LocalOptions"
        ),
        BackendSpec(
            "osworld",
            "legato_gym.backends.osworld:OSWorldDesktop",
            "legato_gym.backends.osworld.options:OSWorldOptions",
        ),
    )
}


@dataclass(frozen=True)
class Backend:
    """A resolved backend: its desktop class, its default tasks and its options class.

    Attributes:
        name: the name it was resolved from (``"fake"``, ``"package.module:Class"``): what a worker process
            resolves again, and what records and Ray placement name.
        desktop_class: the class implementing :class:`~legato_gym.contract.Desktop`.
        default_tasks: ``default_tasks(config)``, the backend's own suite (``[]`` when its module has none).
        options_class: its options dataclass, a :class:`~legato_gym.options.BackendOptions` (a backend of your
            own names it as its desktop class's ``options_class``; ``None``: it has none, and
            ``DesktopConfig.options`` stays a mapping of JSON values).
    """

    name: str
    desktop_class: type[Any]
    default_tasks: Callable[[DesktopConfig], Sequence[Task]]
    options_class: type[BackendOptions] | None = None

    def configure(self, config: DesktopConfig | None = None) -> DesktopConfig:
        """``config`` (default: ``DesktopConfig()``) with its ``options`` as this backend's options class.

        A mapping is read into the class once, here (:meth:`~legato_gym.options.BackendOptions.from_mapping`);
        typed options and ``None`` are kept as they are.

        Raises:
            ConfigError: another backend's options (the message names both and the fix), or an unknown key
                or bad value in a mapping (the message names the key path).
        """
        config = config or DesktopConfig()
        options = config.options
        if options is None:
            return config
        if self.options_class is None:
            if isinstance(options, BackendOptions):
                wrong_options(options, None, self.name)
            return config
        typed = typed_options(options, self.options_class, self.name)
        return config if typed is options else replace(config, options=typed)

    def make(self, config: DesktopConfig | None = None, *, seed: int | None = None) -> Desktop:
        """One desktop of this backend, built from :meth:`configure`'s config."""
        return cast(Desktop, self.desktop_class(self.configure(config), seed=seed))


def resolve_backend(backend: str | Backend) -> Backend:
    """The backend of a name (``"fake"``, ``"local"``, ``"osworld"``) or ``"package.module:Class"``; a
    :class:`Backend` is itself. Call it once, at the entry point, and pass the result down.

    Raises:
        BackendUnavailableError: an unknown name (with the closest known one), a backend that is not built in
            this installation, or a ``module:Class`` whose module cannot be imported (the message says why)
            or has no such class.
    """
    if isinstance(backend, Backend):
        return backend
    cls, default_tasks, spec = _load(backend)
    if spec.options is not None:
        module, _, attr = spec.options.partition(":")
        options_class = getattr(importlib.import_module(module), attr)
    else:  # a backend of your own names its options class on its desktop class
        options_class = getattr(cls, "options_class", None)
    if not (isinstance(options_class, type) and issubclass(options_class, BackendOptions)):
        options_class = None
    return Backend(backend, cls, default_tasks, options_class)


def backend_names() -> list[str]:
    """Names of the backends that are built in this installation."""
    names = []
    for name, spec in BACKENDS.items():
        if importlib.util.find_spec(spec.module) is not None:
            names.append(name)
    return names


def get_backend(name: str) -> tuple[type[Any], Callable[[DesktopConfig], Sequence[Task]]]:
    """The backend class and its ``default_tasks`` function, by name or ``module:Class``
    (:func:`resolve_backend` gives them with the options class, as one :class:`Backend`).

    Raises:
        BackendUnavailableError: as :func:`resolve_backend`.
    """
    resolved = resolve_backend(name)
    return resolved.desktop_class, resolved.default_tasks


def _load(name: str) -> tuple[type[Any], Callable[[DesktopConfig], Sequence[Task]], BackendSpec]:
    """The class, ``default_tasks`` and spec of a backend name or ``module:Class``; see :func:`resolve_backend`."""
    spec = BACKENDS.get(name)
    custom = spec is None
    if spec is None and isinstance(name, str) and ":" in name:
        spec = BackendSpec(name, name)
    if spec is None or not spec.module or not spec.attr:
        from legato_gym.tasks import suggest

        hint = suggest(str(name), list(BACKENDS)).lstrip("; ")
        raise BackendUnavailableError(
            f"unknown backend {name!r}; {hint + ' ' if hint else ''}choose one of {', '.join(backend_names())} "
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

    return cast(type[Any], cls), default_tasks, spec


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


def make_desktop(name: str | Backend, config: DesktopConfig | None = None, *, seed: int | None = None) -> Desktop:
    """Build one desktop of the named (or resolved) backend."""
    return resolve_backend(name).make(config, seed=seed)
