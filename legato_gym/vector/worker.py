"""The desktop worker process: one desktop, driven over the protocol in :mod:`legato_gym.transport.protocol`.

Started by the vector env with ``DesktopConfig.worker_python`` as the equivalent of ``python -m
legato_gym.vector.worker --fd N --parent-pid P [--pdeathsig]`` (through a one-line bootstrap that imports
:mod:`legato_gym` with gymnasium hidden, so no Gymnasium ids are registered in the worker). It imports only
the standard library, numpy, the dependency-free parts of :mod:`legato_gym` and the backend it is asked to
load, so it can run under another interpreter (desktop-env's own venv).

It leads its own process group (the parent starts it in a new session) so that killing the group also
kills whatever the desktop started. It kills that group itself when its parent goes away: when the
parent's end of the socket closes, when it is re-parented, and (Linux) on ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import platform
import queue
import select
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np

from legato_gym.transport.protocol import PROTOCOL_VERSION, FrameReader, ProtocolError, config_from_json, encode_frame
from legato_gym.transport.screens import ScreenBuffer

__all__ = ["main"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
#: How often the socket reader checks that its parent is still the same process (seconds).
_PARENT_POLL_S = 1.0


def _die() -> None:
    """Kill this worker's process group (the desktop's children too), or just this process."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _watch_parent(parent_pid: int, pdeathsig: bool) -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: _die())
    if pdeathsig and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - exotic libc
            logger.debug("prctl(PR_SET_PDEATHSIG) unavailable")
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        _die()


def _send(sock: socket.socket, message: Mapping[str, Any], *blobs: memoryview | bytes) -> None:
    for part in encode_frame(message, *blobs):
        sock.sendall(part)


def _reader(sock: socket.socket, parent_pid: int, requests: queue.Queue[dict[str, Any]]) -> None:
    """Read request frames into ``requests``; kill the group when the parent is gone."""
    frames = FrameReader()
    closing = False
    try:
        while True:
            ready, _, _ = select.select([sock], [], [], _PARENT_POLL_S)
            if not ready:
                if os.getppid() != parent_pid:
                    break
                continue
            data = sock.recv(1 << 16)
            if not data:
                break
            frames.feed(data)
            for message, _ in frames.frames:
                closing = closing or message.get("op") == "close"
                requests.put(message)
            frames.frames.clear()
    except (OSError, ProtocolError):
        pass
    if not closing:
        _die()


class _Worker:
    """The desktop and episode of this process, and the ops that drive them."""

    def __init__(self) -> None:
        self.desktop: Any = None
        self.desktop_config: Any = None
        self.episode: Any = None
        self.screens: ScreenBuffer | None = None
        self.png = False
        #: ``(height, width, 3)`` every observation must have, for a desktop without ``screen_size``
        self.unchecked_shape: tuple[int, int, int] | None = None

    def handle(self, op: str, args: Mapping[str, Any]) -> tuple[dict[str, Any], memoryview | bytes]:
        """Run one request; returns its result and the frame's blob."""
        result, blobs = self.handle_parts(op, args)
        if len(blobs) > 1:
            return result, b"".join(blobs)
        return result, blobs[0] if blobs else b""

    def handle_parts(self, op: str, args: Mapping[str, Any]) -> tuple[dict[str, Any], list[memoryview | bytes]]:
        """Run one request; returns its result and the parts of the frame's blob (sent without joining them)."""
        if op == "init":
            return self._init(args), []
        if self.episode is None:
            raise RuntimeError(f"op {op!r} before 'init'")
        if op == "reset":
            from legato_gym.contract import Task
            from legato_gym.episode import UNKNOWN

            hint = args.get("next_task", UNKNOWN)  # absent: no word; null: none known
            next_task = Task.from_json(hint) if isinstance(hint, Mapping) else hint
            obs, info = self.episode.reset(Task.from_json(args["task"]), next_task=next_task)
            result, blobs = self._observation(obs)
            result["info"] = info
            return result, blobs
        if op == "step":
            obs, reward, terminated, truncated, info = self.episode.step(str(args["action"]))
            result, blobs = self._observation(obs)
            result.update(reward=float(reward), terminated=bool(terminated), truncated=bool(truncated), info=info)
            return result, blobs
        if op == "truncate":
            reward = self.episode.truncate()
            return {"reward": float(reward), "info": dict(self.episode.last_info)}, []
        if op == "call":  # a plain attribute's value, as Gymnasium's vector envs' call() gives
            attr = getattr(self.desktop, str(args["name"]))
            value = attr(*args.get("args", ()), **args.get("kwargs", {})) if callable(attr) else attr
            return {"value": value}, []
        if op == "get_attr":
            return {"value": getattr(self.desktop, str(args["name"]))}, []
        raise ProtocolError(f"unknown op {op!r}")

    def _init(self, args: Mapping[str, Any]) -> dict[str, Any]:
        from legato_gym.backends import resolve_backend
        from legato_gym.episode import Episode

        backend = resolve_backend(str(args["backend"]))  # again, in this process: a class does not cross
        self.desktop_config = config_from_json(args["config"])
        self.desktop = backend.make(self.desktop_config, seed=args.get("seed"))
        self.episode = Episode(
            self.desktop, max_steps=int(args["max_steps"]), expect_next=backend.hint_next(self.desktop)
        )
        if args.get("shm_fd") is not None:
            self.screens = ScreenBuffer(int(args["shm_size"]), fd=int(args["shm_fd"]))
            self.screens.close_fd()
        self.png = bool(args.get("png", False))
        from legato_gym.contract import screen_size_of

        size = screen_size_of(self.desktop)
        if size is None:  # a desktop without screen_size: each observation is checked against config.screen
            width, height = self.desktop_config.screen
            self.unchecked_shape = (height, width, 3)
            return {"screen_size": None}
        return {"screen_size": list(size)}

    def _observation(self, obs: Any) -> tuple[dict[str, Any], list[memoryview | bytes]]:
        image = np.ascontiguousarray(obs.screenshot, dtype=np.uint8)
        if self.unchecked_shape is not None and image.shape != self.unchecked_shape:
            from legato_gym.errors import DesktopCrashed

            height, width, _ = self.unchecked_shape
            raise DesktopCrashed(
                f"the desktop's screenshot has shape {image.shape} but config.screen={(width, height)!r} "
                f"(the backend has no screen_size, so its observations give the size): expected "
                f"{self.unchecked_shape}; make the backend honour DesktopConfig.screen"
            )
        meta: dict[str, Any] = {"instruction": str(obs.instruction), "shape": list(image.shape)}
        blobs: list[memoryview | bytes] = []
        if self.screens is not None and self.screens.write(image):
            meta["where"] = "shm"
        else:
            meta["where"] = "blob"
            blobs.append(image.reshape(-1).data)
        if self.png:
            png = getattr(obs, "png", None)  # a backend's own PNG (OSWorld's server sends one) costs nothing
            if not isinstance(png, bytes) or not png:
                from legato_gym.png import encode_png

                png = encode_png(image)
            meta["png"] = len(png)
            blobs.append(png)
        return {"obs": meta}, blobs

    def close(self) -> None:
        if self.desktop is not None:
            self.desktop.close()
        if self.screens is not None:
            self.screens.close()


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": str(exc),
        "traceback": traceback.format_exc(),
    }


def serve(sock: socket.socket, parent_pid: int) -> int:
    """Answer requests on ``sock`` until ``close``; returns the exit status."""
    _send(
        sock,
        {
            "kind": "hello",
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
    )
    requests: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=_reader, args=(sock, parent_pid, requests), name="legato-reader", daemon=True).start()
    worker = _Worker()
    while True:
        message = requests.get()
        op = str(message.get("op"))
        reply: dict[str, Any] = {"kind": "response", "id": message.get("id")}
        if op == "close":
            try:
                worker.close()
                reply["ok"] = True
            except Exception as exc:
                reply.update(ok=False, error=_error(exc))
            _send(sock, reply)
            return 0
        blobs: list[memoryview | bytes] = []
        try:
            result, blobs = worker.handle_parts(op, message.get("args") or {})
            reply.update(ok=True, result=result)
        except Exception as exc:
            reply.update(ok=False, error=_error(exc))
        _send(sock, reply, *blobs)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m legato_gym.vector.worker --fd N --parent-pid P [--pdeathsig]``."""
    parser = argparse.ArgumentParser(prog="legato_gym.vector.worker", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="inherited socket descriptor")
    parser.add_argument("--parent-pid", type=int, required=True, help="exit when this process is gone")
    parser.add_argument("--pdeathsig", action="store_true", help="arm PR_SET_PDEATHSIG (Linux)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    _watch_parent(args.parent_pid, args.pdeathsig)
    # The protocol owns the socket; stray prints from a backend go to stderr, and nothing it starts can
    # read our stdin.
    os.dup2(2, 1)
    logging.basicConfig(level=os.environ.get("LEGATO_WORKER_LOG", "WARNING"), stream=sys.stderr)
    sock = socket.socket(fileno=args.fd)
    try:
        status = serve(sock, args.parent_pid)
    finally:
        sock.close()
    # The desktop is closed and the reply sent: skip the interpreter's teardown, which costs a fraction of
    # a second of CPU per worker and adds up when hundreds stop at once.
    logging.shutdown()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
