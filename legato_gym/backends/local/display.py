"""One X display on this host: Xvfb with a framebuffer file and a socket folder of its own.

The X server lives outside the sandbox (the window manager and the apps are inside): the apps reach it
only through its socket file, bind-mounted into their sandbox. legato reads the screen from the
framebuffer file that ``Xvfb -fbdir`` memory-maps (no X client library, no copy through the X protocol).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from legato_gym.backends.local.sandbox import drop_to, joined_cgroup
from legato_gym.desktop_server.image import read_xwd_header
from legato_gym.desktop_server.pointer import paste_pointer, read_pointer
from legato_gym.errors import DeadlineExceeded, DesktopCrashed, MissingDependencyError

__all__ = ["Display", "WindowInfo", "require_tools"]

logger = logging.getLogger(__name__)

_POLL_S = 0.005


def require_tools(names: Sequence[str]) -> None:
    """Raise :class:`MissingDependencyError` naming the Debian packages when a tool is missing."""
    packages = {
        "Xvfb": "xvfb",
        "openbox": "openbox",
        "bwrap": "bubblewrap",
        "wmctrl": "wmctrl",
        "xdotool": "xdotool",
        "setpriv": "util-linux",
        "xterm": "xterm",
    }
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        debs = " ".join(sorted({packages.get(name, name) for name in missing}))
        raise MissingDependencyError(
            f"the local backend needs {', '.join(missing)} on PATH; install them with "
            f"`apt-get install -y --no-install-recommends {debs}`"
        )


#: :meth:`Display.painted`: the share of a window's pixels, off its commonest colour, that counts as drawn.
PAINTED_FRACTION = 0.02


class WindowInfo(tuple[str, str, str]):
    """``(window id, WM_CLASS, title)`` of one managed window."""

    @property
    def wid(self) -> str:
        return self[0]

    @property
    def wm_class(self) -> str:
        return self[1]

    @property
    def title(self) -> str:
        return self[2]


class Display:
    """An Xvfb display, started by :meth:`start` and ended by :meth:`stop`.

    The X server keeps its socket in a folder of this display's own (bound over ``/tmp/.X11-unix`` in a
    mount namespace of its own), so desktops never share, replace or delete each other's sockets, whatever
    display numbers they get. Host-side clients (``wmctrl``) reach it through its abstract socket, which
    sandboxes, in network namespaces of their own, cannot see. When legato is root the X server and those
    clients run as the desktop's unprivileged uid. The window manager runs inside the sandbox.

    Args:
        state_dir: a private directory for this display (framebuffer file, socket folder).
        screen: ``(width, height)``.
        uid: unprivileged host uid to run the X server and host-side clients as (``None``: don't switch).
        cgroup_procs: ``cgroup.procs`` files the X server joins (its memory counts against the desktop's).
    """

    def __init__(
        self,
        state_dir: Path,
        screen: tuple[int, int],
        uid: int | None = None,
        cgroup_procs: list[Path] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.screen = screen
        self.uid = uid
        self.cgroup_procs = list(cgroup_procs or [])
        self.number: int | None = None
        self._xvfb: subprocess.Popen[bytes] | None = None
        self._fb_path = state_dir / "fb" / "Xvfb_screen0"
        self._socket_dir = state_dir / "x11"
        self._fb_view: npt.NDArray[np.uint8] | None = None
        #: Paste the pointer into :meth:`screenshot` as OSWorld's server does (``LocalOptions.pointer``).
        self.pointer = True

    # ------------------------------------------------------------------ lifecycle
    @property
    def name(self) -> str:
        """``:N``, the value of ``DISPLAY``."""
        if self.number is None:
            raise DesktopCrashed("the display is not running")
        return f":{self.number}"

    @property
    def socket_path(self) -> Path:
        """The display's X socket file, in this display's own folder (bound into its sandbox)."""
        return self._socket_dir / f"X{self.number}"

    @property
    def fb_path(self) -> Path:
        return self._fb_path

    @property
    def pids(self) -> list[int]:
        return [self._xvfb.pid] if self._xvfb is not None else []

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DISPLAY": self.name,
            "HOME": str(self.state_dir),
            "LANG": "C.UTF-8",
        }

    def _client(self, argv: list[str]) -> list[str]:
        """A host-side X client, run without root (it parses what the agent's windows say)."""
        return drop_to(self.uid, argv)

    def start(self, deadline: float) -> None:
        """Start Xvfb (free display number from ``-displayfd``); return once it accepts clients."""
        width, height = self.screen
        for folder in (self.state_dir / "fb", self._socket_dir):
            folder.mkdir(parents=True, exist_ok=True)
            if self.uid is not None:
                os.chown(folder, self.uid, self.uid)
        self.state_dir.chmod(0o711)  # the X server's uid reaches its folders, nobody lists them
        userns = [] if os.geteuid() == 0 else ["--unshare-user"]
        xvfb = [
            "Xvfb",
            "-displayfd",
            "",
            "-screen",
            "0",
            f"{width}x{height}x24",
            "-nolisten",
            "tcp",
            "-noreset",  # else the server resets when its last client leaves (races the WM)
            # no pointer drawn into the framebuffer (Xvfb's software cursor, at the position less the hotspot):
            # screenshots paste it as OSWorld's server does (XFixes still reports its image), else it shows twice
            "-nocursor",
            "-fbdir",
            str(self.state_dir / "fb"),
        ]
        read_fd, write_fd = os.pipe()
        xvfb[2] = str(write_fd)
        try:
            self._xvfb = subprocess.Popen(
                joined_cgroup(
                    self.cgroup_procs,
                    [
                        "bwrap",
                        *userns,
                        "--dev-bind",
                        "/",
                        "/",
                        "--bind",
                        str(self._socket_dir),
                        "/tmp/.X11-unix",
                        "--die-with-parent",
                        "--",
                        *drop_to(self.uid, xvfb),
                    ],
                ),
                pass_fds=(write_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            os.close(write_fd)
            write_fd = -1
            self.number = int(self._read_line(read_fd, deadline, "Xvfb -displayfd"))
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
        self._socket_dir.chmod(0o755)  # Xvfb makes it world-writable, as it does /tmp/.X11-unix
        logger.debug("display %s up (pid %s, socket %s)", self.name, self._xvfb.pid, self.socket_path)

    def _read_line(self, fd: int, deadline: float, what: str) -> str:
        data = b""
        while not data.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise DeadlineExceeded(f"{what} did not report ready before the reset deadline")
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(fd, 64)
                if not chunk:
                    self.stop()
                    raise DesktopCrashed(f"{what} exited during start-up (is the display already in use?)")
                data += chunk
        return data.decode().strip()

    def alive(self) -> bool:
        return self._xvfb is not None and self._xvfb.poll() is None

    def stop(self) -> None:
        """Kill Xvfb (its process group) and reap it. Idempotent; removes only this display's own files."""
        self._fb_view = None
        if self._xvfb is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._xvfb.pid, signal.SIGKILL)
            self._xvfb.wait()
        self._xvfb = None
        if self.number is not None:
            with contextlib.suppress(OSError):
                for stale in self._socket_dir.iterdir():  # our own folder: no other desktop's socket is here
                    stale.unlink()
        self.number = None

    # ------------------------------------------------------------------ screen
    def _framebuffer(self) -> npt.NDArray[np.uint8]:
        if self._fb_view is None:
            header = read_xwd_header(self._fb_path)
            if header.bits_per_pixel != 32:
                bpp = header.bits_per_pixel
                raise DesktopCrashed(f"framebuffer {self._fb_path} has {bpp} bits per pixel; expected 32")
            shape = (header.height, header.bytes_per_line)
            mm = np.memmap(self._fb_path, dtype=np.uint8, mode="r", offset=header.offset, shape=shape)
            self._fb_view = mm[:, : 4 * header.width].reshape(header.height, header.width, 4)
        return self._fb_view

    def screenshot(self) -> npt.NDArray[np.uint8]:
        """The screen as an ``(H, W, 3)`` RGB array (a copy), with the pointer pasted in where and as OSWorld's
        server pastes it (:mod:`legato_gym.desktop_server.pointer`), unless :attr:`pointer` is off."""
        if not self.alive():
            raise DesktopCrashed(f"the X server of display {self.number} died")
        image = np.ascontiguousarray(self._framebuffer()[:, :, 2::-1])
        pointer = read_pointer(self.name) if self.pointer else None
        if pointer is not None:
            paste_pointer(image.reshape(-1).data, image.shape[1], image.shape[0], pointer)
        return image

    def fingerprint(self) -> bytes:
        """A cheap digest of the screen (every 4th pixel of every 4th row) to tell whether it changed."""
        return self._framebuffer()[::4, ::4, :3].tobytes()

    def digest(self) -> bytes:
        """A digest of every pixel of the screen (its padding byte left out): exact where :meth:`fingerprint` is
        cheap, for a reset to tell whether the screen it leaves is the baseline's to the pixel (about 7 ms at
        1920x1080)."""
        words = np.ascontiguousarray(self._framebuffer()).view(np.uint32) & np.uint32(0xFFFFFF)
        return hashlib.sha256(words.data).digest()

    def wait_settled(
        self,
        deadline: float,
        settle_s: float,
        poll_s: float,
        work: Callable[[], int] | None = None,
        allowance: int = 0,
    ) -> bool:
        """Wait until the screen stays unchanged for ``settle_s``; False when the deadline passed first.

        With ``work`` (a counter that grows while something is busy, such as the CPU ticks of the desktop's
        processes), it must also grow by at most ``allowance`` over those ``settle_s``, read in the same polls.
        """
        last, done = self.fingerprint(), work() if work else 0
        stable_since = time.monotonic()
        while True:
            now = time.monotonic()
            if now - stable_since >= settle_s:
                return True
            if now >= deadline:
                return False
            time.sleep(min(poll_s, max(0.0, deadline - now)))
            current, spent = self.fingerprint(), work() if work else 0
            if current != last or spent - done > allowance:
                last, done, stable_since = current, spent, time.monotonic()

    # ------------------------------------------------------------------ windows
    def windows(self) -> list[WindowInfo]:
        """Managed top-level windows (``_NET_CLIENT_LIST``, through ``wmctrl -l`` and ``wmctrl -lx``).

        A class may hold spaces (Chromium's names its profile folder), so the title comes from ``-l``.
        """
        listings = []
        for flags in ("-lx", "-l"):
            out = subprocess.run(
                self._client(["wmctrl", flags]), env=self.env(), capture_output=True, text=True, timeout=10
            )
            if out.returncode != 0:
                return []
            listings.append(out.stdout.splitlines())
        titles = {}
        for line in listings[1]:
            parts = line.split(None, 3)
            if len(parts) >= 3:
                titles[parts[0]] = (parts[2], parts[3] if len(parts) > 3 else "")
        result = []
        for line in listings[0]:
            parts = line.split(None, 2)
            if len(parts) < 3 or parts[0] not in titles:
                continue
            host, title = titles[parts[0]]
            tail = f" {host} {title}".rstrip()
            wm_class = parts[2][: -len(tail)] if tail and parts[2].endswith(tail) else parts[2].split()[0]
            result.append(WindowInfo((parts[0], wm_class.strip(), title)))
        return result

    def wait_windows(self, count: int, deadline: float) -> bool:
        """Wait until at least ``count`` windows are managed; False when the deadline passed first."""
        while len(self.windows()) < count:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S * 4)
        return True

    def painted(self, x: int, y: int, width: int, height: int) -> bool:
        """Whether a screen area shows content: :data:`PAINTED_FRACTION` of it off its commonest colour.

        An app's window is mapped, and titled, before the app has drawn into it: LibreOffice shows a flat
        grey frame while it lays out the loaded document.
        """
        area = self._framebuffer()[max(0, y) : max(0, y) + height : 4, max(0, x) : max(0, x) + width : 4, :3]
        if area.size == 0:
            return False
        flat = area.reshape(-1, 3).astype(np.uint32)
        colours = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
        counts = np.unique(colours, return_counts=True)[1]
        return bool(1.0 - counts.max() / colours.size >= PAINTED_FRACTION)

    def wait_titles(self, titles: Sequence[str], deadline: float) -> bool:
        """Wait until each of ``titles`` is part of a window's title and that window has painted (:meth:`painted`).

        False when the deadline passed first.
        """
        while titles:
            out = subprocess.run(
                self._client(["wmctrl", "-lG"]), env=self.env(), capture_output=True, text=True, timeout=10
            )
            windows = [line.split(None, 7) for line in out.stdout.splitlines()]
            shown = [(w[7], int(w[2]), int(w[3]), int(w[4]), int(w[5])) for w in windows if len(w) == 8]
            if all(any(title in name and self.painted(x, y, w, h) for name, x, y, w, h in shown) for title in titles):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S * 4)
        return True

    def wait_no_windows(self, deadline: float) -> bool:
        """Wait until no client window is left (the X server drops a dead client's windows)."""
        while self.windows():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True
