"""OSWorld's routes: one method of :class:`Handlers` per path, each answering as OSWorld's server does.

Every handler takes the request's fields (JSON, form or multipart, as one dict) and returns a
:data:`Response`; :mod:`.httpd` maps paths to handlers (its ``ROUTES``) and writes the answers.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from .actions import ACTION_OUTPUT_LIMIT, SERVER_FOLDER, ActionRunner
from .atspi import ATSPI_PYTHON, ATSPI_TIMEOUT, ATSPI_UNAVAILABLE
from .damage import ScreenWatch, work_ticks
from .image import Framebuffer
from .pointer import read_pointer

__all__ = [
    "OPEN_FILE_TIMEOUT",
    "SERVER_MODES",
    "Handlers",
    "Response",
    "flask_error",
    "json_reply",
    "run_capped",
    "text_reply",
]

#: ``legato``: this server's own answers. ``osworld``: also what OSWorld's real server does that a client can
#: see (reference/osworld.md §3b): an X connection leaked per ``/screenshot`` and death once X is full, Flask's
#: HTML answers to bodies of the wrong kind (415, 400) and to unhandled errors (500), form-only routes.
SERVER_MODES = ("legato", "osworld")

_FLASK_ERRORS = {
    400: ("Bad Request", "The browser (or proxy) sent a request that this server could not understand."),
    415: (
        "Unsupported Media Type",
        "Did not attempt to load JSON data because the request Content-Type was not &#39;application/json&#39;.",
    ),
    500: (
        "Internal Server Error",
        "The server encountered an internal error and was unable to complete your request. Either the server is "
        "overloaded or there is an error in the application.",
    ),
}

#: OSWorld's ``/setup/open_file`` waits this long for the window (its ``TIMEOUT``).
OPEN_FILE_TIMEOUT = 1800.0

#: ``(status, content type, body, extra headers)``.
Response = tuple[int, str, bytes, dict[str, str]]


class _AtspiUnavailable(RuntimeError):
    """The desktop has no AT-SPI to read (no pyatspi for the helper's interpreter)."""


class _AtspiFailed(RuntimeError):
    """The AT-SPI helper failed or timed out."""


def json_reply(data: Any, status: int = 200) -> Response:
    """``data`` as a JSON answer."""
    return status, "application/json", json.dumps(data).encode(), {}


def text_reply(text: str, status: int = 200) -> Response:
    """``text`` as an HTML answer (what Flask gives a view's string)."""
    return status, "text/html; charset=utf-8", text.encode(), {}


def flask_error(status: int) -> Response:
    """The HTML page Flask (Werkzeug) answers ``status`` with, as OSWorld's server does."""
    title, text = _FLASK_ERRORS[status]
    page = f"<!doctype html>\n<html lang=en>\n<title>{status} {title}</title>\n<h1>{title}</h1>\n<p>{text}</p>\n"
    return text_reply(page, status)


def _expand_command(data: dict[str, Any]) -> tuple[list[str] | str, bool]:
    shell = bool(data.get("shell", False))
    command = data.get("command", "" if shell else [])
    if isinstance(command, str) and not shell:
        command = shlex.split(command)
    if isinstance(command, list):
        command = [os.path.expanduser(arg) if arg.startswith("~/") else arg for arg in command]
    return command, shell


def _drain(stream: Any, kept: bytearray, limit: int) -> None:
    """Read ``stream`` to its end, keeping its first ``limit`` bytes in ``kept`` (the rest is read and dropped)."""
    fd = stream.fileno()
    while chunk := os.read(fd, 65536):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]


def run_capped(
    command: list[str] | str,
    shell: bool,
    timeout: float,
    *,
    merge: bool = False,
    cwd: str | None = None,
    limit: int = ACTION_OUTPUT_LIMIT,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(command, capture_output=True, text=True, timeout=timeout)``, keeping at most ``limit``
    bytes of each of stdout and stderr (the rest is read and dropped, as an action's output is): a command
    that prints gigabytes costs this server, and the host that reads its answer, ``limit`` bytes.

    ``merge`` sends stderr to stdout. Output is decoded as UTF-8 (invalid bytes replaced). Output still held
    by processes the command left running is not waited for once it exits.

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout`` (it was killed).
    """
    proc = subprocess.Popen(
        command, shell=shell, cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
    )  # fmt: skip
    kept = {"out": bytearray(), "err": bytearray()}
    streams = {"out": proc.stdout, "err": proc.stderr}
    readers = [
        threading.Thread(target=_drain, args=(stream, kept[name], limit), daemon=True)
        for name, stream in streams.items()
        if stream is not None
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    for reader in readers:  # what the command wrote before it exited is in the pipes: read it
        reader.join(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
    out, err = (bytes(kept[name]).decode("utf-8", errors="replace") for name in ("out", "err"))
    return subprocess.CompletedProcess(command, code, out, err)


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
        mode: str = "legato",
        pointer: bool = True,
        watch: ScreenWatch | None = None,
    ) -> None:
        if mode not in SERVER_MODES:
            raise ValueError(f"server mode {mode!r}: choose one of {', '.join(SERVER_MODES)}")
        self.mode = mode
        self.pointer = pointer
        #: ``/screenshot`` answers in ``osworld`` mode once X refused the server a connection (then it dies).
        self.x_refused = 0
        self.fb = fb
        self.open_file_timeout = open_file_timeout
        self.runner = runner
        self.atspi_python = atspi_python
        self.atspi_timeout = atspi_timeout
        #: The screen's changes (X DAMAGE) for the wait after an action; ``None`` or not running: the host
        #: compares frames instead.
        self.watch = watch
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
            result = run_capped(command, shell, 120)
        except Exception as exc:
            return json_reply({"status": "error", "message": str(exc)}, 500)
        return json_reply(
            {"status": "success", "output": result.stdout, "error": result.stderr, "returncode": result.returncode}
        )

    def action(self, data: dict[str, Any]) -> Response:
        """legato's own route: run pyautogui code in a child of the warm fork server (see :class:`ActionRunner`).

        Body ``{"code": str, "timeout": seconds, "sync_input": bool, "still": {...}}`` (``sync_input``, default
        true: each pyautogui call waits until the focused app took its input); answers ``/execute``'s fields
        plus ``timed_out``.

        With ``"still": {"quiet": s, "timeout": s, "poll": s, "allowance": ticks}``, the answer comes once the
        screen has had no change (X DAMAGE, :mod:`.damage`) and the apps have used at most ``allowance``
        clock ticks for ``quiet`` s since the focused app took the action's last input (or since the action
        ended, when no pyautogui call waited for input), or once ``timeout`` s of waiting passed; it then
        holds ``"still": {"ready", "seconds", "quiet_for", "how": "damage"}``, or ``{"how": "none",
        "why": ...}`` when this server cannot watch the screen (the caller compares frames itself).
        """
        code, timeout, sync_input = data.get("code"), data.get("timeout", 120), data.get("sync_input", True)
        if not isinstance(code, str) or not code:
            return json_reply({"status": "error", "message": "code (python source) is required"}, 400)
        if not isinstance(timeout, (int, float)) or not timeout > 0:
            return json_reply({"status": "error", "message": f"timeout={timeout!r}: give a positive number"}, 400)
        if self.runner is None:
            return json_reply({"status": "error", "message": "this server runs no action fork server"}, 500)
        still = data.get("still")
        if still is not None and not _valid_still(still):
            message = f"still={still!r}: give {{quiet, timeout, poll}} in positive seconds and allowance >= 0 ticks"
            return json_reply({"status": "error", "message": message}, 400)
        try:
            result = self.runner.run(code, float(timeout), bool(sync_input))
        except (OSError, ValueError) as exc:
            return json_reply({"status": "error", "message": f"the action fork server failed: {exc}"}, 500)
        result.pop("started", None)
        ended = result.pop("ended", None)
        taken = result.pop("input_taken", None)
        if still is not None and not result.get("timed_out"):
            result["still"] = self._wait_still(still, ended, taken)
        return json_reply({"status": "success", **result})

    def _wait_still(self, still: dict[str, Any], ended: float | None, taken: list[float] | None) -> dict[str, Any]:
        """The wait of :meth:`action`'s ``still``: from the action's last input taken, else from its end."""
        watch = self.watch
        if watch is None or not watch.running:
            return {"how": "none", "why": watch.unavailable if watch is not None else "no screen watch"}
        runner_pid = self.runner.pid if self.runner is not None else None
        skip = (os.getpid(), *([runner_pid] if runner_pid else []))

        def ticks() -> int:
            return work_ticks(skip)

        now = time.monotonic()
        since, base = (taken[0], int(taken[1])) if taken else (ended or now, None)
        waited = watch.wait_still(
            since=min(since, now),
            quiet=float(still["quiet"]),
            deadline=now + float(still["timeout"]),
            poll=float(still["poll"]),
            work=ticks,
            work_since=base,
            allowance=int(still.get("allowance", 0)),
        )
        return {"how": "damage", "ready": waited.ready, "seconds": waited.seconds, "quiet_for": waited.quiet_for}

    def execute_with_verification(self, data: dict[str, Any]) -> Response:
        command, shell = _expand_command(data)
        verification = data.get("verification") or {}
        max_wait = float(data.get("max_wait_time", 10))
        interval = float(data.get("check_interval", 1))
        try:
            result = run_capped(command, shell, 120)
        except Exception as exc:
            return json_reply({"status": "error", "message": str(exc)}, 500)
        base = {"output": result.stdout, "error": result.stderr, "returncode": result.returncode}
        if not verification:
            return json_reply({"status": "success", **base})
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
                return json_reply({"status": "success", **base, "verification": "passed", "wait_time": wait})
            time.sleep(interval)
        return json_reply(
            {"status": "verification_failed", **base, "verification": "failed", "wait_time": max_wait}, 500
        )

    def launch(self, data: dict[str, Any]) -> Response:
        command, shell = _expand_command(data)
        try:
            self._spawn(command, shell)
        except Exception as exc:
            return json_reply({"status": "error", "message": str(exc)}, 500)
        shown = command if shell or isinstance(command, str) else " ".join(command)
        return text_reply(f"{shown} launched successfully")

    def run_python(self, data: dict[str, Any]) -> Response:
        code = data.get("code")
        if not code:
            return json_reply({"status": "error", "message": "Code not supplied!"}, 400)
        path = os.path.join(tempfile.gettempdir(), f"python_exec_{uuid.uuid4().hex}.py")
        try:
            Path(path).write_text(code)
            result = run_capped([sys.executable, path], False, 30)
        except subprocess.TimeoutExpired:
            return json_reply(
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
            return json_reply(
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
        return json_reply(
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
            return json_reply({"status": "error", "output": "Script not supplied!", "error": "", "returncode": -1}, 400)
        if working_dir:
            working_dir = os.path.expanduser(working_dir)
            if not os.path.exists(working_dir):
                return json_reply(
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
            result = run_capped(["/bin/bash", path], False, timeout, merge=True, cwd=working_dir)
        except subprocess.TimeoutExpired:
            return json_reply(
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
        return json_reply(
            {
                "status": "success" if result.returncode == 0 else "error",
                "output": result.stdout,
                "error": "",
                "returncode": result.returncode,
            }
        )

    # --- screen
    def screenshot(self, data: dict[str, Any]) -> Response:
        """The screen with the pointer pasted in (:mod:`.pointer`), as OSWorld's.

        In ``osworld`` mode every call leaks its X connection, as OSWorld's does. Once X refuses a connection
        (every client slot taken), the first call answers Flask's HTML 500 and the next one kills the server
        with SIGSEGV, as OSWorld's does (a segfault in ``XFixesGetCursorImage``); a unit would restart it.
        """
        if self.fb is None:
            return text_reply("no framebuffer (start the server with --fb)", 500)
        osworld = self.mode == "osworld"
        if not (self.pointer or osworld):
            return 200, "image/png", self.fb.png(), {}
        pointer = read_pointer(leak=osworld)
        if pointer is None and osworld:
            with self._lock:
                self.x_refused += 1
                refused = self.x_refused
            if refused > 1:
                signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)  # now, from this thread
            return flask_error(500)
        return 200, "image/png", self.fb.png(pointer=pointer), {}

    def screen_size(self, data: dict[str, Any]) -> Response:
        if self.fb is None:
            return text_reply("no framebuffer (start the server with --fb)", 500)
        return json_reply({"width": self.fb.width, "height": self.fb.height})

    def cursor_position(self, data: dict[str, Any]) -> Response:
        out = subprocess.run(["xdotool", "getmouselocation", "--shell"], capture_output=True, text=True, timeout=10)
        fields = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        return json_reply([int(fields.get("X", 0)), int(fields.get("Y", 0))])

    def window_size(self, data: dict[str, Any]) -> Response:
        name = data.get("app_class_name")
        if not name:
            return json_reply({"error": "app_class_name is required"}, 400)
        for line in _wmctrl("-lGx").stdout.splitlines():
            parts = line.split(None, 7)
            if len(parts) >= 7 and name.lower() in [c.lower() for c in parts[6].split(".")]:
                return json_reply({"width": int(parts[4]), "height": int(parts[5])})
        return text_reply("Internal Server Error", 500)

    def platform(self, data: dict[str, Any]) -> Response:
        return text_reply(platform.system())

    def accessibility(self, data: dict[str, Any]) -> Response:
        """OSWorld's ``{"AT": xml}``: the AT-SPI tree of every application on the desktop (:func:`atspi_tree`)."""
        try:
            reply = self._atspi("tree")
        except _AtspiUnavailable as exc:
            return text_reply(f"Currently not implemented for platform {platform.platform()}: {exc}", 500)
        except _AtspiFailed as exc:
            return json_reply({"status": "error", "message": str(exc)}, 500)
        return json_reply({"AT": reply["AT"]})

    def terminal(self, data: dict[str, Any]) -> Response:
        """The text of the focused gnome-terminal tab in the active window, as OSWorld's (:func:`atspi_terminal`)."""
        try:
            reply = self._atspi("terminal")
        except _AtspiUnavailable:
            return json_reply({"output": None, "status": "success"})  # no AT-SPI: no terminal can be read
        except _AtspiFailed as exc:
            return json_reply({"status": "error", "message": str(exc)}, 500)
        return json_reply({"output": reply["output"], "status": "success"})

    def _atspi(self, what: str) -> dict[str, Any]:
        """Run the AT-SPI helper (``--atspi WHAT`` under :attr:`atspi_python`); its JSON answer."""
        python = self.atspi_python
        if not os.path.exists(python):
            raise _AtspiUnavailable(f"no {python} to read AT-SPI with (apt-get install python3-pyatspi at-spi2-core)")
        try:
            proc = subprocess.run(
                [python, "-I", SERVER_FOLDER, "--atspi", what],
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
            return json_reply({"desktop_path": path})
        return json_reply({"error": "Unsupported operating system or desktop path not found"}, 404)

    def wallpaper(self, data: dict[str, Any]) -> Response:
        return text_reply("Wallpaper file not found", 404)

    def change_wallpaper(self, data: dict[str, Any]) -> Response:
        """OSWorld's: ``gsettings set org.gnome.desktop.background picture-uri file://PATH``."""
        path = data.get("path")
        if not path:
            return text_reply("Path not supplied!", 400)
        target = Path(os.path.expandvars(os.path.expanduser(path)))
        if not target.exists():
            return text_reply(f"File not found: {target}", 404)
        try:
            subprocess.run(
                ["gsettings", "set", "org.gnome.desktop.background", "picture-uri", f"file://{target}"],
                capture_output=True, timeout=30, check=False,
            )  # fmt: skip
        except Exception as exc:
            return text_reply(f"Failed to change wallpaper. Error: {exc}", 500)
        return text_reply("Wallpaper changed successfully")

    def download_file(self, data: dict[str, Any]) -> Response:
        """OSWorld's: the VM downloads ``url`` to ``path`` (3 tries, 300 s each, the size checked)."""
        url, path = data.get("url"), data.get("path")
        if not url or not path:
            return text_reply("Path or URL not supplied!", 400)
        target = Path(os.path.expandvars(os.path.expanduser(path)))
        error: Exception | None = None
        for _ in range(3):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with urllib.request.urlopen(url, timeout=300) as response, open(target, "wb") as out:
                    expected = int(response.headers.get("Content-Length") or -1)
                    shutil.copyfileobj(response, out)
                if expected >= 0 and target.stat().st_size != expected:
                    raise OSError(f"downloaded {target.stat().st_size} bytes of {expected}")
                return text_reply("File downloaded successfully")
            except Exception as exc:
                error = exc
        return text_reply(f"Failed to download {url}. No retries left. Error: {error}", 500)

    def start_recording(self, data: dict[str, Any]) -> Response:
        message = "ffmpeg is required for recording but was not found in PATH."
        return json_reply({"status": "error", "message": message}, 500)

    def end_recording(self, data: dict[str, Any]) -> Response:
        return json_reply({"status": "error", "message": "No recording in progress to stop."}, 400)

    # --- files
    def list_directory(self, data: dict[str, Any]) -> Response:
        if "path" not in data:
            return json_reply({"error": "Missing 'path' parameter"}, 400)
        start = data["path"]
        if not os.path.isdir(start):
            return json_reply({"error": "The provided path is not a directory"}, 400)

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

        return json_reply({"directory_tree": tree(start)})

    def file(self, data: dict[str, Any]) -> Response:
        if "file_path" not in data:
            return json_reply({"error": "file_path is required"}, 400)
        path = os.path.expandvars(os.path.expanduser(data["file_path"]))
        if not os.path.exists(path):
            return json_reply({"error": "File not found"}, 404)
        try:
            body = Path(path).read_bytes()
        except FileNotFoundError:
            return json_reply({"error": "File not found"}, 404)
        except Exception as exc:
            return json_reply({"error": f"Failed to serve file: {exc}"}, 500)
        disposition = f'attachment; filename="{os.path.basename(path)}"'
        return 200, "application/octet-stream", body, {"Content-Disposition": disposition}

    def upload(self, data: dict[str, Any]) -> Response:
        file_data = data.get("file_data")
        if "file_path" not in data or not isinstance(file_data, bytes):
            return json_reply({"error": "file_path and file_data are required"}, 400)
        path = os.path.expandvars(os.path.expanduser(data["file_path"]))
        try:
            if os.path.dirname(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).write_bytes(file_data)
        except Exception as exc:
            Path(path).unlink(missing_ok=True)
            return json_reply({"error": f"Failed to upload file: {exc}"}, 500)
        return text_reply(f"File Uploaded: {os.path.getsize(path)} bytes")

    def open_file(self, data: dict[str, Any]) -> Response:
        path = data.get("path")
        if not path:
            return text_reply("Path not supplied!", 400)
        target = Path(os.path.expandvars(os.path.expanduser(path)))
        is_file = target.exists()
        if not is_file and not shutil.which(path):
            return text_reply(f"Application/file not found: {path}", 404)
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
                        return text_reply("File opened and window activated successfully")
                time.sleep(0.05)
            return text_reply(f"Failed to find window for {name} within {self.open_file_timeout:g} seconds.", 500)
        except Exception as exc:
            return text_reply(f"Failed to open {path}. Error: {exc}", 500)

    def activate_window(self, data: dict[str, Any]) -> Response:
        name = data.get("window_name")
        if not name:
            return text_reply("window_name required", 400)
        flags = "-{}{}a".format("x" if data.get("by_class") else "", "F" if data.get("strict") else "")
        _wmctrl(flags, name)
        return text_reply("Window activated successfully")

    def close_window(self, data: dict[str, Any]) -> Response:
        if "window_name" not in data:
            return text_reply("window_name required", 400)
        flags = "-{}{}c".format("x" if data.get("by_class") else "", "F" if data.get("strict") else "")
        _wmctrl(flags, data["window_name"])
        return text_reply("Window closed successfully.")


def _valid_still(still: object) -> bool:
    if not isinstance(still, dict):
        return False
    seconds = [still.get(name) for name in ("quiet", "timeout", "poll")]
    allowance = still.get("allowance", 0)
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in seconds) and (
        isinstance(allowance, int) and not isinstance(allowance, bool) and allowance >= 0
    )


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
