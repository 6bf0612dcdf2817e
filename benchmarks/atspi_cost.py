"""What AT-SPI costs a local desktop: boot time, fast-reset time and memory, with the accessibility bus and
the apps' bridges on (the default where at-spi2-core is installed) and off (``NO_AT_BRIDGE=1``, no bus).

Run: ``python benchmarks/atspi_cost.py [--rounds 5] [--app mousepad]``. Prints markdown. The two modes
alternate round by round, so both see the same machine load. Memory is the summed PSS of the sandbox's
processes with the app open (the X server not counted).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from local_desktop import pss_kib

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, sandbox

SCREEN = (1280, 720)


def _task(app: str | None) -> Task:
    steps = [{"type": "launch", "parameters": {"command": app.split()}}] if app else []
    return Task("legato-atspi-cost", "Do nothing.", {"config": steps, "evaluator": {"func": "infeasible"}})


@contextmanager
def _atspi(on: bool) -> Iterator[None]:
    if on:
        yield
        return
    with mock.patch.object(sandbox.session, "atspi_installed", lambda which=None: False):  # where the entry asks
        yield


def round_of(on: bool, app: str) -> dict[str, float]:
    """One desktop: boot (start and a first empty reset), a fast reset that opens ``app``, its memory."""
    with _atspi(on):
        start = time.monotonic()
        desktop = LocalDesktop(DesktopConfig(screen=SCREEN))
        try:
            desktop.reset(_task(None))
            boot = time.monotonic() - start
            start = time.monotonic()
            desktop.reset(_task(app))
            ready = desktop.wait_after_reset().ready
            reset = time.monotonic() - start
            assert ready, f"{app} did not show its window"
            assert desktop._processes.sandbox is not None and desktop._processes.sandbox.init_pid is not None
            pss = pss_kib([desktop._processes.sandbox.init_pid]) / 1024
        finally:
            desktop.close()
    return {"boot": boot, "reset": reset, "pss": pss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--app", default="mousepad", help="the app a fast reset opens (a command line)")
    args = parser.parse_args()
    if not sandbox.atspi_installed():
        raise SystemExit("AT-SPI is not installed here (apt-get install at-spi2-core libatk-adaptor)")
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for on in (True, False):
            results[on].append(round_of(on, args.app))
    print(f"AT-SPI cost per desktop, {args.rounds} rounds, app `{args.app}` (median):\n")
    print("| AT-SPI | boot (start + empty reset) | fast reset opening the app | sandbox PSS with the app |")
    print("|---|---|---|---|")
    for on in (True, False):
        rows = results[on]
        boot = statistics.median(r["boot"] for r in rows)
        reset = statistics.median(r["reset"] for r in rows)
        pss = statistics.median(r["pss"] for r in rows)
        print(f"| {'on' if on else 'off'} | {boot * 1000:.0f} ms | {reset * 1000:.0f} ms | {pss:.0f} MiB |")


if __name__ == "__main__":
    main()
