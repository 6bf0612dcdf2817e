"""The host agent: a long-lived Ray actor that hosts one host's desktop workers and relays their frames.

:class:`~legato_gym.vector.ray_env.RayDesktopVectorEnv` places one :class:`HostAgent` per group of desktops
on the hosts of a Ray cluster. The agent is deliberately thin: it starts the same worker processes a local
vector env starts (:class:`~legato_gym.transport.process.WorkerProcess`, with a shared-memory screenshot buffer
on its own host) and relays the same protocol messages (:mod:`legato_gym.transport.protocol`) between them and
the driver. Deadlines, replacement and the episode state machine stay on the driver, in the vector env's
worker pool (:mod:`legato_gym.vector.pool`).

What crosses the network per request is one protocol message as a Ray argument (about 100-300 bytes of
JSON-able dict for a step) and, back, the worker's reply plus the *new* screenshot only, encoded by
:func:`encode_screen` on the host (zlib, PNG or raw), never a history.

``hosting="inproc"`` runs the desktops inside the agent process instead (the worker's own op handler, one
thread per call): no process per desktop, so thousands of fake desktops fit on a small machine. A hung
desktop cannot be killed there, so it is meant for the fake backend and benchmarks.

Ray is imported by the caller, not here: this module is importable without Ray, and the actor class is
made with ``ray.remote(HostAgent)`` in :mod:`legato_gym.vector.ray_hosts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import socket
import time
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np

from legato_gym.png import decode_png
from legato_gym.transport.process import WorkerProcess
from legato_gym.transport.protocol import PROTOCOL_VERSION
from legato_gym.vector.worker import _error, _Worker

__all__ = ["Codec", "HostAgent", "LazyScreenshot", "decode_screen", "encode_screen"]

logger = logging.getLogger(__name__)

Codec = Literal["auto", "zlib", "png", "raw"]
#: How long a closing worker may take to exit after it answered ``close`` (seconds).
_CLOSE_EXIT_S = 10.0
#: How long a request may wait for room in a worker's socket buffer (it is read at once unless hung).
_SEND_S = 30.0


def encode_screen(image: memoryview | bytes | bytearray, shape: tuple[int, ...], codec: Codec) -> bytes:
    """Encode one raw ``uint8`` screenshot of ``shape`` for the wire (``auto`` means ``zlib`` here).

    ``zlib`` (level 1 over the raw pixels) is lossless, stdlib only, and on desktop screens about as small as
    PNG; ``png`` is legato's fast PNG (:func:`legato_gym.png.encode_png`); ``raw`` suits a driver on the same
    host.
    """
    if codec == "raw":
        return bytes(image)
    if codec == "png":
        from legato_gym.png import encode_png

        return encode_png(np.frombuffer(image, dtype=np.uint8).reshape(shape))
    return zlib.compress(image, 1)


def decode_screen(payload: bytes | memoryview, shape: tuple[int, ...], codec: str, extra: int = 0) -> bytearray:
    """The inverse of :func:`encode_screen`: the raw screenshot bytes in a new writable buffer, followed by
    ``extra`` bytes of room (for the worker's PNG, so the pixels are written once).

    PNGs whose rows all use the *None* or *Up* filter (legato's own) are decoded with zlib and numpy; any
    other PNG (a backend's own) with Pillow.

    Raises:
        ValueError: the payload does not hold a screenshot of ``shape`` in ``codec``.
    """
    size = int(np.prod(shape))
    out = bytearray(size + extra)
    pixels = np.frombuffer(out, dtype=np.uint8, count=size)
    if codec == "png":
        decode_png(payload, shape, pixels)
        return out
    if codec == "raw":
        data: bytes | memoryview = payload
    elif codec == "zlib":
        data = zlib.decompress(payload)
    else:
        raise ValueError(f"unknown screenshot codec {codec!r}")
    if len(data) != size:
        raise ValueError(f"screenshot holds {len(data)} bytes, expected shape {list(shape)}")
    out[:size] = data
    return out


class LazyScreenshot:
    """A screenshot that arrived as a PNG only: the array's ``shape`` and ``dtype`` at once, its pixels decoded
    from :attr:`png` the first time they are read, then kept.

    A vector env made with ``pixels="lazy"`` returns one as ``obs["screenshot"]`` from ``areset``/``astep``
    when its desktop runs on another host and sent just the PNG (``png=True``, Ray): a caller that only sends
    ``info["screenshot_png"]`` to a model never pays for decoding. Reading the pixels in any way numpy or
    Pillow does (``np.asarray(s)``, ``s[y, x]``, ``Image.fromarray(s)``) decodes them; the array is read-only,
    as a ``copy=False`` view is.

    Example::

        >>> from legato_gym.png import encode_png
        >>> pixels = np.zeros((2, 3, 3), np.uint8)
        >>> shot = LazyScreenshot(encode_png(pixels), (2, 3, 3))
        >>> shot.shape, shot.decoded
        ((2, 3, 3), False)
        >>> bool((np.asarray(shot) == pixels).all()), shot.decoded
        (True, True)
    """

    __slots__ = ("_array", "png", "shape")
    dtype = np.dtype(np.uint8)

    def __init__(self, png: bytes, shape: tuple[int, ...]) -> None:
        self.png = png
        self.shape = tuple(int(n) for n in shape)
        self._array: np.ndarray[Any, np.dtype[np.uint8]] | None = None

    @property
    def ndim(self) -> int:
        """Number of dimensions (3: height, width, RGB)."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of ``uint8`` values."""
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded pixels."""
        return self.size

    @property
    def decoded(self) -> bool:
        """Whether the pixels were decoded already."""
        return self._array is not None

    def array(self) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """The pixels, a read-only ``(H, W, 3)`` ``uint8`` array (decoded from the PNG on the first call).

        Raises:
            ValueError: :attr:`png` is not a PNG of :attr:`shape`.
        """
        if self._array is None:
            array = np.frombuffer(decode_screen(self.png, self.shape, "png"), dtype=np.uint8).reshape(self.shape)
            array.flags.writeable = False
            self._array = array
        return self._array

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        array = self.array()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    @property
    def __array_interface__(self) -> dict[str, Any]:
        array = self.array()
        # explicit strides: Pillow then copies via tobytes() instead of asking this object for a buffer
        return {**array.__array_interface__, "strides": array.strides}

    def tobytes(self) -> bytes:
        """The pixels as bytes (row-major), as ``ndarray.tobytes``."""
        return self.array().tobytes()

    def __getitem__(self, key: Any) -> Any:
        return self.array()[key]

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        state = "decoded" if self.decoded else "not decoded yet"
        return f"LazyScreenshot(shape={self.shape}, png={len(self.png)} bytes, {state})"


class _Hosted:
    """One desktop on this host: a worker process, or an in-process worker."""

    def __init__(self, key: int, proc: WorkerProcess | None, inproc: _Worker | None) -> None:
        self.key = key
        self.proc = proc
        self.inproc = inproc
        self.replies: asyncio.Queue[tuple[dict[str, Any], bytearray | None] | None] = asyncio.Queue()


class HostAgent:
    """The body of the Ray actor hosting one group of desktops (see the module docstring).

    Args:
        hosting: ``"process"`` (a worker process per desktop, the default) or ``"inproc"``.
        codec: how screenshots cross the network (:func:`encode_screen`).
        screen_bytes: size of one raw screenshot (the workers' shared-memory buffers).
        python: the workers' interpreter (``DesktopConfig.worker_python``).
        worker_env: extra environment variables for the workers.
        capacity: desktops this agent hosts at most (sizes its thread pool in ``inproc`` mode).
    """

    def __init__(
        self,
        hosting: Literal["process", "inproc"],
        codec: Codec,
        screen_bytes: int,
        python: str | None,
        worker_env: Mapping[str, str],
        capacity: int,
    ) -> None:
        self.hosting = hosting
        self.codec: Codec = codec
        self.screen_bytes = screen_bytes
        self.python = python
        self.worker_env = dict(worker_env)
        self._hosted: dict[int, _Hosted] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, capacity), thread_name_prefix="legato-desktop")
        self.node_id = ""
        address = "?"
        with contextlib.suppress(Exception):  # outside Ray (unit tests): no node, and no Ray started to ask
            import ray

            if ray.is_initialized():
                self.node_id = str(ray.get_runtime_context().get_node_id())
                address = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        #: This host as error messages name it: ``hostname (ip)``.
        self.host = f"{socket.gethostname()} ({address})"

    def info(self) -> dict[str, Any]:
        """Where this agent runs: node id, host name, pid and the desktops it hosts."""
        return {
            "node_id": self.node_id,
            "hostname": socket.gethostname(),
            "host": self.host,
            "pid": os.getpid(),
            "hosted": sorted(self._hosted),
        }

    async def start(self, key: int) -> dict[str, Any]:
        """Start desktop ``key``'s worker; returns its ``hello`` message (plus ``node_id``), or an ``eof``."""
        self.kill(key)
        if self.hosting == "inproc":
            self._hosted[key] = _Hosted(key, None, _Worker())
            hello = {
                "kind": "hello",
                "protocol": PROTOCOL_VERSION,
                "pid": os.getpid(),
                "python": platform.python_version(),
                "numpy": np.__version__,
            }
        else:
            try:
                proc = WorkerProcess(key, python=self.python, env=self.worker_env, screen_bytes=self.screen_bytes)
            except Exception as exc:  # e.g. no such interpreter on this host: the desktop's failure, not ours
                why = f"{type(exc).__name__}: {exc}"
                return {"kind": "eof", "status": None, "stderr": why, "node_id": self.node_id, "host": self.host}
            hosted = _Hosted(key, proc, None)
            self._hosted[key] = hosted
            loop = asyncio.get_running_loop()
            loop.add_reader(proc.sock.fileno(), self._on_socket, hosted)
            loop.add_reader(proc.stderr_fd, self._on_stderr, hosted)
            reply = await hosted.replies.get()
            if reply is None:
                return self._eof(hosted)
            hello = reply[0]
        hello["node_id"], hello["host"] = self.node_id, self.host
        return hello

    async def request(self, key: int, message: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """Relay one request to desktop ``key``; returns its reply and the encoded screenshot (or ``b""``)."""
        hosted = self._hosted.get(key)
        if hosted is None:
            return {"kind": "eof", "status": None, "stderr": f"no desktop {key} on this host"}, b""
        if hosted.inproc is not None:
            return await self._request_inproc(hosted, hosted.inproc, message)
        proc = hosted.proc
        assert proc is not None
        args = message.get("args") or {}
        if message.get("op") == "init":  # the worker's screenshot buffer lives on this host
            message = dict(message, args=dict(args, shm_fd=proc.shm_fd_in_child, shm_size=self.screen_bytes))
        try:
            proc.send(message, time.monotonic() + _SEND_S)
        except (OSError, TimeoutError):
            return self._eof(hosted), b""
        reply = await hosted.replies.get()
        if reply is None:
            return self._eof(hosted), b""
        response, blob = reply
        if message.get("op") == "close":
            await asyncio.get_running_loop().run_in_executor(self._pool, proc.wait_exit, _CLOSE_EXIT_S)
            self._forget(key)
            return response, b""
        return self._encode(response, proc, blob)

    def kill(self, key: int) -> None:
        """Kill desktop ``key``'s worker (and everything it started). Unknown keys are ignored."""
        hosted = self._forget(key)
        if hosted is not None and hosted.inproc is not None:
            with contextlib.suppress(Exception):
                hosted.inproc.close()

    def shutdown(self) -> None:
        """Kill every worker on this host."""
        for key in list(self._hosted):
            self.kill(key)

    # ------------------------------------------------------------------ internals

    def _forget(self, key: int) -> _Hosted | None:
        hosted = self._hosted.pop(key, None)
        if hosted is None:
            return None
        proc = hosted.proc
        if proc is not None:
            loop = asyncio.get_running_loop()
            for fd in (proc.sock.fileno(), proc.stderr_fd):
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(fd)
            proc.kill()
            hosted.replies.put_nowait(None)
        return hosted

    def _on_socket(self, hosted: _Hosted) -> None:
        proc = hosted.proc
        assert proc is not None
        try:
            alive = proc.read()
        except Exception as exc:  # a malformed frame: the worker is unusable
            logger.warning("desktop %d: %s", hosted.key, exc)
            alive = False
        for frame in proc.frames.frames:
            hosted.replies.put_nowait(frame)
        proc.frames.frames.clear()
        if not alive:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(proc.sock.fileno())
            hosted.replies.put_nowait(None)

    def _on_stderr(self, hosted: _Hosted) -> None:
        proc = hosted.proc
        assert proc is not None
        if not proc.read_stderr():
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(proc.stderr_fd)

    def _eof(self, hosted: _Hosted) -> dict[str, Any]:
        """The worker is gone: its exit status and stderr, for the driver's error message."""
        proc = hosted.proc
        status, stderr = None, ""
        if proc is not None:
            self._forget(hosted.key)
            status, stderr = proc.proc.returncode, proc.stderr_text()
        return {"kind": "eof", "status": status, "stderr": stderr, "node_id": self.node_id, "host": self.host}

    def _encode(
        self, response: dict[str, Any], proc: WorkerProcess | None, blob: bytes | bytearray | memoryview | None
    ) -> tuple[dict[str, Any], bytes]:
        """The reply for the wire: the screenshot encoded (``obs["wire"]`` names how), the worker's PNG kept.

        The payload is ``encoded pixels + png`` (``obs["png"]`` bytes at the end, as in the protocol), or just
        the worker's PNG when it stands for the pixels too (``wire == "png-tail"``: sent once, decoded twice).
        """
        result = response.get("result")
        obs = result.get("obs") if isinstance(result, dict) else None
        if not isinstance(obs, dict):
            return response, b""
        shape = tuple(int(n) for n in obs["shape"])
        data = memoryview(blob if blob is not None else b"")
        png_bytes = int(obs.get("png", 0) or 0)
        png = data[len(data) - png_bytes :] if 0 < png_bytes <= len(data) else data[:0]
        head = data[: len(data) - len(png)]
        where = obs.get("where")
        if where == "shm" and proc is not None and proc.screens is not None:
            image: memoryview = proc.screens.array(shape).reshape(-1).data
        elif where == "blob":
            image = head
        else:  # a form this agent does not know: forwarded as it came
            return response, bytes(data)
        obs["where"] = "blob"
        if len(png) and self.codec in ("auto", "png"):
            obs["wire"] = "png-tail"
            return response, bytes(png)
        codec: Codec = "zlib" if self.codec == "auto" else self.codec
        obs["wire"] = codec
        return response, encode_screen(image, shape, codec) + bytes(png)

    async def _request_inproc(
        self, hosted: _Hosted, worker: _Worker, message: dict[str, Any]
    ) -> tuple[dict[str, Any], bytes]:
        op = str(message.get("op"))
        reply: dict[str, Any] = {"kind": "response", "id": message.get("id")}
        loop = asyncio.get_running_loop()
        if op == "close":
            try:
                await loop.run_in_executor(self._pool, worker.close)
                reply["ok"] = True
            except Exception as exc:
                reply.update(ok=False, error=_error(exc))
            self._hosted.pop(hosted.key, None)
            return reply, b""
        args = dict(message.get("args") or {})
        args["shm_fd"] = None
        try:
            result, blob = await loop.run_in_executor(self._pool, worker.handle, op, args)
            reply.update(ok=True, result=result)
        except Exception as exc:
            reply.update(ok=False, error=_error(exc))
            return reply, b""
        return self._encode(reply, None, blob)
