"""OSWorld's real apps on local desktops, side by side with their baselines in one run.

* reset: fast reset in place, and switching to a desktop started ahead (``prestart``: bare when the tasks
  vary, set up for the task when a desktop is given the same task again, as a GRPO group's attempts),
  against a whole desktop restart, for a Calc task (an ``.xlsx`` opened) and a Chrome task
  (``google-chrome`` with its DevTools port, as OSWorld's Chrome tasks start it), interleaved;
* rollout: whole attempts of OSWorld's LibreOffice Impress task 2cd43775 (AutoRecovery every 3 minutes,
  no file download) with its scripted solution, graded by desktop-env, through legato's loop (fast reset,
  ready signals, grading when the apps have written their settings) against OSWorld's stock loop (desktop
  restarted per task, 60 s after reset, 2 s after each action, 20 s before grading), at an instant policy
  and a 2 s policy, interleaved; legato's loop also with ``prestart``;
* memory: the PSS of one desktop with each app open, and how many such desktops fit in the memory left.

Run: ``python benchmarks/local_apps.py [--resets 5] [--episode-s 5] [--attempts 2]
[--only reset|rollout|memory] [--before] [--openbox] [--as-filed]`` (``--openbox``: legato's loops on the
openbox session too, side by side with the default session; ``--as-filed``: on openbox comparing frames, the
local backend when issue 29 was filed). Prints markdown. It grades with desktop-env, so it re-runs itself under
desktop-env's interpreter (made by ``legato osworld setup``) when the current one lacks it. Needs the local
backend's Debian packages.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMPRESS_TASK = "2cd43775-7085-45d8-89fa-9e35c0a915cf"
SCREEN = (1920, 1080)


def _reexec_under_desktop_env() -> None:
    """Run this script again in desktop-env's interpreter, with the project importable."""
    from legato_gym.desktopenv.venv import default_venv, venv_python

    python = venv_python(default_venv())
    if not python.exists():
        raise SystemExit(f"desktop-env's interpreter {python} does not exist: run `legato osworld setup` first")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
    os.execve(str(python), [str(python), *sys.argv], env)


if importlib.util.find_spec("desktop_env") is None:
    sys.path.insert(0, str(ROOT))
    _reexec_under_desktop_env()

from benchmarks.local_desktop import pss_kib, stats  # noqa: E402
from legato_gym import DesktopConfig, Task, Timeouts  # noqa: E402
from legato_gym.backends.local import LocalDesktop  # noqa: E402
from legato_gym.backends.local.solutions import osworld_solution  # noqa: E402
from legato_gym.tasks import load_osworld_task  # noqa: E402


def _config(**overrides: Any) -> DesktopConfig:
    options = {"grader": "osworld", **overrides.pop("options", {})}
    return DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        timeouts=Timeouts(reset=180, ready=60),
        options=options,
        **overrides,
    )


def _xlsx(folder: Path) -> Path:
    """A small spreadsheet, converted from CSV by the host's LibreOffice (no Python writer needed)."""
    source = folder / "numbers.csv"
    source.write_text("n\n1\n2\n3\n")
    profile = f"-env:UserInstallation={(folder / 'profile').as_uri()}"
    subprocess.run(
        ["soffice", profile, "--headless", "--convert-to", "xlsx", "--outdir", str(folder), str(source)],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return folder / "numbers.xlsx"


def _probe(task_id: str, steps: list[dict[str, Any]]) -> Task:
    config = {"id": task_id, "instruction": "Look at the screen.", "config": steps, "evaluator": {"func": "infeasible"}}
    return Task(task_id, "Look at the screen.", config)


def reset_tasks(folder: Path) -> dict[str, Task]:
    """The two reset tasks: Calc with a document, Chrome as OSWorld's Chrome tasks start it."""
    upload = {"local_path": str(_xlsx(folder)), "path": "/home/user/Desktop/numbers.xlsx"}
    calc = _probe(
        "bench-calc-open",
        [
            {"type": "upload_file", "parameters": {"files": [upload]}},
            {"type": "open", "parameters": {"path": "/home/user/Desktop/numbers.xlsx"}},
        ],
    )
    chrome = _probe(
        "bench-chrome-open",
        [
            {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
            {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}},
        ],
    )
    return {"Calc (an .xlsx opened)": calc, "Chrome (DevTools port, socat)": chrome}


#: The resets compared: in place, switching to a desktop started ahead (after an episode, and right after
#: the last action), and the whole desktop restarted; each with the desktop's config, and whether its tasks
#: vary (two tasks of the same setup in turns: a desktop started ahead is then bare) or repeat (the desktop
#: started ahead is set up for the task, from the third reset on).
RESETS: dict[str, tuple[dict[str, Any], bool]] = {
    "fast reset in place": ({"fast_reset": True, "options": {"prestart": False}}, False),
    "started ahead, tasks vary": ({"fast_reset": True, "options": {"prestart": True}}, True),
    "started ahead, the same task again (set up ahead)": ({"fast_reset": True, "options": {"prestart": True}}, False),
    "started ahead, tasks vary, no episode": ({"fast_reset": True, "options": {"prestart": True}}, True),
    "desktop restarted": ({"fast_reset": False, "options": {"prestart": False}}, False),
}


def _timed_reset(desktop: LocalDesktop, task: Task) -> float:
    start = time.monotonic()
    desktop.reset(task)
    waited = desktop.wait_after_reset()
    seconds = time.monotonic() - start
    if not waited.ready:
        print(f"<!-- {task.task_id}: not ready within the deadline -->")
    desktop.act("pyautogui.typewrite('dirty')")  # a used desktop for the next reset
    return seconds


def bench_reset(task: Task, resets: int, episode_s: float) -> tuple[dict[str, list[float]], dict[str, int]]:
    """reset + wait_after_reset of each of :data:`RESETS`, in turns; and each desktop's PSS (KiB) at the end.

    Between two rounds the desktops sit through an episode of ``episode_s`` (the policy's calls and the
    agent's actions), in which the desktops started ahead build the next one; "no episode" resets again at
    once after its last action, so that its reset waits for the build. The first two rounds are not counted
    (a desktop starts one ahead from its second episode on: its first two resets are made in place).
    """
    times: dict[str, list[float]] = {name: [] for name in RESETS}
    desktops = {name: LocalDesktop(_config(**json.loads(json.dumps(over)))) for name, (over, _) in RESETS.items()}
    twin = Task(f"{task.task_id}-twin", task.instruction, task.config)  # the same setup, another task
    try:
        for round_ in range(resets + 2):
            for name, desktop in desktops.items():
                vary = RESETS[name][1]
                if name.endswith("no episode"):  # two tasks in turns, the second right after the first
                    _timed_reset(desktop, twin)
                    seconds = _timed_reset(desktop, task)
                else:
                    seconds = _timed_reset(desktop, twin if vary and round_ % 2 else task)
                if round_ >= 2:
                    times[name].append(seconds)
            time.sleep(episode_s)
        memory = {name: pss_kib(desktop.pids) for name, desktop in desktops.items()}
    finally:
        for desktop in desktops.values():
            desktop.close()
    return times, memory


#: The loops of the rollout benchmark: legato's (resetting in place, and switching to the desktop started
#: ahead, told that the next attempt is of the same task, as ``legato rl collect`` tells a desktop that has
#: more of a GRPO group's attempts to run), and OSWorld's stock loop on the same desktops.
LOOPS: dict[str, dict[str, Any]] = {
    "legato, fast reset in place": {"fast_reset": True, "ready_signal": True, "options": {"prestart": False}},
    "legato, started ahead, set up ahead": {"fast_reset": True, "ready_signal": True, "options": {"prestart": True}},
    # fast_reset off: the desktop restarts per task; no ready signal: 30x fixed_wait (60 s) after reset, the
    # fixed wait after each action, 10x (20 s) before grading: OSWorld's lib_run_single.py
    "OSWorld stock loop": {"fast_reset": False, "ready_signal": False, "fixed_wait": 2.0},
}


def _attempt(desktop: LocalDesktop, task: Task, actions: Sequence[str], think_s: float) -> tuple[float, float]:
    """One attempt: reset, one policy call (``think_s``) before each action, grading. (seconds, reward)."""
    start = time.monotonic()
    if desktop.options.prestart and desktop.config.fast_reset:
        desktop.expect_next(task)  # the next attempt is of this task too
    desktop.reset(task)
    desktop.wait_after_reset()
    desktop.observe()
    for action in actions:
        if think_s:
            time.sleep(think_s)  # the policy's latency, the same in both loops
        desktop.act(action)
        desktop.observe()
    desktop.wait_before_eval()
    reward = desktop.evaluate()
    return time.monotonic() - start, reward


#: ``--before``: legato's loops with the wait after each action read by comparing frames, as before X DAMAGE.
BEFORE_LOOPS: dict[str, dict[str, Any]] = {
    f"{name}, frames (before)": {**loop, "options": {**loop["options"], "screen_watch": "frames"}}
    for name, loop in LOOPS.items()
    if name.startswith("legato")
}
#: ``--openbox``: legato's loops on the openbox session, the local desktop before it looked like the VM (issue 29).
OPENBOX_LOOPS: dict[str, dict[str, Any]] = {
    f"{name}, openbox (before)": {**loop, "options": {**loop["options"], "session": "openbox"}}
    for name, loop in LOOPS.items()
    if name.startswith("legato")
}
#: ``--as-filed``: legato's loops as when issue 29 was filed: openbox, the wait after an action comparing frames.
AS_FILED_LOOPS: dict[str, dict[str, Any]] = {
    f"{name}, openbox + frames (as filed)": {
        **loop,
        "options": {**loop["options"], "session": "openbox", "screen_watch": "frames"},
    }
    for name, loop in LOOPS.items()
    if name.startswith("legato")
}


def bench_rollout(
    osworld: str, attempts: int, thinks: Sequence[float], loops: dict[str, dict[str, Any]] = LOOPS
) -> dict[tuple[str, float], tuple[list[float], list[float]]]:
    """Whole attempts of the Impress task in the loops, in turns; (seconds, rewards) per (loop, think)."""
    task = load_osworld_task("libreoffice_impress", IMPRESS_TASK, osworld_path=osworld)
    actions = [a for a in osworld_solution(IMPRESS_TASK) if a != "DONE"]
    results: dict[tuple[str, float], tuple[list[float], list[float]]] = {}
    desktops = {name: LocalDesktop(_config(**overrides)) for name, overrides in loops.items()}
    try:
        for desktop in desktops.values():  # a collection's desktops run many attempts: not their first two
            if desktop.config.fast_reset:
                for _ in range(2):
                    _attempt(desktop, task, actions, 0.0)
        for think in thinks:
            for _ in range(attempts):
                for name, desktop in desktops.items():
                    seconds, reward = _attempt(desktop, task, actions, think)
                    bucket = results.setdefault((name, think), ([], []))
                    bucket[0].append(seconds)
                    bucket[1].append(reward)
    finally:
        for desktop in desktops.values():
            desktop.close()
    return results


#: One task per app for the memory table: the setup step that opens it.
def memory_tasks(xlsx: Path) -> dict[str, list[dict[str, Any]]]:
    upload = {"type": "upload_file", "parameters": {"files": [{"local_path": str(xlsx), "path": "/home/user/a.xlsx"}]}}
    launch: Callable[[list[str]], list[dict[str, Any]]] = lambda argv: [  # noqa: E731
        {"type": "launch", "parameters": {"command": argv}}
    ]
    return {
        "no app (terminal only)": launch(["xterm"]),
        "Calc with an .xlsx": [upload, {"type": "open", "parameters": {"path": "/home/user/a.xlsx"}}],
        "Writer": launch(["libreoffice", "--writer"]),
        "Impress": launch(["libreoffice", "--impress"]),
        "Chrome": launch(["google-chrome", "--remote-debugging-port=1337"]),
        "GIMP": launch(["gimp"]),
        "VLC": launch(["vlc"]),
        "Thunderbird": launch(["thunderbird"]),
        "VS Code (code-server)": launch(["code"]),
    }


def bench_memory(xlsx: Path, apps: Sequence[str] | None) -> dict[str, tuple[int, float, bool]]:
    """PSS (KiB) of one desktop with each app open, its reset time, and whether its ready signal held."""
    out = {}
    with LocalDesktop(_config(options={"prestart": False})) as desktop:  # one desktop, none started ahead
        for name, steps in memory_tasks(xlsx).items():
            if apps and name not in apps:
                continue
            task = _probe("bench-memory", steps)
            try:
                desktop.check_task(task)
            except Exception as error:  # an app this machine does not have: say so, measure the rest
                print(f"<!-- {name}: skipped ({error}) -->")
                continue
            start = time.monotonic()
            desktop.reset(task)
            ready = desktop.wait_after_reset().ready
            seconds = time.monotonic() - start
            desktop._waits.wait_idle(time.monotonic() + 30)
            out[name] = (pss_kib(desktop.pids), seconds, ready)
    return out


def _mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--resets", type=int, default=5)
    parser.add_argument("--attempts", type=int, default=2, help="attempts per loop and policy latency")
    parser.add_argument("--only", choices=["reset", "rollout", "memory"])
    parser.add_argument("--episode-s", type=float, default=5.0, help="seconds between two resets (the episode)")
    parser.add_argument(
        "--osworld",
        default=os.environ.get("LEGATO_OSWORLD") or str(ROOT.parent / "shared" / "osworld"),
        help="OSWorld checkout holding evaluation_examples/ (default: $LEGATO_OSWORLD, else ../shared/osworld)",
    )
    parser.add_argument("--thinks", default="0,2", help="rollout: policy latencies in seconds, comma-separated")
    parser.add_argument(
        "--before", action="store_true", help="rollout: also legato's loops comparing frames after each action"
    )
    parser.add_argument(
        "--openbox", action="store_true", help="rollout: also legato's loops on the openbox session (before issue 29)"
    )
    parser.add_argument("--as-filed", action="store_true", help="rollout: also legato's loops as issue 29 found them")
    args = parser.parse_args()
    print("## Real apps on local desktops (benchmarks/local_apps.py)\n")
    print(f"Machine: {os.cpu_count()} cores, screen {SCREEN[0]}x{SCREEN[1]}, grader desktop-env.\n")
    with tempfile.TemporaryDirectory(prefix="legato-bench-") as tmp:
        folder = Path(tmp)
        if args.only in (None, "reset"):
            print(f"Reset + ready signal, {args.resets}x each in turns, an episode of {args.episode_s:g} s between:\n")
            print("| task | reset | median (p90) | / restarted | PSS of the desktop (and the one started ahead) |")
            print("|---|---|---|---|---|")
            for task_name, task in reset_tasks(folder).items():
                times, memory = bench_reset(task, args.resets, args.episode_s)
                full = _median(times["desktop restarted"])
                for name, seconds in times.items():
                    ratio = _median(seconds) / full
                    print(f"| {task_name} | {name} | {stats(seconds)} | {ratio:.2f}x | {memory[name] / 1024:.0f} MiB |")
            print()
        if args.only in (None, "rollout"):
            loops = {
                **(AS_FILED_LOOPS if args.as_filed else {}),
                **(BEFORE_LOOPS if args.before else {}),
                **(OPENBOX_LOOPS if args.openbox else {}),
                **LOOPS,
            }
            thinks = tuple(float(t) for t in args.thinks.split(","))
            results = bench_rollout(args.osworld, args.attempts, thinks, loops)
            print(f"Whole attempts of libreoffice_impress/{IMPRESS_TASK}, scripted solution, {args.attempts}x:\n")
            print("| policy latency | loop | attempt, median (p90) | speed-up over the stock loop | rewards |")
            print("|---|---|---|---|---|")
            for think in thinks:
                stock = _median(results[("OSWorld stock loop", think)][0])
                for loop in loops:
                    seconds, rewards = results[(loop, think)]
                    latency = "instant" if think == 0 else f"{think:g} s per call"
                    ratio = stock / _median(seconds)
                    print(f"| {latency} | {loop} | {stats(seconds)} | **{ratio:.1f}x** | {json.dumps(rewards)} |")
            print()
        if args.only in (None, "memory"):
            memory = bench_memory(_xlsx(folder), None)
            available = _mem_available_kib()
            print("| desktop with | PSS | reset + ready | ready signal held | desktops that fit in the memory left |")
            print("|---|---|---|---|---|")
            for name, (pss, seconds, ready) in memory.items():
                fit = available // max(1, pss)
                print(f"| {name} | {pss / 1024:.0f} MiB | {seconds:.1f} s | {'yes' if ready else 'no'} | {fit} |")
            print(f"\nLoad average at the end: {os.getloadavg()[0]:.1f}.")


if __name__ == "__main__":
    main()
