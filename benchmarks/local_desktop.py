"""Local desktops side by side: fast reset vs full restart, ready signal vs a fixed 2 s pause, memory,
and the action path: a fresh ``python -c`` with pyautogui's 0.1 s pause vs the warm fork server (with that
pause and the wait for the app's input, its fast setting, and as it was before that wait), in the text
editor of ``local-editor-write-save`` (a GTK app, which answers the input wait's pings).

Run: ``python benchmarks/local_desktop.py [--resets 10] [--steps 10] [--actions 30] [--max-desktops 8]
[--only actions]``. Prints markdown. Needs the local backend's Debian packages and
``pip install 'legatolabs[local]'``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig
from legato_gym.backends.local import LocalDesktop, default_tasks, solution


def pss_kib(pids: Sequence[int]) -> int:
    """Summed PSS of the given processes and all their descendants, in KiB."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    seen, stack, total = set(), list(pids), 0
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def stats(values: Sequence[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:.0f} ms (p90 {p90 * 1000:.0f})"


def bench_reset(task_id: str, resets: int) -> tuple[list[float], list[float]]:
    """Reset times (reset + wait_after_reset) of a fast-reset desktop and a restart-every-time desktop,
    interleaved so that both see the same load."""
    fast_config, full_config = DesktopConfig(fast_reset=True), DesktopConfig(fast_reset=False)
    task = next(t for t in default_tasks(fast_config) if t.task_id == task_id)
    times: tuple[list[float], list[float]] = ([], [])
    with LocalDesktop(fast_config) as fast, LocalDesktop(full_config) as full:
        for _ in range(resets):
            for desktop, bucket in ((fast, times[0]), (full, times[1])):
                start = time.monotonic()
                desktop.reset(task)
                desktop.wait_after_reset()
                bucket.append(time.monotonic() - start)
                desktop.act(solution(task_id, desktop.screen_size)[0])  # dirty the desktop for the next reset
    return times


def bench_steps(ready_signal: bool, steps: int) -> tuple[list[float], list[float]]:
    config = DesktopConfig(ready_signal=ready_signal, fixed_wait=0.0 if ready_signal else 2.0)
    task = next(t for t in default_tasks(config) if t.task_id == "local-terminal-create-file")
    waits, totals = [], []
    with LocalDesktop(config) as desktop:
        desktop.reset(task)
        desktop.wait_after_reset()
        for i in range(steps):
            start = time.monotonic()
            result = desktop.act(f"pyautogui.typewrite('echo step {i}\\n')")
            desktop.observe()
            totals.append(time.monotonic() - start)
            waits.append(result.ready_s + result.wait_s)
    return waits, totals


#: The action paths compared by :func:`bench_actions`: OSWorld's own (a fresh ``python -c``), the fork server's
#: default (OSWorld's pause, each call's input taken by the focused app), its fast option and the fork server
#: as it was before ``sync_input`` (pause 0, no wait for the app).
ACTION_PATHS: dict[str, dict[str, Any]] = {
    "OSWorld's: fresh `python -c`, pyautogui pause 0.1 s": {"action_runner": "exec"},
    "default: fork server, pause 0.1 s, input synced": {"action_runner": "fork"},
    "fast: fork server, pause 0, input synced": {"action_runner": "fork", "pyautogui_pause": 0.0},
    "as in 2f52d08: fork server, pause 0, not synced": {"pyautogui_pause": 0.0, "sync_input": False},
}


def bench_actions(actions: int) -> dict[str, tuple[list[float], list[float]]]:
    """Per-action cost (``act_s``) and whole step (act + ready signal + observe) of each action path.

    Both desktops are up at once and step in turns, so both see the same load.
    """
    task_id = "local-editor-write-save"
    desktops = {}
    try:
        for name, options in ACTION_PATHS.items():
            config = DesktopConfig(options=options)
            desktops[name] = LocalDesktop(config)
            task = next(t for t in default_tasks(config) if t.task_id == task_id)
            desktops[name].reset(task)
            desktops[name].wait_after_reset()
        width, height = desktops[next(iter(desktops))].screen_size
        script = [
            f"pyautogui.click({width // 2}, {height // 2})",
            "pyautogui.typewrite('echo step {i}')",
            "pyautogui.press('enter')",
        ]
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in desktops}
        for i in range(actions):
            action = script[i % len(script)].format(i=i)
            for name, desktop in desktops.items():
                start = time.monotonic()
                result = desktop.act(action)
                desktop.observe()
                times[name][0].append(result.act_s)
                times[name][1].append(time.monotonic() - start)
        return times
    finally:
        for desktop in desktops.values():
            desktop.close()


def bench_memory(max_desktops: int) -> tuple[list[int], int]:
    config = DesktopConfig()
    task = next(t for t in default_tasks(config) if t.task_id == "local-editor-write-save")
    desktops: list[LocalDesktop] = []
    per_desktop = []
    avail_before = _mem_available_kib()
    try:
        for _ in range(max_desktops):
            desktop = LocalDesktop(config)
            desktops.append(desktop)
            desktop.reset(task)  # an editor open: a realistic desktop, not an empty screen
            desktop.wait_after_reset()
        for desktop in desktops:
            assert desktop._processes.sandbox is not None and desktop._processes.sandbox.init_pid is not None
            per_desktop.append(pss_kib([*desktop.display.pids, desktop._processes.sandbox.init_pid]))
        used = avail_before - _mem_available_kib()
    finally:
        for desktop in desktops:
            desktop.close()
    return per_desktop, used


def _mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def print_actions(times: dict[str, tuple[list[float], list[float]]], actions: int) -> None:
    (old_name, (old_act, old_step)), *others = times.items()
    print(f"### Actions: a fresh `python -c` vs the fork server ({actions} actions each, interleaved)\n")
    print("| Path | per action (act_s) | whole step (act + ready + observe) | act / OSWorld's | step / OSWorld's |")
    print("|---|---|---|---|---|")
    print(f"| {old_name} | {stats(old_act)} | {stats(old_step)} | 1 | 1 |")
    for name, (act, step) in others:
        act_ratio = statistics.median(act) / statistics.median(old_act)
        step_ratio = statistics.median(step) / statistics.median(old_step)
        print(f"| {name} | {stats(act)} | {stats(step)} | {act_ratio:.2f}x | {step_ratio:.2f}x |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--actions", type=int, default=30)
    parser.add_argument("--max-desktops", type=int, default=8)
    parser.add_argument("--only", choices=["actions"], help="run one part only")
    args = parser.parse_args()

    print("## Local desktops (benchmarks/local_desktop.py)\n")
    if args.only == "actions":
        times = bench_actions(args.actions)
        print(f"Machine: {os.cpu_count()} cores; load average at the end {os.getloadavg()[0]:.1f}. Screen 1920x1080.\n")
        print_actions(times, args.actions)
        return
    resets = {
        task_id: bench_reset(task_id, args.resets)
        for task_id in ("local-terminal-create-file", "local-editor-write-save")
    }
    ready_waits, ready_totals = bench_steps(True, args.steps)
    fixed_waits, fixed_totals = bench_steps(False, min(args.steps, 5))
    action_times = bench_actions(args.actions)
    per_desktop, used = bench_memory(args.max_desktops)
    mem_total = _mem_available_kib()
    median_pss = statistics.median(per_desktop)

    print(f"Machine: {os.cpu_count()} cores; load average at the end {os.getloadavg()[0]:.1f}. Screen 1920x1080.\n")
    print("| What | Median (p90) |")
    print("|---|---|")
    for task_id, (fast, full) in resets.items():
        print(f"| reset + wait_after_reset, fast reset ({task_id}, {args.resets}×) | {stats(fast)} |")
        print(f"| reset + wait_after_reset, whole desktop restarted ({task_id}, {args.resets}×) | {stats(full)} |")
    print(f"| per-step wait, ready signal (screen settled {0.1:g} s) | {stats(ready_waits)} |")
    print(f"| per-step wait, fixed 2 s pause | {stats(fixed_waits)} |")
    print(f"| whole step (act + wait + observe), ready signal | {stats(ready_totals)} |")
    print(f"| whole step (act + wait + observe), fixed 2 s pause | {stats(fixed_totals)} |")
    print()
    print_actions(action_times, args.actions)
    print(
        f"Memory with {len(per_desktop)} desktops up at once, each with the text editor open: "
        f"median PSS {median_pss / 1024:.0f} MiB per desktop (Xvfb, openbox, sandbox, server, editor); "
        f"MemAvailable fell by {used / 1024:.0f} MiB ({used / 1024 / max(1, len(per_desktop)):.0f} MiB each). "
        f"At that rate {mem_total / max(1, used / max(1, len(per_desktop))):.0f} more would fit in the memory "
        "left; on 2 cores CPU is the limit long before memory."
    )


if __name__ == "__main__":
    main()
