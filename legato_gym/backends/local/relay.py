"""Inside the sandbox: connections accepted on a listening unix socket, relayed to TCP ports on its loopback.

The sandbox's network namespace has only ``lo``, so the host cannot connect to a port an app listens on
inside (Chrome's DevTools port 9222 and VLC's HTTP interface on 8080, as on OSWorld's VM). The host instead
binds a unix socket in a folder the sandbox cannot see and passes it in already listening (as it does for
the server's); this relay, run by the sandbox's entry, accepts on it, reads the port the connection is for
from its first line (``b"9222\\n"``: one of the ports it was started with, else the connection is closed)
and connects it to ``127.0.0.1:PORT`` inside. On the host, one
:class:`~legato_gym.backends.local.forward.UnixForwarder` per port puts a loopback TCP port in front of the
socket and writes that line first: that is what desktop-env's Chrome and VLC getters connect to. Standard
library only.

Run: ``python relay.py --fd 4 --port 9222 --port 8080``.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading
from collections.abc import Collection

_CHUNK = 1 << 16
#: The longest first line a connection may send (a port number and its newline).
_PREAMBLE_MAX = 6


def preamble(port: int) -> bytes:
    """The first bytes of a connection through the relay to ``127.0.0.1:port`` inside the sandbox."""
    return f"{port}\n".encode()


def pump(source: socket.socket, target: socket.socket, limit: int | None = None) -> int:
    """Copy ``source`` to ``target`` until ``source`` ends, then end ``target``'s writing side.

    The one byte pump of the local backend: this relay's, and the host-side forwarder's
    (:mod:`~legato_gym.backends.local.forward`), which imports it (this file is copied into the sandbox and
    run on its own, so it cannot import legato). With ``limit``, it stops once that many bytes have passed
    and shuts both sockets down (the forwarder's cap on what a desktop answers); it returns the bytes copied,
    more than ``limit`` when it stopped there."""
    copied = 0
    try:
        while data := source.recv(_CHUNK):
            copied += len(data)
            if limit is not None and copied > limit:
                with contextlib.suppress(OSError):
                    source.shutdown(socket.SHUT_RDWR)
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_RDWR if limit is not None and copied > limit else socket.SHUT_WR)
    return copied


def read_port(client: socket.socket, ports: Collection[int]) -> int | None:
    """The port named by the connection's first line, if it is one of ``ports`` (``None``: close it)."""
    line = b""
    while not line.endswith(b"\n"):
        if len(line) >= _PREAMBLE_MAX:
            return None
        try:
            byte = client.recv(1)
        except OSError:
            return None
        if not byte:
            return None
        line += byte
    text = line[:-1].decode("ascii", errors="replace")
    if not text.isdigit() or int(text) not in ports:
        return None
    return int(text)


def _serve(client: socket.socket, ports: Collection[int]) -> None:
    with client:
        client.settimeout(10)
        port = read_port(client, ports)
        if port is None:
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            return  # nothing listens inside yet: the caller sees the connection closed, as a refused port
        with upstream:
            upstream.settimeout(None)
            client.settimeout(None)
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()


def relay(listener: socket.socket, ports: Collection[int]) -> None:
    """Accept on ``listener`` forever; each connection is relayed, in a thread, to the port it names."""
    allowed = frozenset(ports)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, allowed), daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="the listening unix socket's file descriptor")
    parser.add_argument(
        "--port", type=int, action="append", required=True, help="a TCP port on the sandbox's loopback (repeat)"
    )
    args = parser.parse_args(argv)
    relay(socket.socket(fileno=args.fd), args.port)


if __name__ == "__main__":
    main()
