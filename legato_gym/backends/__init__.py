"""Desktop backends: each one a declared unit, resolved once by name.

A backend is one package whose ``__init__`` declares one :class:`Backend`, named ``BACKEND``: its desktop
class (implementing :class:`legato_gym.contract.Desktop`, built as ``cls(config, *, seed=None)``), its options
class, its default tasks, its task checks, the interpreter its workers run in, what a desktop needs of a Ray
host, the options ``legato rl collect`` sets from its flags, and its scripted solutions. The core and
``legato_rl`` read only that object. Adding a backend to legato is that package plus one line in
:data:`BACKENDS` (its name, its package and its Gymnasium id); a backend of your own needs no line at all:
give ``"package.module:BACKEND"`` (docs/backends.md has a worked example).

Packages are imported only when their backend is asked for, so a backend's heavy dependencies cost nothing
to users of another; Gymnasium ids are registered from :data:`BACKENDS` without importing any backend.

Each public entry point (``DesktopEnv``, ``DesktopVectorEnv``, ``legato_rl.collect``, ``legato rl collect``)
calls :func:`resolve_backend` once and :meth:`Backend.finish` once, and passes the :class:`Finished`
settings down. A worker process resolves the backend again by its :attr:`Backend.name` (a class does not
cross a process boundary)::

    backend = resolve_backend("fake")
    finished = backend.finish(DesktopConfig(options={"faults": {"crash": 0.01}}))
    finished.config.options  # FakeOptions(latency={}, faults=Faults(crash=0.01, ...))
    desktop = backend.make(finished.config, seed=0)
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from legato_gym.config import DesktopConfig
from legato_gym.contract import Desktop, Task
from legato_gym.errors import BackendUnavailableError, ConfigError
from legato_gym.options import BackendOptions, typed_options, wrong_options

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendSpec",
    "Finished",
    "RayNeeds",
    "backend_names",
    "get_backend",
    "make_desktop",
    "resolve_backend",
]

GiB = 1024**3


@dataclass(frozen=True)
class BackendSpec:
    """The one line that makes a built-in backend known: its name, its package and its Gymnasium id.

    The id lives here, not in the package, because Gymnasium ids are registered when :mod:`legato_gym` is
    imported, and importing every backend there would cost each desktop worker its start-up time.
    """

    name: str
    package: str
    gym_id: str | None = None


#: Every backend built into legato, by name: one line each.
BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("fake", "legato_gym.backends.fake", "legato/FakeDesktop-v0"),
        BackendSpec("local", "legato_gym.backends.local", "legato/LocalDesktop-v0"),
        BackendSpec("osworld", "legato_gym.backends.osworld", "legato/OSWorld-v0"),
    )
}


@dataclass(frozen=True)
class RayNeeds:
    """What one desktop asks of a Ray host: CPUs, bytes of memory and custom resources.

    Example: ``RayNeeds(cpus=1.0, memory=GiB, resources={"legato_xvfb": 1.0})`` for a local desktop.
    """

    cpus: float
    memory: int
    resources: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Finished:
    """Settings finished once, at an entry point (:meth:`Backend.finish`), and carried downstream as they are.

    Attributes:
        backend: the backend they are for.
        config: the final config: ``options`` typed as the backend's class, ``worker_python`` resolved.
        tasks: the tasks given, checked (``None``: none were given; the backend's default suite applies).
        verdicts: what the backend's :attr:`Backend.check_tasks` said of them (backend-specific values,
            e.g. the local backend's :class:`~legato_gym.backends.local.coverage.Verdict`; ``()``: no check).
    """

    backend: Backend
    config: DesktopConfig
    tasks: tuple[Task, ...] | None = None
    verdicts: tuple[Any, ...] = ()


def _no_tasks(config: DesktopConfig) -> Sequence[Task]:
    return []


@dataclass(frozen=True)
class Backend:
    """A backend, declared once: everything legato knows of it.

    Attributes:
        name: the name it is resolved by (``"fake"``, ``"package.module:BACKEND"``): what a worker process
            resolves again, and what records and messages name.
        desktop_class: the class implementing :class:`~legato_gym.contract.Desktop`, built as
            ``desktop_class(config, *, seed=None)``.
        options_class: its options dataclass, a :class:`~legato_gym.options.BackendOptions` (``None``: it has
            none, and ``DesktopConfig.options`` stays a mapping of JSON values).
        default_tasks: ``default_tasks(config)``, the suite run without ``--tasks`` (default: none).
        check_tasks: ``check_tasks(tasks, config)``: refuse, all at once and before a desktop boots, the tasks
            this backend cannot run with ``config`` (raise :class:`~legato_gym.errors.UnsupportedTaskError`),
            returning its verdicts (any values; ``None``: none). Called once, by :meth:`finish`.
        check_task: ``check_task(desktop, task)``: refuse a task given at a reset, before the reset (usually
            the desktop class's own method, e.g. ``FakeDesktop.check_task``).
        expect_next: ``expect_next(desktop, task)``: the hint of the task after the next reset (see
            :mod:`legato_gym.contract`), usually the desktop class's own method.
        worker_python: ``worker_python(config) -> str | None``: the interpreter the desktops' worker processes
            run in (``None``: legato's own), resolved once by :meth:`finish` (the osworld backend needs
            desktop-env's). Default: ``config.worker_python``.
        ray_needs: what one desktop asks of a Ray host (``None``: undeclared, and a Ray placement must give
            ``cpus`` and ``memory`` itself: an undeclared backend is never placed as if it needed nothing).
        cli_options: what ``legato rl collect``'s flags of this backend do, by flag: ``apply(config, value)``
            returns the config with the backend's options set (``{"--grader": grader_flag}``); another
            backend's flag is refused (:meth:`with_cli`).
        solution: ``solution(task, screen) -> steps | None``: a scripted solution of a task (``None``: none
            known), what ``--policy-url embedded`` answers with: action strings, or the fake backend's
            ``FakeStep`` values.
        grader: ``grader(config) -> str``: the name of what grades the attempts (recorded in every graded
            record); default: the backend's name.
        run_settings: ``run_settings(config) -> {name: JSON value}``: the backend's settings that change what an
            attempt sees or does (the local backend's session and pyautogui pause, the osworld backend's
            provider). A run records them and a resume refuses a change (default: none).
    """

    name: str
    desktop_class: type[Any]
    options_class: type[BackendOptions] | None = None
    default_tasks: Callable[[DesktopConfig], Sequence[Task]] = _no_tasks
    check_tasks: Callable[[Sequence[Task], DesktopConfig], Sequence[Any] | None] | None = None
    check_task: Callable[[Any, Task], None] | None = None
    expect_next: Callable[[Any, Task | None], None] | None = None
    worker_python: Callable[[DesktopConfig], str | None] | None = None
    ray_needs: RayNeeds | None = None
    cli_options: Mapping[str, Callable[[DesktopConfig, Any], DesktopConfig]] = field(default_factory=dict)
    solution: Callable[[Task, tuple[int, int]], Sequence[Any] | None] | None = None
    grader: Callable[[DesktopConfig], str] | None = None
    run_settings: Callable[[DesktopConfig], Mapping[str, Any]] | None = None

    @property
    def gym_id(self) -> str | None:
        """Its Gymnasium id (``legato/FakeDesktop-v0``), for a built-in backend; ``None`` for your own."""
        spec = BACKENDS.get(self.name)
        return spec.gym_id if spec is not None else None

    def renamed(self, name: str) -> Backend:
        """This unit under another name (what a worker resolves: ``package.module:BACKEND`` for your own)."""
        return self if name == self.name else replace(self, name=name)

    def configure(self, config: DesktopConfig | None = None) -> DesktopConfig:
        """``config`` (default: ``DesktopConfig()``) with its ``options`` as this backend's options class.

        A mapping is read into the class once, here (:meth:`~legato_gym.options.BackendOptions.from_mapping`);
        typed options and ``None`` are kept as they are. :meth:`finish` is the whole finishing step.

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

    def finish(self, config: DesktopConfig | Finished | None = None, tasks: Sequence[Task] | None = None) -> Finished:
        """What the user gave, finished once: the final config and the verdicts on ``tasks``.

        Options given as a mapping become the backend's options class, the workers' interpreter is resolved
        (:attr:`worker_python`), and ``tasks`` (when given) are checked all at once (:attr:`check_tasks`).
        Settings already finished for this backend are returned as they are (with ``tasks`` checked if new).

        Raises:
            ConfigError: bad options; UnsupportedTaskError: a task the backend cannot run (all named at once);
            MissingDependencyError: a worker interpreter the backend needs is not set up.
        """
        if isinstance(config, Finished):
            if config.backend.name != self.name:
                raise ConfigError(
                    f"settings finished for backend {config.backend.name!r} were given to backend {self.name!r}; "
                    f"finish them with resolve_backend({self.name!r}).finish(...)"
                )
            if tasks is None or (config.tasks is not None and tuple(tasks) == config.tasks):
                return config
            return self._checked(config.config, tasks)
        final = self.configure(config)
        if self.worker_python is not None:
            python = self.worker_python(final)
            if python != final.worker_python:
                final = replace(final, worker_python=python)
        return self._checked(final, tasks)

    def _checked(self, config: DesktopConfig, tasks: Sequence[Task] | None) -> Finished:
        if tasks is None:
            return Finished(self, config)
        given = tuple(tasks)
        verdicts: Sequence[Any] | None = None
        if self.check_tasks is not None:
            verdicts = self.check_tasks([t for t in given if isinstance(t, Task)], config)
        return Finished(self, config, given, tuple(verdicts or ()))

    def make(self, config: DesktopConfig | Finished | None = None, *, seed: int | None = None) -> Desktop:
        """One desktop of this backend, built from finished settings (finished here when they are not)."""
        final = config.config if isinstance(config, Finished) else self.configure(config)
        return cast(Desktop, self.desktop_class(final, seed=seed))

    def hint_next(self, desktop: object) -> Callable[[Task | None], None] | None:
        """``desktop``'s :attr:`expect_next`, bound (``None``: this backend takes no hint)."""
        if self.expect_next is None:
            return None
        return functools.partial(self.expect_next, desktop)

    def grader_name(self, config: DesktopConfig) -> str:
        """What grades this backend's attempts under ``config`` (:attr:`grader`; default: its name)."""
        return self.grader(config) if self.grader is not None else self.name

    def needs(self) -> RayNeeds:
        """What one desktop asks of a Ray host.

        Raises:
            ConfigError: the backend declares none (its ``ray_needs``), so a placement must give them.
        """
        if self.ray_needs is None:
            raise ConfigError(
                f"backend {self.name!r} declares no Ray needs (Backend.ray_needs), so legato cannot tell what one "
                "desktop asks of a host: give RayPlacement(cpus=..., memory=...) or declare ray_needs=RayNeeds(...)"
            )
        return self.ray_needs

    def with_cli(self, config: DesktopConfig, values: Mapping[str, Any], defaults: Mapping[str, Any]) -> DesktopConfig:
        """``config`` with what ``legato rl collect``'s backend flags say (``values``, by flag).

        Each flag this backend declares (:attr:`cli_options`) applies its value, given or default; a flag of
        another backend is refused unless it has its default value.

        Raises:
            ConfigError: a flag this backend does not take (the message names the backends that do), or a value
                the backend refuses.
        """
        for flag, value in values.items():
            apply = self.cli_options.get(flag)
            if apply is not None:
                config = apply(config, value)
            elif value != defaults.get(flag):
                shown = f"--no-{flag[2:]}" if value is False else f"{flag} {value}" if isinstance(value, str) else flag
                owners = [n for n in BACKENDS if n != self.name and flag in _flags_of(n)]
                raise ConfigError(
                    f"{shown} applies to --backend {' or '.join(owners) or 'none'} only, not {self.name!r}"
                )
        return config


def _flags_of(name: str) -> Mapping[str, object]:
    try:
        return resolve_backend(name).cli_options
    except BackendUnavailableError:
        return {}


def resolve_backend(backend: str | Backend) -> Backend:
    """The backend of a name (``"fake"``, ``"local"``, ``"osworld"``) or ``"package.module:BACKEND"``; a
    :class:`Backend` is itself. Call it once, at the entry point, and pass the result down.

    ``"package.module:Class"`` (a desktop class rather than a declared unit) is still accepted for one
    release: :meth:`Backend` is then built from the class, reading its ``options_class`` and ``check_tasks``
    class attributes and its ``check_task`` and ``expect_next`` methods, with a ``DeprecationWarning`` when
    it has any of them.

    Raises:
        BackendUnavailableError: an unknown name (with the closest known one), a backend that is not built in
            this installation, or a ``module:NAME`` whose module cannot be imported (the message says why)
            or has no such unit or class.
    """
    if isinstance(backend, Backend):
        return backend
    return _resolve(backend)


def _resolve(name: str) -> Backend:
    spec = BACKENDS.get(name)
    if spec is not None:
        module = _import_builtin(name, spec)
        unit = getattr(module, "BACKEND", None)
        if not isinstance(unit, Backend):
            raise BackendUnavailableError(
                f"backend {name!r}: package {spec.package} declares no BACKEND = Backend(...)"
            )
        return unit.renamed(name)
    if not isinstance(name, str) or ":" not in name:
        from legato_gym.tasks import suggest

        hint = suggest(str(name), list(BACKENDS)).lstrip("; ")
        raise BackendUnavailableError(
            f"unknown backend {name!r}; {hint + ' ' if hint else ''}choose one of {', '.join(backend_names())} "
            "or give your own as 'package.module:BACKEND'"
        )
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise BackendUnavailableError(f"backend {name!r}: give your own as 'package.module:BACKEND'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a custom module that fails while importing: say so instead of a traceback
        raise BackendUnavailableError(_import_failure(name, module_name, exc)) from exc
    try:
        value = getattr(module, attr)
    except AttributeError as exc:
        from legato_gym.tasks import suggest

        names = sorted(n for n, v in vars(module).items() if isinstance(v, (type, Backend)) and not n.startswith("_"))
        raise BackendUnavailableError(
            f"backend {name!r}: module {module_name} has no {attr!r}{suggest(attr, names)}"
            + (f" (it has: {', '.join(names)})" if names else "")
        ) from exc
    if isinstance(value, Backend):
        return value.renamed(name)
    if isinstance(value, type):
        return _from_class(name, value, module)
    raise BackendUnavailableError(
        f"backend {name!r}: {module_name}.{attr} is a {type(value).__name__}, not a Backend(...) or a desktop class"
    )


def _import_builtin(name: str, spec: BackendSpec) -> Any:
    try:
        return importlib.import_module(spec.package)
    except ModuleNotFoundError as exc:
        if exc.name != spec.package:
            raise
        raise BackendUnavailableError(
            f"backend {name!r} is not built in this version of legato; available: {', '.join(backend_names())}"
        ) from exc


#: The class attributes a desktop class given as ``module:Class`` was read for before units existed.
_LEGACY_HOOKS = ("options_class", "check_tasks", "check_task", "expect_next")


def _from_class(name: str, cls: type[Any], module: Any) -> Backend:
    """A unit for a desktop class given as ``module:Class`` (the form before :class:`Backend` units)."""
    hooks = {hook: cls.__dict__.get(hook, None) for hook in _LEGACY_HOOKS}
    for base in cls.__mro__[1:]:  # inherited hooks count too (a subclass of a built-in desktop)
        for hook in _LEGACY_HOOKS:
            if hooks[hook] is None:
                hooks[hook] = base.__dict__.get(hook, None)
    if any(v is not None for v in hooks.values()):
        warnings.warn(
            f"backend {name!r}: a desktop class's {', '.join(h for h, v in hooks.items() if v is not None)} are "
            "read for one more release; declare BACKEND = Backend(...) in its module and give "
            f"'{module.__name__}:BACKEND' (docs/api-changes.md)",
            DeprecationWarning,
            stacklevel=4,
        )
    options_class = hooks["options_class"]
    if not (isinstance(options_class, type) and issubclass(options_class, BackendOptions)):
        options_class = None
    check_tasks = getattr(cls, "check_tasks", None) if hooks["check_tasks"] is not None else None
    default_tasks = getattr(module, "default_tasks", None)
    return Backend(
        name=name,
        desktop_class=cls,
        options_class=options_class,
        default_tasks=default_tasks if callable(default_tasks) else _no_tasks,
        check_tasks=check_tasks,
        check_task=getattr(cls, "check_task", None) if hooks["check_task"] is not None else None,
        expect_next=getattr(cls, "expect_next", None) if hooks["expect_next"] is not None else None,
    )


def backend_names() -> list[str]:
    """Names of the backends that are built in this installation."""
    return [name for name, spec in BACKENDS.items() if importlib.util.find_spec(spec.package) is not None]


def get_backend(name: str) -> tuple[type[Any], Callable[[DesktopConfig], Sequence[Task]]]:
    """Deprecated: the backend class and its ``default_tasks``, as a tuple. Use :func:`resolve_backend`,
    whose :class:`Backend` names them (``.desktop_class``, ``.default_tasks``); kept for one release."""
    warnings.warn(
        "get_backend(name) returns a tuple and is deprecated; use resolve_backend(name).desktop_class and "
        ".default_tasks (docs/api-changes.md)",
        DeprecationWarning,
        stacklevel=2,
    )
    resolved = resolve_backend(name)
    return resolved.desktop_class, resolved.default_tasks


def _import_failure(name: str, module: str, exc: BaseException) -> str:
    """Why the module of a custom backend did not import, and how to fix it."""
    head = f"backend {name!r}: cannot import module {module!r}"
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    own = missing is not None and (module == missing or module.startswith(missing + "."))
    if not own:  # the module was found, and failed while it was being imported
        return f"{head}: importing it raised {type(exc).__name__}: {exc}; fix that module (or install what it needs)"
    top = module.split(".")[0]
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


def make_desktop(
    name: str | Backend, config: DesktopConfig | Finished | None = None, *, seed: int | None = None
) -> Desktop:
    """Build one desktop of the named (or resolved) backend."""
    return resolve_backend(name).make(config, seed=seed)
