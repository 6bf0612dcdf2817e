"""One running sandbox: starting it, telling whether it is alive, and killing every process it holds."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from legato_gym.backends.local.limits import seccomp_filter, write_to_pipe
from legato_gym.backends.local.sandbox.bwrap import bwrap_argv
from legato_gym.backends.local.sandbox.files import write_state_files
from legato_gym.backends.local.sandbox.identity import joined_cgroup
from legato_gym.backends.local.sandbox.session import SERVER_ENDED
from legato_gym.backends.local.sandbox.spec import SandboxLayout, SandboxSpec
from legato_gym.errors import ConfigError, DeadlineExceeded, DesktopCrashed, MissingDependencyError

__all__ = ["Sandbox"]

logger = logging.getLogger(__name__)

_SOCKET_PATH_MAX = 107
_POLL_S = 0.005
_STDERR_MAX = 1 << 20


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
        slot: names the sandbox's socket folder (:attr:`SandboxLayout.slot`).
    """

    def __init__(
        self,
        spec: SandboxSpec,
        state_dir: Path,
        display_number: int,
        x_socket: Path,
        fb_path: Path,
        cgroup_procs: list[Path] | None = None,
        slot: str = "",
    ) -> None:
        self.spec = spec
        self.state_dir = state_dir
        self.display_number = display_number
        self.layout = SandboxLayout(state_dir, display_number, x_socket, fb_path, slot)
        self.cgroup_procs = list(cgroup_procs or [])
        self.control_dir = self.layout.control_dir
        self.bin_dir = self.layout.bin_dir
        self.baseline = self.layout.baseline
        self._proc: subprocess.Popen[bytes] | None = None
        self._listener: socket.socket | None = None
        self._devtools: socket.socket | None = None
        self.init_pid: int | None = None
        self._pidns: int | None = None
        #: an open handle on the sandbox's pid namespace while :attr:`_pidns` names it: the kernel gives a freed
        #: namespace's inode number to the next new one, so without it a desktop killing its sandbox while another
        #: starts one took the other's processes for its survivors (and waited out its whole reset deadline)
        self._pidns_fd: int | None = None

    @property
    def socket_path(self) -> Path:
        """The server's socket on the host (in a folder the sandbox cannot see)."""
        return self.control_dir / "server.sock"

    @property
    def devtools_path(self) -> Path:
        """The host's socket relayed to the app ports inside: Chrome's DevTools port (:data:`.session.DEVTOOLS_PORT`)
        and VLC's HTTP interface (:data:`.session.VLC_HTTP_PORT`); each connection names its port first
        (:mod:`legato_gym.backends.local.relay`)."""
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
        write_state_files(self.spec, self.layout)

    # ------------------------------------------------------------------ lifecycle
    def start(self, deadline: float) -> None:
        """Start the sandbox; its server then answers on :attr:`socket_path` (see :meth:`check_alive`)."""
        self._prepare()
        assert self._listener is not None
        seccomp_fd = write_to_pipe(seccomp_filter())
        info_r, info_w = os.pipe()
        try:
            argv = joined_cgroup(self.cgroup_procs, bwrap_argv(self.spec, self.layout, seccomp_fd, info_w))
            self._proc = subprocess.Popen(
                argv,
                pass_fds=(info_w, seccomp_fd),
                stdin=self._listener.fileno(),
                stdout=self._devtools.fileno() if self._devtools is not None else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            os.close(info_w)
            info_w = -1
            self._drop_listeners()  # the sandbox holds them now: when it dies, connecting is refused at once
            info = self._read_info(info_r, deadline)
        finally:
            os.close(info_r)
            os.close(seccomp_fd)
            if info_w >= 0:
                os.close(info_w)
        self.init_pid = int(str(info["child-pid"]))
        self._release_pidns()  # the last sandbox's, if it outlived its kill's deadline
        try:
            self._pidns_fd = os.open(f"/proc/{self.init_pid}/ns/pid", os.O_RDONLY)
        except FileNotFoundError as exc:
            raise DesktopCrashed(f"sandbox died at start: {self._stderr()}") from exc
        self._pidns = os.fstat(self._pidns_fd).st_ino

    def _drop_listeners(self) -> None:
        """Close the host's copies of the listening sockets (the paths stay until :meth:`kill`)."""
        for sock in (self._listener, self._devtools):
            if sock is not None:
                sock.close()
        self._listener = self._devtools = None

    def server_ended(self, timeout: float) -> str | None:
        """Why the sandbox exited, if it did because its server ended from inside (``None``: it did not).

        Waits up to ``timeout`` seconds for the sandbox to exit (its server's death is seen by a connection
        first). A part of the sandbox the agent cannot reach outlives the server to tell
        (:data:`.session.SERVER_ENDED`): its root shell when legato is root, its pid 1 otherwise
        (:mod:`legato_gym.desktop_server.supervise`); the agent's processes, of the server's uid, are the only
        ones inside that can end the server.
        """
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None
        if code != SERVER_ENDED:
            return None
        lines = [line for line in self._stderr().splitlines() if "desktop server ended" in line]
        return lines[-1].removeprefix("legato: ") if lines else "the desktop server ended"

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
        # bounded: the server's own stderr is this pipe too
        return self._proc.stderr.read(_STDERR_MAX).decode(errors="replace").strip()[-2000:] or "(no output)"

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Host pid of bwrap (``None`` when not started); its end ends the sandbox's pid namespace."""
        return self._proc.pid if self._proc is not None else None

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
        self._drop_listeners()
        if self._proc is not None or self.init_pid is not None:
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
        self._release_pidns()
        return True

    def _release_pidns(self) -> None:
        """Close the handle that keeps the namespace's number from being given to another."""
        if self._pidns_fd is not None:
            os.close(self._pidns_fd)
            self._pidns_fd = None
