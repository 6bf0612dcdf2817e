"""Draw docs/local-lookalike-vs-vm.png: OSWorld's VM beside a local ``lookalike`` desktop with Files open.

    python docs/gen_lookalike_picture.py                 # rewrite docs/local-lookalike-vs-vm.png
    python docs/gen_lookalike_picture.py --out a.png     # elsewhere

Left the VM's reference screenshot (``$LEGATO_OSWORLD/../reference/osworld-vm-desktop.png`` or ``--vm``), right
what an agent sees on a fresh 1920x1080 lookalike desktop after clicking the dock's Files launcher, each at half
size with a 10 px gap. Needs what the lookalike needs (Xvfb, bubblewrap, xfwm4, Nautilus).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from PIL import Image

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions
from legato_gym.backends.local.sandbox.lookalike import layout
from legato_gym.config import OSWORLD_ENV_VAR

PICTURE = Path(__file__).resolve().parent / "local-lookalike-vs-vm.png"
SCREEN = (1920, 1080)
GAP = 10
EMPTY = Task("t-picture", "Look.", {"config": [], "evaluator": {"func": "infeasible"}})


def vm_screenshot() -> Path:
    """The VM's screenshot beside OSWorld's checkout (the developers' guide keeps it in ``reference/``)."""
    osworld = Path(os.environ.get(OSWORLD_ENV_VAR) or "/work/shared/osworld")
    return osworld.parent / "reference" / "osworld-vm-desktop.png"


def files_open(desktop: LocalDesktop, timeout: float = 30.0) -> np.ndarray:
    """Click the dock's Files launcher and return the screen once Files' window has drawn and kept still."""
    files = layout(SCREEN).launcher_centre(8)
    before = desktop.observe().screenshot
    desktop.act(f"pyautogui.click(35, {files})")
    deadline = time.monotonic() + timeout
    last = before
    while time.monotonic() < deadline:
        time.sleep(1.0)
        shot = desktop.observe().screenshot
        # the work area changed (a window) and stayed the same for a second (drawn, its icons loaded)
        if np.abs(shot[100:, 200:].astype(int) - before[100:, 200:]).sum() > 0 and np.array_equal(shot, last):
            return shot
        last = shot
    raise TimeoutError(f"Files' window did not settle within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=PICTURE)
    parser.add_argument("--vm", type=Path, default=None, help="the VM's screenshot (default: the reference one)")
    args = parser.parse_args()
    vm = Image.open(args.vm or vm_screenshot()).convert("RGB")
    with LocalDesktop(DesktopConfig(screen=SCREEN, options=LocalOptions(session="lookalike"))) as desktop:
        desktop.reset(EMPTY)
        desktop.wait_after_reset()
        ours = Image.fromarray(files_open(desktop))
    half = (SCREEN[0] // 2, SCREEN[1] // 2)
    picture = Image.new("RGB", (half[0] * 2 + GAP, half[1]), (255, 255, 255))
    picture.paste(vm.resize(half, Image.Resampling.LANCZOS), (0, 0))
    picture.paste(ours.resize(half, Image.Resampling.LANCZOS), (half[0] + GAP, 0))
    picture.save(args.out, optimize=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
