"""Do one-action keyboard solutions score 1 every time? Calc, Writer, Impress and Chrome, on a loaded machine.

Each app's task (tests/gym/app_scenarios.py) is solved by one action that moves the cursor and then types
(tests/gym/keys_scenarios.py), ``--runs`` times in a row on one desktop (so also on desktops set up ahead),
graded by desktop-env, while ``--load`` busy-loop processes (started here, killed by pid) keep the CPUs busy.
Each setting of the action runner is run in turn:

* ``before``: legato up to 2f52d08 (``pyautogui.PAUSE = 0``, no wait for the app between calls);
* ``osworld-pause``: pyautogui's own 0.1 s pause (OSWorld's semantics) and no wait for the app;
* ``default``: the pause and the wait until the focused app took each call's input (``sync_input``);
* ``fast``: ``pyautogui.PAUSE = 0`` with that wait;
* ``frames``: the default, with the ready signal after each action read by comparing frames on the host
  (``screen_watch="frames"``, as before X DAMAGE) instead of from X DAMAGE in the desktop.

Run: ``python benchmarks/keys_in_order.py [--runs 20] [--load 2] [--apps calc,writer,impress,chrome]
[--settings before,default]``. Needs desktop-env's interpreter (``legato osworld setup``) and the local
backend's apps. Prints a markdown table: right solutions that scored 1, per app and setting.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "before": {"pyautogui_pause": 0.0, "sync_input": False},
    "osworld-pause": {"pyautogui_pause": None, "sync_input": False},
    "default": {},
    "fast": {"pyautogui_pause": 0.0},
    "frames": {"screen_watch": "frames"},
}


def _busy_loops(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes running meanwhile")
    parser.add_argument("--apps", default="calc,writer,impress,chrome")
    parser.add_argument("--settings", default="before,default")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "gym"))
    from osworld_kit import desktop_env_python

    python = desktop_env_python()
    apps = args.apps.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.settings.split(","):
            payload = {
                "cache": str(Path(tmp, "cache")),
                "files": str(Path(tmp, "files")),
                "apps": apps,
                "runs": args.runs,
                "options": SETTINGS[setting],
            }
            loops = _busy_loops(args.load)
            start = time.monotonic()
            try:
                env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
                proc = subprocess.run(
                    [python, str(ROOT / "tests" / "gym" / "keys_scenarios.py"), json.dumps(payload)],
                    capture_output=True, text=True, env=env, check=False,
                )  # fmt: skip
            finally:
                for loop in loops:
                    os.kill(loop.pid, signal.SIGKILL)
                    loop.wait()
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode or not lines:
                raise SystemExit(f"keys_scenarios.py failed ({setting}):\n{proc.stderr[-3000:]}")
            result = json.loads(lines[-1])
            cells = []
            for app in apps:
                scores = [run["score"] for run in result[app]]
                wrong = [run["saved"] for run in result[app] if run["score"] != 1.0][:2]
                cells.append(f"{scores.count(1.0)}/{len(scores)}")
                if wrong:
                    print(f"{setting} {app} scored 0 with: {json.dumps(wrong)[:300]}", file=sys.stderr)
            rows.append((setting, cells, time.monotonic() - start))
    print(f"| setting ({args.load} busy loops, {os.cpu_count()} CPUs) | {' | '.join(apps)} | minutes |")
    print("|---|" + "---|" * len(apps) + "---|")
    for setting, cells, seconds in rows:
        print(f"| {setting} | {' | '.join(cells)} | {seconds / 60:.1f} |")


if __name__ == "__main__":
    main()
