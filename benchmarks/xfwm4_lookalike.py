"""xfwm4 instead of openbox under the lookalike session: how near its title bars come to mutter's, and its cost.

How the lookalike session's xfwm4 (:mod:`legato_gym.backends.local.sandbox.xfwm`) compares with mutter. openbox 3.6
draws a title button as a rectangle with a one-colour mask and always an even title height, so the lookalike's
buttons are squares, an own-size window has a 1 px row under its client and its top corners are square. xfwm4
(Debian's 4.18) draws each part of the frame from a full-colour picture (a shaped one for the corners), so a
theme drawn here (:func:`write_theme`) can be Yaru's under mutter: a 37 px bar with its top highlight and
bottom line, 22 px discs where mutter puts them, no border and no bottom row, rounded top corners.

Run: ``python benchmarks/xfwm4_lookalike.py [--idle 60] [--theme DIR] [--picture PNG]``. It starts, each on a
private Xvfb of its own (1920x1080), mutter 43 with Yaru's GTK theme (Debian's yaru-theme-gtk, Ubuntu's button
layout, the VM's title font Ubuntu Bold 11 and GTK settings where legato's fonts and xsettingsd are installed, as in
the sandbox), xfwm4 with this theme drawn in the same Yaru's colours, and openbox with the lookalike's rc; an xterm
in each. It prints markdown: the title bar's pixels against mutter's (own size, maximized, hovered, pressed,
unfocused), the frame of a maximized window beside a dock window whose struts are the VM's top bar and dock, whether
a ``_NET_WM_STATE`` set before the window is mapped opens it maximized, and xfwm4's (and xfconfd's, which xfwm4
takes its settings from) PSS and idle CPU beside openbox's, with ``GDK_GL=disable`` and without (GTK's start-up
otherwise probes GLX and maps Mesa's llvmpipe into xfwm4). ``--theme DIR`` also writes the theme in the VM's colours
(legato's ``TITLE_BAR_COLOURS``) into ``DIR``; ``--picture PNG`` draws mutter's bar above xfwm4's, at its own size
and with the close button hovered. Every process it starts it ends, by its process group. Needs: Xvfb, xterm, xfwm4
(``apt-get install --no-install-recommends xfwm4``), mutter, yaru-theme-gtk, dbus-daemon, openbox.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from PIL import Image
from Xlib import X, Xatom, display, protocol  # type: ignore[import-untyped]
from Xlib.ext import xtest  # type: ignore[import-untyped]

from benchmarks.local_desktop import pss_kib
from legato_gym.backends.local.sandbox import fonts, lookalike, shell
from legato_gym.backends.local.sandbox.files import OPENBOX_RC
from legato_gym.backends.local.sandbox.xfwm import (
    BAR,
    BUTTON_OFFSET,
    BUTTON_SPACING,
    CORNER,
    DISC,
    DISC_TOP,
    VM,
    Colours,
    settings_channel,
    write_theme,
)
from legato_gym.backends.local.waits import cpu_ticks

SCREEN = (1920, 1080)
#: Debian's Yaru 22.10 under mutter 43, measured here on mutter's own frames (to compare pixel for pixel).
MUTTER = Colours(235, 251, 189, 218, 209, 191, 61, 250, 254, 209, 99, "#3d3d3d", "#636363")


# ---------------------------------------------------------------------------------------------- the runs


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something true, or raise naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = condition()
            if value:
                return value
        time.sleep(0.05)
    raise TimeoutError(f"{what}: not within {timeout:g} s")


class Group:
    """Processes started in one new process group, all ended (by that group) on exit."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.leader: subprocess.Popen[bytes] | None = None
        self.pids: list[int] = []

    def start(self, *argv: str, env: dict[str, str] | None = None) -> int:
        group = 0 if self.leader is None else self.leader.pid
        proc = subprocess.Popen(
            argv,
            env={**self.env, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.setpgid(0, group),
        )
        self.leader = self.leader or proc
        self.pids.append(proc.pid)
        return proc.pid

    def stop(self) -> None:
        if self.leader is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.leader.pid, signal.SIGTERM)
            self.leader.wait(timeout=10)


@contextlib.contextmanager
def desktop(root: Path, name: str) -> Iterator[tuple[display.Display, Group]]:
    """A private 1920x1080 Xvfb with its own session bus and home under ``root / name``."""
    home = root / name
    (home / "run").mkdir(parents=True, mode=0o700)
    read, write = os.pipe()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={home / 'bus'}",
        "NO_AT_BRIDGE": "1",
        "LANG": "C.UTF-8",
    }
    conf = fonts.fontconfig_conf()
    if conf is not None:  # the VM's title font, Ubuntu Bold 11, for both window managers (as in the sandbox)
        (home / "fonts.conf").write_text(conf)
        env["FONTCONFIG_FILE"] = str(home / "fonts.conf")
    group = Group(env)
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            env["DISPLAY"] = f":{pipe.readline().strip()}"
        group.start("dbus-daemon", "--session", f"--address={env['DBUS_SESSION_BUS_ADDRESS']}", "--nofork")
        wait_for(lambda: (home / "bus").exists(), 10, "the session bus")
        if fonts.xsettingsd_installed():  # the VM's GTK settings (96 dpi, hinting, subpixel), as gsd-xsettings there
            (home / "xsettingsd.conf").write_text(fonts.xsettings_conf())
            group.start("xsettingsd", "-c", str(home / "xsettingsd.conf"))
        d = display.Display(env["DISPLAY"])
        try:
            yield d, group
        finally:
            d.close()
    finally:
        group.stop()
        xvfb.terminate()
        xvfb.wait(timeout=10)


def find(d: display.Display, title: str) -> Any:
    def walk(window: Any) -> Any:
        for child in window.query_tree().children:
            if child.get_wm_name() == title:
                return child
            found = walk(child)
            if found is not None:
                return found
        return None

    return walk(d.screen().root)


def frame_of(d: display.Display, client: Any) -> tuple[int, int, int, int]:
    """``(x, y, width, height)`` of the window manager's frame around ``client``."""
    root, window = d.screen().root, client
    while (parent := window.query_tree().parent) != root:
        window = parent
    at = window.translate_coords(root, 0, 0)
    geometry = window.get_geometry()
    return -at.x, -at.y, geometry.width, geometry.height


def bar_pixels(d: display.Display, client: Any) -> Any:
    """The title bar's grey values: the 37 rows above the client, over the client's columns."""
    at = client.translate_coords(d.screen().root, 0, 0)
    width = client.get_geometry().width
    raw = d.screen().root.get_image(-at.x, -at.y - BAR, width, BAR, X.ZPixmap, 0xFFFFFFFF)
    return np.array(Image.frombytes("RGB", (width, BAR), raw.data, "raw", "BGRX"))[..., 1].astype(int)


def set_maximized(d: display.Display, client: Any, on: bool) -> None:
    atom = d.intern_atom
    data = [1 if on else 0, atom("_NET_WM_STATE_MAXIMIZED_VERT"), atom("_NET_WM_STATE_MAXIMIZED_HORZ"), 1, 0]
    event = protocol.event.ClientMessage(window=client, client_type=atom("_NET_WM_STATE"), data=(32, data))
    d.screen().root.send_event(event, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
    d.flush()


def settled(d: display.Display, client: Any) -> Callable[[], Any]:
    """A condition: the title bar is drawn (light, as Yaru's bars are) and the same twice 0.2 s apart."""

    def check() -> Any:
        first = bar_pixels(d, client)
        time.sleep(0.2)
        return first[BAR // 2, CORNER + 4] > 200 and (first == bar_pixels(d, client)).all()

    return check


def xterm(d: display.Display, group: Group, title: str, geometry: str) -> Any:
    group.start("xterm", "-T", title, "-geometry", geometry)
    client = wait_for(lambda: find(d, title), 15, f"xterm {title!r}")
    wait_for(lambda: frame_of(d, client)[3] > client.get_geometry().height, 15, f"{title!r} framed")
    wait_for(lambda: active(d) == client.id, 15, f"{title!r} focused")
    wait_for(settled(d, client), 15, f"{title!r} drawn")
    return client


def active(d: display.Display) -> int:
    value = d.screen().root.get_full_property(d.intern_atom("_NET_ACTIVE_WINDOW"), X.AnyPropertyType)
    return int(value.value[0]) if value is not None else 0


def struts(d: display.Display) -> None:
    """The VM's top bar and dock reserved as GNOME Shell reserves them (``_NET_WM_STRUT_PARTIAL``), by one 1x1
    input-only dock window: invisible, and under the lookalike's own (override-redirect) bar it would take no click.
    """
    screen, atom = d.screen(), d.intern_atom
    width, height = SCREEN
    top, left = lookalike.BAR_HEIGHT, lookalike.DOCK_WIDTH
    window = screen.root.create_window(0, 0, 1, 1, 0, 0, window_class=X.InputOnly, visual=X.CopyFromParent)
    window.change_property(atom("_NET_WM_WINDOW_TYPE"), Xatom.ATOM, 32, [atom("_NET_WM_WINDOW_TYPE_DOCK")])
    strut = [left, 0, top, 0, top, height - 1, 0, 0, 0, width - 1, 0, 0]
    window.change_property(atom("_NET_WM_STRUT_PARTIAL"), Xatom.CARDINAL, 32, strut)
    window.map()
    d.flush()


def mapped_maximized(d: display.Display) -> tuple[int, int, int, int]:
    """The frame of a window whose ``_NET_WM_STATE`` says maximized before it is mapped."""
    screen, atom = d.screen(), d.intern_atom
    window = screen.root.create_window(200, 200, 400, 300, 0, screen.root_depth, background_pixel=screen.white_pixel)
    window.set_wm_class("premap", "Premap")
    window.set_wm_name("premap")
    states = [atom("_NET_WM_STATE_MAXIMIZED_VERT"), atom("_NET_WM_STATE_MAXIMIZED_HORZ")]
    window.change_property(atom("_NET_WM_STATE"), Xatom.ATOM, 32, states)
    window.map()
    d.flush()
    wait_for(lambda: frame_of(d, window)[2] > 400, 10, "the pre-mapped window maximized")
    return frame_of(d, window)


@dataclass
class Bars:
    """Title bar pixels of one window manager's xterm: own size, maximized, hovered, pressed, unfocused."""

    own: Any
    maximized: Any
    hovered: Any
    pressed: Any
    unfocused: Any
    maximized_frame: tuple[int, int, int, int] = (0, 0, 0, 0)
    premapped_frame: tuple[int, int, int, int] = (0, 0, 0, 0)
    extents: tuple[int, ...] = ()


def shoot(d: display.Display, group: Group, with_struts: bool) -> Bars:
    if with_struts:
        struts(d)
    client = xterm(d, group, "Terminal", "80x24+300+200")
    own = bar_pixels(d, client)
    extents = tuple(client.get_full_property(d.intern_atom("_NET_FRAME_EXTENTS"), X.AnyPropertyType).value)
    x, y, width, _ = frame_of(d, client)
    close = (x + width - BUTTON_OFFSET - DISC // 2, y + DISC_TOP + DISC // 2)
    xtest.fake_input(d, X.MotionNotify, x=close[0], y=close[1])
    d.flush()
    wait_for(lambda: (bar_pixels(d, client) != own).any(), 5, "the close button hovered")
    hovered = bar_pixels(d, client)
    xtest.fake_input(d, X.ButtonPress, 1)
    d.flush()
    wait_for(lambda: (bar_pixels(d, client) != hovered).any(), 5, "the close button pressed")
    pressed = bar_pixels(d, client)
    xtest.fake_input(d, X.MotionNotify, x=1000, y=1000)  # released off the button: nothing is clicked
    xtest.fake_input(d, X.ButtonRelease, 1)
    d.flush()
    wait_for(settled(d, client), 10, "the close button released")
    set_maximized(d, client, True)
    wait_for(lambda: frame_of(d, client)[2] > width, 10, "maximized")
    wait_for(settled(d, client), 10, "maximized and drawn")
    maximized, maximized_frame = bar_pixels(d, client), frame_of(d, client)
    set_maximized(d, client, False)
    wait_for(lambda: frame_of(d, client)[2] == width, 10, "restored")
    xterm(d, group, "Other", "40x10+1200+600")
    wait_for(lambda: (bar_pixels(d, client) != own).any(), 5, "the first xterm unfocused")
    wait_for(settled(d, client), 10, "unfocused and drawn")
    bars = Bars(own, maximized, hovered, pressed, bar_pixels(d, client), maximized_frame, extents=extents)
    if with_struts:
        bars.premapped_frame = mapped_maximized(d)
    return bars


def mutter(root: Path) -> Bars:
    name, size, weight = lookalike.TITLE_FONT
    config = root / "mutter" / "config"
    (config / "gtk-3.0").mkdir(parents=True)
    (config / "gtk-3.0" / "settings.ini").write_text("[Settings]\ngtk-theme-name=Yaru\ngtk-icon-theme-name=Yaru\n")
    (config / "glib-2.0" / "settings").mkdir(parents=True)
    (config / "glib-2.0" / "settings" / "keyfile").write_text(
        "[org/gnome/desktop/wm/preferences]\nbutton-layout=':minimize,maximize,close'\n"
        f"titlebar-font='{name} {weight} {size}'\n\n"
        "[org/gnome/desktop/interface]\ngtk-theme='Yaru'\n"
    )
    with desktop(root, "mutter") as (d, group):
        group.env["GSETTINGS_BACKEND"] = "keyfile"
        group.start("mutter", "--x11", "--replace", "--sm-disable")
        wait_for(lambda: wm_running(d), 30, "mutter")
        return shoot(d, group, with_struts=False)


def wm_running(d: display.Display) -> bool:
    value = d.screen().root.get_full_property(d.intern_atom("_NET_SUPPORTING_WM_CHECK"), X.AnyPropertyType)
    return value is not None


@dataclass(frozen=True)
class Cost:
    pss_mib: float
    cpu_percent: float
    parts: str


def _rollup(pid: int) -> dict[str, int]:
    rows = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    return {row.split()[0].rstrip(":"): int(row.split()[1]) for row in rows}


def idle_cost(pids: list[int], idle: float) -> Cost:
    before = cpu_ticks(pids)
    time.sleep(idle)  # the measurement's window, not a wait for a condition
    ticks = cpu_ticks(pids) - before
    parts = []
    for pid in pids:
        rollup = _rollup(pid)
        own = (rollup["Private_Clean"] + rollup["Private_Dirty"]) / 1024
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        parts.append(f"{name}: PSS {rollup['Pss'] / 1024:.1f}, RSS {rollup['Rss'] / 1024:.1f}, private {own:.1f}")
    return Cost(pss_kib(pids) / 1024, 100 * ticks / os.sysconf("SC_CLK_TCK") / idle, "; ".join(parts))


def xfwm4(root: Path, idle: float, with_gl: bool = False) -> tuple[Bars, Cost]:
    name = "xfwm4-gl" if with_gl else "xfwm4"
    theme = root / name / "theme"
    write_theme(theme, MUTTER)
    channel = root / name / "config" / "xfce4" / "xfconf" / "xfce-perchannel-xml"
    channel.mkdir(parents=True)
    work_area = lookalike.layout(SCREEN).work_area
    (channel / "xfwm4.xml").write_text(settings_channel(str(theme), lookalike.TITLE_FONT, work_area))
    with desktop(root, name) as (d, group):
        # GDK_GL=disable: GTK's start-up otherwise probes GLX for its visuals and maps Mesa's llvmpipe (+56 MiB RSS)
        gl = {} if with_gl else {"GDK_GL": "disable"}
        wm = group.start("xfwm4", "--compositor=off", "--sm-client-disable", env=gl)
        wait_for(lambda: wm_running(d), 30, "xfwm4")
        bars = shoot(d, group, with_struts=True)
        xfconfd = [p for p in _group_pids(group) if Path(f"/proc/{p}/comm").read_text().strip() == "xfconfd"]
        return bars, idle_cost([wm, *xfconfd], idle)


def _group_pids(group: Group) -> list[int]:
    assert group.leader is not None
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[2]) == group.leader.pid:
                    pids.append(int(entry.name))
    return pids


def openbox(root: Path, idle: float) -> tuple[tuple[int, ...], Cost]:
    rc = OPENBOX_RC.replace("{applications}", shell.openbox_applications())
    rc = rc.replace("{margins}", lookalike.lookalike_margins()).replace("{keybinds}", "")
    rc = rc.replace(
        "{theme}", lookalike.lookalike_theme().replace(f"{lookalike.LOOKALIKE_DIR}/theme", str(lookalike.THEME_DIR))
    )
    (root / "openbox.xml").write_text(rc)
    with desktop(root, "openbox") as (d, group):
        wm = group.start("openbox", "--config-file", str(root / "openbox.xml"))
        wait_for(lambda: wm_running(d), 30, "openbox")
        client = xterm(d, group, "Terminal", "80x24+300+200")
        extents = tuple(client.get_full_property(d.intern_atom("_NET_FRAME_EXTENTS"), X.AnyPropertyType).value)
        return extents, idle_cost([wm], idle)


# ---------------------------------------------------------------------------------------------- the report


def compare(ours: Any, theirs: Any, columns: slice = slice(None)) -> str:
    diff = np.abs(ours[:, columns] - theirs[:, columns])
    return f"{int((diff > 0).sum())} differ, {int((diff > 8).sum())} by more than 8, max {int(diff.max())}"


def corners(ours: Any, theirs: Any) -> str:
    """How many pixels of the two 14 x 14 top corners are inside one frame's shape and not the other's, and how
    far the pixels inside both differ (mutter's edge is anti-aliased over what lies behind, xfwm4's is 1 bit)."""
    disagree, worse = 0, 0
    for cols in (slice(0, 14), slice(-14, None)):
        a, b = ours[:14, cols], theirs[:14, cols]
        inside_a, inside_b = a > 128, b > 128
        disagree += int((inside_a != inside_b).sum())
        worse += int((np.abs(a - b)[inside_a & inside_b] > 8).sum())
    return f"{disagree} pixels in one shape only; inside both, {worse} differ by more than 8"


def title_text(pixels: Any, width: int) -> str:
    dark = pixels[:, CORNER : width - 4 * DISC - 2 * BUTTON_SPACING - BUTTON_OFFSET] < 180
    ys, xs = np.nonzero(dark)
    return f"rows {ys.min()}-{ys.max()}, columns {xs.min() + CORNER}-{xs.max() + CORNER}"


def draw(path: Path, bars: list[Any], gap: int = 6, zoom: int = 2) -> None:
    """Write ``bars`` (grey title bars of one width) one under another, ``zoom`` times, on white, as a PNG."""
    rows = []
    for bar in bars:
        rows += [np.asarray(bar, dtype=np.uint8), np.full((gap, bar.shape[1]), 255, np.uint8)]
    picture = np.concatenate(rows[:-1]).repeat(zoom, axis=0).repeat(zoom, axis=1)
    Image.fromarray(picture, "L").save(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU measured per window manager")
    parser.add_argument("--theme", type=Path, help="also write the theme in the VM's colours into this folder")
    parser.add_argument("--picture", type=Path, help="also draw mutter's bar above xfwm4's (own size, then hovered)")
    args = parser.parse_args()
    if args.theme:
        write_theme(args.theme, VM)
    with tempfile.TemporaryDirectory(prefix="xfwm4-lookalike-") as folder:
        root = Path(folder)
        ref = mutter(root)
        ours, xfwm4_cost = xfwm4(root, args.idle)
        _, gl_cost = xfwm4(root, args.idle, with_gl=True)
        openbox_extents, openbox_cost = openbox(root, args.idle)
    if args.picture:
        draw(args.picture, [ref.own, ours.own, ref.hovered, ours.hovered])
    width = ref.own.shape[1]
    buttons = slice(width - 4 * DISC - 2 * BUTTON_SPACING - BUTTON_OFFSET, width - CORNER)
    print("| xfwm4 + theme vs mutter 43 (Yaru 22.10 colours), 484 px xterm | pixels |")
    print("|---|---|")
    print(f"| frame extents (mutter / xfwm4 / openbox) | {ref.extents} / {ours.extents} / {openbox_extents} |")
    print(f"| own size: buttons ({buttons.stop - buttons.start} x {BAR}) | {compare(ours.own, ref.own, buttons)} |")
    print(f"| own size: top corners | {corners(ours.own, ref.own)} |")
    print(f"| own size: title text mutter / xfwm4 | {title_text(ref.own, width)} / {title_text(ours.own, width)} |")
    print(f"| own size: whole bar | {compare(ours.own, ref.own)} |")
    print(f"| hovered close: buttons | {compare(ours.hovered, ref.hovered, buttons)} |")
    print(f"| pressed close: buttons | {compare(ours.pressed, ref.pressed, buttons)} |")
    print(f"| unfocused: buttons | {compare(ours.unfocused, ref.unfocused, buttons)} |")
    last = slice(-(4 * DISC + 2 * BUTTON_SPACING + BUTTON_OFFSET), -CORNER)
    print(
        f"| maximized: buttons (bar's last 110 columns) | {compare(ours.maximized[:, last], ref.maximized[:, last])} |"
    )
    print(f"| maximized frame beside the VM's struts (x, y, w, h) | {ours.maximized_frame} |")
    print(f"| frame of a window mapped with _NET_WM_STATE maximized | {ours.premapped_frame} |")
    print()
    print("| window manager | PSS (MiB) | idle CPU (% of a core) | by process (MiB) |")
    print("|---|---|---|---|")
    for name, cost in (
        ("xfwm4 --compositor=off, GDK_GL=disable + xfconfd", xfwm4_cost),
        ("xfwm4 --compositor=off + xfconfd (GTK probes GLX)", gl_cost),
        ("openbox (the lookalike's rc)", openbox_cost),
    ):
        print(f"| {name} | {cost.pss_mib:.1f} | {cost.cpu_percent:.3f} | {cost.parts} |")


if __name__ == "__main__":
    main()
