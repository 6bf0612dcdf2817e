"""Is the first window after a reset focused? The lookalike desktop, reset and an xterm launched, many times.

A window opened at once after a reset (or after the agent killed the window manager, which the session starts
again) must get the focus, as mutter gives it on the VM: the app's name on the top bar, its title bar lit, the
keys typed into it. xfwm4 focuses a new window at the time of the last event it read, and its own window at the
server's time as it starts; until the panel gave it a later time before the desktop is ready, 10 of 200 such
windows stayed unfocused (docs/backends.md). ``--watch`` records, with X's RECORD extension, every
``SetInputFocus`` request and the focus events, and prints the last ones before each unfocused window: where the
times of the window manager's focus requests show which the X server dropped. (Watching loads the X server:
unfocused windows were more frequent with it.)

Run: ``python benchmarks/first_focus.py [--tries 200] [--restart-every 4] [--watch]``. Needs the local backend
(``pip install -e '.[local]'`` and its Debian packages). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SET_INPUT_FOCUS = 42  # the core request's opcode
FOCUS_IN, FOCUS_OUT = 9, 10


class FocusWatch:
    """The last ``size`` focus requests and events on a display, from X's RECORD extension."""

    def __init__(self, display_name: str, size: int = 40) -> None:
        from Xlib.ext import record  # type: ignore[import-untyped]
        from Xlib.protocol import rq  # type: ignore[import-untyped]

        from legato_gym.backends.local.xstate import open_display

        self.seen: collections.deque[str] = collections.deque(maxlen=size)
        self._control, self._data = open_display(display_name), open_display(display_name)
        ranges = {
            "core_requests": (SET_INPUT_FOCUS, SET_INPUT_FOCUS), "core_replies": (0, 0),
            "ext_requests": (0, 0, 0, 0), "ext_replies": (0, 0, 0, 0), "delivered_events": (FOCUS_IN, FOCUS_OUT),
            "device_events": (0, 0), "errors": (0, 0), "client_started": False, "client_died": False,
        }  # fmt: skip
        context = self._control.record_create_context(0, [record.AllClients], [ranges])
        self._control.sync()
        start = time.monotonic()

        def heard(reply: Any) -> None:
            at = f"{time.monotonic() - start:9.3f} s"
            if reply.category == record.FromClient:
                _, _, _, window, when = struct.unpack("<BBHII", reply.data[:12])
                said = "CurrentTime" if when == 0 else f"{when} ms"
                self.seen.append(f"{at} client {reply.id_base:#x} SetInputFocus({window:#x}, {said})")
            elif reply.category == record.FromServer:
                data = reply.data
                while data:
                    event, data = rq.EventField(None).parse_binary_value(data, self._data.display, None, None)
                    self.seen.append(f"{at} {type(event).__name__} {event.window.id:#x} detail {event.detail}")

        def serve() -> None:
            with contextlib.suppress(Exception):  # the X server ends with the desktop, and the recording with it
                self._data.record_enable_context(context, heard)

        threading.Thread(target=serve, daemon=True).start()

    def mark(self, what: str) -> None:
        self.seen.append(f"-- {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tries", type=int, default=200)
    parser.add_argument("--restart-every", type=int, default=4, help="every Nth try kills the window manager first")
    parser.add_argument("--watch", action="store_true", help="record focus requests and events (RECORD)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "gym"))
    from desktop_kit import active_window, wait_for

    from legato_gym import DesktopConfig
    from legato_gym.backends.local.desktop import LocalDesktop
    from legato_gym.backends.local.options import LocalOptions
    from legato_gym.tasks import Task

    empty = Task("first-focus", "Look.", {"config": [], "evaluator": {"func": "infeasible"}})
    counts = {"after a reset": [0, 0], "after the window manager restarted": [0, 0]}
    options = LocalOptions(session="lookalike", prestart=False)
    with LocalDesktop(DesktopConfig(screen=(1920, 1080), options=options)) as desktop:
        desktop.reset(empty)
        watch = FocusWatch(desktop.display.name) if args.watch else None
        for i in range(args.tries):
            restart = args.restart_every > 0 and i % args.restart_every == args.restart_every - 1
            desktop.reset(empty)
            if restart:  # as an agent may: the session starts it again
                desktop.act("import subprocess; subprocess.run(['pkill', '-x', 'xfwm4'])")
                time.sleep(0.3)
            if watch is not None:
                watch.mark(f"try {i}: xterm launched")
            desktop.client.post_json("/setup/launch", {"command": ["xterm", "-T", f"first-{i}"]})
            focused = wait_for(lambda: active_window(desktop) != 0, 10)
            row = counts["after the window manager restarted" if restart else "after a reset"]
            row[0] += 1
            row[1] += 0 if focused else 1
            if not focused and watch is not None:
                print(f"try {i}: not focused; the last focus requests and events:", *watch.seen, sep="\n  ")
    print("| first window | tries | unfocused |\n|---|---|---|")
    for name, (tries, unfocused) in counts.items():
        print(f"| {name} | {tries} | {unfocused} |")


if __name__ == "__main__":
    sys.exit(main())
