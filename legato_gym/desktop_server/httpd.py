"""The HTTP side: OSWorld's paths mapped to :class:`~.handlers.Handlers`, request bodies parsed as Flask's
views see them, and :func:`serve` on a unix socket, an inherited listening socket or TCP."""

from __future__ import annotations

import ctypes
import email.parser
import email.policy
import json
import logging
import os
import signal
import socket
import socketserver
import sys
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from .actions import ActionRunner
from .atspi import ATSPI_PYTHON
from .damage import ScreenWatch
from .handlers import OPEN_FILE_TIMEOUT, Handlers, Response, flask_error, json_reply, text_reply
from .image import Framebuffer

__all__ = ["FORM_ROUTES", "JSON_ROUTES", "ROUTES", "RequestHandler", "TCPHTTPServer", "UnixHTTPServer", "serve"]

logger = logging.getLogger("legato.desktop_server")

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
    ("POST", "/setup/change_wallpaper"): "change_wallpaper",
    ("POST", "/setup/download_file"): "download_file",
}

#: Handlers whose OSWorld view reads ``request.json``: in ``osworld`` mode a body of another content type
#: gets Flask's 415 page, malformed JSON its 400 page.
JSON_ROUTES = frozenset(
    {
        "execute", "execute_with_verification", "launch", "run_python", "run_bash_script", "list_directory",
        "open_file", "activate_window", "close_window", "change_wallpaper", "download_file",
    }
)  # fmt: skip
#: Handlers whose OSWorld view reads ``request.form`` (and ``request.files``): in ``osworld`` mode any
#: other body gets Flask's 400 page (the missing form key).
FORM_ROUTES = frozenset({"file", "window_size", "upload"})
_FORM_KINDS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _osworld_refusal(name: str, content_type: str, body: bytes) -> Response | None:
    """Flask's answer to a body OSWorld's view of handler ``name`` cannot read, or ``None``."""
    kind = content_type.split(";")[0].strip().lower()
    if name in JSON_ROUTES:
        if kind != "application/json":
            return flask_error(415)
        try:
            json.loads(body or b"")
        except ValueError:
            return flask_error(400)
    if name in FORM_ROUTES and kind not in _FORM_KINDS:
        return flask_error(400)
    return None


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
            response: Response = text_reply("Method Not Allowed", 405) if known else text_reply("Not Found", 404)
        else:
            osworld = self.handlers.mode == "osworld"
            content_type = self.headers.get("Content-Type", "")
            refusal = _osworld_refusal(name, content_type, body) if osworld else None
            try:
                response = refusal or getattr(self.handlers, name)(_parse_body(content_type, body))
            except Exception as exc:
                logger.exception("handler %s failed", name)
                # Flask (OSWorld's server runs it with debug=True) answers an unhandled error with an HTML page
                response = flask_error(500) if osworld else json_reply({"status": "error", "message": str(exc)}, 500)
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


_PR_SET_DUMPABLE = 4


def _not_dumpable() -> None:
    """Make this process non-dumpable: processes of its uid (the agent's actions) can then neither attach to
    it nor open its ``/proc/PID/mem`` or take its descriptors (``pidfd_getfd``); the sandbox's seccomp
    filter refuses those calls too. Its children get back the default when they run a program."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            logger.warning("the server could not make itself non-dumpable: errno %d", ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        logger.warning("the server could not make itself non-dumpable: %s", exc)


def serve(
    listen: str,
    fb_path: str | None,
    open_file_timeout: float = OPEN_FILE_TIMEOUT,
    atspi_python: str = ATSPI_PYTHON,
    mode: str = "legato",
    pointer: bool = True,
) -> None:
    """Serve forever on ``unix:PATH``, ``fd:N`` or ``tcp:HOST:PORT``; ``mode``, ``pointer``: see :class:`Handlers`."""
    _not_dumpable()
    fb = Framebuffer(fb_path) if fb_path else None
    runner = ActionRunner()
    runner.start()  # warms up while the host runs the task's setup
    watch = ScreenWatch()
    if not watch.start():  # the host compares frames after each action instead
        logger.info("no X DAMAGE watch of the screen: %s", watch.unavailable)
    handlers = Handlers(fb, open_file_timeout, runner, atspi_python, mode=mode, pointer=pointer, watch=watch)
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
