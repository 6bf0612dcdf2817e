"""A loopback TCP port in front of a desktop server's unix socket.

The sandbox's network namespace is its own (only ``lo``), so nothing outside can reach a TCP port inside
it, and the sandbox cannot reach the host's loopback either (the escape tests check both). Code that
speaks OSWorld's protocol over ``http://host:port`` (desktop-env's controllers and getters, the ``osworld``
backend) therefore gets a host-side forwarder: ``127.0.0.1:<ephemeral port>`` → the server's socket file.
The sandbox is unchanged; like an OSWorld docker VM's published port, the forwarded port is reachable by
processes of this host only.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from pathlib import Path

from legato_gym.backends.local.relay import pump
from legato_gym.bounds import ReadCaps

__all__ = ["UnixForwarder"]

logger = logging.getLogger(__name__)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(str(self.server.socket_path))
        except OSError as exc:
            logger.debug("forwarder: %s is not accepting connections: %s", self.server.socket_path, exc)
            upstream.close()
            return
        if self.server.preamble:
            try:
                upstream.sendall(self.server.preamble)
            except OSError:
                upstream.close()
                return
        back = threading.Thread(target=self._answer, args=(upstream,), daemon=True)
        back.start()
        pump(self.request, upstream)
        back.join()
        upstream.close()

    def _answer(self, upstream: socket.socket) -> None:
        limit = self.server.limit
        if pump(upstream, self.request, limit) > limit:
            self.server.overflows += 1
            logger.warning(
                "forwarder: %s answered more than the cap of %d bytes; the connection was cut",
                self.server.socket_path,
                limit,
            )


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    socket_path: Path
    preamble: bytes
    limit: int
    overflows: int


class UnixForwarder:
    """Forward ``127.0.0.1:port`` to a unix socket; each connection gets its own upstream connection.

    The socket is looked up per connection, so the forwarder outlives a sandbox restart that recreates
    the socket at the same path.

    Args:
        socket_path: the server's unix socket.
        host: address to listen on (loopback).
        port: port to listen on; 0 lets the kernel choose a free one (see :attr:`port`).
        preamble: bytes written upstream before the connection's own (the port line the sandbox's
            :mod:`.relay` reads to pick the app port a connection is for).
        limit: the most bytes one connection's answer may carry to the host (default
            ``ReadCaps.file_bytes``: the largest file a grader fetches); past it the connection is cut and
            :attr:`overflows` counts it.
    """

    def __init__(
        self,
        socket_path: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        preamble: bytes = b"",
        limit: int = ReadCaps.DEFAULT.file_bytes,
    ) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.socket_path = socket_path
        self._server.preamble = preamble
        self._server.limit = limit
        self._server.overflows = 0
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="legato-forwarder", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def overflows(self) -> int:
        """Connections cut because their answer passed :attr:`limit` (each one logged)."""
        return self._server.overflows

    def retarget(self, socket_path: Path) -> None:
        """Send the connections made from now on to ``socket_path`` (open ones stay where they are)."""
        self._server.socket_path = socket_path

    def close(self) -> None:
        """Stop listening (idempotent). Open connections end with their peers."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
