"""Run by test_local_cleanup.py in a cgroup of its own: a vector env of local desktops whose worker is killed
(and replaced), whose desktop's X server crashes, and which is then closed. Prints what it saw, as JSON."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from legato_gym import DesktopConfig
from legato_gym.backends.local import default_tasks, reaper
from legato_gym.errors import LegatoError
from legato_gym.vector.env import DesktopVectorEnv


def _owned_by(pid: int) -> list[reaper.DesktopRecord]:
    return [r for r in reaper.records() if r.owner.pid == pid]


def _program(pid: int) -> str:
    """The program a process runs; ``""`` once it has exited (a desktop's short-lived helpers come and go: one
    may exit between listing its cgroup and reading this)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        return ""


def _gone(pid: int, deadline: float) -> bool:
    """Whether every desktop of (dead) worker ``pid`` is taken down (its records go last) by ``deadline``."""
    while _owned_by(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def main() -> None:
    config = DesktopConfig(screen=(320, 240), options={"prestart": False})
    task = default_tasks(config)[0]
    seen: dict[str, object] = {}
    env = DesktopVectorEnv(2, backend="local", config=config, max_steps=3)
    try:
        env.reset(options={"task": task})
        # a worker replaced: SIGKILLed by pid, its desktop left to its reaper
        lost = env.worker_pids[0]
        cgroups = [c for r in _owned_by(lost) for c in r.cgroups]
        os.kill(lost, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while env.worker_pids[0] in (lost, -1) and time.monotonic() < deadline:
            try:
                env.reset(options={"task": task})
            except LegatoError:
                time.sleep(0.1)
        seen["replaced"] = env.worker_pids[0] not in (lost, -1)
        seen["lost_worker_desktop_gone"] = _gone(lost, time.monotonic() + 60)
        seen["lost_worker_cgroups_left"] = [c for c in cgroups if Path(c).exists()]
        # a desktop crashed: its X server killed by pid (found in its own cgroup)
        record = _owned_by(env.worker_pids[1])[0]
        xservers = [p for c in record.cgroups for p in reaper.cgroup_members(Path(c)) if _program(p).endswith("/Xvfb")]
        seen["xservers"] = len(set(xservers))
        for pid in set(xservers):
            os.kill(pid, signal.SIGKILL)
        try:
            env.step(["WAIT", "WAIT"])
        except LegatoError as exc:
            seen["crash_error"] = type(exc).__name__
        env.reset(options={"task": task})
        seen["records_while_open"] = len(_owned_by(env.worker_pids[0]) + _owned_by(env.worker_pids[1]))
        workers = env.worker_pids
    finally:
        env.close()
    seen["records_after_close"] = sum(len(_owned_by(w)) for w in workers)
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
