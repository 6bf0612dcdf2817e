"""The bubblewrap sandbox that holds a desktop's window manager, apps, in-desktop server and everything an
agent runs.

Isolation, per sandbox (docs/backends.md says what this guarantees and what it does not):

* namespaces: pid, net, ipc, uts, mount (and cgroup where available); the net namespace has only ``lo``,
  so the sandbox reaches neither the network nor the host's loopback services. A seccomp filter refuses
  new user namespaces (``unshare -Ur`` fails) and a few kernel interfaces desktops do not use
  (:mod:`.limits`);
* identity: when legato is root, bwrap runs as root without a user namespace only to build the mounts;
  its entry then sets the rlimits and drops, with ``setpriv``, to the desktop's own unprivileged host uid
  (shown as ``user`` inside) with no capabilities, an empty bounding set and ``no_new_privs``, before
  anything else runs. Without root, bwrap maps the caller's uid to 1000 in a user namespace;
* filesystem: an empty root with only the system folders the apps need bound read-only (``/usr``,
  ``/etc``, ... :data:`SYSTEM_PATHS`) and the desktop interpreter's folders (its prefixes and where
  pyautogui lives). Nothing else of the host is there: not ``/root``, ``/home``, the project checkout or
  a new folder at the host's root. The writable places are ``/home/user``, ``/tmp``, ``/dev/shm`` and
  ``/run/user/1000`` (the session bus's folder, where OSWorld's VM has it), each a tmpfs of bounded size
  (the runtime folder is in ``/tmp``); the root, ``/dev`` and every bind
  are read-only. ``/home/user`` is filled from the home baseline (a tar) at every start, so nothing an
  episode wrote survives it;
* the window manager (openbox, with no menu and no exit binding; its one launcher, ctrl+alt+t, opens the
  terminal inside, as GNOME does) runs inside, restarted if it exits, so nothing the agent reaches on the
  screen starts a program outside or ends the desktop;
* lifecycle: ``--die-with-parent`` (the kernel kills the sandbox when legato's process dies) and
  ``--new-session``; resetting kills the pid namespace's init, which takes every process inside with it.

The host reaches the in-desktop server through a unix socket that the host creates, binds in a folder
only it can see, and passes into the sandbox as an already-listening file descriptor: the sandbox has no
path to replace, so the host never follows one the agent could have pointed elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import os
import select
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from legato_gym.backends.local import apps
from legato_gym.backends.local.limits import Limits, seccomp_filter, write_to_pipe
from legato_gym.errors import ConfigError, DeadlineExceeded, DesktopCrashed, MissingDependencyError

__all__ = [
    "SYSTEM_PATHS",
    "Sandbox",
    "SandboxSpec",
    "UidLease",
    "atspi_installed",
    "atspi_readable",
    "interpreter_paths",
    "joined_cgroup",
]

logger = logging.getLogger(__name__)

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
SERVER_FILE = Path(__file__).with_name("server.py")
RELAY_FILE = Path(__file__).with_name("relay.py")
#: Chrome's DevTools port inside the desktop (OSWorld's VM: Chrome on 1337, socat from 9222 to it).
DEVTOOLS_PORT = 9222
#: VLC's HTTP interface inside the desktop (OSWorld's VM: port 8080, password ``password``; see apps.py).
VLC_HTTP_PORT = 8080
#: The packages an action imports (pyautogui and what it imports), located in the interpreter's path.
ACTION_MODULES = ("pyautogui", "pyscreeze", "pymsgbox", "pytweening", "mouseinfo", "pyperclip", "Xlib", "six", "PIL")
_SOCKET_PATH_MAX = 107
_POLL_S = 0.005
_WM_MARKER = "/tmp/runtime-user/.legato-wm-ready"
#: The session bus, where OSWorld's VM has it (tasks export this address before running ``gsettings``).
SESSION_BUS_DIR = "/run/user/1000"
SESSION_BUS = f"unix:path={SESSION_BUS_DIR}/bus"
#: AT-SPI (Debian ``at-spi2-core``): the accessibility bus's launcher and the registry the apps join.
ATSPI_LAUNCHER = "/usr/libexec/at-spi-bus-launcher"
ATSPI_REGISTRY = "/usr/libexec/at-spi2-registryd"
#: The interpreter the server reads AT-SPI with: the one Debian's ``python3-pyatspi`` and ``gi`` are built for.
ATSPI_PYTHON = "/usr/bin/python3"
#: Apps publish their accessibility trees, as on the VM's GNOME: GTK always does with its bridge; these turn
#: it on for Chromium (with its ``--force-renderer-accessibility`` for the page), Gecko and Qt.
ACCESSIBILITY_ON = {"ACCESSIBILITY_ENABLED": "1", "GNOME_ACCESSIBILITY": "1", "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1"}

_SUDO_SHIM = r"""#!/bin/sh
# legato: the sandbox has no privileges to give, so `sudo CMD` runs CMD as the desktop's user (as OSWorld's
# VM user would after typing the password). Options are accepted and ignored; -S reads the password line.
while [ $# -gt 0 ]; do
  case "$1" in
    -S|--stdin) read -r _ || true; shift ;;
    -u|-g|-p|-C|-h|-D|-r|-t|-U|-T) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -eq 0 ] && exec "${SHELL:-/bin/sh}"
exec "$@"
"""

#: openbox's configuration inside the sandbox: no root menu, no key binding that exits, restarts or
#: reconfigures the window manager, and none that runs a program but the VM's own shortcuts (ctrl+alt+t opens
#: the terminal, inside the sandbox: :func:`.apps.openbox_keybinds`); window moves, focus and the window menu stay.
OPENBOX_RC = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <resistance><strength>10</strength><screen_edge_strength>20</screen_edge_strength></resistance>
  <focus><focusNew>yes</focusNew><followMouse>no</followMouse></focus>
  <placement><policy>Smart</policy><center>yes</center></placement>
  <theme><name>Clearlooks</name><titleLayout>NLIMC</titleLayout></theme>
  <desktops><number>1</number></desktops>
  <menu><file>/run/legato-openbox/menu.xml</file><hideDelay>200</hideDelay></menu>
  <keyboard>
    <keybind key="A-Tab"><action name="NextWindow"/></keybind>
    <keybind key="A-S-Tab"><action name="PreviousWindow"/></keybind>
    <keybind key="A-F4"><action name="Close"/></keybind>
{keybinds}  </keyboard>
  <mouse>
    <dragThreshold>1</dragThreshold>
    <doubleClickTime>500</doubleClickTime>
    <context name="Frame">
      <mousebind button="A-Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="A-Left" action="Drag"><action name="Move"/></mousebind>
    </context>
    <context name="Titlebar">
      <mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Left" action="Drag"><action name="Move"/></mousebind>
      <mousebind button="Left" action="DoubleClick"><action name="ToggleMaximize"/></mousebind>
    </context>
    <context name="Client">
      <mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Middle" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Right" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
    </context>
    <context name="Close"><mousebind button="Left" action="Click"><action name="Close"/></mousebind></context>
    <context name="Maximize">
      <mousebind button="Left" action="Click"><action name="ToggleMaximize"/></mousebind>
    </context>
    <context name="Iconify"><mousebind button="Left" action="Click"><action name="Iconify"/></mousebind></context>
    <context name="BLCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="BRCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="TLCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="TRCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
  </mouse>
{applications}</openbox_config>
"""
OPENBOX_MENU = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_menu xmlns="http://openbox.org/3.4/menu"></openbox_menu>
"""


@functools.lru_cache(maxsize=8)
def interpreter_paths(python: str) -> tuple[str, ...]:
    """The host folders an interpreter needs inside the sandbox to run an action.

    Its prefixes (``sys.prefix``, ``sys.base_prefix``, ...; a venv, virtualenv, uv or conda env and the
    Python it was made from), the folders of its executable's symlink chain, and the ``sys.path`` entries
    that hold pyautogui and its dependencies (a user site, ``--system-site-packages``).

    Raises:
        MissingDependencyError: the interpreter does not run, or cannot import pyautogui.
    """
    probe = (
        "import importlib.util, json, os, sys\n"
        "mods = {}\n"
        f"for name in {ACTION_MODULES!r}:\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    if spec is not None and spec.origin:\n"
        "        mods[name] = os.path.dirname(spec.origin)\n"
        "prefixes = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]\n"
        "print(json.dumps({'prefixes': prefixes, 'modules': mods, 'path': [p for p in sys.path if p]}))\n"
    )
    try:
        out = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        info = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise MissingDependencyError(
            f"cannot run the desktop interpreter {python!r}: {exc}; set DesktopConfig.python (or the local "
            "option python) to an interpreter with `pip install 'legatolabs[local]'`"
        ) from exc
    if "pyautogui" not in info["modules"]:
        raise MissingDependencyError(
            f"the desktop interpreter {python} cannot import pyautogui; install it into that environment with "
            "`pip install 'legatolabs[local]'`"
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


def _flat(path: str) -> str:
    """A system file's path as one file name (its copy in the desktop's state folder)."""
    return path.strip("/").replace("/", "%")


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


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
    """

    python: str
    host_uid: int | None
    limits: Limits
    system_paths: tuple[str, ...] = SYSTEM_PATHS
    extra_paths: tuple[str, ...] = ()
    open_file_timeout: float = 60.0


class UidLease:
    """An unprivileged host uid that no other live desktop of this host uses (a lock file held open).

    Args:
        first: the first uid of the range.
        count: how many uids the range has.
        lock_dir: where the lock files live (root-only; the system temp dir by default).
    """

    def __init__(self, first: int, count: int, lock_dir: Path | None = None) -> None:
        directory = lock_dir or Path(tempfile.gettempdir()) / "legato-uids"
        directory.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise ConfigError(
                f"{directory} (the sandbox uid locks) is not a folder of this user's that only it can write; "
                "remove it (it holds only lock files) and start again"
            )
        for uid in range(first, first + count):
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(directory / f"{uid}.lock", flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            self.uid, self._fd = uid, fd
            return
        raise ConfigError(
            f"all {count} sandbox uids from {first} are in use by running desktops; raise the local option "
            "uid_count or close desktops"
        )

    def release(self) -> None:
        """Let another desktop take the uid (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def joined_cgroup(procs: list[Path], argv: list[str]) -> list[str]:
    """``argv`` run by a shell that first joins the cgroups (writes its pid to each ``cgroup.procs``)."""
    if not procs:
        return argv
    script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 121; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "legato-cgroup", *map(str, procs), "--", *argv]


def drop_to(uid: int | None, argv: list[str]) -> list[str]:
    """``argv`` run as ``uid`` with no capabilities and ``no_new_privs`` (unchanged when ``uid`` is None)."""
    if uid is None:
        return argv
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        *argv,
    ]


def atspi_installed(which: Callable[[str], str | None] = shutil.which) -> bool:
    """Whether AT-SPI's bus launcher and registry are installed, with the session bus they run on and
    ``dbus-send`` (which starts them)."""
    return all(Path(p).exists() for p in (ATSPI_LAUNCHER, ATSPI_REGISTRY)) and all(
        which(tool) is not None for tool in ("dbus-daemon", "dbus-send")
    )


@functools.lru_cache(maxsize=4)
def _imports_pyatspi(python: str) -> bool:
    try:
        probe = subprocess.run([python, "-I", "-c", "import pyatspi"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def atspi_readable(which: Callable[[str], str | None] = shutil.which) -> bool:
    """Whether the desktop's server can read the accessibility tree: AT-SPI runs (:func:`atspi_installed`)
    and :data:`ATSPI_PYTHON` imports pyatspi (Debian ``python3-pyatspi``; probed in a child process)."""
    return atspi_installed(which) and _imports_pyatspi(ATSPI_PYTHON)


def accessibility_bus() -> str:
    """The entry's part that starts AT-SPI's accessibility bus, as GNOME's session does, before any app.

    Asking the session bus for the accessibility bus's address starts ``at-spi-bus-launcher`` (D-Bus
    activation) and its bus, and answers once that bus is up, so no app waits for it. The launcher also
    publishes the address on the X root window (``AT_SPI_BUS``), which the X server keeps across a fast
    reset: started first, it names this sandbox's bus there before any app or the server's reader looks.
    Empty without AT-SPI (:func:`atspi_installed`).
    """
    if not atspi_installed():
        return ""
    ask = (
        "dbus-send --session --print-reply=literal --reply-timeout=30000 --dest=org.a11y.Bus /org/a11y/bus "
        "org.a11y.Bus.GetAddress"
    )
    return f"{ask} </dev/null >/dev/null 2>&1 4>&- || true; "


def _listening(path: Path) -> socket.socket:
    """A unix socket listening at ``path`` (in a folder only the host reaches), to pass into the sandbox."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


class Sandbox:
    """One running bwrap sandbox (window manager and server included). Start it with :meth:`start`.

    Args:
        spec: how to build it.
        state_dir: the desktop's private folder on the host (never visible inside).
        display_number: the X display's number (``DISPLAY=:N`` inside).
        x_socket: the display's socket on the host, bound at ``/tmp/.X11-unix/XN`` inside.
        fb_path: the display's framebuffer file, bound read-only for the server's ``/screenshot``.
        cgroup_procs: ``cgroup.procs`` files the sandbox joins before it starts (empty: none).
    """

    def __init__(
        self,
        spec: SandboxSpec,
        state_dir: Path,
        display_number: int,
        x_socket: Path,
        fb_path: Path,
        cgroup_procs: list[Path] | None = None,
    ) -> None:
        self.spec = spec
        self.state_dir = state_dir
        self.display_number = display_number
        self.x_socket = x_socket
        self.fb_path = fb_path
        self.cgroup_procs = list(cgroup_procs or [])
        self.control_dir = state_dir / "control"
        self.bin_dir = state_dir / "bin"
        self.baseline = state_dir / "baseline.tar"
        self._proc: subprocess.Popen[bytes] | None = None
        self._listener: socket.socket | None = None
        self._devtools: socket.socket | None = None
        self.init_pid: int | None = None
        self._pidns: int | None = None

    @property
    def socket_path(self) -> Path:
        """The server's socket on the host (in a folder the sandbox cannot see)."""
        return self.control_dir / "server.sock"

    @property
    def devtools_path(self) -> Path:
        """The host's socket relayed to the app ports inside: Chrome's DevTools port (:data:`DEVTOOLS_PORT`) and
        VLC's HTTP interface (:data:`VLC_HTTP_PORT`); each connection names its port first (:mod:`.relay`)."""
        return self.control_dir / "devtools.sock"

    # ------------------------------------------------------------------ building
    def _prepare(self) -> None:
        if shutil.which("bwrap") is None:
            raise MissingDependencyError("the local backend needs bubblewrap: `apt-get install -y bubblewrap`")
        if len(os.fsencode(self.socket_path)) > _SOCKET_PATH_MAX:
            raise ConfigError(
                f"the desktop's state folder {self.state_dir} is too long for a unix socket path; set the local "
                "option state_dir to a shorter folder"
            )
        self.control_dir.mkdir(mode=0o700, exist_ok=True)
        self._listener = _listening(self.socket_path)
        self._devtools = _listening(self.devtools_path)
        if self.bin_dir.exists():
            return
        uid = self.spec.host_uid or 1000
        self.bin_dir.mkdir(parents=True)
        # a script, not a symlink: the interpreter must see its own path to find its venv (pyvenv.cfg)
        wrapper = f'#!/bin/sh\nexec {shlex.quote(self.spec.python)} "$@"\n'
        for name in ("python", "python3"):
            (self.bin_dir / name).write_text(wrapper)
            (self.bin_dir / name).chmod(0o755)
        sudo = self.bin_dir / "sudo"
        sudo.write_text(_SUDO_SHIM)
        sudo.chmod(0o755)
        for name, entry in apps.bin_entries().items():  # google-chrome and the like (apps.py)
            if isinstance(entry, Path):
                (self.bin_dir / name).symlink_to(entry)
            else:
                (self.bin_dir / name).write_text(entry)
                (self.bin_dir / name).chmod(0o755)
        etc = self.state_dir / "etc"
        etc.mkdir(exist_ok=True)
        (etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\nuser:x:{uid}:{uid}:user:/home/user:/bin/bash\n")
        (etc / "group").write_text(f"root:x:0:\nuser:x:{uid}:\n")
        openbox = self.state_dir / "openbox"
        openbox.mkdir(exist_ok=True)
        rc = OPENBOX_RC.replace("{applications}", apps.OPENBOX_APPLICATIONS)
        (openbox / "rc.xml").write_text(rc.replace("{keybinds}", apps.openbox_keybinds()))
        system = self.state_dir / "system"  # system files shown changed inside (apps.system_files)
        system.mkdir(exist_ok=True)
        for inside, text in apps.system_files().items():
            (system / _flat(inside)).write_text(text)
            (system / _flat(inside)).chmod(0o755)
        (openbox / "menu.xml").write_text(OPENBOX_MENU)

    def _mounts(self) -> list[str]:
        size = str(self.spec.limits.tmpfs_bytes)
        # the writable, bounded folders first, so that a bind below one of them (an interpreter under /tmp)
        # lands on top of it
        argv = ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/home", "--perms", "0755"]
        argv += ["--dir", "/var", "--dev", "/dev", "--proc", "/proc"]
        argv += ["--size", size, "--perms", "1777", "--tmpfs", "/dev/shm"]
        argv += ["--size", size, "--perms", "1777", "--tmpfs", "/tmp"]
        argv += ["--size", size, "--perms", "0700", "--tmpfs", "/home/user"]
        argv += ["--perms", "0755", "--dir", "/run/user", "--size", size, "--perms", "0700", "--tmpfs", SESSION_BUS_DIR]
        argv += ["--symlink", "/tmp", "/var/tmp"]
        bound: list[str] = []
        made: set[str] = {"/run", "/home", "/var", "/tmp", "/home/user", "/dev", "/run/user", SESSION_BUS_DIR}

        def parents(path: str) -> None:  # as 0755: bwrap would make the missing ones 0700
            parts = Path(path).parts
            for i in range(2, len(parts)):
                parent = str(Path(*parts[:i]))
                if parent not in made and not _covered(parent, bound):
                    argv.extend(["--perms", "0755", "--dir", parent])
                    made.add(parent)

        for path in self.spec.system_paths:
            if os.path.islink(path):
                parents(path)
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                parents(path)
                argv += ["--ro-bind", path, path]
                bound.append(path)
        for path in sorted({*interpreter_paths(self.spec.python), *self.spec.extra_paths}):
            if _covered(path, bound) or not os.path.isdir(path):
                continue
            parents(path)
            argv += ["--ro-bind", path, path]
            bound.append(path)
        x_inside = f"/tmp/.X11-unix/X{self.display_number}"
        argv += ["--perms", "0755", "--dir", "/tmp/.X11-unix", "--ro-bind", str(self.x_socket), x_inside]
        argv += ["--ro-bind", str(self.bin_dir), "/run/legato-bin"]
        argv += ["--ro-bind", str(SERVER_FILE), "/run/legato-server.py"]
        argv += ["--ro-bind", str(RELAY_FILE), "/run/legato-relay.py"]
        argv += ["--ro-bind", str(self.fb_path), "/run/legato-fb"]
        argv += ["--ro-bind", str(self.state_dir / "openbox"), "/run/legato-openbox"]
        argv += ["--ro-bind", str(self.state_dir / "etc" / "passwd"), "/etc/passwd"]
        argv += ["--ro-bind", str(self.state_dir / "etc" / "group"), "/etc/group"]
        for inside in apps.system_files():
            changed = self.state_dir / "system" / _flat(inside)
            if _covered(inside, bound) and changed.is_file():
                argv += ["--ro-bind", str(changed), inside]
        if self.baseline.exists():
            argv += ["--ro-bind", str(self.baseline), "/run/legato-baseline.tar"]
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
        return argv

    def _argv(self, seccomp_fd: int, info_fd: int) -> list[str]:
        """bwrap's command line; the listening socket is the sandbox's stdin (moved to fd 3 for the server).

        The DevTools relay's listening socket is the sandbox's stdout, moved to fd 4 for the relay at once.
        """
        uid = self.spec.host_uid
        argv = ["bwrap", *self._mounts()]
        env = {
            "PATH": "/run/legato-bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/home/user",
            "USER": "user",
            "LOGNAME": "user",
            "SHELL": "/bin/bash",
            "TERM": "xterm",
            "LANG": "C.UTF-8",
            "DISPLAY": f":{self.display_number}",
            "XDG_RUNTIME_DIR": "/tmp/runtime-user",
            "DBUS_SESSION_BUS_ADDRESS": SESSION_BUS,
            **(ACCESSIBILITY_ON if atspi_installed() else {"NO_AT_BRIDGE": "1"}),
            **apps.environment(),
        }
        argv += ["--clearenv"]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        if uid is None:  # unprivileged legato: a user namespace maps our uid to 1000 inside
            argv += ["--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000"]
        else:  # root: no user namespace; the entry drops to `uid` with no capabilities before running anything
            argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        argv += ["--hostname", f"desk{self.display_number}", "--chdir", "/home/user"]
        argv += ["--seccomp", str(seccomp_fd), "--info-fd", str(info_fd), "--die-with-parent", "--new-session"]
        # openbox is restarted if it exits (the agent may run `openbox --exit` or kill it), and does not
        # inherit the server's socket
        wm = f"openbox --config-file /run/legato-openbox/rc.xml --startup {shlex.quote('touch ' + _WM_MARKER)}"
        # the window manager first, so that its pid inside (a root property) is the same in every sandbox
        user_entry = (
            "exec 4>&1 >/dev/null; "
            "mkdir -p -m 700 /tmp/runtime-user; "
            f"{self._session_bus()}"
            f"(while :; do {wm}; sleep 0.2; done) </dev/null >/dev/null 2>&1 4>&- & "
            "if [ -f /run/legato-baseline.tar ]; then tar -xf /run/legato-baseline.tar -C /home/user || exit 3; fi; "
            f"while [ ! -e {_WM_MARKER} ]; do sleep 0.005; done; "
            f"python /run/legato-relay.py --fd 4 --port {DEVTOOLS_PORT} --port {VLC_HTTP_PORT} "
            "</dev/null 2>/dev/null & "
            "exec python /run/legato-server.py --listen fd:3 --fb /run/legato-fb "
            f"--open-file-timeout {self.spec.open_file_timeout:g} --atspi-python {ATSPI_PYTHON} 3<&0 </dev/null 4>&-"
        )
        limits = self.spec.limits
        rlimits = ["prlimit", f"--nproc={limits.max_processes}", f"--data={limits.memory_bytes}", "--"]
        if uid is None:
            return [*argv, *rlimits, "/bin/sh", "-c", user_entry]
        root_entry = f"chown {uid}:{uid} /home/user {SESSION_BUS_DIR} && exec " + shlex.join(
            [*rlimits, *drop_to(uid, ["/bin/sh", "-c", user_entry])]
        )
        return [*argv, "/bin/sh", "-c", root_entry]

    @staticmethod
    def _session_bus() -> str:
        """The entry's part that starts the session bus (dconf, so that ``gsettings`` keeps what it sets, and
        other services start on it on demand) and waits for its socket; nothing without ``dbus-daemon``.

        With AT-SPI installed it then starts the accessibility bus (:func:`accessibility_bus`)."""
        if shutil.which("dbus-daemon") is None:
            return ""
        bus = f"{SESSION_BUS_DIR}/bus"
        return (
            f"dbus-daemon --session --address={SESSION_BUS} --nofork --nopidfile </dev/null >/dev/null 2>&1 4>&- & "
            f"while [ ! -S {bus} ]; do sleep 0.005; done; "
            f"{accessibility_bus()}"
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self, deadline: float) -> None:
        """Start the sandbox; its server then answers on :attr:`socket_path` (see :meth:`check_alive`)."""
        self._prepare()
        assert self._listener is not None
        seccomp_fd = write_to_pipe(seccomp_filter())
        info_r, info_w = os.pipe()
        try:
            argv = joined_cgroup(self.cgroup_procs, self._argv(seccomp_fd, info_w))
            self._proc = subprocess.Popen(
                argv,
                pass_fds=(info_w, seccomp_fd),
                stdin=self._listener.fileno(),
                stdout=self._devtools.fileno() if self._devtools is not None else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            os.close(info_w)
            info_w = -1
            info = self._read_info(info_r, deadline)
        finally:
            os.close(info_r)
            os.close(seccomp_fd)
            if info_w >= 0:
                os.close(info_w)
        self.init_pid = int(str(info["child-pid"]))
        try:
            self._pidns = os.stat(f"/proc/{self.init_pid}/ns/pid").st_ino
        except FileNotFoundError as exc:
            raise DesktopCrashed(f"sandbox died at start: {self._stderr()}") from exc

    def check_alive(self) -> None:
        """Raise :class:`DesktopCrashed` (with bwrap's and the entry's error output) if the sandbox exited."""
        if self._proc is None or self._proc.poll() is not None:
            raise DesktopCrashed(f"the desktop's sandbox exited: {self._stderr()}")

    def _read_info(self, fd: int, deadline: float) -> dict[str, object]:
        data = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded("bwrap did not start before the reset deadline")
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            try:
                info = json.loads(data)
            except ValueError:
                continue
            if isinstance(info, dict) and "child-pid" in info:
                return info
        raise DesktopCrashed(f"bwrap failed to start the sandbox: {self._stderr()}")

    def _stderr(self) -> str:
        if self._proc is None or self._proc.stderr is None or self._proc.poll() is None:
            return "(still running)"
        return self._proc.stderr.read().decode(errors="replace").strip()[-2000:] or "(no output)"

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pidns(self) -> int | None:
        """The inode of the sandbox's pid namespace (``None`` when not running)."""
        return self._pidns

    def survivors(self) -> list[int]:
        """Host pids still in this sandbox's pid namespace."""
        if self._pidns is None:
            return []
        pids = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if os.stat(f"/proc/{entry.name}/ns/pid").st_ino == self._pidns:
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def kill(self, deadline: float) -> bool:
        """Kill every process of the sandbox; True when none survived before the deadline."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._devtools is not None:
            self._devtools.close()
            self._devtools = None
            self.devtools_path.unlink(missing_ok=True)
            self.socket_path.unlink(missing_ok=True)
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)  # pid 1 of the namespace: the kernel kills the rest
        if self._proc is not None:
            try:
                self._proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stderr is not None:
                self._proc.stderr.close()
        while survivors := self.survivors():
            if time.monotonic() >= deadline:
                logger.warning("sandbox pids %s survived the kill", survivors)
                return False
            time.sleep(_POLL_S)
        self._proc = None
        self.init_pid = self._pidns = None
        return True
