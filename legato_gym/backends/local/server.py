"""The in-desktop HTTP server of the ``local`` backend: OSWorld's VM server protocol, standard library only.

It runs *inside* each desktop's sandbox (so every command it runs is sandboxed too) and answers the same
paths, fields and status codes as OSWorld's ``desktop_env/server/main.py`` (a Flask app on port 5000 in
the VM), so OSWorld's controllers and getters can talk to it. Differences, all deliberate:

* it listens on a unix socket (``--listen unix:PATH``; the sandbox has no network, so the socket file is
  how the host reaches it) or, outside a sandbox, on TCP (``--listen tcp:HOST:PORT``);
* ``/screenshot`` reads the X server's framebuffer file (``Xvfb -fbdir``) instead of ``pyautogui``, so it
  needs no third-party package; unlike OSWorld's, the image has no mouse cursor pasted in;
* ``/run_bash_script`` does not have OSWorld's undefined ``_append_event`` bug (it answers 200, not 500);
* ``/accessibility`` and ``/terminal`` read AT-SPI in a helper process run by the system's interpreter
  (``--atspi-python``, ``/usr/bin/python3``: Debian's ``python3-pyatspi`` and ``gi`` are built for it,
  not for the desktop's venv), so the server itself imports neither. The tree has OSWorld's XML format
  (:func:`atspi_tree`), with these differences: the applications come in the registry's order (OSWorld
  walks them in threads and appends them as they finish); a node whose reading fails is left out, not
  its later siblings with it; characters XML cannot hold and attribute names that are not XML names are
  dropped (OSWorld's lxml would refuse the node); Chromium's application node is named ``Google Chrome``,
  as the VM's Chrome is (Chromium answers to ``google-chrome`` here, and desktop-env's getters look for
  that name). Without AT-SPI ``/accessibility`` answers 500 and ``/terminal`` ``{"output": null}``;
* routes OSWorld serves that need GNOME or network (wallpaper, download_file, recording) answer as
  OSWorld's do when their tool is missing;
* one route of legato's own, ``POST /legato/action``, runs an agent action (pyautogui code) in a fresh
  child forked from a fork server that has already imported pyautogui (:class:`ActionRunner`): a new
  process per action, as OSWorld's ``python -c``, without paying the interpreter start and the import.

Run: ``python server.py --listen unix:/run/legato/server.sock --fb /run/legato-fb``.
"""

from __future__ import annotations

import argparse
import atexit
import builtins
import contextlib
import ctypes
import email.parser
import email.policy
import gc
import importlib
import json
import logging
import os
import platform
import re
import select
import shlex
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import uuid
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

logger = logging.getLogger("legato.desktop_server")

#: OSWorld's ``/setup/open_file`` waits this long for the window (its ``TIMEOUT``).
OPEN_FILE_TIMEOUT = 1800.0
_XWD_HEADER = struct.Struct(">25I")

Response = tuple[int, str, bytes, dict[str, str]]


# --------------------------------------------------------------------------------------------- screen


class Framebuffer:
    """The X screen as Xvfb's ``-fbdir`` XWD file (memory-mapped by Xvfb, so reads are live)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            header = _XWD_HEADER.unpack(f.read(_XWD_HEADER.size))
        header_size, ncolors = header[0], header[19]
        self.width, self.height = header[4], header[5]
        self.bits_per_pixel, self.bytes_per_line = header[11], header[12]
        self.offset = header_size + 12 * ncolors
        if self.bits_per_pixel != 32:
            raise ValueError(f"framebuffer {path}: {self.bits_per_pixel} bits per pixel; start Xvfb with depth 24")

    def bgrx(self) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read(self.bytes_per_line * self.height)

    def png(self, level: int = 1) -> bytes:
        raw = self.bgrx()
        w, h = self.width, self.height
        if self.bytes_per_line != 4 * w:
            raw = b"".join(raw[y * self.bytes_per_line : y * self.bytes_per_line + 4 * w] for y in range(h))
        rgb = bytearray(3 * w * h)
        rgb[0::3] = raw[2::4]
        rgb[1::3] = raw[1::4]
        rgb[2::3] = raw[0::4]
        stride = 3 * w
        rows = bytearray((stride + 1) * h)
        for y in range(h):
            start = y * (stride + 1) + 1
            rows[start : start + stride] = rgb[y * stride : (y + 1) * stride]

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        return b"".join(
            (
                b"\x89PNG\r\n\x1a\n",
                chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)),
                chunk(b"IDAT", zlib.compress(bytes(rows), level)),
                chunk(b"IEND", b""),
            )
        )


# -------------------------------------------------------------------------------------------- actions

#: Output an action may leave on each of stdout and stderr before the rest is dropped.
ACTION_OUTPUT_LIMIT = 4 * 1024 * 1024
_REAP_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36


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


def _run_child(source: str, out_w: int, err_w: int) -> None:
    """In the forked child: become a fresh ``python -c SOURCE`` process as far as the action can tell."""
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


def _run_action(source: str, timeout: float) -> dict[str, Any]:
    """Fork a child of this (warm) process to run ``source``; its status and output, killed at the deadline."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    table = _process_table()
    before = {p: table[p][1] for p in _descendants(table, os.getpid())}
    pid = os.fork()
    if pid == 0:
        _run_child(source, out_w, err_w)
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
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "output": streams[out_r].decode(errors="replace"),
        "error": streams[err_r].decode(errors="replace"),
        "timed_out": timed_out,
    }


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
    _become_subreaper()
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
        control.send(_run_action(str(request["code"]), float(request["timeout"])))


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
                [sys.executable, os.path.abspath(__file__), "--fork-server", str(theirs.fileno())],
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

    def run(self, code: str, timeout: float) -> dict[str, Any]:
        """Run ``code`` as a fresh ``python -c`` would; kill it (and its children) after ``timeout`` seconds.

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
                self._control.send({"code": code, "timeout": timeout})
                reply = self._control.receive(timeout + 10.0)  # the fork server kills the action at `timeout`
                if reply is None:
                    raise ConnectionError("the action fork server exited while running the action")
                return reply
            except (OSError, ValueError):
                self._stop()
                raise


# -------------------------------------------------------------------------------------------- AT-SPI

#: The interpreter that reads AT-SPI: the one Debian's ``python3-pyatspi`` and ``python3-gi`` are built for.
ATSPI_PYTHON = "/usr/bin/python3"
ATSPI_TIMEOUT = 120.0
#: The helper's exit status when it cannot import pyatspi (the desktop has no AT-SPI to read).
ATSPI_UNAVAILABLE = 3
#: OSWorld's namespaces for the Ubuntu accessibility tree (``_accessibility_ns_map["ubuntu"]``).
ATSPI_NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
#: OSWorld's bounds: children below this depth are not read, nor a node's children past this many.
ATSPI_MAX_DEPTH = 50
ATSPI_MAX_WIDTH = 1024
#: Calc's sheet: a table of every cell; only those on screen are read, looking this far for the first one.
_CALC_SEARCH = 500
_CALC_MAX_ROWS = 1_048_576
_CALC_COLUMNS = 16384  # LibreOffice 7.4 and later (1024 before)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_NAME = re.compile(r"[A-Za-z_][\w.\-]*\Z")
_TEXT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"}
_ATTR_ESCAPES = {**_TEXT_ESCAPES, '"': "&quot;", "\n": "&#10;", "\t": "&#9;"}
#: Applications renamed in the tree to the VM's: Chromium stands in for Google Chrome.
_APP_NAMES = {"Chromium": "Google Chrome"}


class _AtspiUnavailable(RuntimeError):
    """The desktop has no AT-SPI to read (no pyatspi for the helper's interpreter)."""


class _AtspiFailed(RuntimeError):
    """The AT-SPI helper failed or timed out."""


def _xml_text(value: str, escapes: dict[str, str]) -> str:
    value = _NOT_XML.sub("", value)
    return "".join(escapes.get(ch, ch) for ch in value) if any(ch in escapes for ch in value) else value


class XmlNode:
    """One element of the accessibility tree: its tag (the role), attributes in order, text and children."""

    def __init__(self, tag: str, attributes: list[tuple[str, str]], text: str = "") -> None:
        self.tag = tag
        self.attributes = attributes
        self.text = text
        self.children: list[XmlNode] = []

    def get(self, name: str) -> str | None:
        """The value of attribute ``name`` (``prefix:local`` for a namespaced one)."""
        return next((value for key, value in self.attributes if key == name), None)

    def iter(self) -> Iterator[XmlNode]:
        """This node and every node below it, in document order."""
        yield self
        for child in self.children:
            yield from child.iter()

    def serialize(self, out: list[str], root: bool = False) -> None:
        """Append this element's XML to ``out`` (the root declares OSWorld's namespaces, as lxml's does)."""
        out.append("<" + self.tag)
        if root:
            out.extend(f' xmlns:{prefix}="{uri}"' for prefix, uri in ATSPI_NS.items())
        out.extend(f' {key}="{_xml_text(value, _ATTR_ESCAPES)}"' for key, value in self.attributes)
        if not self.text and not self.children:
            out.append("/>")
            return
        out.append(">" + _xml_text(self.text, _TEXT_ESCAPES))
        for child in self.children:
            child.serialize(out)
        out.append(f"</{self.tag}>")

    def tostring(self) -> str:
        out: list[str] = []
        self.serialize(out, root=True)
        return "".join(out)


def _optional(read: Callable[[], Any]) -> Any:
    """``read()``, or ``None`` when the node does not implement that AT-SPI interface."""
    try:
        return read()
    except NotImplementedError:
        return None


def _atspi_node(pyatspi: Any, node: Any, depth: int, flag: str | None) -> XmlNode:
    """One accessible object and what is below it, with OSWorld's names for its states and interfaces.

    Attributes, in OSWorld's order: ``name``; ``st:STATE="true"`` per state; ``attr:NAME`` per object
    attribute; ``cp:screencoord`` and ``cp:size`` when visible and showing; ``image`` and ``selection``
    (``"true"``) for those interfaces; ``val:value|min|max|step``; ``act:ACTION_desc`` and ``act:ACTION_kb``.
    The text (``\ufffc``/``\ufffd`` removed) is the element's text; the role, spaces as ``-``, its tag.
    """
    attributes: list[tuple[str, str]] = [("name", str(node.name or ""))]
    states = set()
    for state in node.getState().get_states():
        name = str(pyatspi.StateType._enum_lookup[state]).split("_", 1)[1].lower()
        if name:
            states.add(name)
            attributes.append((f"st:{name}", "true"))
    for key, value in (node.get_attributes() or {}).items():
        if key and _XML_NAME.match(key):
            attributes.append((f"attr:{key}", str(value)))
    if "visible" in states and "showing" in states:
        component = _optional(node.queryComponent)
        if component is not None:
            box = tuple(component.getExtents(pyatspi.XY_SCREEN))
            attributes += [("cp:screencoord", str(box[0:2])), ("cp:size", str(box[2:]))]
    text = ""
    reader = _optional(node.queryText)
    if reader is not None:
        text = str(reader.getText(0, reader.characterCount)).replace("\ufffc", "").replace("\ufffd", "")
    if _optional(node.queryImage) is not None:
        attributes.append(("image", "true"))
    if _optional(node.querySelection) is not None:
        attributes.append(("selection", "true"))
    value = _optional(node.queryValue)
    if value is not None:
        for key, field in (("value", "currentValue"), ("min", "minimumValue"), ("max", "maximumValue")):
            with contextlib.suppress(Exception):
                attributes.append((f"val:{key}", str(getattr(value, field))))
        with contextlib.suppress(Exception):
            attributes.append(("val:step", str(value.minimumIncrement)))
    action = _optional(node.queryAction)
    if action is not None:
        for i in range(action.nActions):
            name = str(action.getName(i)).replace(" ", "-")
            if _XML_NAME.match(name + "_kb"):
                attributes.append((f"act:{name}_desc", str(action.getDescription(i))))
                attributes.append((f"act:{name}_kb", str(action.getKeyBinding(i))))
    role = str(node.getRoleName()).strip()
    if not flag and role == "document spreadsheet":
        flag = "calc"
    elif not flag and role == "application" and node.name == "Thunderbird":
        flag = "thunderbird"
    tag = (role or "unknown").replace(" ", "-")
    element = XmlNode(tag if _XML_NAME.match(tag) else "unknown", attributes, text)
    if depth >= ATSPI_MAX_DEPTH:
        return element
    children = _calc_cells(pyatspi, node) if flag == "calc" and tag == "table" else _children(node)
    try:
        for child in children:
            with contextlib.suppress(Exception):  # a child gone or unreadable: leave it out
                element.children.append(_atspi_node(pyatspi, child, depth + 1, flag))
    except Exception:  # the node's children cannot be listed any further: keep those read
        logger.debug("stopped reading the children of a %s", tag, exc_info=True)
    return element


def _children(node: Any) -> Iterator[Any]:
    for i in range(min(int(node.childCount), ATSPI_MAX_WIDTH)):
        child = node.getChildAtIndex(i)
        if child is not None:
            yield child


def _calc_cells(pyatspi: Any, table: Any) -> Iterator[Any]:
    """The cells of a Calc sheet that are on screen, row by row, as OSWorld reads them.

    The sheet exposes every cell (a million rows), so the walk looks for the first showing cell within the
    first :data:`_CALC_SEARCH` rows and columns, then reads each row from that column until a cell is not
    showing, and stops at the first row whose first column is not showing.
    """
    columns = _optional(lambda: int(table.queryTable().nColumns)) or _CALC_COLUMNS
    first: int | None = None
    for row in range(_CALC_MAX_ROWS):
        found = False
        for column in range(first or 0, columns):
            cell = table.getChildAtIndex(row * columns + column)
            if cell is not None and cell.getState().contains(pyatspi.STATE_SHOWING):
                found = True
                first = column if first is None else first
                yield cell
            elif first is not None or column >= _CALC_SEARCH:
                break
        if (first is not None and not found) or (first is None and row >= _CALC_SEARCH):
            return


def _applications(pyatspi: Any) -> Iterator[Any]:
    desktop = pyatspi.Registry.getDesktop(0)
    for i in range(int(desktop.childCount)):
        app = desktop.getChildAtIndex(i)
        if app is not None:
            yield app


def _application_node(pyatspi: Any, app: Any) -> XmlNode | None:
    try:
        element = _atspi_node(pyatspi, app, 1, None)
    except Exception:  # the application quit while it was read
        logger.debug("skipped an application that could not be read", exc_info=True)
        return None
    if element.tag == "application" and element.get("name") in _APP_NAMES:
        element.attributes[0] = ("name", _APP_NAMES[str(element.get("name"))])
    return element


def atspi_tree(pyatspi: Any) -> str:
    """The desktop's accessibility tree as OSWorld's server gives it on Linux: a ``desktop-frame`` root with
    one element per application (see :func:`_atspi_node` for the elements)."""
    root = XmlNode("desktop-frame", [])
    for app in _applications(pyatspi):
        element = _application_node(pyatspi, app)
        if element is not None:
            root.children.append(element)
    return root.tostring()


def atspi_terminal(pyatspi: Any) -> str | None:
    """The text of gnome-terminal's focused terminal in its active window, right-stripped, as OSWorld's
    ``/terminal`` (``//application[@name="gnome-terminal-server"]/frame[@st:active="true"]
    //terminal[@st:focused="true"]``, exactly one); ``None`` when there is none, or more than one."""
    found: list[XmlNode] = []
    for app in _applications(pyatspi):
        if app.name != "gnome-terminal-server" or app.getRoleName() != "application":
            continue
        element = _application_node(pyatspi, app)
        for frame in element.children if element is not None else []:
            if frame.tag == "frame" and frame.get("st:active") == "true":
                found += [n for n in frame.iter() if n.tag == "terminal" and n.get("st:focused") == "true"]
    return found[0].text.rstrip() if len(found) == 1 else None


def atspi_main(what: str) -> int:
    """The AT-SPI helper (``server.py --atspi tree|terminal``): prints its answer as one JSON object."""
    try:
        pyatspi = importlib.import_module("pyatspi")
    except Exception as exc:  # ImportError, or gi failing to load its typelibs
        sys.stderr.write(f"cannot import pyatspi under {sys.executable}: {exc} (apt-get install python3-pyatspi)\n")
        return ATSPI_UNAVAILABLE
    if what == "tree":
        answer: dict[str, Any] = {"AT": atspi_tree(pyatspi)}
    elif what == "terminal":
        answer = {"output": atspi_terminal(pyatspi)}
    else:
        sys.stderr.write(f"--atspi {what!r}: give tree or terminal\n")
        return 2
    sys.stdout.write(json.dumps(answer))
    return 0


# ------------------------------------------------------------------------------------------- handlers


def _json(data: Any, status: int = 200) -> Response:
    return status, "application/json", json.dumps(data).encode(), {}


def _text(text: str, status: int = 200) -> Response:
    return status, "text/html; charset=utf-8", text.encode(), {}


def _expand_command(data: dict[str, Any]) -> tuple[list[str] | str, bool]:
    shell = bool(data.get("shell", False))
    command = data.get("command", "" if shell else [])
    if isinstance(command, str) and not shell:
        command = shlex.split(command)
    if isinstance(command, list):
        command = [os.path.expanduser(arg) if arg.startswith("~/") else arg for arg in command]
    return command, shell


def _wmctrl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["wmctrl", *args], capture_output=True, text=True, timeout=10)


class Handlers:
    """One method per OSWorld route; each returns ``(status, content type, body, extra headers)``."""

    def __init__(
        self,
        fb: Framebuffer | None,
        open_file_timeout: float,
        runner: ActionRunner | None = None,
        atspi_python: str = ATSPI_PYTHON,
        atspi_timeout: float = ATSPI_TIMEOUT,
    ) -> None:
        self.fb = fb
        self.open_file_timeout = open_file_timeout
        self.runner = runner
        self.atspi_python = atspi_python
        self.atspi_timeout = atspi_timeout
        self._children: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def _spawn(self, command: list[str] | str, shell: bool) -> None:
        # not this server's stderr: nobody reads it while the desktop runs, and an app that fills it (LibreOffice
        # warns on stderr for every AT-SPI read of its menus) would block on its next write
        proc = subprocess.Popen(command, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with self._lock:
            self._children = [p for p in self._children if p.poll() is None]
            self._children.append(proc)

    # --- commands
    def execute(self, data: dict[str, Any]) -> Response:
        command, shell = _expand_command(data)
        try:
            result = subprocess.run(command, capture_output=True, shell=shell, text=True, timeout=120)
        except Exception as exc:
            return _json({"status": "error", "message": str(exc)}, 500)
        return _json(
            {"status": "success", "output": result.stdout, "error": result.stderr, "returncode": result.returncode}
        )

    def action(self, data: dict[str, Any]) -> Response:
        """legato's own route: run pyautogui code in a child of the warm fork server (see :class:`ActionRunner`).

        Body ``{"code": str, "timeout": seconds}``; answers ``/execute``'s fields plus ``timed_out``.
        """
        code, timeout = data.get("code"), data.get("timeout", 120)
        if not isinstance(code, str) or not code:
            return _json({"status": "error", "message": "code (python source) is required"}, 400)
        if not isinstance(timeout, (int, float)) or not timeout > 0:
            return _json({"status": "error", "message": f"timeout={timeout!r}: give a positive number"}, 400)
        if self.runner is None:
            return _json({"status": "error", "message": "this server runs no action fork server"}, 500)
        try:
            result = self.runner.run(code, float(timeout))
        except (OSError, ValueError) as exc:
            return _json({"status": "error", "message": f"the action fork server failed: {exc}"}, 500)
        return _json({"status": "success", **result})

    def execute_with_verification(self, data: dict[str, Any]) -> Response:
        command, shell = _expand_command(data)
        verification = data.get("verification") or {}
        max_wait = float(data.get("max_wait_time", 10))
        interval = float(data.get("check_interval", 1))
        try:
            result = subprocess.run(command, capture_output=True, shell=shell, text=True, timeout=120)
        except Exception as exc:
            return _json({"status": "error", "message": str(exc)}, 500)
        base = {"output": result.stdout, "error": result.stderr, "returncode": result.returncode}
        if not verification:
            return _json({"status": "success", **base})
        start = time.monotonic()
        while time.monotonic() - start < max_wait:
            passed = True
            if "window_exists" in verification:
                try:
                    listing = _wmctrl("-l").stdout
                    passed = str(verification["window_exists"]).lower() in listing.lower()
                except Exception:
                    passed = False
            if passed and "command_success" in verification:
                try:
                    check = subprocess.run(verification["command_success"], shell=True, capture_output=True, timeout=5)
                    passed = check.returncode == 0
                except Exception:
                    passed = False
            if passed:
                wait = time.monotonic() - start
                return _json({"status": "success", **base, "verification": "passed", "wait_time": wait})
            time.sleep(interval)
        return _json({"status": "verification_failed", **base, "verification": "failed", "wait_time": max_wait}, 500)

    def launch(self, data: dict[str, Any]) -> Response:
        command, shell = _expand_command(data)
        try:
            self._spawn(command, shell)
        except Exception as exc:
            return _json({"status": "error", "message": str(exc)}, 500)
        shown = command if shell or isinstance(command, str) else " ".join(command)
        return _text(f"{shown} launched successfully")

    def run_python(self, data: dict[str, Any]) -> Response:
        code = data.get("code")
        if not code:
            return _json({"status": "error", "message": "Code not supplied!"}, 400)
        path = os.path.join(tempfile.gettempdir(), f"python_exec_{uuid.uuid4().hex}.py")
        try:
            Path(path).write_text(code)
            result = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return _json(
                {
                    "status": "error",
                    "message": "Execution timeout: Code took too long to execute",
                    "error": "TimeoutExpired",
                    "need_more": False,
                    "output": None,
                },
                500,
            )
        except Exception as exc:
            return _json(
                {"status": "error", "message": f"Execution error: {exc}", "error": repr(exc), "need_more": False}, 500
            )
        finally:
            Path(path).unlink(missing_ok=True)
        output, error = result.stdout, result.stderr
        message = output + (("\n" + error) if output else error) if error else output
        status = "success"
        if result.returncode != 0:
            status = "error"
            if not error:
                error = f"Process exited with code {result.returncode}"
                message = message + "\n" + error if message else error
        return _json(
            {
                "status": status,
                "message": message,
                "need_more": False,
                "output": output,
                "error": error,
                "return_code": result.returncode,
            }
        )

    def run_bash_script(self, data: dict[str, Any]) -> Response:
        script = data.get("script")
        timeout = float(data.get("timeout", 100))
        working_dir = data.get("working_dir")
        if not script:
            return _json({"status": "error", "output": "Script not supplied!", "error": "", "returncode": -1}, 400)
        if working_dir:
            working_dir = os.path.expanduser(working_dir)
            if not os.path.exists(working_dir):
                return _json(
                    {
                        "status": "error",
                        "output": f"Working directory does not exist: {working_dir}",
                        "error": "",
                        "returncode": -1,
                    },
                    400,
                )
        if "#!/bin/bash" not in script:
            script = "#!/bin/bash\n\n" + script
        fd, path = tempfile.mkstemp(suffix=".sh")
        with os.fdopen(fd, "w") as f:
            f.write(script)
        try:
            result = subprocess.run(
                ["/bin/bash", path],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                cwd=working_dir,
            )
        except subprocess.TimeoutExpired:
            return _json(
                {
                    "status": "error",
                    "output": f"Script execution timed out after {timeout:g} seconds",
                    "error": "",
                    "returncode": -1,
                },
                500,
            )
        finally:
            Path(path).unlink(missing_ok=True)
        return _json(
            {
                "status": "success" if result.returncode == 0 else "error",
                "output": result.stdout,
                "error": "",
                "returncode": result.returncode,
            }
        )

    # --- screen
    def screenshot(self, data: dict[str, Any]) -> Response:
        if self.fb is None:
            return _text("no framebuffer (start the server with --fb)", 500)
        return 200, "image/png", self.fb.png(), {}

    def screen_size(self, data: dict[str, Any]) -> Response:
        if self.fb is None:
            return _text("no framebuffer (start the server with --fb)", 500)
        return _json({"width": self.fb.width, "height": self.fb.height})

    def cursor_position(self, data: dict[str, Any]) -> Response:
        out = subprocess.run(["xdotool", "getmouselocation", "--shell"], capture_output=True, text=True, timeout=10)
        fields = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        return _json([int(fields.get("X", 0)), int(fields.get("Y", 0))])

    def window_size(self, data: dict[str, Any]) -> Response:
        name = data.get("app_class_name")
        if not name:
            return _json({"error": "app_class_name is required"}, 400)
        for line in _wmctrl("-lGx").stdout.splitlines():
            parts = line.split(None, 7)
            if len(parts) >= 7 and name.lower() in [c.lower() for c in parts[6].split(".")]:
                return _json({"width": int(parts[4]), "height": int(parts[5])})
        return _text("Internal Server Error", 500)

    def platform(self, data: dict[str, Any]) -> Response:
        return _text(platform.system())

    def accessibility(self, data: dict[str, Any]) -> Response:
        """OSWorld's ``{"AT": xml}``: the AT-SPI tree of every application on the desktop (:func:`atspi_tree`)."""
        try:
            reply = self._atspi("tree")
        except _AtspiUnavailable as exc:
            return _text(f"Currently not implemented for platform {platform.platform()}: {exc}", 500)
        except _AtspiFailed as exc:
            return _json({"status": "error", "message": str(exc)}, 500)
        return _json({"AT": reply["AT"]})

    def terminal(self, data: dict[str, Any]) -> Response:
        """The text of the focused gnome-terminal tab in the active window, as OSWorld's (:func:`atspi_terminal`)."""
        try:
            reply = self._atspi("terminal")
        except _AtspiUnavailable:
            return _json({"output": None, "status": "success"})  # no AT-SPI: no terminal can be read
        except _AtspiFailed as exc:
            return _json({"status": "error", "message": str(exc)}, 500)
        return _json({"output": reply["output"], "status": "success"})

    def _atspi(self, what: str) -> dict[str, Any]:
        """Run the AT-SPI helper (``server.py --atspi WHAT`` under :attr:`atspi_python`); its JSON answer."""
        python = self.atspi_python
        if not os.path.exists(python):
            raise _AtspiUnavailable(f"no {python} to read AT-SPI with (apt-get install python3-pyatspi at-spi2-core)")
        try:
            proc = subprocess.run(
                [python, "-I", os.path.abspath(__file__), "--atspi", what],
                capture_output=True, text=True, timeout=self.atspi_timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise _AtspiFailed(f"reading the accessibility tree took more than {self.atspi_timeout:g} s") from exc
        if proc.returncode == ATSPI_UNAVAILABLE:
            raise _AtspiUnavailable(proc.stderr.strip()[-500:])
        try:
            reply = json.loads(proc.stdout)
        except ValueError:
            reply = None
        if proc.returncode != 0 or not isinstance(reply, dict):
            raise _AtspiFailed(f"the AT-SPI helper failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return reply

    def desktop_path(self, data: dict[str, Any]) -> Response:
        path = os.path.join(str(Path.home()), "Desktop")
        if os.path.exists(path):
            return _json({"desktop_path": path})
        return _json({"error": "Unsupported operating system or desktop path not found"}, 404)

    def wallpaper(self, data: dict[str, Any]) -> Response:
        return _text("Wallpaper file not found", 404)

    def start_recording(self, data: dict[str, Any]) -> Response:
        message = "ffmpeg is required for recording but was not found in PATH."
        return _json({"status": "error", "message": message}, 500)

    def end_recording(self, data: dict[str, Any]) -> Response:
        return _json({"status": "error", "message": "No recording in progress to stop."}, 400)

    # --- files
    def list_directory(self, data: dict[str, Any]) -> Response:
        if "path" not in data:
            return _json({"error": "Missing 'path' parameter"}, 400)
        start = data["path"]
        if not os.path.isdir(start):
            return _json({"error": "The provided path is not a directory"}, 400)

        def tree(directory: str) -> dict[str, Any]:
            node: dict[str, Any] = {"type": "directory", "name": os.path.basename(directory), "children": []}
            try:
                for entry in os.listdir(directory):
                    full = os.path.join(directory, entry)
                    if os.path.isdir(full):
                        node["children"].append(tree(full))
                    else:
                        node["children"].append({"type": "file", "name": entry})
            except OSError as exc:
                return {"error": str(exc)}
            return node

        return _json({"directory_tree": tree(start)})

    def file(self, data: dict[str, Any]) -> Response:
        if "file_path" not in data:
            return _json({"error": "file_path is required"}, 400)
        path = os.path.expandvars(os.path.expanduser(data["file_path"]))
        if not os.path.exists(path):
            return _json({"error": "File not found"}, 404)
        try:
            body = Path(path).read_bytes()
        except FileNotFoundError:
            return _json({"error": "File not found"}, 404)
        except Exception as exc:
            return _json({"error": f"Failed to serve file: {exc}"}, 500)
        disposition = f'attachment; filename="{os.path.basename(path)}"'
        return 200, "application/octet-stream", body, {"Content-Disposition": disposition}

    def upload(self, data: dict[str, Any]) -> Response:
        file_data = data.get("file_data")
        if "file_path" not in data or not isinstance(file_data, bytes):
            return _json({"error": "file_path and file_data are required"}, 400)
        path = os.path.expandvars(os.path.expanduser(data["file_path"]))
        try:
            if os.path.dirname(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).write_bytes(file_data)
        except Exception as exc:
            Path(path).unlink(missing_ok=True)
            return _json({"error": f"Failed to upload file: {exc}"}, 500)
        return _text(f"File Uploaded: {os.path.getsize(path)} bytes")

    def open_file(self, data: dict[str, Any]) -> Response:
        path = data.get("path")
        if not path:
            return _text("Path not supplied!", 400)
        target = Path(os.path.expandvars(os.path.expanduser(path)))
        is_file = target.exists()
        if not is_file and not shutil.which(path):
            return _text(f"Application/file not found: {path}", 404)
        try:
            if is_file:
                self._spawn(_opener(target), False)
                name, stem = target.name, os.path.splitext(target.name)[0]
            else:
                self._spawn([path], False)
                name = stem = path
            deadline = time.monotonic() + self.open_file_timeout
            while time.monotonic() < deadline:
                for line in _wmctrl("-l").stdout.splitlines():
                    if name in line or stem in line:
                        _wmctrl("-i", "-a", line.split()[0])
                        return _text("File opened and window activated successfully")
                time.sleep(0.05)
            return _text(f"Failed to find window for {name} within {self.open_file_timeout:g} seconds.", 500)
        except Exception as exc:
            return _text(f"Failed to open {path}. Error: {exc}", 500)

    def activate_window(self, data: dict[str, Any]) -> Response:
        name = data.get("window_name")
        if not name:
            return _text("window_name required", 400)
        flags = "-{}{}a".format("x" if data.get("by_class") else "", "F" if data.get("strict") else "")
        _wmctrl(flags, name)
        return _text("Window activated successfully")

    def close_window(self, data: dict[str, Any]) -> Response:
        if "window_name" not in data:
            return _text("window_name required", 400)
        flags = "-{}{}c".format("x" if data.get("by_class") else "", "F" if data.get("strict") else "")
        _wmctrl(flags, data["window_name"])
        return _text("Window closed successfully.")


def _opener(path: Path) -> list[str]:
    """``xdg-open`` when installed, else the app this desktop has for the file type."""
    if shutil.which("xdg-open"):
        return ["xdg-open", str(path)]
    office = {".xlsx": "--calc", ".xls": "--calc", ".ods": "--calc", ".csv": "--calc", ".docx": "--writer"}
    office |= {".doc": "--writer", ".odt": "--writer", ".pptx": "--impress", ".odp": "--impress"}
    flag = office.get(path.suffix.lower())
    if flag and shutil.which("soffice"):
        return ["soffice", flag, "--norestore", "--nologo", "--nofirststartwizard", str(path)]
    for editor in ("mousepad", "gedit", "xed"):
        if shutil.which(editor):
            return [editor, str(path)]
    return ["xterm", "-e", "less", str(path)]


ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/execute"): "execute",
    ("POST", "/setup/execute"): "execute",
    ("POST", "/execute_with_verification"): "execute_with_verification",
    ("POST", "/setup/execute_with_verification"): "execute_with_verification",
    ("POST", "/setup/launch"): "launch",
    ("POST", "/run_python"): "run_python",
    ("POST", "/legato/action"): "action",
    ("POST", "/run_bash_script"): "run_bash_script",
    ("GET", "/screenshot"): "screenshot",
    ("POST", "/screen_size"): "screen_size",
    ("POST", "/window_size"): "window_size",
    ("GET", "/cursor_position"): "cursor_position",
    ("GET", "/platform"): "platform",
    ("GET", "/accessibility"): "accessibility",
    ("GET", "/terminal"): "terminal",
    ("POST", "/desktop_path"): "desktop_path",
    ("POST", "/wallpaper"): "wallpaper",
    ("POST", "/start_recording"): "start_recording",
    ("POST", "/end_recording"): "end_recording",
    ("POST", "/list_directory"): "list_directory",
    ("POST", "/file"): "file",
    ("POST", "/setup/upload"): "upload",
    ("POST", "/setup/open_file"): "open_file",
    ("POST", "/setup/activate_window"): "activate_window",
    ("POST", "/setup/close_window"): "close_window",
}


def _parse_body(content_type: str, body: bytes) -> dict[str, Any]:
    """JSON, urlencoded form or multipart form (file fields as bytes) into one dict, like Flask's views see."""
    kind = content_type.split(";")[0].strip().lower()
    if not body:
        return {}
    if kind == "application/x-www-form-urlencoded":
        return {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
    if kind == "multipart/form-data":
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        fields: dict[str, Any] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if not isinstance(name, str) or not isinstance(payload, bytes):
                continue
            fields[name] = payload if part.get_filename() is not None else payload.decode()
        return fields
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


class RequestHandler(BaseHTTPRequestHandler):
    server_version = "legato-desktop/0"
    protocol_version = "HTTP/1.1"
    handlers: Handlers

    def address_string(self) -> str:  # a unix socket peer has no address
        return "local"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        name = ROUTES.get((method, self.path.split("?")[0]))
        if name is None:
            known = any(path == self.path.split("?")[0] for _, path in ROUTES)
            response: Response = _text("Method Not Allowed", 405) if known else _text("Not Found", 404)
        else:
            try:
                data = _parse_body(self.headers.get("Content-Type", ""), body)
                response = getattr(self.handlers, name)(data)
            except Exception as exc:
                logger.exception("handler %s failed", name)
                response = _json({"status": "error", "message": str(exc)}, 500)
        status, content_type, payload, headers = response
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class TCPHTTPServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(
    listen: str, fb_path: str | None, open_file_timeout: float = OPEN_FILE_TIMEOUT, atspi_python: str = ATSPI_PYTHON
) -> None:
    """Serve forever on ``unix:PATH`` or ``tcp:HOST:PORT``."""
    fb = Framebuffer(fb_path) if fb_path else None
    runner = ActionRunner()
    runner.start()  # warms up while the host runs the task's setup
    handlers = Handlers(fb, open_file_timeout, runner, atspi_python)
    handler = type("BoundHandler", (RequestHandler,), {"handlers": handlers})
    server: socketserver.BaseServer
    kind, _, address = listen.partition(":")
    if kind == "unix":
        tmp = f"{address}.{os.getpid()}.tmp"
        server = UnixHTTPServer(tmp, handler)
        os.chmod(tmp, 0o600)
        os.replace(tmp, address)  # the socket appears only once it accepts connections
    elif kind == "fd":  # a listening socket the host bound where the sandbox cannot reach it
        server = UnixHTTPServer("", handler, bind_and_activate=False)
        server.socket.close()
        server.socket = socket.socket(fileno=int(address))
    elif kind == "tcp":
        host, _, port = address.rpartition(":")
        server = TCPHTTPServer((host or "127.0.0.1", int(port)), handler)
    else:
        raise SystemExit(f"--listen {listen!r}: give unix:PATH, fd:N or tcp:HOST:PORT")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever(poll_interval=0.5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    if argv is None and sys.argv[1:2] == ["--fork-server"]:
        fork_server(int(sys.argv[2]))  # started by ActionRunner, never by hand
        return
    if argv is None and sys.argv[1:2] == ["--atspi"] and len(sys.argv) == 3:
        sys.exit(atspi_main(sys.argv[2]))  # run by Handlers._atspi under the system's interpreter
    parser.add_argument("--listen", required=True, help="unix:PATH, fd:N (listening unix socket) or tcp:HOST:PORT")
    parser.add_argument("--fb", help="Xvfb -fbdir framebuffer file (XWD) of this display")
    parser.add_argument("--open-file-timeout", type=float, default=OPEN_FILE_TIMEOUT)
    parser.add_argument("--atspi-python", default=ATSPI_PYTHON, help="interpreter with pyatspi (AT-SPI reads)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    socket.setdefaulttimeout(None)
    serve(args.listen, args.fb, args.open_file_timeout, args.atspi_python)


if __name__ == "__main__":
    main()
