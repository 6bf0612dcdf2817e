"""Scenarios run *inside desktop-env's interpreter* by tests/gym/test_osworld_backend.py.

Usage: python osworld_scenarios.py NAME '{"json": "args"}'; prints one JSON line with the results.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from desktop_kit import play

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop, default_tasks, solution
from legato_gym.backends.osworld import OSWorldDesktop

SCREEN = (1024, 768)


def _config(args: dict[str, Any], **extra: Any) -> DesktopConfig:
    options = {"download_cache": args["cache"], **extra.pop("options", {})}
    return DesktopConfig(
        screen=SCREEN,
        osworld_path=Path(args["osworld"]) if args.get("osworld") else None,
        worker_python=sys.executable,
        options=options,
        **extra,
    )


def local_grader(args: dict[str, Any]) -> dict[str, Any]:
    """The local backend graded by desktop-env: every local task and runnable OSWorld os task, right and wrong."""
    config = _config(args, options={"grader": "osworld"})
    scores = {}
    with LocalDesktop(config) as desktop:
        for task in default_tasks(config):
            right = play(desktop, task, solution(task.task_id, SCREEN, correct=True))
            wrong = play(desktop, task, solution(task.task_id, SCREEN, correct=False))
            scores[task.task_id] = [right, wrong]
    import desktop_env.desktop_env as de

    return {"scores": scores, "desktop_env": de.__file__}


def prepared(args: dict[str, Any]) -> dict[str, Any]:
    """One task four times, right and wrong in turns, graded by desktop-env: the last two set up ahead."""
    config = _config(args, options={"grader": "osworld"})
    task = next(t for t in default_tasks(config) if t.task_id == "local-editor-write-save")
    runs = []
    with LocalDesktop(config) as desktop:
        for correct in (True, False, True, False):
            score = play(desktop, task, solution(task.task_id, SCREEN, correct=correct))
            runs.append([score, desktop.last_reset_kind])
    return {"runs": runs}


def lifecycle(args: dict[str, Any]) -> dict[str, Any]:
    """The osworld backend on a local stand-in VM: dead VM replaced, unverifiable reset reverted."""
    config = _config(
        args, options={"provider": "local", "local": {"sandbox_python": sys.executable, "server_mode": "osworld"}}
    )
    task = next(t for t in default_tasks(config) if t.task_id == "local-files-rename")
    out: dict[str, Any] = {}
    with OSWorldDesktop(config) as desktop:
        out["first"] = [play(desktop, task, solution(task.task_id, SCREEN)), desktop.last_reset_kind]
        impl = desktop._impl
        impl._baseline_pids.append(2**22 + 7)  # a first-boot process that is gone: the reset cannot be verified
        out["unverifiable"] = [play(desktop, task, solution(task.task_id, SCREEN)), desktop.last_reset_kind]
        for pid in impl.vm.pids:  # the VM dies under us
            os.kill(pid, signal.SIGKILL)
        out["dead"] = [play(desktop, task, solution(task.task_id, SCREEN)), desktop.last_reset_kind]
        out["again"] = [play(desktop, task, solution(task.task_id, SCREEN, correct=False)), desktop.last_reset_kind]
    return out


def _setup_task(task_id: str, setup: list[dict[str, Any]]) -> Task:
    config = {"id": task_id, "instruction": "Do nothing.", "config": setup, "evaluator": {"func": "infeasible"}}
    return Task(task_id, "Do nothing.", config, domain="local")


def probes(args: dict[str, Any]) -> dict[str, Any]:
    """On a stand-in VM whose server answers as OSWorld's: a windowless launch (socat) is not waited for as a
    window, and a wmctrl that fails (X full) makes the reset unverified, so it reverts."""
    import subprocess

    local = {"sandbox_python": sys.executable, "server_mode": "osworld", "prestart": False}
    config = _config(args, options={"provider": "local", "local": local, "window_timeout": 3})
    xterm = {"type": "launch", "parameters": {"command": ["xterm"]}}
    socat = {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}}
    out: dict[str, Any] = {}
    with OSWorldDesktop(config) as desktop:
        desktop.reset(_setup_task("legato-windowless", [xterm, socat]))
        out["windowless"] = [desktop.wait_after_reset().ready, desktop.last_reset_kind]
        desktop.reset(_setup_task("legato-nothing", []))
        out["clean"] = [desktop.wait_after_reset().ready, desktop.last_reset_kind]
        # the ready signals cost the server no /screenshot (each one leaks an X connection on OSWorld's)
        screenshots = []
        desktop._impl._http.event_hooks["request"].append(
            lambda request: screenshots.append(1) if request.url.path == "/screenshot" else None
        )
        desktop.reset(_setup_task("legato-xterm", [xterm]))
        ready = [desktop.wait_after_reset().ready]
        for _ in range(3):
            desktop.act("pyautogui.typewrite('ls')")
        ready.append(desktop.wait_before_eval().ready)
        desktop.observe()
        out["screenshots"] = [len(screenshots), ready]
        display = desktop._impl.vm._desktop.display
        # a host client takes every X slot, and each one freed again (the reset kills the task's X clients),
        # until that X server is gone (the next one may get its display number)
        code = (
            "import os, sys, time; from legato_gym.desktop_server.pointer import read_pointer\n"
            "full = False\n"
            f"while os.path.exists('/proc/{display.pids[0]}'):\n"
            f"    if read_pointer({display.name!r}, leak=True) is None:\n"
            "        if not full: print('full', flush=True); full = True\n"
            "        time.sleep(0.001)\n"
        )
        filler = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert filler.stdout is not None and filler.stdout.readline().strip() == "full"
            desktop.reset(_setup_task("legato-nothing", []))  # wmctrl cannot open the display
            out["x_full"] = desktop.last_reset_kind
        finally:
            filler.kill()
            filler.wait()
        desktop.reset(_setup_task("legato-nothing", []))
        out["after"] = [desktop.wait_after_reset().ready, desktop.last_reset_kind]
    return out


def recycle(args: dict[str, Any]) -> dict[str, Any]:
    """A server that leaks as OSWorld's, recycled before its screenshot budget runs out (mid-episode) and
    during fast reset; its new helpers count as first-boot processes, so the resets stay fast."""
    local = {"sandbox_python": sys.executable, "server_mode": "osworld"}
    config = _config(args, options={"provider": "local", "local": local, "screenshot_budget": 6})
    xterm = {"type": "launch", "parameters": {"command": ["xterm"]}}
    out: dict[str, Any] = {"kinds": [], "recycles": []}
    with OSWorldDesktop(config) as desktop:
        impl = desktop._impl
        servers = {impl._execute("echo $PPID", shell=True)["output"].strip()}
        for _ in range(3):
            desktop.reset(_setup_task("legato-xterm", [xterm]))
            out["kinds"].append(desktop.last_reset_kind)
            desktop.wait_after_reset()
            for _ in range(8):  # more than the budget: the server is recycled mid-episode
                desktop.observe()
            desktop.act("pyautogui.typewrite('ls')")
            out["recycles"].append(impl.server_recycles)
            servers.add(impl._execute("echo $PPID", shell=True)["output"].strip())
        desktop.reset(_setup_task("legato-nothing", []))
        out["kinds"].append(desktop.last_reset_kind)
        left = impl._execute("ps -u $(id -u) -o stat=,comm= | grep -v '^Z' | grep -c xterm", shell=True)
        out["xterms_left"] = left["output"].strip()
    out["servers"] = len(servers)
    return out


def _docker_config(args: dict[str, Any], **extra: Any) -> DesktopConfig:
    docker = {
        "image": args["image"],
        "vm_image": False,
        "ports": [5000],
        "network": args["network"],
        "volumes": {"/usr": "/usr"},
    }
    return DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        timeouts=Timeouts(reset=90, ready=30),
        options={"provider": "docker", "download_cache": args["cache"], "docker": docker},
        **extra,
    )


def _made_file_task() -> Task:
    config = {
        "id": "legato-docker-made",
        "instruction": "Do nothing.",
        "config": [{"type": "execute", "parameters": {"command": "echo hi > ~/made.txt", "shell": True}}],
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": "cat ~/made.txt", "shell": True},
            "expected": {"type": "rule", "rules": {"expected": "hi\n"}},
        },
    }
    return Task("legato-docker-made", "Do nothing.", config, domain="local")


def _no_made_file_task() -> Task:
    config = {
        "id": "legato-docker-clean",
        "instruction": "Do nothing.",
        "config": [],
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": "ls -A ~ | grep -c made.txt", "shell": True},
            "expected": {"type": "rule", "rules": {"expected": "0\n"}},
        },
    }
    return Task("legato-docker-clean", "Do nothing.", config, domain="local")


def docker_desktop(args: dict[str, Any]) -> dict[str, Any]:
    """The osworld backend on containers: labels, loopback ports, fast reset, a dead container replaced."""
    import docker

    client = docker.from_env()
    out: dict[str, Any] = {}
    with OSWorldDesktop(_docker_config(args)) as desktop:
        vm = desktop._impl.vm
        first = vm.container
        out["labels"] = first.labels
        out["ports"] = first.attrs["NetworkSettings"]["Ports"]
        out["made"] = [play(desktop, _made_file_task(), ["DONE"]), desktop.last_reset_kind]
        out["clean"] = [play(desktop, _no_made_file_task(), ["DONE"]), desktop.last_reset_kind]
        first.kill()
        out["replaced"] = [play(desktop, _made_file_task(), ["DONE"]), desktop.last_reset_kind]
        out["new_container"] = vm.container.name != first.name
        out["old_gone"] = not client.containers.list(all=True, filters={"name": first.name})
        last = vm.container.name
    out["closed_gone"] = not client.containers.list(all=True, filters={"name": last})
    return out


def docker_many(args: dict[str, Any]) -> dict[str, Any]:
    """Several containers started at once from threads: each gets its own ports, none waits on a global lock."""
    import threading
    import time

    from legato_gym.backends.osworld.vms import DockerSettings, DockerVM

    settings = DockerSettings(
        image=args["image"], vm_image=False, ports=(5000,), network=args["network"], volumes={"/usr": "/usr"}
    )
    vms: list[Any] = []
    barrier = threading.Barrier(args["count"])

    def start() -> None:
        barrier.wait()
        vms.append(DockerVM(settings, time.monotonic() + 60))

    threads = [threading.Thread(target=start) for _ in range(args["count"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ports = sorted(vm.endpoint.server_port for vm in vms)
    for vm in vms:
        vm.close()
    return {"ports": ports, "started": len(vms)}


def docker_leak(args: dict[str, Any]) -> dict[str, Any]:
    """Start a container and hang: the test SIGKILLs this process to leak it."""
    import time

    from legato_gym.backends.osworld.vms import DockerSettings, DockerVM

    settings = DockerSettings(
        image=args["image"], vm_image=False, ports=(5000,), network=args["network"], volumes={"/usr": "/usr"}
    )
    vm = DockerVM(settings, time.monotonic() + 60)
    sys.stdout.write(json.dumps({"name": vm.name}) + "\n")
    sys.stdout.flush()
    time.sleep(600)
    return {}


def docker_sweep(args: dict[str, Any]) -> dict[str, Any]:
    """A new VM's start removes containers leaked by a killed run."""
    import time

    import docker

    from legato_gym.backends.osworld.vms import DockerSettings, DockerVM

    settings = DockerSettings(
        image=args["image"], vm_image=False, ports=(5000,), network=args["network"], volumes={"/usr": "/usr"}
    )
    vm = DockerVM(settings, time.monotonic() + 60)
    client = docker.from_env()
    leaked_left = bool(client.containers.list(all=True, filters={"name": args["leaked"]}))
    vm.close()
    return {"leaked_left": leaked_left}


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    name, raw = sys.argv[1], sys.argv[2]
    scenarios = {
        "local_grader": local_grader,
        "prepared": prepared,
        "lifecycle": lifecycle,
        "probes": probes,
        "recycle": recycle,
        "docker_desktop": docker_desktop,
        "docker_many": docker_many,
        "docker_leak": docker_leak,
        "docker_sweep": docker_sweep,
    }
    result = scenarios[name](json.loads(raw))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
