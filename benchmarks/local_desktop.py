"""Local desktops side by side: fast reset vs full restart, ready signal vs a fixed 2 s pause, memory,
and the action path: a fresh ``python -c`` with pyautogui's 0.1 s pause vs the warm fork server (with that
pause and the wait for the app's input, its fast setting, and as it was before that wait), in the text
editor of ``local-editor-write-save`` (a GTK app, which answers the input wait's pings).

``--only cost`` puts side by side, in one run, the wait after an action read by comparing frames (before)
and from X DAMAGE in the desktop (after), on the openbox session and on GNOME Shell's: the wait after an
action on a still screen, the whole step, PSS per desktop, an idle desktop's CPU, and resets in place, to a
desktop started ahead and to one set up ahead.

Run: ``python benchmarks/local_desktop.py [--resets 10] [--steps 10] [--actions 30] [--max-desktops 8]
[--only actions|cost] [--sides ...]``. Prints markdown. Needs the local backend's Debian packages and
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

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, default_tasks, solution
from legato_gym.backends.local.waits import cpu_ticks


def descendants(pids: Sequence[int]) -> list[int]:
    """The given processes and all their descendants (those alive now), sorted."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    seen, stack = set(), list(pids)
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack += children.get(pid, [])
    return sorted(seen)


def pss_kib(pids: Sequence[int]) -> int:
    """Summed PSS of the given processes and all their descendants, in KiB."""
    return _rollup_kib(pids, ("Pss",))


def private_kib(pids: Sequence[int]) -> int:
    """Summed private memory (USS: ``Private_Clean`` + ``Private_Dirty``) of the given processes and all their
    descendants, in KiB: what one more such desktop adds, whatever else shares their libraries (PSS moves with
    how many other processes map the same files; another test run's X servers halve an Xvfb's share of them)."""
    return _rollup_kib(pids, ("Private_Clean", "Private_Dirty"))


def _rollup_kib(pids: Sequence[int], fields: Sequence[str]) -> int:
    total = 0
    for pid in descendants(pids):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.split(":")[0] in fields:
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def stats(values: Sequence[float], digits: int = 0) -> str:
    ordered = sorted(values)
    if not ordered:
        return "-"
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:.{digits}f} ms (p90 {p90 * 1000:.{digits}f})"


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


#: The sides of :func:`bench_cost`: the wait after an action read by comparing frames (before) or from X DAMAGE
#: in the desktop (after), on the openbox session, on GNOME Shell's and on the lookalike (the default session).
COST_SIDES: dict[str, dict[str, Any]] = {
    "openbox + frames (before)": {"session": "openbox", "screen_watch": "frames"},
    "openbox + X DAMAGE (after)": {"session": "openbox", "screen_watch": "damage"},
    "gnome + frames": {"session": "gnome", "screen_watch": "frames"},
    "gnome + X DAMAGE": {"session": "gnome", "screen_watch": "damage"},
    "lookalike + X DAMAGE (the default)": {"session": "lookalike", "screen_watch": "damage"},
}

#: A desktop with no app open: a screen that stays still through an action that draws nothing.
BARE = Task("bench-bare", "Nothing.", {"config": [], "evaluator": {"func": "infeasible"}})


def tree_ticks(pids: Sequence[int]) -> int:
    """User plus system clock ticks of the given processes and all their descendants."""
    return cpu_ticks(descendants(pids))


class CostSide:
    """The figures of one side of :func:`bench_cost`, each a list of samples."""

    def __init__(self) -> None:
        self.still_wait: list[float] = []
        self.step: list[float] = []
        self.step_wait: list[float] = []
        self.pss_kib: list[int] = []
        self.idle_cpu: list[float] = []
        self.resets: dict[str, list[float]] = {mode: [] for mode in RESET_MODES}
        self.rewards: list[float] = []


#: How :func:`bench_cost` resets: in place, to the desktop started ahead (the next task differs, so it is
#: bare), to the desktop started ahead and set up for the task (the same task again).
RESET_MODES = ("in place", "started ahead", "set up ahead")


def bench_cost(
    sides: dict[str, dict[str, Any]], actions: int, resets: int, idle_s: float, episode_s: float
) -> dict[str, CostSide]:
    """Each side's wait after an action on a still screen, whole step, memory, idle CPU and reset times.

    All desktops of all sides are up at once and take their turns, so every side sees the same load.
    """
    found = {name: CostSide() for name in sides}
    editor = next(t for t in default_tasks(DesktopConfig()) if t.task_id == "local-editor-write-save")
    terminal = next(t for t in default_tasks(DesktopConfig()) if t.task_id == "local-terminal-create-file")
    desktops: dict[tuple[str, str], LocalDesktop] = {}
    try:
        for name, options in sides.items():
            desktops[(name, "in place")] = LocalDesktop(DesktopConfig(options={**options, "prestart": False}))
            for mode in RESET_MODES[1:]:
                desktops[(name, mode)] = LocalDesktop(DesktopConfig(options={**options, "prestart": True}))
        # the wait after an action that draws nothing, on a desktop with no app: a still screen
        for name in sides:
            desktops[(name, "in place")].reset(BARE)
            desktops[(name, "in place")].wait_after_reset()
        for _ in range(actions):
            for name in sides:
                result = desktops[(name, "in place")].act("pyautogui.press('shift')")
                found[name].still_wait.append(result.ready_s)
        # an idle desktop's CPU and memory, with the text editor open
        for name in sides:
            desktops[(name, "in place")].reset(editor)
            desktops[(name, "in place")].wait_after_reset()
        before = {name: tree_ticks(desktops[(name, "in place")].pids) for name in sides}
        start = time.monotonic()
        time.sleep(idle_s)  # the measurement: what the desktops use on their own meanwhile
        spent = time.monotonic() - start
        for name in sides:
            ticks = tree_ticks(desktops[(name, "in place")].pids) - before[name]
            found[name].idle_cpu.append(ticks / os.sysconf("SC_CLK_TCK") / spent)
            found[name].pss_kib.append(pss_kib(desktops[(name, "in place")].pids))
        # whole steps in the editor: a click, a typed line, Enter
        width, height = desktops[(next(iter(sides)), "in place")].screen_size
        script = [
            f"pyautogui.click({width // 2}, {height // 2})",
            "pyautogui.typewrite('echo step {i}')",
            "pyautogui.press('enter')",
        ]
        for i in range(actions):
            for name in sides:
                desktop = desktops[(name, "in place")]
                begin = time.monotonic()
                result = desktop.act(script[i % len(script)].format(i=i))
                desktop.observe()
                found[name].step.append(time.monotonic() - begin)
                found[name].step_wait.append(result.ready_s)
        # resets: in place, to a bare desktop started ahead (tasks vary), to one set up ahead (the same task)
        for round_ in range(resets + 2 if resets else 0):  # the first two are not counted: the desks get built
            for name in sides:
                for mode in RESET_MODES:
                    desktop = desktops[(name, mode)]
                    task = (editor, terminal)[round_ % 2] if mode == "started ahead" else editor
                    if mode == "set up ahead":
                        desktop.expect_next(editor)
                    begin = time.monotonic()
                    desktop.reset(task)
                    desktop.wait_after_reset()
                    if round_ >= 2:
                        found[name].resets[mode].append(time.monotonic() - begin)
                    desktop.act(solution(task.task_id, desktop.screen_size)[0])
            time.sleep(episode_s)  # the episode, in which the desktops started ahead are built (and set up)
        return found
    finally:
        for desktop in desktops.values():
            desktop.close()


def print_cost(found: dict[str, CostSide], args: argparse.Namespace) -> None:
    base = next(iter(found.values()))
    print(
        f"### Cost side by side: the wait after an action, memory, idle CPU, resets ({args.actions} actions, "
        f"{args.resets} resets of each kind per side, in turns)\n"
    )
    print(
        "| Side | wait after an action on a still screen | whole step (act + ready + observe) | its wait | "
        "PSS per desktop (editor open) | idle CPU (% of a core) | reset in place | started ahead | set up ahead |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, side in found.items():
        resets = " | ".join(stats(side.resets[mode]) for mode in RESET_MODES)
        pss = statistics.median(side.pss_kib) / 1024
        ratio = pss / (statistics.median(base.pss_kib) / 1024)
        print(
            f"| {name} | {stats(side.still_wait, 1)} | {stats(side.step)} | {stats(side.step_wait)} | "
            f"{pss:.0f} MiB ({ratio:.2f}x) | {100 * statistics.median(side.idle_cpu):.2f} | {resets} |"
        )
    print()


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
    parser.add_argument("--only", choices=["actions", "cost"], help="run one part only")
    parser.add_argument("--idle-s", type=float, default=10.0, help="cost: seconds the idle CPU is measured over")
    parser.add_argument("--episode-s", type=float, default=5.0, help="cost: seconds between two rounds of resets")
    parser.add_argument(
        "--sides", default=",".join(COST_SIDES), help=f"cost: which sides, comma-separated, of {list(COST_SIDES)}"
    )
    args = parser.parse_args()
    if args.only == "cost":
        sides = {name: COST_SIDES[name] for name in args.sides.split(",")}
        found = bench_cost(sides, args.actions, args.resets, args.idle_s, args.episode_s)
        print(f"Machine: {os.cpu_count()} cores; load average at the end {os.getloadavg()[0]:.1f}. Screen 1920x1080.\n")
        print_cost(found, args)
        return

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
