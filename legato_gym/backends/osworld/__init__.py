"""The ``osworld`` backend: OSWorld VMs with fast reset, ready signals and OSWorld's own setup and grading.

Each desktop is one VM (docker: OSWorld's image, 4 vCPU, 4 GB; or a local desktop standing in for one),
kept up between rollouts and driven from desktop-env's own interpreter (``legato osworld setup`` builds
it; desktop-env cannot share legato's environment). See :mod:`.desktop` for reset, ready signals and
grading, :mod:`.vms` for the machines, :mod:`legato_gym.desktopenv` for desktop-env's controllers and ``evaluate()``,
:mod:`.options` for :class:`OSWorldOptions` (``DesktopConfig.options``: the provider and its settings)::

    from legato_gym import DesktopConfig
    from legato_gym.backends.osworld import OSWorldOptions

    config = DesktopConfig(osworld_path="~/osworld", options=OSWorldOptions(provider="local"))

Importing this package imports neither desktop-env nor docker.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from legato_gym.backends import Backend, GiB, RayNeeds
from legato_gym.backends.osworld.desktop import OSWorldDesktop
from legato_gym.backends.osworld.options import REVERT_DOMAINS, DockerSettings, OSWorldOptions
from legato_gym.config import DesktopConfig
from legato_gym.contract import Task
from legato_gym.errors import ConfigError
from legato_gym.options import typed_options
from legato_gym.tasks import check_task_id

__all__ = [
    "BACKEND",
    "REVERT_DOMAINS",
    "DockerSettings",
    "OSWorldDesktop",
    "OSWorldOptions",
    "default_tasks",
    "tasks_from_index",
]


def tasks_from_index(osworld_path: Path, index: str = "test_all.json") -> list[Task]:
    """The tasks listed in ``evaluation_examples/<index>`` (``{domain: [task ids]}``) of a checkout."""
    root = Path(osworld_path).expanduser() / "evaluation_examples"
    try:
        listing = json.loads((root / index).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read {root / index} ({exc}); give --osworld (DesktopConfig.osworld_path) an OSWorld checkout "
            "holding evaluation_examples/"
        ) from exc
    tasks = []
    for domain, ids in listing.items():
        for task_id in ids:
            where = str(root / index)  # ids from the file never reach a path unchecked
            folder = root / "examples" / check_task_id(domain, where, what="domain")
            path = folder / f"{check_task_id(task_id, where)}.json"
            config = json.loads(path.read_text())
            tasks.append(
                Task(task_id=task_id, instruction=config["instruction"], config=config, domain=domain, source=path)
            )
    return tasks


def default_tasks(config: DesktopConfig) -> list[Task]:
    """Every task of ``test_all.json`` under ``config.osworld_path``.

    Raises:
        ConfigError: no ``osworld_path``; the message asks for ``--osworld`` or ``--tasks``.
    """
    if config.osworld_path is None:
        raise ConfigError(
            "the osworld backend's tasks come from an OSWorld checkout: give --osworld PATH (or set $LEGATO_OSWORLD, "
            "DesktopConfig.osworld_path), or a tasks file with --tasks"
        )
    return tasks_from_index(config.osworld_path)


def _worker_python(config: DesktopConfig) -> str:
    """desktop-env's interpreter, where the desktops' workers run (``legato osworld setup`` records it)."""
    from legato_gym.backends.osworld.remote import resolve_python

    return resolve_python(config)


def _file_cache_flag(config: DesktopConfig, folder: Path | None) -> DesktopConfig:
    """``--file-cache DIR``: the file cache of the local desktops standing in for VMs (provider ``local``)."""
    if folder is None:
        return config
    from legato_gym.backends.local.options import LocalOptions

    options = typed_options(config.options, OSWorldOptions, "osworld")
    local = replace(options.local or LocalOptions(), file_cache=os.fspath(Path(folder).expanduser().resolve()))
    return replace(config, options=replace(options, local=local))


def _provider_flag(config: DesktopConfig, provider: str | None) -> DesktopConfig:
    """``--provider NAME|package.module:Class``: the VM provider (``OSWorldOptions.provider``).

    Raises:
        ConfigError: a provider desktop-env does not have, naming the ones it has.
    """
    if provider is None:
        return config
    options = typed_options(config.options, OSWorldOptions, "osworld")
    try:
        return replace(config, options=replace(options, provider=provider))
    except ConfigError as exc:
        raise ConfigError(f"--provider {provider!r}: {exc}") from exc


def _run_settings(config: DesktopConfig) -> dict[str, Any]:
    """What a resume must not change: the kind of VM the attempts run on."""
    return {"provider": typed_options(config.options, OSWorldOptions, "osworld").provider}


def _solution(task: Task, screen: tuple[int, int]) -> list[str] | None:
    """The scripted solution of a real OSWorld task (the local backend's), for ``--policy-url embedded``."""
    from legato_gym.backends.local.flags import scripted_solution

    return scripted_solution(task.task_id, screen)


#: The osworld backend, declared once (:class:`~legato_gym.backends.Backend`): what legato knows of it.
BACKEND = Backend(
    name="osworld",
    desktop_class=OSWorldDesktop,
    options_class=OSWorldOptions,
    default_tasks=default_tasks,
    worker_python=_worker_python,
    ray_needs=RayNeeds(cpus=4.0, memory=4 * GiB, resources={"legato_kvm": 1.0, "legato_docker": 1.0}),
    cli_options={"--file-cache": _file_cache_flag, "--provider": _provider_flag},
    solution=_solution,
    run_settings=_run_settings,
)
