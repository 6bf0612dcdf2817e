"""Agent actions: a fork server that has imported pyautogui once, and a fresh child of it per action.

:class:`ActionRunner` (in the server) starts the fork server (this folder run with ``--fork-server FD``)
and sends it one action at a time over a socket pair; :func:`fork_server` forks a child for each, which
becomes a fresh ``python -c SOURCE`` as far as the action can tell (:func:`_run_child`), and is killed with
everything it started when it overruns its timeout (:func:`_kill_action`). A new process per action, as
OSWorld's ``python -c``, without paying the interpreter start and the import.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import gc
import importlib
import json
import logging
import mmap
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

from .damage import work_ticks
from .input_sync import install_on_import

__all__ = ["ACTION_OUTPUT_LIMIT", "SERVER_FOLDER", "ActionRunner", "fork_server"]

logger = logging.getLogger("legato.desktop_server")

#: This server's folder: ``python SERVER_FOLDER ...`` runs it (the fork server is started that way).
SERVER_FOLDER = os.path.dirname(os.path.abspath(__file__))

#: Output an action may leave on each of stdout and stderr before the rest is dropped.
ACTION_OUTPUT_LIMIT = 4 * 1024 * 1024
_REAP_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36

#: Where an action's process records when the focused app last took its input, and the apps' clock ticks
#: then (:func:`_mark_taken`): a page shared by the fork server and its children (``MAP_SHARED``, not an fd, so
#: it survives the child's closing of every descriptor). The fork server reads it once the child exited.
_TAKEN = struct.Struct("=dq")
_taken_page: mmap.mmap | None = None
#: The in-desktop server's pid (the fork server's parent): its work is not an app's.
_server_pid = 0


def _mark_taken() -> None:
    """In an action's process, after an input wait: the time, and the apps' ticks (this process, the fork
    server and the server left out), for the ready signal that follows the action (:mod:`.damage`)."""
    if _taken_page is not None:
        ticks = work_ticks((os.getpid(), os.getppid(), _server_pid))
        _taken_page[: _TAKEN.size] = _TAKEN.pack(time.monotonic(), ticks)


def _is_x_connection(value: object) -> bool:
    return type(value).__module__ == "Xlib.display" and type(value).__name__ == "Display"


def _x_connected_modules() -> list[str]:
    """Modules holding an X connection (pyautogui and mouseinfo open one at import), and those referring to them.

    No action may inherit them: a child writing on its parent's X connection would desynchronise that
    connection for every later child.
    """
    tainted = {
        name
        for name, module in list(sys.modules.items())
        if module is not None and any(_is_x_connection(v) for v in list(vars(module).values()))
    }
    changed = True
    while changed:
        changed = False
        for name, module in list(sys.modules.items()):
            if name in tainted or module is None:
                continue
            refs = {
                getattr(v, "__name__", None) for v in list(vars(module).values()) if isinstance(v, types.ModuleType)
            }
            if refs & tainted or any(name.startswith(t + ".") for t in tainted):
                tainted.add(name)
                changed = True
    return sorted(tainted)


def _warm_up() -> str:
    """Import pyautogui and its dependencies, then close and forget the modules that hold X connections.

    Each action imports those again (cheap: their dependencies stay loaded) on a connection of its own.
    Returns ``""``, or why pyautogui cannot be imported (each action then fails on its own ``import
    pyautogui`` with the real traceback, as a fresh ``python -c`` would).
    """
    try:
        importlib.import_module("pyautogui")
    except Exception as exc:  # any import-time failure is reported by each action itself
        return f"{type(exc).__name__}: {exc}"
    for name in _x_connected_modules():
        module = sys.modules.pop(name, None)
        for value in list(vars(module).values()) if module is not None else []:
            if _is_x_connection(value):
                with contextlib.suppress(Exception):
                    value.close()
    gc.collect()
    return ""


def _exit_code(exc: SystemExit) -> int:
    """The exit status ``python -c`` gives for ``SystemExit(code)`` (printing a non-int code, as it does)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    sys.stderr.write(f"{exc.code}\n")
    return 1


def _run_child(source: str, out_w: int, err_w: int, sync_input: bool) -> None:
    """In the forked child: become a fresh ``python -c SOURCE`` process as far as the action can tell.

    With ``sync_input``, each pyautogui call the action makes waits until the focused app took its input
    (:mod:`.input_sync`).
    """
    code = 1
    try:
        os.setsid()  # its own session and process group, so a timeout kills it with its children
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, _max_fd())  # the control socket and every other fd of the fork server
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)  # noqa: SIM115
        sys.argv = ["-c"]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        atexit._clear()
        if sync_input:
            install_on_import(_mark_taken)
        try:
            exec(compile(source, "<string>", "exec"), main.__dict__)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException as exc:  # printed as the interpreter prints it, without this frame
            tb = exc.__traceback__.tb_next if exc.__traceback__ else None
            sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        for thread in threading.enumerate():  # the interpreter waits for non-daemon threads at exit
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 1024


def _become_subreaper() -> None:
    """Make orphaned descendants of actions (a ``setsid cmd &``) children of this process, not of pid 1."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _process_table() -> dict[int, tuple[int, int]]:
    """``pid: (ppid, start time in clock ticks)`` of every live process this pid namespace shows."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] not in ("Z", "X"):
                table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def _descendants(table: dict[int, tuple[int, int]], root: int) -> set[int]:
    found: set[int] = set()
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in table.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                frontier.append(pid)
    return found


def _kill_action(pid: int, before: dict[int, int]) -> None:
    """SIGKILL a hung action and every process it started, until none is left.

    Those are this process's descendants (orphans included: it is their subreaper) that were not
    already running before the action (``before``: pid to start time); apps that earlier actions left
    running stay.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for _ in range(200):
        table = _process_table()
        doomed = {p for p in _descendants(table, os.getpid()) if before.get(p) != table[p][1]}
        if not doomed:
            return
        for p in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.005)


def _reap_orphans() -> None:
    """Collect exited orphans this subreaper inherited (between actions: no action child is running)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _read_output(fd: int, streams: dict[int, bytearray], open_fds: list[int]) -> None:
    """Read what is ready on an action's stdout or stderr pipe (up to :data:`ACTION_OUTPUT_LIMIT`)."""
    chunk = os.read(fd, 65536)
    if not chunk:
        open_fds.remove(fd)
    elif len(streams[fd]) < ACTION_OUTPUT_LIMIT:
        streams[fd] += chunk[: ACTION_OUTPUT_LIMIT - len(streams[fd])]


#: Read ends of action output pipes still held open by processes an action left running (``Popen`` of an app,
#: ``cmd &``). They are read and the data thrown away until those processes close them: closing the pipe
#: instead would kill them with SIGPIPE at their next line of output.
_LEFTOVERS: list[int] = []


def _drain_leftovers(ready: list[int]) -> None:
    for fd in ready:
        if fd in _LEFTOVERS and not os.read(fd, 65536):
            _LEFTOVERS.remove(fd)
            os.close(fd)


def _run_action(source: str, timeout: float, sync_input: bool = True) -> dict[str, Any]:
    """Fork a child of this (warm) process to run ``source``; its status and output, killed at the deadline."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    table = _process_table()
    before = {p: table[p][1] for p in _descendants(table, os.getpid())}
    if _taken_page is not None:
        _taken_page[: _TAKEN.size] = bytes(_TAKEN.size)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _run_child(source, out_w, err_w, sync_input)
    os.close(out_w)
    os.close(err_w)
    deadline = time.monotonic() + timeout
    pidfd = os.pidfd_open(pid)
    streams = {out_r: bytearray(), err_r: bytearray()}
    open_fds = [out_r, err_r]
    status: int | None = None
    timed_out = False
    try:
        while status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                _kill_action(pid, before)
                status = os.waitpid(pid, 0)[1]
                break
            ready, _, _ = select.select([*open_fds, pidfd, *_LEFTOVERS], [], [], remaining)
            _drain_leftovers(ready)
            for fd in ready:
                if fd in _LEFTOVERS:
                    continue
                if fd == pidfd:
                    status = os.waitpid(pid, 0)[1]
                    continue
                _read_output(fd, streams, open_fds)
        # the child is gone; take what it wrote, but don't wait for processes it left holding the pipes
        drain_until = time.monotonic() + 0.05
        while open_fds and time.monotonic() < drain_until:
            ready, _, _ = select.select(open_fds, [], [], max(0.0, drain_until - time.monotonic()))
            if not ready:
                break
            for fd in ready:
                _read_output(fd, streams, open_fds)
    finally:
        os.close(pidfd)
        for fd in (out_r, err_r):
            if fd in open_fds and not timed_out:  # still held by a process the action left running
                _LEFTOVERS.append(fd)
            else:
                os.close(fd)
    ended = time.monotonic()
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "output": streams[out_r].decode(errors="replace"),
        "error": streams[err_r].decode(errors="replace"),
        "timed_out": timed_out,
        "started": started,
        "ended": ended,
        "input_taken": _input_taken(started, ended),
    }


def _input_taken(started: float, ended: float) -> list[float] | None:
    """``[monotonic time, apps' ticks]`` of the action's last input wait, or ``None`` (no pyautogui call
    waited). The time is held within the action's run: it is written by agent-run code."""
    if _taken_page is None:
        return None
    at, ticks = _TAKEN.unpack(_taken_page[: _TAKEN.size])
    if not at:
        return None
    return [min(max(at, started), ended), ticks]


class _Lines:
    """JSON objects, one per line, over a stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def has_line(self) -> bool:
        """Whether a whole object is already read and waiting."""
        return b"\n" in self._buffer

    def receive(self, timeout: float | None) -> dict[str, Any] | None:
        """The next object; ``None`` when the peer closed; ``TimeoutError`` after ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        while b"\n" not in self._buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = json.loads(line)
        return message if isinstance(message, dict) else {}


def fork_server(control_fd: int) -> None:
    """Serve action requests (one JSON line each) on ``control_fd`` until it closes.

    The process imports pyautogui once; each action runs in a fresh child forked from it, so an action
    starts warm yet shares nothing mutable with the next one (the child's memory is a copy, its X
    connection its own, and this process never runs agent code itself).
    """
    global _taken_page, _server_pid
    _become_subreaper()
    _taken_page = mmap.mmap(-1, mmap.PAGESIZE)  # anonymous and shared with the children forked from here
    _server_pid = os.getppid()
    control = _Lines(socket.socket(fileno=control_fd))
    control.send({"ready": True, "warm_error": _warm_up()})
    while True:
        while _LEFTOVERS and not control.has_line():  # drain what apps left running write, between actions
            ready, _, _ = select.select([control_fd, *_LEFTOVERS], [], [])
            _drain_leftovers(ready)
            if control_fd in ready:
                break
        if (request := control.receive(None)) is None:
            break
        _reap_orphans()
        sync_input = bool(request.get("sync_input", True))
        control.send(_run_action(str(request["code"]), float(request["timeout"]), sync_input))


class ActionRunner:
    """The in-desktop server's end of the fork server: starts it, and sends it one action at a time.

    Args:
        warm_timeout: how long the first action waits for the fork server to import pyautogui.
    """

    def __init__(self, warm_timeout: float = 60.0) -> None:
        self.warm_timeout = warm_timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: _Lines | None = None
        self._ready = False

    @property
    def pid(self) -> int | None:
        """The fork server's pid (``None`` before :meth:`start`)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the fork server; it warms up in the background and :meth:`run` waits for it."""
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, SERVER_FOLDER, "--fork-server", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        self._control = _Lines(ours)
        self._ready = False

    def _stop(self) -> None:
        if self._control is not None:
            self._control.sock.close()
            self._control = None
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(_REAP_S)
            self._proc = None

    def run(self, code: str, timeout: float, sync_input: bool = True) -> dict[str, Any]:
        """Run ``code`` as a fresh ``python -c`` would; kill it (and its children) after ``timeout`` seconds.

        With ``sync_input`` (the default), each pyautogui call waits until the focused app took its input
        (:mod:`.input_sync`).

        Returns ``{returncode, output, error, timed_out}``. Raises ``OSError`` when the fork server died
        or wedged (the next call starts a new one).
        """
        with self._lock:
            try:
                if self._proc is None or self._proc.poll() is not None or self._control is None:
                    self._stop()
                    self.start()
                assert self._control is not None
                if not self._ready:
                    hello = self._control.receive(self.warm_timeout)
                    if hello is None:
                        raise ConnectionError("the action fork server exited while importing pyautogui")
                    if hello.get("warm_error"):
                        logger.warning("the action fork server cannot import pyautogui: %s", hello["warm_error"])
                    self._ready = True
                self._control.send({"code": code, "timeout": timeout, "sync_input": sync_input})
                reply = self._control.receive(timeout + 10.0)  # the fork server kills the action at `timeout`
                if reply is None:
                    raise ConnectionError("the action fork server exited while running the action")
                return reply
            except (OSError, ValueError):
                self._stop()
                raise
