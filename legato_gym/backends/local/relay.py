"""Inside the sandbox: connections accepted on a listening unix socket, relayed to a TCP port on its loopback.

The sandbox's network namespace has only ``lo``, so the host cannot connect to a port an app listens on
inside (Chrome's DevTools port, 9222 as on OSWorld's VM). The host instead binds a unix socket in a folder
the sandbox cannot see and passes it in already listening (as it does for the server's); this relay, run
by the sandbox's entry, accepts on it and connects each connection to ``127.0.0.1:PORT`` inside. On the
host, a :class:`~legato_gym.backends.local.forward.UnixForwarder` puts a loopback TCP port in front of
the socket, which is what desktop-env's Chrome getters connect to. Standard library only.

Run: ``python relay.py --fd 4 --port 9222``.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading

_CHUNK = 1 << 16


def pump(source: socket.socket, target: socket.socket) -> None:
    """Copy ``source`` to ``target`` until ``source`` ends, then end ``target``'s writing side.

    The one byte pump of the local backend: this relay's, and the host-side forwarder's
    (:mod:`~legato_gym.backends.local.forward`), which imports it (this file is copied into the sandbox and
    run on its own, so it cannot import legato)."""
    try:
        while data := source.recv(_CHUNK):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _serve(client: socket.socket, port: int) -> None:
    with client:
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            return  # nothing listens inside yet: the caller sees the connection closed, as a refused port
        with upstream:
            upstream.settimeout(None)
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()


def relay(listener: socket.socket, port: int) -> None:
    """Accept on ``listener`` forever; each connection is relayed to ``127.0.0.1:port`` in a thread."""
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, port), daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="the listening unix socket's file descriptor")
    parser.add_argument("--port", type=int, required=True, help="the TCP port on the sandbox's loopback")
    args = parser.parse_args()
    relay(socket.socket(fileno=args.fd), args.port)


if __name__ == "__main__":
    main()
