"""The osworld backend on a stand-in VM whose server answers as OSWorld's (``server_mode="osworld"``).

* ``steps``: ``--steps`` agent steps in a row (act, ready signal, observation) on one stand-in VM whose server
  leaks an X connection per screenshot as OSWorld's does, in episodes of ``--episode`` steps with a fast
  reset between: crashes, resets by kind, server recycles and the seconds per step.
* ``chrome``: resets of OSWorld's Chrome task 030eeff7 (``google-chrome --remote-debugging-port=1337`` and
  ``socat tcp-listen:9222,fork tcp:localhost:1337``, as 79 chrome and multi_apps tasks start them): the time
  of ``reset`` and of ``wait_after_reset`` (the ready signal), and whether it was ready. Before socat was
  known to open no window, every such reset waited ``window_timeout`` (20 s) for a second window.

Run under desktop-env's interpreter (``legato osworld setup``), from the project root: ``LEGATO_OSWORLD=~/osworld
PYTHONPATH=. ~/.cache/legato/osworld-venv/bin/python benchmarks/osworld_standin.py [--resets 4]``.
Prints markdown. Needs the local backend's Debian packages and Chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from legato_gym import DesktopConfig, Task
from legato_gym.backends.osworld import OSWorldDesktop
from legato_gym.backends.osworld.vms import LocalStandInVM  # noqa: F401  (the stand-in, provider "local")

CHROME_TASK = "030eeff7-b492-4218-b312-701ec99ee0cc"
SCREEN = (1280, 720)


def chrome(resets: int) -> list[tuple[float, float, bool, str]]:
    root = Path(os.environ.get("LEGATO_OSWORLD", "~/osworld")).expanduser()
    path = root / "evaluation_examples" / "examples" / "chrome" / f"{CHROME_TASK}.json"
    data = json.loads(path.read_text())
    task = Task(CHROME_TASK, data["instruction"], data, domain="chrome")
    local = {"sandbox_python": sys.executable, "server_mode": "osworld"}
    config = DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        options={"provider": "local", "local": local, "download_cache": tempfile.mkdtemp(prefix="legato-bench-")},
    )
    rows = []
    with OSWorldDesktop(config) as desktop:
        for _ in range(resets + 1):  # the first reset after boot is not counted
            start = time.monotonic()
            desktop.reset(task)
            reset_s = time.monotonic() - start
            waited = desktop.wait_after_reset()
            rows.append((reset_s, waited.seconds, waited.ready, desktop.last_reset_kind))
    return rows[1:]


def steps(total: int, episode: int) -> dict[str, object]:
    from legato_gym.errors import DesktopError

    local = {"sandbox_python": sys.executable, "server_mode": "osworld"}
    config = DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        options={"provider": "local", "local": local, "download_cache": tempfile.mkdtemp(prefix="legato-bench-")},
    )
    setup = [{"type": "launch", "parameters": {"command": ["xterm"]}}]
    config_json = {"id": "legato-steps", "instruction": "Move.", "config": setup, "evaluator": {"func": "infeasible"}}
    task = Task("legato-steps", "Move.", config_json, domain="local")
    kinds: dict[str, int] = {}
    crashes, done, ready = 0, 0, 0
    start = time.monotonic()
    with OSWorldDesktop(config) as desktop:
        impl = desktop._impl
        while done < total:
            desktop.reset(task)
            kinds[desktop.last_reset_kind] = kinds.get(desktop.last_reset_kind, 0) + 1
            desktop.wait_after_reset()
            for _ in range(min(episode, total - done)):
                x, y = 100 + (done * 37) % 1000, 100 + (done * 53) % 500
                try:
                    result = desktop.act(f"pyautogui.moveTo({x}, {y})")
                    desktop.observe()
                except DesktopError:
                    crashes += 1
                    break
                ready += result.ready_s > 0
                done += 1
            print(f"{done} steps, resets {kinds}, recycles {impl.server_recycles}", file=sys.stderr, flush=True)
        recycles = impl.server_recycles
    elapsed = time.monotonic() - start
    return {"steps": done, "crashes": crashes, "resets": kinds, "recycles": recycles, "s_per_step": elapsed / done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=4)
    parser.add_argument("--steps", type=int, default=0, help="run the steps part with this many steps")
    parser.add_argument("--episode", type=int, default=50)
    args = parser.parse_args()
    if args.steps:
        print(json.dumps(steps(args.steps, args.episode)))
        return
    rows = chrome(args.resets)
    print("| reset (s) | wait_after_reset (s) | ready | kind |")
    print("|---|---|---|---|")
    for reset_s, wait_s, ready, kind in rows:
        print(f"| {reset_s:.2f} | {wait_s:.2f} | {ready} | {kind} |")
    print(
        f"\nmedian reset {statistics.median(r[0] for r in rows):.2f} s, "
        f"median wait_after_reset {statistics.median(r[1] for r in rows):.2f} s over {len(rows)} resets"
    )


if __name__ == "__main__":
    main()
