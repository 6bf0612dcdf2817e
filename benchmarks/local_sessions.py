"""The local desktop's sessions side by side in one run: openbox alone, the lookalike session (openbox with
legato's top bar and dock) and GNOME Shell: memory per desktop, CPU of an idle desktop, start and reset times.

Run: ``python benchmarks/local_sessions.py [--idle 30] [--resets 5] [--desktops 2]
[--sessions openbox,lookalike,gnome]``.
Prints markdown. Each session runs ``--desktops`` 1920x1080 desktops at once (started ahead off: the desktops'
own cost), reset to an empty task; the start and reset times are the first one's. Per desktop: the idle CPU is
the utime + stime of the desktops' processes over ``--idle`` seconds after the screen settled, the PSS their summed
``/proc/PID/smaps_rollup`` (and the top of it, by command), and their private memory (USS): with a desktop of
the same session beside it, what one more desktop adds on a host (alone, a desktop's libraries count as its
private memory; PSS moves with the machine's other processes: a test run's X servers halve an Xvfb's share).
For the lookalike, also what the first desktop's USS grew by once an agent opened its window picker, app grid,
menus and a launcher's menu (their pictures reach the X server when first drawn).
Needs the local backend's Debian packages; GNOME Shell's for ``gnome`` (it is left out when not installed).
"""

from __future__ import annotations

import argparse
import contextlib
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
    used: float | None  # what the first desktop's USS grew by once an agent opened the lookalike's menus


#: What an agent may open on the lookalike's shell at 1920x1080, each closed again: the window picker (Super),
#: the app grid, the date menu, the system menu, a dock launcher's menu. Their pictures reach the X server
#: the first time they are drawn, and stay.
EXERCISE = (
    "pyautogui.press('win')",
    "pyautogui.press('escape')",
    "pyautogui.click(35, 1040)",
    "pyautogui.press('escape')",
    "pyautogui.click(960, 13)",
    "pyautogui.press('escape')",
    "pyautogui.click(1860, 13)",
    "pyautogui.press('escape')",
    "pyautogui.rightClick(35, 65)",
    "pyautogui.press('escape')",
)


def measure(session: str, idle: float, resets: int, desktops: int) -> Result:
    config = DesktopConfig(screen=(1920, 1080), options=LocalOptions(session=session, prestart=False))
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        desktop = stack.enter_context(LocalDesktop(config))
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
        peers = [stack.enter_context(LocalDesktop(config)) for _ in range(desktops - 1)]
        for peer in peers:
            peer.reset(EMPTY)
            peer.wait_after_reset()
        time.sleep(2.0)  # whatever the last reset started, done
        every = [desktop, *peers]
        pids = [pid for d in every for pid in descendants(d.pids)]
        pss = sum(pss_kib(d.pids) for d in every) / 1024 / len(every)
        private = sum(private_kib(d.pids) for d in every) / 1024 / len(every)
        top = by_command(descendants(desktop.pids)).most_common(4)
        idle_private = private_kib(desktop.pids) / 1024
        before, began = cpu_ticks(pids), time.monotonic()
        time.sleep(idle)
        spent = (cpu_ticks(pids) - before) / os.sysconf("SC_CLK_TCK") / len(every)
        cpu = 100 * spent / (time.monotonic() - began)
        used = None
        if session == "lookalike":
            for action in EXERCISE:
                desktop.act(action)
                time.sleep(0.5)
            time.sleep(2.0)
            used = private_kib(desktop.pids) / 1024 - idle_private
    return Result(up, first, times, pss, private, top, cpu, used)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--resets", type=int, default=5)
    parser.add_argument("--sessions", default="openbox,lookalike,gnome")
    parser.add_argument(
        "--desktops", type=int, default=2, help="desktops of each session at once; memory and CPU are per desktop"
    )
    args = parser.parse_args()
    if args.desktops < 1:
        parser.error(f"--desktops {args.desktops}: give 1 or more")
    sessions = [s for s in args.sessions.split(",") if s != "gnome" or gnome_installed()]
    results = {session: measure(session, args.idle, args.resets, args.desktops) for session in sessions}
    base = results.get("openbox")
    print(
        "| session | PSS per desktop | vs openbox | private (USS) per desktop | vs openbox "
        f"| idle CPU ({args.idle:.0f} s) | desktop up | first reset + ready | reset in place (median of {args.resets}) "
        "| USS after the menus opened | largest processes (PSS MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for session, r in results.items():
        ratio = f"{r.pss / base.pss:.2f}x" if base else "-"
        private_ratio = f"{r.private / base.private:.2f}x" if base else "-"
        top = ", ".join(f"{name} {mib}" for name, mib in r.top)
        used = f"+{r.used:.1f} MiB" if r.used is not None else "-"
        print(
            f"| {session} | {r.pss:.0f} MiB | {ratio} | {r.private:.0f} MiB | {private_ratio} "
            f"| {r.cpu:.2f} % of a core | {r.up:.2f} s | {r.first:.2f} s | {stats(r.resets)} | {used} | {top} |"
        )


if __name__ == "__main__":
    main()
