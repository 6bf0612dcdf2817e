"""The parent's handle on one worker process: start it, talk to it, kill it and everything it started.

:class:`WorkerProcess` is the :class:`~legato_gym.transport.handles.WorkerHandle` of a worker on this host, and
:class:`ProcessLauncher` the launcher a local :class:`~legato_gym.vector.env.DesktopVectorEnv` gives its pool.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from legato_gym.errors import ConfigError
from legato_gym.transport.handles import Frame
from legato_gym.transport.protocol import FrameReader, encode_frame
from legato_gym.transport.screens import ScreenBuffer

__all__ = ["ProcessLauncher", "WorkerProcess"]

logger = logging.getLogger(__name__)

#: Bytes of the worker's stderr kept for error messages.
STDERR_TAIL = 16 * 1024
#: Socket buffer size; a large one moves a framed screenshot in few system calls.
SOCKET_BUFFER = 8 * 1024 * 1024
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
#: One BLAS/OpenMP thread per worker unless the environment (or ``worker_env``) says otherwise: a desktop does
#: no linear algebra, and OpenBLAS starting a thread per core in every worker costs ~50 ms of CPU at import
#: (a third of a worker's start-up) and hundreds of idle threads at 256 desktops.
_WORKER_THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: Variables a worker never inherits: the policy server's key has no business near a desktop the agent
#: drives (legato_rl's ``KEY_ENV_VAR``; named here since legato_gym does not import legato_rl).
_WORKER_SECRETS = ("LEGATO_POLICY_KEY",)
#: ``python -m legato_gym.vector.worker`` without registering Gymnasium ids: importing ``legato_gym`` with
#: gymnasium hidden takes its no-gymnasium path, so a worker imports only the stdlib, numpy and its backend
#: (a backend that needs gymnasium, such as desktop-env, still imports it afterwards).
_BOOTSTRAP = (
    "import sys; sys.modules['gymnasium'] = None; import legato_gym; del sys.modules['gymnasium']; "
    "from legato_gym.vector.worker import main; sys.exit(main())"
)


class WorkerProcess:
    """One started worker: its process, socket, stderr and shared screenshot buffer.

    Args:
        env_id: the desktop's index (for log messages).
        python: interpreter to run (``None``: this one).
        env: extra environment variables for the worker (``LEGATO_POLICY_KEY`` is never passed on, from here
            or from ``os.environ``).
        screen_bytes: size of the shared screenshot buffer; ``None`` sends screenshots as framed bytes.
    """

    def __init__(
        self,
        env_id: int,
        *,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        screen_bytes: int | None = None,
    ) -> None:
        self.env_id = env_id
        self.frames = FrameReader()
        self.stderr_tail: deque[bytes] = deque()
        self._stderr_bytes = 0
        self.screens = ScreenBuffer(screen_bytes) if screen_bytes else None
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for sock in (parent_sock, child_sock):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            except OSError:  # pragma: no cover - capped by the kernel
                pass
        child_env = dict(os.environ)
        for name, value in _WORKER_THREADS.items():
            child_env.setdefault(name, value)
        child_env.update(env or {})
        for name in _WORKER_SECRETS:
            child_env.pop(name, None)
        path = child_env.get("PYTHONPATH")
        child_env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + path if path else "")
        pass_fds = [child_sock.fileno()]
        if self.screens is not None and self.screens.fd is not None:
            pass_fds.append(self.screens.fd)
        argv = [python or sys.executable, "-c", _BOOTSTRAP, "--fd", str(child_sock.fileno())]
        argv += ["--parent-pid", str(os.getpid())]
        # PR_SET_PDEATHSIG fires when the *thread* that started the child exits; arm it only from the main
        # thread. The socket's EOF and the parent-pid check cover the other cases.
        if threading.current_thread() is threading.main_thread():
            argv.append("--pdeathsig")
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=pass_fds,
                env=child_env,
                start_new_session=True,
            )
        except OSError as exc:
            parent_sock.close()
            if self.screens is not None:
                self.screens.close()
            raise ConfigError(
                f"cannot start a desktop worker with python={argv[0]!r}: {exc}; "
                "set DesktopConfig.worker_python to a Python interpreter that has legato installed"
            ) from exc
        finally:
            child_sock.close()
        self.pid = self.proc.pid
        self.sock = parent_sock
        self.sock.setblocking(False)
        assert self.proc.stderr is not None
        self.stderr_fd = self.proc.stderr.fileno()
        os.set_blocking(self.stderr_fd, False)
        self.shm_fd_in_child = self.shm_fd = self.screens.fd if self.screens is not None else None
        self._stderr_open = True
        if self.screens is not None:
            self.screens.close_fd()  # the child has its copy; the mapping stays
        self.alive = True
        self._reaped = False

    @property
    def name(self) -> str:
        """``worker PID``, as messages name it."""
        return f"worker {self.pid}"

    @property
    def exit_status(self) -> int | None:
        """The exit status once the worker was reaped (negative: the signal that ended it)."""
        return self.proc.returncode

    def fds(self) -> tuple[int, ...]:
        """The socket, and stderr until it ends."""
        if self._reaped:
            return ()
        return (self.sock.fileno(), self.stderr_fd) if self._stderr_open else (self.sock.fileno(),)

    def receive(self, fd: int) -> tuple[list[Frame], bool]:
        """Read ``fd`` (the socket or stderr): the frames that completed, and ``False`` once the worker is gone."""
        if fd == self.stderr_fd and fd != self.sock.fileno():
            self._stderr_open = self.read_stderr()
            return [], True
        alive = self.read()
        frames = list(self.frames.frames)
        self.frames.frames.clear()
        return frames, alive

    def screen(self, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
        """A view of the shared screenshot buffer as an array of ``shape``."""
        if self.screens is None:
            raise ValueError(f"worker {self.pid} has no shared screenshot buffer (screenshots='blob')")
        return self.screens.array(shape)

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Send one frame; waits (until ``deadline``, monotonic) only if the socket buffer is full."""
        for part in encode_frame(message):
            view = memoryview(part)
            while len(view):
                try:
                    sent = self.sock.send(view)
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"worker {self.pid} does not read its socket") from None
                    select.select([], [self.sock], [], remaining)
                    continue
                view = view[sent:]

    def read(self) -> bool:
        """Read what the socket holds into :attr:`frames`; ``False`` at end of stream (the worker is gone)."""
        frames = self.frames
        while True:
            target = frames.blob_target()
            try:
                if target is not None:
                    count = self.sock.recv_into(target)
                    if count:
                        frames.advance_blob(count)
                        continue
                else:
                    data = self.sock.recv(1 << 20)
                    if data:
                        frames.feed(data)
                        continue
            except BlockingIOError:
                return True
            except OSError:
                return False
            return False

    def read_stderr(self) -> bool:
        """Keep the tail of the worker's stderr; ``False`` at end of stream."""
        while True:
            try:
                data = os.read(self.stderr_fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            for line in data.decode(errors="replace").splitlines():
                logger.debug("worker %d (env %d): %s", self.pid, self.env_id, line)
            self.stderr_tail.append(data)
            self._stderr_bytes += len(data)
            while self._stderr_bytes > STDERR_TAIL and len(self.stderr_tail) > 1:
                self._stderr_bytes -= len(self.stderr_tail.popleft())

    def stderr_text(self) -> str:
        """The last :data:`STDERR_TAIL` bytes the worker wrote to stderr."""
        return b"".join(self.stderr_tail).decode(errors="replace")[-STDERR_TAIL:]

    def kill(self) -> None:
        """SIGKILL the worker's process group (the desktop's children too), reap it, close its pipes."""
        if self._reaped:
            return
        if self.alive:
            self.alive = False
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError:  # pragma: no cover - the group was re-used by another user
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            logger.warning("worker %d did not exit after SIGKILL", self.pid)
        self.read_stderr()
        self._reaped = True
        self._close_fds()

    def wait_exit(self, timeout: float) -> bool:
        """Wait for the worker to exit on its own; then kill what is left of its group."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return False
        self.kill()
        return True

    def _close_fds(self) -> None:
        self.sock.close()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class ProcessLauncher:
    """Starts each desktop's worker as a child of this process.

    A :class:`~legato_gym.transport.handles.WorkerLauncher`.

    Args:
        python: the workers' interpreter (``None``: this one).
        env: extra environment variables for the workers.
        screen_bytes: size of each worker's shared screenshot buffer; ``None`` sends screenshots as framed bytes.
    """

    def __init__(self, *, python: str | None, env: Mapping[str, str], screen_bytes: int | None) -> None:
        self.python = python
        self.env = dict(env)
        self.screen_bytes = screen_bytes

    def start(self, env_id: int) -> WorkerProcess:
        """Start a worker process for desktop ``env_id``."""
        return WorkerProcess(env_id, python=self.python, env=self.env, screen_bytes=self.screen_bytes)

    def close(self) -> None:
        """Nothing to release: each worker is killed by the pool."""
