"""Scenarios run *inside desktop-env's interpreter* by tests/gym/test_osworld_providers.py: the osworld backend
over desktop-env's provider interface, with legato's stand-in provider (local desktops as machines).

Usage: python provider_scenarios.py NAME '{"json": "args"}'; prints one JSON line with the results.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import tempfile
from typing import Any

from desktop_kit import play

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import default_tasks, solution
from legato_gym.backends.osworld import OSWorldDesktop
from legato_gym.backends.osworld.audit import audit_fast_resets

STANDIN = "legato_gym.backends.osworld.standin_provider:StandInProvider"


class Fallbacks(logging.Handler):
    """The osworld backend's warnings that turned a fast reset into a revert (survivors, missing, windows)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("legato_gym.backends.osworld"):
            self.messages.append(record.getMessage()[:600])


def _anonymous(calls: list[tuple[Any, ...]], paths: dict[str, str]) -> list[list[Any]]:
    """The provider's calls with each machine path as ``vm1``, ``vm2``, ... in order of appearance."""
    out = []
    for method, *rest in calls:
        args = [paths.setdefault(a, f"vm{len(paths) + 1}") if str(a).startswith("standin-") else a for a in rest]
        out.append([method, *args])
    return out


def delegation(args: dict[str, Any]) -> dict[str, Any]:
    """Start, IP, snapshot revert and stop go through the provider class; fast reset and grading stay legato's."""
    local = {"python": sys.executable, "server_mode": "osworld"}
    screen = (1024, 768)
    config = DesktopConfig(
        screen=screen,
        worker_python=sys.executable,
        options={"provider": STANDIN, "local": local, "download_cache": args["cache"]},
    )
    task = next(t for t in default_tasks(config) if t.task_id == "local-files-rename")
    as_os = Task(task.task_id, task.instruction, task.config, domain="os")  # a revert domain
    out: dict[str, Any] = {"runs": []}
    with OSWorldDesktop(config) as desktop:
        vm = desktop._impl.vm
        provider = vm.provider
        out["vm"] = [type(vm).__name__, type(provider).__name__, type(vm.manager).__name__]
        for one, correct in ((task, True), (task, False), (as_os, True)):
            score = play(desktop, one, solution(one.task_id, screen, correct=correct))
            out["runs"].append([score, desktop.last_reset_kind])
        for pid in provider.pids(vm.path):  # the machine dies under us: the provider gives a new one
            os.kill(pid, signal.SIGKILL)
        out["runs"].append([play(desktop, task, solution(task.task_id, screen)), desktop.last_reset_kind])
        out["registry"] = sorted(vm.manager.registry.items())
        out["path"] = vm.path
    paths: dict[str, str] = {}
    out["calls"] = _anonymous(provider.calls, paths)
    out["registry"] = [[paths.get(p, p), pid == os.getpid()] for p, pid in out["registry"]]
    out["path"] = paths.get(out["path"], out["path"])
    out["left"] = sorted(provider.desktops)
    return out


def gnome_episodes(args: dict[str, Any]) -> dict[str, Any]:
    """Episodes on one GNOME stand-in VM (the provider's defaults: GNOME Shell, the osworld server) whose tasks
    open apps and files: every reset fast, none turned into a revert by GNOME's helpers, each checked clean."""
    from legato_gym.backends.osworld.options import OSWorldOptions

    config = DesktopConfig(
        screen=(1920, 1080),
        worker_python=sys.executable,
        options=OSWorldOptions(provider=STANDIN, download_cache=args["cache"]),
    )
    watch = Fallbacks()
    logging.getLogger("legato_gym").addHandler(watch)
    tasks = {t.task_id: t for t in default_tasks(config)}
    plan = args["tasks"] * args["rounds"]
    out: dict[str, Any] = {"kinds": [], "scores": []}
    with OSWorldDesktop(config) as desktop:
        impl = desktop._impl
        auditor = audit_fast_resets(impl)
        out["session"] = impl._execute("pgrep -x gnome-shell >/dev/null && echo gnome", shell=True)["output"].strip()
        for n, task_id in enumerate(plan):
            task = tasks[task_id]
            out["kinds"].append(desktop.reset(task))  # what reset says it did: the records' reset_kind
            desktop.wait_after_reset()
            for action in solution(task_id, config.screen):
                desktop.act(action)
            desktop.act(f"open('/tmp/agent-{n}', 'w').close()")  # left in /tmp: the next reset removes it
            desktop.wait_before_eval()
            out["scores"].append(float(desktop.evaluate()))
        out["kinds"].append(desktop.reset(tasks[plan[0]]))
        out["helpers"] = [impl.helpers_adopted, impl.helpers_exited]
    out["audits"] = [dataclasses.asdict(a) for a in auditor.audits if not a.clean]
    out["audited"] = len(auditor.audits)
    out["fallbacks"] = watch.messages
    return out


def refusals(args: dict[str, Any]) -> dict[str, Any]:
    """What desktop-env's own providers say here, where none can start: each refusal's kind and message."""
    from legato_gym.backends.osworld.options import OSWorldOptions
    from legato_gym.backends.osworld.providers import load_provider
    from legato_gym.errors import LegatoError

    os.chdir(tempfile.mkdtemp(prefix="legato-providers-"))  # vmware's and virtualbox's managers write here
    out = {}
    for name in args["providers"]:
        try:
            load_provider(OSWorldOptions(provider=name))
            out[name] = ["loaded", ""]
        except LegatoError as exc:
            out[name] = [type(exc).__name__, str(exc)]
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    name, raw = sys.argv[1], sys.argv[2]
    scenarios = {"delegation": delegation, "gnome_episodes": gnome_episodes, "refusals": refusals}
    result = scenarios[name](json.loads(raw))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
