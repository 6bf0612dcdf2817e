"""What a hostile agent can take from the host: its memory per desktop, the time a killed server goes unnoticed,
and the collect process's memory over a long batch (docs/reliability.md, "Bounded reads").

Run: ``python benchmarks/host_bounds.py [--scenario NAME ...] [--attempts 5000]``. Prints markdown. Each
scenario runs in a fresh process, which holds the desktop as a vector env's worker does; its peak RSS
(``ru_maxrss``) is the host's memory for that desktop. Run it under another checkout's ``PYTHONPATH`` for the
figures before a change: the scenarios use only calls that both sides have.

Scenarios:

* ``baseline``: a local desktop, one small action (the peak every other scenario is compared to);
* ``impostor``: the desktop's socket answered by an impostor with a 2 GiB body (what an agent that took over
  the server's sockets answered);
* ``output``: an action (``action_runner="exec"``, through ``/execute``) that prints 1.5 GB;
* ``file``: a grader fetching a 500 MB file the agent wrote (``vm_file``);
* ``forkbomb``: an action that forks until the process bound;
* ``killed``: an action leaves a process that kills the in-desktop server after it returned; the next action
  is timed from its call to the moment it ends (the server's death noticed);
* ``collect``: ``legato rl collect --backend fake --policy-url embedded`` over ``--attempts`` attempts, the
  collect process's RSS at every thousandth record.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCENARIOS = ("baseline", "impostor", "output", "file", "forkbomb", "killed")
_GIB = 1 << 30
_MIB = 1 << 20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _desktop(**options: Any) -> Any:
    from legato_gym import DesktopConfig, Task
    from legato_gym.backends.local import LocalDesktop, LocalOptions

    config = DesktopConfig(screen=(640, 480), options=LocalOptions(prestart=False, **options))
    desktop = LocalDesktop(config)
    desktop.reset(Task("legato-bounds", "Do nothing.", {"config": [], "evaluator": {"func": "infeasible"}}))
    return desktop


def _outcome(call: Any) -> str:
    try:
        call()
    except Exception as exc:  # the outcome is the figure: which error ended the call
        cause = getattr(exc, "cause", None)
        return f"{type(exc).__name__}" + (f" ({cause})" if cause else "")
    return "returned"


def _impostor(path: Path, size: int) -> threading.Thread:
    """A server on ``path`` that answers any request with ``size`` bytes of JSON-looking body, from one buffer."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
            conn.sendall(head.encode())
            chunk = b"x" * _MIB
            sent = 0
            try:
                while sent < size:
                    conn.sendall(chunk[: min(len(chunk), size - sent)])
                    sent += len(chunk)
            except OSError:
                pass  # the host stopped reading

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def run_scenario(name: str) -> dict[str, Any]:
    """One scenario in this process; its outcome, seconds and this process's peak RSS."""
    start = time.monotonic()
    if name == "impostor":
        from legato_gym.backends.local.client import DesktopClient

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "server.sock"
            _impostor(path, 2 * _GIB)
            client = DesktopClient(path, timeout=300)
            outcome = _outcome(lambda: client.execute(["true"]))
            client.close()
        return {"outcome": outcome, "seconds": time.monotonic() - start, "peak_mb": _peak_mb()}
    options: dict[str, Any] = {}
    if name == "output":
        options = {"action_runner": "exec"}
    desktop = _desktop(**options)
    try:
        start = time.monotonic()
        if name == "baseline":
            outcome = _outcome(lambda: desktop.act("pyautogui.moveTo(5, 5)"))
        elif name == "output":
            code = "import sys\nblock = 'x' * (1 << 20)\nfor _ in range(1500):\n    sys.stdout.write(block)\n"
            outcome = _outcome(lambda: desktop.act(code))
        elif name == "file":
            from legato_gym.backends.local.evaluators import get_vm_file

            write = "import os\nwith open('/tmp/big.bin', 'wb') as f:\n    for _ in range(500):\n"
            write += "        f.write(b'x' * (1 << 20))"
            desktop.act(write)
            with tempfile.TemporaryDirectory() as cache:
                start = time.monotonic()
                config = {"path": "/tmp/big.bin", "dest": "big.bin"}
                outcome = _outcome(lambda: get_vm_file(desktop.client, Path(cache), config))
        elif name == "forkbomb":
            bomb = (
                "import os, time\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
                "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
            )
            outcome = _outcome(lambda: desktop.act(bomb))
        elif name == "killed":
            # the action leaves a process that kills the server once the action has returned: the next call is
            # the first to meet the dead server
            kill = (
                "import os, subprocess\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                "        try:\n            cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n        except OSError:\n"
                "            continue\n        if b'\\x00--listen\\x00' in cmd:\n"
                "            subprocess.Popen(['sh', '-c', f'sleep 1; kill -9 {p}'], start_new_session=True)\n"
            )
            desktop.act(kill)
            time.sleep(3)
            start = time.monotonic()
            outcome = _outcome(lambda: desktop.act("pyautogui.moveTo(5, 5)"))
        else:
            raise SystemExit(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
        seconds = time.monotonic() - start
    finally:
        desktop.close()
    return {"outcome": outcome, "seconds": seconds, "peak_mb": _peak_mb()}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_collect(attempts: int) -> list[tuple[int, float]]:
    """``(records, collect's RSS in MB)`` at every thousandth record of a fake batch with the embedded policy."""
    tasks = 11  # the fake backend's suite
    group = -(-attempts // tasks)
    with tempfile.TemporaryDirectory() as out:
        argv = ["legato", "rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--out", out]
        argv += ["--group", str(group), "--desktops", "2"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        records = Path(out) / "rollouts.jsonl"
        marks: list[tuple[int, float]] = []
        step = 1000 if attempts >= 2000 else max(1, attempts // 5)
        while proc.poll() is None:
            time.sleep(0.5)
            try:
                done = sum(1 for _ in records.open()) if records.exists() else 0
                rss = _rss_mb(proc.pid)
            except (OSError, ValueError):
                continue
            if done >= (len(marks) + 1) * step or (not marks and done):
                marks.append((done, rss))
        return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=[*SCENARIOS, "collect"])
    parser.add_argument("--attempts", type=int, default=5000)
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(run_scenario(args.inner)))
        return
    print("| scenario | outcome | seconds | host peak RSS (MB) |\n| --- | --- | ---: | ---: |")
    for name in args.scenario or SCENARIOS:
        if name == "collect":
            continue
        done = subprocess.run(
            [sys.executable, __file__, "--inner", name], capture_output=True, text=True, env=os.environ, check=False
        )
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            print(f"| {name} | failed: {done.stderr.strip()[-300:]!r} | | |")
            continue
        print(f"| {name} | {result['outcome']} | {result['seconds']:.2f} | {result['peak_mb']:.0f} |")
    if args.scenario and "collect" in args.scenario:
        print("\n| records | collect RSS (MB) |\n| ---: | ---: |")
        for done, rss in run_collect(args.attempts):
            print(f"| {done} | {rss:.0f} |")


if __name__ == "__main__":
    main()
