"""The local desktop's sessions side by side in one run: openbox alone, the lookalike session (openbox with
legato's top bar and dock) and GNOME Shell: memory per desktop, CPU of an idle desktop, start and reset times.

Run: ``python benchmarks/local_sessions.py [--idle 30] [--resets 5] [--sessions openbox,lookalike,gnome]``.
Prints markdown. Each session runs one 1920x1080 desktop (started ahead off: one desktop's own cost) reset to
an empty task; the idle CPU is the utime + stime of the desktop's processes over ``--idle`` seconds after the
screen settled, the PSS their summed ``/proc/PID/smaps_rollup`` (and the top of it, by command), and their private
memory (USS), which another desktop adds whatever else shares the libraries: PSS moves with the machine's other
processes (a test run's X servers beside it halve an Xvfb's share of its libraries).
Needs the local backend's Debian packages; GNOME Shell's for ``gnome`` (it is left out when not installed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.local_desktop import descendants, private_kib, pss_kib, stats
from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions
from legato_gym.backends.local.sandbox.shell import gnome_installed
from legato_gym.backends.local.waits import cpu_ticks

EMPTY = Task("bench-session", "Nothing.", {"config": [], "evaluator": {"func": "infeasible"}})


def by_command(pids: list[int]) -> Counter[str]:
    """PSS (MiB) per command; the lookalike's panel named apart from the desktop's other python processes."""
    out: Counter[str] = Counter()
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            if name == "python" and b"panel.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                name = "python (panel)"
            out[name] += _own_pss(pid)
        except OSError:
            continue
    return out


def _own_pss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) // 1024
    return 0


@dataclass(frozen=True)
class Result:
    up: float
    first: float
    resets: list[float]
    pss: float
    private: float
    top: list[tuple[str, int]]
    cpu: float


def measure(session: str, idle: float, resets: int) -> Result:
    config = DesktopConfig(screen=(1920, 1080), options=LocalOptions(session=session, prestart=False))
    started = time.monotonic()
    with LocalDesktop(config) as desktop:
        up = time.monotonic() - started
        desktop.reset(EMPTY)
        desktop.wait_after_reset()
        first = time.monotonic() - started
        times = []
        for _ in range(resets):
            began = time.monotonic()
            desktop.reset(EMPTY)
            desktop.wait_after_reset()
            times.append(time.monotonic() - began)
        time.sleep(2.0)  # whatever the last reset started, done
        pids = descendants(desktop.pids)
        pss = pss_kib(desktop.pids) / 1024
        private = private_kib(desktop.pids) / 1024
        top = by_command(pids).most_common(4)
        before, began = cpu_ticks(pids), time.monotonic()
        time.sleep(idle)
        spent = (cpu_ticks(pids) - before) / os.sysconf("SC_CLK_TCK")
        cpu = 100 * spent / (time.monotonic() - began)
    return Result(up, first, times, pss, private, top, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--resets", type=int, default=5)
    parser.add_argument("--sessions", default="openbox,lookalike,gnome")
    args = parser.parse_args()
    sessions = [s for s in args.sessions.split(",") if s != "gnome" or gnome_installed()]
    results = {session: measure(session, args.idle, args.resets) for session in sessions}
    base = results.get("openbox")
    print(
        "| session | PSS per desktop | vs openbox | private (USS) per desktop | vs openbox "
        f"| idle CPU ({args.idle:.0f} s) | desktop up | first reset + ready | reset in place (median of {args.resets}) "
        "| largest processes (PSS MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for session, r in results.items():
        ratio = f"{r.pss / base.pss:.2f}x" if base else "-"
        private_ratio = f"{r.private / base.private:.2f}x" if base else "-"
        top = ", ".join(f"{name} {mib}" for name, mib in r.top)
        print(
            f"| {session} | {r.pss:.0f} MiB | {ratio} | {r.private:.0f} MiB | {private_ratio} "
            f"| {r.cpu:.2f} % of a core | {r.up:.2f} s | {r.first:.2f} s | {stats(r.resets)} | {top} |"
        )


if __name__ == "__main__":
    main()
