"""The ``local`` backend: real, sandboxed X desktops on this host that speak OSWorld's protocol.

Each desktop is an Xvfb display with openbox, and a bubblewrap sandbox (private home, pid/net/ipc
namespaces, read-only system) holding the apps and an in-desktop server that answers OSWorld's VM HTTP
protocol over a unix socket. Needs the Debian packages ``xvfb openbox bubblewrap wmctrl xdotool xterm``
(plus a text editor such as ``mousepad``) and ``pip install 'legatolabs[local]'`` (pyautogui).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legato_gym.backends import Backend, GiB, RayNeeds
from legato_gym.backends.local import flags
from legato_gym.backends.local.coverage import Verdict
from legato_gym.backends.local.desktop import LocalDesktop
from legato_gym.backends.local.options import LocalOptions, resolve_grader
from legato_gym.backends.local.tasks import default_tasks, osworld_tasks, solution
from legato_gym.config import DesktopConfig
from legato_gym.contract import Task
from legato_gym.options import typed_options


def _check_tasks(tasks: Sequence[Task], config: DesktopConfig) -> list[Verdict]:
    """The load-time refusal (:meth:`LocalDesktop.check_tasks`) with the grader of the workers' interpreter."""
    return LocalDesktop.check_tasks(tasks, config, python=config.worker_python)


def _grader(config: DesktopConfig) -> str:
    """``osworld`` (desktop-env's getters and metrics) or ``local`` (built in), as the desktops will grade."""
    return resolve_grader(typed_options(config.options, LocalOptions, "local").grader, config.worker_python)


def _run_settings(config: DesktopConfig) -> dict[str, Any]:
    """What a resume must not change: the session an agent sees and the pause its actions run with."""
    options = typed_options(config.options, LocalOptions, "local")
    return {"session": options.session, "pyautogui_pause": options.pyautogui_pause}


def _solution(task: Task, screen: tuple[int, int]) -> list[str] | None:
    return flags.scripted_solution(task.task_id, screen)


#: The local backend, declared once (:class:`~legato_gym.backends.Backend`): what legato knows of it.
BACKEND = Backend(
    name="local",
    desktop_class=LocalDesktop,
    options_class=LocalOptions,
    default_tasks=default_tasks,
    check_tasks=_check_tasks,
    check_task=LocalDesktop.check_task,
    expect_next=LocalDesktop.expect_next,
    ray_needs=RayNeeds(cpus=1.0, memory=1 * GiB, resources={"legato_xvfb": 1.0}),
    cli_options={
        "--grader": flags.grader_flag,
        "--prestart": flags.prestart_flag,
        "--pyautogui-pause": flags.pause_flag,
        "--file-cache": flags.file_cache_flag,
        "--session": flags.session_flag,
    },
    solution=_solution,
    grader=_grader,
    run_settings=_run_settings,
)

__all__ = ["BACKEND", "LocalDesktop", "LocalOptions", "default_tasks", "osworld_tasks", "solution"]
