"""The bubblewrap sandbox that holds a desktop's apps, its in-desktop server and everything an agent runs.

Isolation, per sandbox:

* namespaces: pid, net, ipc, uts, mount (and cgroup where available); the net namespace has only ``lo``,
  so the sandbox reaches neither the network nor the host's loopback services;
* identity: when legato runs as root, bwrap runs as root without a user namespace only to build the
  mounts; its entry then drops, with ``setpriv``, to an unprivileged host uid (``nobody`` by default, shown
  as ``user`` inside) with no capabilities, an empty bounding set and ``no_new_privs``, before anything
  else runs. Without root, bwrap maps the caller's uid to 1000 in a user namespace;
* filesystem: the host's ``/`` read-only; ``/root``, ``/home``, ``/tmp``, ``/var/tmp``, ``/run``, ``/mnt``,
  ``/media``, ``/srv`` and ``/dev/shm`` replaced by empty tmpfs (the desktop interpreter's prefix is bound
  back read-only when it lives under one of them); ``/home/user`` is a fresh tmpfs filled from the home
  baseline (a tar) at every start, so nothing an episode wrote survives it;
* lifecycle: ``--die-with-parent`` (the kernel kills the sandbox when legato's process dies) and
  ``--new-session``; resetting kills the pid namespace's init, which takes every process inside with it.

The host reaches the in-desktop server through a unix socket in a directory bind-mounted from the host:
a socket file works across network namespaces, needs no port, and cannot be reached by anything that does
not see that directory (a TCP port would need a shared network namespace or a forwarder, which is what
the sandbox exists to avoid). The X server is reached the same way, through its socket file only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from legato_gym.errors import DeadlineExceeded, DesktopCrashed, MissingDependencyError

__all__ = ["HIDDEN_PATHS", "Sandbox", "SandboxSpec", "interpreter_prefixes"]

logger = logging.getLogger(__name__)

#: Host paths an agent must not see; each becomes an empty tmpfs inside the sandbox.
HIDDEN_PATHS = ("/root", "/home", "/tmp", "/var/tmp", "/run", "/mnt", "/media", "/srv")
SERVER_FILE = Path(__file__).with_name("server.py")
_SOCKET = "/run/legato/server.sock"
_POLL_S = 0.005

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


def interpreter_prefixes(python: str) -> list[str]:
    """The directories an interpreter needs (``sys.prefix`` and ``sys.base_prefix``)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = {sys.prefix, sys.base_prefix}
    else:
        try:
            out = subprocess.run(
                [python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise MissingDependencyError(f"cannot run the desktop interpreter {python!r}: {exc}") from exc
        prefixes = set(out.stdout.split())
    return sorted(os.path.realpath(p) for p in prefixes)


@dataclass(frozen=True)
class SandboxSpec:
    """How to build each sandbox of one desktop.

    Attributes:
        python: interpreter for the server and for agent actions (``python`` inside); needs pyautogui.
        host_uid: unprivileged host uid to run bwrap as when legato is root (``None``: don't switch).
        hidden: host paths hidden behind a tmpfs.
        open_file_timeout: how long the server's ``/setup/open_file`` waits for the window.
    """

    python: str
    host_uid: int | None
    hidden: tuple[str, ...] = HIDDEN_PATHS
    open_file_timeout: float = 60.0


class Sandbox:
    """One running bwrap sandbox (server included). Start it with :meth:`start`, end it with :meth:`kill`."""

    def __init__(self, spec: SandboxSpec, state_dir: Path, display_number: int, fb_path: Path) -> None:
        self.spec = spec
        self.state_dir = state_dir
        self.display_number = display_number
        self.fb_path = fb_path
        self.run_dir = state_dir / "run"
        self.bin_dir = state_dir / "bin"
        self.baseline = state_dir / "baseline.tar"
        self._proc: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None
        self._pidns: int | None = None

    @property
    def socket_path(self) -> Path:
        """The server's socket, as the host sees it."""
        return self.run_dir / "server.sock"

    # ------------------------------------------------------------------ building
    def _prepare(self) -> None:
        if shutil.which("bwrap") is None:
            raise MissingDependencyError("the local backend needs bubblewrap: `apt-get install -y bubblewrap`")
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        self.run_dir.mkdir(parents=True)
        uid = self.spec.host_uid
        if uid is not None:
            os.chown(self.run_dir, uid, uid)
        if not self.bin_dir.exists():
            self.bin_dir.mkdir(parents=True)
            for name in ("python", "python3"):
                (self.bin_dir / name).symlink_to(os.path.realpath(self.spec.python))
            sudo = self.bin_dir / "sudo"
            sudo.write_text(_SUDO_SHIM)
            sudo.chmod(0o755)
            etc = self.state_dir / "etc"
            etc.mkdir(exist_ok=True)
            (etc / "passwd").write_text(
                f"root:x:0:0:root:/root:/bin/sh\nuser:x:{uid or 1000}:{uid or 1000}:user:/home/user:/bin/bash\n"
            )
            (etc / "group").write_text(f"root:x:0:\nuser:x:{uid or 1000}:\n")

    def _argv(self) -> list[str]:
        uid = self.spec.host_uid
        x_socket = f"/tmp/.X11-unix/X{self.display_number}"
        argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm"]
        for path in self.spec.hidden:
            if os.path.isdir(path):
                argv += ["--tmpfs", path]
        for prefix in interpreter_prefixes(self.spec.python):
            hider = next((h for h in self.spec.hidden if prefix.startswith(h.rstrip("/") + "/")), None)
            if hider is not None:  # re-expose the interpreter; bwrap would create the parents as 0700
                parts = Path(prefix).relative_to(hider).parts
                for i in range(1, len(parts)):
                    argv += ["--perms", "0755", "--dir", str(Path(hider, *parts[:i]))]
                argv += ["--ro-bind", prefix, prefix]
        argv += ["--dir", "/home/user", "--perms", "0700", "--tmpfs", "/home/user", "--dir", "/tmp/.X11-unix"]
        argv += ["--ro-bind", x_socket, x_socket]
        argv += ["--bind", str(self.run_dir), "/run/legato"]
        argv += ["--ro-bind", str(self.bin_dir), "/run/legato-bin"]
        argv += ["--ro-bind", str(SERVER_FILE), "/run/legato-server.py"]
        argv += ["--ro-bind", str(self.fb_path), "/run/legato-fb"]
        argv += ["--ro-bind", str(self.state_dir / "etc" / "passwd"), "/etc/passwd"]
        argv += ["--ro-bind", str(self.state_dir / "etc" / "group"), "/etc/group"]
        if self.baseline.exists():
            argv += ["--ro-bind", str(self.baseline), "/run/legato-baseline.tar"]
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
            "NO_AT_BRIDGE": "1",
        }
        argv += ["--clearenv"]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        if uid is None:  # unprivileged legato: a user namespace maps our uid to 1000 inside
            argv += ["--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000"]
        else:  # root: no user namespace; the entry drops to `uid` with no capabilities before running anything
            argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        argv += ["--hostname", f"desk{self.display_number}", "--chdir", "/home/user"]
        argv += ["--die-with-parent", "--new-session"]
        user_entry = (
            "if [ -f /run/legato-baseline.tar ]; then tar -xf /run/legato-baseline.tar -C /home/user || exit 3; fi; "
            "mkdir -p -m 700 /tmp/runtime-user; "
            f"exec python /run/legato-server.py --listen unix:{_SOCKET} --fb /run/legato-fb "
            f"--open-file-timeout {self.spec.open_file_timeout:g}"
        )
        if uid is None:
            return [*argv, "/bin/sh", "-c", user_entry]
        root_entry = (
            f"chown {uid}:{uid} /home/user && chmod 1777 /tmp /var/tmp /dev/shm && "
            f"exec setpriv --reuid={uid} --regid={uid} --clear-groups --no-new-privs --inh-caps=-all "
            f"--bounding-set=-all /bin/sh -c {shlex.quote(user_entry)}"
        )
        return [*argv, "/bin/sh", "-c", root_entry]

    # ------------------------------------------------------------------ lifecycle
    def start(self, deadline: float) -> None:
        """Start the sandbox and its server; return once the server's socket accepts connections."""
        self._prepare()
        info_r, info_w = os.pipe()
        try:
            argv = self._argv()
            argv[argv.index("--die-with-parent") : argv.index("--die-with-parent")] = ["--info-fd", str(info_w)]
            self._proc = subprocess.Popen(
                argv,
                pass_fds=(info_w,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            os.close(info_w)
            info_w = -1
            info = self._read_info(info_r, deadline)
        finally:
            os.close(info_r)
            if info_w >= 0:
                os.close(info_w)
        self.init_pid = int(str(info["child-pid"]))
        try:
            self._pidns = os.stat(f"/proc/{self.init_pid}/ns/pid").st_ino
        except FileNotFoundError as exc:
            raise DesktopCrashed(f"sandbox died at start: {self._stderr()}") from exc
        while not self.socket_path.exists():
            if self._proc.poll() is not None:
                raise DesktopCrashed(f"the desktop server exited at start: {self._stderr()}")
            if time.monotonic() >= deadline:
                raise DeadlineExceeded("the desktop server did not start before the reset deadline")
            time.sleep(_POLL_S)

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


def default_host_uid(name: str = "nobody") -> int | None:
    """The unprivileged uid to run sandboxes as when legato is root; ``None`` when not root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return 65534
