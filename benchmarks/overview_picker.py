"""The lookalike's window picker: Super to drawn, and what it costs the panel (memory, idle CPU).

Run: ``python benchmarks/overview_picker.py [--windows 0,1,3] [--rounds 10] [--idle 20]``. Prints markdown.
One 1920x1080 lookalike desktop (started ahead off) with 0, 1 or 3 xterms open; each round presses Super
through XTEST on the desktop's X server and polls one pixel left of the search entry (the overview's grey) and
one in the middle of each window's preview until all are drawn, then Escape and a wait for the desktop again.
The panel's PSS is read before the first round and after the last (the previews are freed at close), its CPU
(utime + stime) over ``--idle`` seconds with the picker closed and then open.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.local_desktop import descendants, stats
from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions
from legato_gym.backends.local.sandbox.lookalike import PICKER_COLOUR, PICKER_SPACING, picker_area, picker_card
from legato_gym.backends.local.sandbox.panel import picker_slots
from legato_gym.backends.local.waits import cpu_ticks
from legato_gym.backends.local.xstate import open_display

EMPTY = Task("bench-picker", "Nothing.", {"config": [], "evaluator": {"func": "infeasible"}})
SCREEN = (1920, 1080)
GEOMETRIES = ("100x30+100+80", "70x20+1100+600", "60x15+900+150")


def panel_pid(desktop: LocalDesktop) -> int:
    """The panel's python process (not the sandbox's processes that name it in their command lines)."""
    for pid in descendants(desktop.pids):
        try:
            named = b"panel.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
            if named and Path(f"/proc/{pid}/comm").read_text().startswith("python"):
                return pid
        except OSError:
            continue
    raise SystemExit("no panel process: is the session the lookalike?")


def own_pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def frames(display: object) -> list[tuple[int, int, int, int]]:
    """Each managed window's frame, oldest first (the order the picker lays them out in)."""
    from Xlib import X

    root = display.screen().root  # type: ignore[attr-defined]
    clients = root.get_full_property(display.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)  # type: ignore[attr-defined]
    found = []
    for wid in clients.value if clients is not None else []:
        window = display.create_resource_object("window", wid)  # type: ignore[attr-defined]
        top = window
        while top.query_tree().parent.id != root.id:
            top = top.query_tree().parent
        g = top.get_geometry()
        found.append((g.x, g.y, g.width, g.height))
    return found


def pixel(display: object, x: int, y: int) -> tuple[int, int, int]:
    from Xlib import X

    data = display.screen().root.get_image(x, y, 1, 1, X.ZPixmap, 0xFFFFFFFF).data  # type: ignore[attr-defined]
    return data[2], data[1], data[0]


def super_to_drawn(display: object, spots: list[tuple[int, int, tuple[int, int, int]]], key: int) -> float:
    """Seconds from Super's release (sent through XTEST) until every spot shows its colour (within 40)."""
    from Xlib import X
    from Xlib.ext import xtest

    xtest.fake_input(display, X.KeyPress, key)
    xtest.fake_input(display, X.KeyRelease, key)
    display.sync()  # type: ignore[attr-defined]
    began = time.perf_counter()
    deadline = began + 30
    while time.perf_counter() < deadline:
        if all(sum(abs(a - b) for a, b in zip(pixel(display, x, y), c, strict=True)) <= 40 for x, y, c in spots):
            return time.perf_counter() - began
        time.sleep(0.002)
    raise SystemExit(f"the picker was not drawn within 30 s: {spots}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="0,1,3")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--idle", type=float, default=20)
    args = parser.parse_args()
    from Xlib import XK

    options = LocalOptions(session="lookalike", prestart=False)
    rows = []
    with LocalDesktop(DesktopConfig(screen=SCREEN, options=options)) as desktop:
        display = open_display(desktop.display.name)
        super_key = display.keysym_to_keycode(XK.XK_Super_L)
        escape = display.keysym_to_keycode(XK.XK_Escape)
        card_y = picker_card(SCREEN)[1]
        grey = (100, 27 + card_y - 20)
        for count in (int(n) for n in args.windows.split(",")):
            desktop.reset(EMPTY)
            desktop.wait_after_reset()
            for geometry in GEOMETRIES[:count]:
                desktop.client.post_json("/setup/launch", {"command": ["xterm", "-bg", "red", "-geometry", geometry]})
            deadline = time.monotonic() + 30
            while len(frames(display)) < count and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1)
            ax, ay, aw, ah = picker_area(SCREEN)
            slots = picker_slots(
                frames(display), (SCREEN[0] - 70, SCREEN[1] - 27), (ax, ay, aw, ah), SCREEN[1], PICKER_SPACING
            )
            spots = [(grey[0], grey[1], PICKER_COLOUR)]
            spots += [(70 + round(x + w / 2), 27 + round(y + h * 0.6), (255, 0, 0)) for x, y, w, h in slots]
            pid = panel_pid(desktop)
            pss_before = own_pss_kib(pid)
            times = []
            for _ in range(args.rounds):
                times.append(super_to_drawn(display, spots, super_key))
                from Xlib import X
                from Xlib.ext import xtest

                xtest.fake_input(display, X.KeyPress, escape)
                xtest.fake_input(display, X.KeyRelease, escape)
                display.sync()
                while pixel(display, *grey) == PICKER_COLOUR:
                    time.sleep(0.01)
                time.sleep(0.2)
            pss_after = own_pss_kib(pid)
            ticks = cpu_ticks([pid])
            time.sleep(args.idle)
            idle = (cpu_ticks([pid]) - ticks) / os.sysconf("SC_CLK_TCK") / args.idle * 100
            super_to_drawn(display, spots, super_key)
            pss_open = own_pss_kib(pid)
            ticks = cpu_ticks([pid])
            time.sleep(args.idle)
            idle_open = (cpu_ticks([pid]) - ticks) / os.sysconf("SC_CLK_TCK") / args.idle * 100
            rows.append((count, times, pss_before, pss_open, pss_after, idle, idle_open))
        display.close()
    print("| windows | Super to drawn (median of rounds) | panel PSS before / open / after | idle CPU, closed / open |")
    print("|---|---|---|---|")
    for count, times, before, opened, after, idle, idle_open in rows:
        print(
            f"| {count} | {stats(times)} | {before / 1024:.1f} / {opened / 1024:.1f} / {after / 1024:.1f} MiB | "
            f"{idle:.2f} % / {idle_open:.2f} % of a core |"
        )


if __name__ == "__main__":
    main()
