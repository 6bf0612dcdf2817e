"""Run by test_local_unprivileged.py as an unprivileged user: a process that owns one local desktop, as a collect's
worker does, until it is killed. Prints one JSON line once its desktop is up, then waits.

With ``faults``, first: an action that kills the in-desktop server must end as the agent's failure
(``server_killed``), and the sandbox killed from outside as the desktop's (``DesktopCrashed``, not
``AgentFault``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, reaper
from legato_gym.errors import AgentFault, DesktopError

#: An action that signals the sandbox's pid 1 with everything that would end it, and tries to write its memory.
PID1_PROBE = (
    "import os\n"
    "for sig in (9, 15, 2, 1, 3, 10, 19):\n"
    "    os.kill(1, sig)\n"
    "try:\n"
    "    open('/proc/1/mem', 'wb').close()\n"
    "    mem = 'opened'\n"
    "except OSError as exc:\n"
    "    mem = f'refused {exc.errno}'\n"
    "status = open('/proc/1/status').read().splitlines()\n"
    "state = next(line for line in status if line.startswith('State:'))\n"
    "open('/tmp/pid1-probe', 'w').write(f'{mem}; {state}')\n"
)
TASK = Task("t-unprivileged", "Do nothing.", {"config": [], "evaluator": {"func": "infeasible"}})


def _server_pid_inside(desktop: LocalDesktop) -> int:
    sandbox = desktop._processes.sandbox
    assert sandbox is not None
    for pid in sandbox.survivors():
        with contextlib.suppress(OSError):
            if b"\x00--listen\x00" in Path(f"/proc/{pid}/cmdline").read_bytes():
                status = Path(f"/proc/{pid}/status").read_text()
                return int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1])
    raise AssertionError("no server in the sandbox")


def _outcome(desktop: LocalDesktop, action: str) -> str:
    try:
        desktop.act(action)
    except AgentFault as exc:
        return f"AgentFault {exc.cause}: {exc}"
    except DesktopError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "returned"


def main() -> None:
    faults = sys.argv[1:] == ["faults"]
    desktop = LocalDesktop(DesktopConfig(screen=(320, 240), options={"prestart": False}))
    seen: dict[str, object] = {"euid": os.geteuid(), "run_dir": str(reaper.run_dir())}
    desktop.reset(TASK)
    if faults:
        # the sandbox's pid 1, which tells how the server ended, is out of the agent's reach
        desktop.act(PID1_PROBE)
        seen["pid1_probe"] = (desktop.client.file("/tmp/pid1-probe") or b"").decode()
        seen["after_pid1_probe"] = _outcome(desktop, "pyautogui.moveTo(4, 4)")
        seen["server_killed_inside"] = _outcome(desktop, f"import os; os.kill({_server_pid_inside(desktop)}, 9)")
        desktop.reset(TASK)
        sandbox = desktop._processes.sandbox
        assert sandbox is not None and sandbox.init_pid is not None
        os.kill(sandbox.init_pid, signal.SIGKILL)  # from outside: the host, not the agent
        seen["sandbox_killed_outside"] = _outcome(desktop, "pyautogui.moveTo(5, 5)")
        desktop.reset(TASK)
    record = desktop._processes.record
    seen.update(
        record=str(record.path),
        cgroups=record.cgroups,
        tracked=record.processes,
        state_dir=str(desktop.state_dir),
        pids=desktop.pids,
    )
    print(json.dumps(seen), flush=True)
    while True:  # until killed
        time.sleep(60)


if __name__ == "__main__":
    main()
