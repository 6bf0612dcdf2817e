"""The HTTP plumbing of the reference policy server: a threading HTTP/1.1 server and its request handler.

:class:`HTTPServer` keeps track of its open connections (so a stop closes kept-alive ones, as a dying server
would) and :class:`Handler` sends whole, half or no answers, running the server's bookkeeping just before the
client can see one. What to answer is decided by :class:`~legato_rl.testing.server.ReferencePolicyServer`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HTTPServer", "Handler"]

logger = logging.getLogger("legato_rl.testing.server")  # the server's one logger, whichever module logs


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # many desktops connect at once; the default backlog of 5 drops SYNs
    handle: Callable[[Handler, str], None]  # the server's request handler, set before serving

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.connections: set[socket.socket] = set()  # open client connections, closed by stop() as a death would
        self.connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a collect that stopped) is not the server's failure: no traceback on stderr.
        if isinstance(sys.exc_info()[1], ConnectionError):
            logger.debug("reference server: client %s hung up", client_address)
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HTTPServer
    timeout = 30  # an idle keep-alive connection is closed after this
    before_send: Callable[[int], None] | None = None
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("reference server: " + format, *args)

    def do_GET(self) -> None:
        self.server.handle(self, "GET")

    def do_POST(self) -> None:
        self.server.handle(self, "POST")

    def send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        self.send_raw(status, json.dumps(payload).encode(), headers)

    def fire(self, status: int) -> None:
        """Run the pending bookkeeping once, before the client can see the answer (so tests never race it)."""
        callback, self.before_send = self.before_send, None
        if callback is not None:
            callback(status)

    def send_raw(
        self, status: int, data: bytes, headers: Mapping[str, str] | None = None, *, quiet: bool = False
    ) -> None:
        """Send one whole answer; ``quiet``: a client that hangs up halfway (refusing a huge body) is expected."""
        self.fire(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            if not quiet:
                raise
            self.close_connection = True

    def send_half(self, status: int, data: bytes) -> None:
        """Announce all of ``data`` in ``Content-Length``, send its first half, then close the connection."""
        self.fire(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    def drop(self) -> None:
        self.fire(0)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
