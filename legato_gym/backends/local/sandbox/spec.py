"""How each sandbox of a desktop is built: its spec, the host folders it binds, and where its files are."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from legato_gym.backends.local.limits import Limits
from legato_gym.errors import MissingDependencyError

__all__ = [
    "ACTION_MODULES",
    "NO_TKINTER_FIX",
    "SYSTEM_PATHS",
    "Inside",
    "SandboxLayout",
    "SandboxSpec",
    "interpreter_paths",
]


class Inside:
    """Where the host's files are bound inside the sandbox (all read-only)."""

    BIN = "/run/legato-bin"
    SERVER = "/run/legato-server"
    RELAY = "/run/legato-relay.py"
    FB = "/run/legato-fb"
    OPENBOX = "/run/legato-openbox"
    BASELINE = "/run/legato-baseline.tar"


#: Host folders bound read-only into every sandbox (those missing on the host are skipped; a symlink,
#: as ``/bin`` is on merged-/usr systems, is recreated as the same symlink).
SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/var/cache/fontconfig",
    "/var/lib/dbus",
)
#: What gives an interpreter tkinter, without which pyautogui cannot be imported (it imports MouseInfo, which exits).
NO_TKINTER_FIX = (
    "give it tkinter (Debian's python3: `sudo apt-get install python3-tk`; another Python: one built with Tk)"
)
#: The packages an action imports (pyautogui and what it imports), located in the interpreter's path.
ACTION_MODULES = ("pyautogui", "pyscreeze", "pymsgbox", "pytweening", "mouseinfo", "pyperclip", "Xlib", "six", "PIL")


@functools.lru_cache(maxsize=8)
def interpreter_paths(python: str) -> tuple[str, ...]:
    """The host folders an interpreter needs inside the sandbox to run an action.

    Its prefixes (``sys.prefix``, ``sys.base_prefix``, ...; a venv, virtualenv, uv or conda env and the
    Python it was made from), the folders of its executable's symlink chain, and the ``sys.path`` entries
    that hold pyautogui and its dependencies (a user site, ``--system-site-packages``).

    Raises:
        MissingDependencyError: the interpreter does not run, cannot import pyautogui, or has no tkinter (pyautogui
            imports MouseInfo, which exits without it: Debian's python3 without ``python3-tk``).
    """
    probe = (
        "import importlib.util, json, os, sys\n"
        "mods = {}\n"
        f"for name in {ACTION_MODULES!r}:\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    if spec is not None and spec.origin:\n"
        "        mods[name] = os.path.dirname(spec.origin)\n"
        "prefixes = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]\n"
        "tk = importlib.util.find_spec('_tkinter') is not None\n"
        "print(json.dumps({'prefixes': prefixes, 'modules': mods, 'path': [p for p in sys.path if p], 'tk': tk}))\n"
    )
    try:
        out = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        info = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise MissingDependencyError(
            f"cannot run the desktop interpreter {python!r}: {exc}; set DesktopConfig.worker_python (or the local "
            "option sandbox_python) to an interpreter with `pip install 'legatolabs[local]'`"
        ) from exc
    if "pyautogui" not in info["modules"]:
        raise MissingDependencyError(
            f"the desktop interpreter {python} cannot import pyautogui; install it into that environment with "
            "`pip install 'legatolabs[local]'`"
        )
    if not info.get("tk", True):
        raise MissingDependencyError(
            f"the desktop interpreter {python} has no tkinter, without which pyautogui cannot be imported (it imports "
            f"MouseInfo, which exits then); {NO_TKINTER_FIX}, or make the venv from a Python that has it"
        )
    paths = {p for p in info["prefixes"] if p}
    paths |= {os.path.realpath(p) for p in info["prefixes"] if p}
    hop = python if os.path.isabs(python) else (shutil.which(python) or python)
    for _ in range(40):  # the executable's symlink chain: each hop must resolve inside
        paths.add(os.path.dirname(os.path.abspath(hop)))
        if not os.path.islink(hop):
            break
        hop = os.path.join(os.path.dirname(hop), os.readlink(hop))
    for module_dir in info["modules"].values():
        entry = max((p for p in info["path"] if module_dir.startswith(p.rstrip("/") + "/")), key=len, default="")
        paths.add(os.path.realpath(entry or module_dir))
    return tuple(sorted(paths))


@dataclass(frozen=True)
class SandboxSpec:
    """How to build each sandbox of one desktop.

    Attributes:
        python: interpreter for the server and for agent actions (``python`` inside); needs pyautogui.
        host_uid: the desktop's own unprivileged host uid when legato is root (``None``: not root).
        limits: memory, process and tmpfs bounds.
        system_paths: host folders bound read-only (the apps' system folders).
        extra_paths: more host folders bound read-only at the same place (apps installed elsewhere).
        open_file_timeout: how long the server's ``/setup/open_file`` waits for the window.
        server_mode: the in-desktop server's mode, ``legato`` or ``osworld`` (``LocalOptions.server_mode``).
        pointer: the server pastes the pointer into ``/screenshot`` (always in ``osworld`` mode).
        session: the desktop's session, ``"openbox"``, ``"gnome"`` or ``"lookalike"`` (:mod:`.shell`).
        screen: the display's ``(width, height)`` (the lookalike session's pictures are drawn for it).
    """

    python: str
    host_uid: int | None
    limits: Limits
    system_paths: tuple[str, ...] = SYSTEM_PATHS
    extra_paths: tuple[str, ...] = ()
    open_file_timeout: float = 60.0
    server_mode: str = "legato"
    pointer: bool = True
    session: str = "openbox"
    screen: tuple[int, int] = (1920, 1080)


@dataclass(frozen=True)
class SandboxLayout:
    """Where one sandbox's files are on the host, and the display it shows.

    Attributes:
        state_dir: the desktop's private folder on the host (never visible inside).
        display_number: the X display's number (``DISPLAY=:N`` inside).
        x_socket: the display's socket on the host, bound at ``/tmp/.X11-unix/XN`` inside.
        fb_path: the display's framebuffer file, bound read-only for the server's ``/screenshot``.
        slot: names the sandbox's own folders (its sockets), so that two sandboxes of one desktop can run
            at once (the episode's and the one started ahead of the next, :mod:`..prestart`).
    """

    state_dir: Path
    display_number: int
    x_socket: Path
    fb_path: Path
    slot: str = ""

    @property
    def control_dir(self) -> Path:
        """The host's sockets to the sandbox (a folder only the host reaches)."""
        return self.state_dir / f"control{self.slot}"

    @property
    def bin_dir(self) -> Path:
        """Commands put first on the sandbox's ``PATH`` (``python``, ``sudo``, the apps' aliases)."""
        return self.state_dir / "bin"

    @property
    def baseline(self) -> Path:
        """The home baseline (a tar) unpacked into ``/home/user`` at every start, when it exists."""
        return self.state_dir / "baseline.tar"

    @property
    def etc_dir(self) -> Path:
        """``passwd`` and ``group`` as the sandbox shows them."""
        return self.state_dir / "etc"

    @property
    def openbox_dir(self) -> Path:
        """openbox's configuration (bound at :attr:`Inside.OPENBOX`)."""
        return self.state_dir / "openbox"

    @property
    def gnome_dir(self) -> Path:
        """The GNOME session's files (bound at :data:`.shell.GNOME_DIR`; ``session="gnome"`` only)."""
        return self.state_dir / "gnome"

    @property
    def lookalike_dir(self) -> Path:
        """The lookalike session's panel and pictures (bound at :data:`.lookalike.LOOKALIKE_DIR`)."""
        return self.state_dir / "lookalike"

    @property
    def system_dir(self) -> Path:
        """The system files the sandbox shows changed (``apps.system_files``), one file each."""
        return self.state_dir / "system"

    def system_copy(self, inside: str) -> Path:
        """The changed copy of the system file at ``inside``, in :attr:`system_dir`."""
        return self.system_dir / inside.strip("/").replace("/", "%")
