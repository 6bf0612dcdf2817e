"""The wire protocol between a vector env and its desktop worker processes (version 1).

Stdlib only: the worker side may run under another interpreter (desktop-env's own venv).

Transport: one ``AF_UNIX`` stream socket per worker (a ``socketpair``; the worker gets its end as an
inherited file descriptor). Both directions carry *frames*::

    frame := header json blob
    header := 8 bytes, big-endian: u32 len(json), u32 len(blob)
    json   := one UTF-8 JSON object (a message)
    blob   := raw bytes (a screenshot in ``blob`` mode; empty otherwise)

Messages, in order:

1. worker → parent ``{"kind": "hello", "protocol": 1, "pid": int, "python": str, "numpy": str}`` as soon
   as the worker has started. The parent refuses a different ``protocol``.
2. parent → worker ``{"kind": "request", "id": int, "op": str, "args": {...}}``; exactly one request is
   in flight per worker. Ops:

   ========== ============================================================ ==============================
   op         args                                                         result
   ========== ============================================================ ==============================
   init       backend, config (:func:`config_to_json`), seed, env_id,      ``{"screen_size": [w, h]}``
              max_steps, shm_fd, shm_size, png (bool, optional)            (``null``: the desktop has none)
   reset      task (:meth:`Task.to_json`)                                  info + observation
   step       action                                                       reward, terminated,
                                                                           truncated, info + observation
   truncate   (none): grade now without another action                     reward, info
   call       name, args, kwargs: call a desktop method                    value (JSON)
   get_attr   name: read a desktop attribute                               value (JSON)
   close      (none): close the desktop; the worker then exits             (none)
   ========== ============================================================ ==============================

3. worker → parent ``{"kind": "response", "id": int, "ok": true, "result": {...}}``. A result with an
   observation carries ``"obs": {"instruction": str, "shape": [h, w, 3], "where": "shm" | "blob"}``: the
   screenshot is in the worker's shared-memory buffer (``shm``: a ``memfd`` the parent created, mapped by
   both; the parent copies it out before it sends the next request, or hands out a read-only view valid
   until then) or in the frame's blob. When ``init`` asked for ``png``, the observation also carries
   ``"png": n``: the last ``n`` bytes of the frame's blob are the screenshot PNG-encoded (the backend's own
   :attr:`Observation.png <legato_gym.contract.Observation.png>`, else encoded by the worker with
   :func:`legato_gym.png.encode_png`), after the raw pixels in ``blob`` mode. A worker that ignores
   ``png`` sends no ``"png"`` key; the parent then has no PNG for that observation.
   A failure is ``{"kind": "response", "id": int, "ok": false, "error": {"type": str, "message": str,
   "traceback": str}}`` where ``type`` names a :mod:`legato_gym.errors` class (or a foreign one).

Lifetime: the worker exits after ``close``; it kills its own process group when the parent's end of the
socket closes (the parent died) or, on Linux, when the parent dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from legato_gym.config import DesktopConfig, Timeouts
from legato_gym.errors import ConfigError
from legato_gym.options import options_from_json, options_to_json

__all__ = [
    "HEADER",
    "PROTOCOL_VERSION",
    "FrameReader",
    "ProtocolError",
    "config_from_json",
    "config_to_json",
    "encode_frame",
    "to_jsonable",
]

#: Bumped on any incompatible change to the messages above.
PROTOCOL_VERSION = 1

#: The frame header: lengths of the JSON part and of the blob part.
HEADER = struct.Struct(">II")

#: Largest JSON part accepted (a task config or an info dict; screenshots travel in the blob).
MAX_JSON_BYTES = 64 * 1024 * 1024


class ProtocolError(Exception):
    """A malformed frame or an unexpected message. Translated to a DesktopError by the parent."""


def to_jsonable(value: Any) -> Any:
    """``json.dumps`` default hook: numpy scalars and arrays, paths, tuples and sets become plain JSON."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serializable: {value!r}")


def encode_frame(message: Mapping[str, Any], *blobs: bytes | memoryview) -> list[bytes | memoryview]:
    """Encode one frame as buffers for ``socket.sendmsg``; the blob is the concatenation of ``blobs`` (not copied)."""
    data = json.dumps(message, default=to_jsonable, separators=(",", ":")).encode()
    parts = [blob for blob in blobs if memoryview(blob).nbytes]
    size = sum(memoryview(blob).nbytes for blob in parts)
    return [HEADER.pack(len(data), size) + data, *parts]


class FrameReader:
    """Incremental frame decoder for a non-blocking stream: feed it with :meth:`read_from`.

    Large blobs are read straight into one preallocated buffer (no repeated concatenation).
    """

    def __init__(self) -> None:
        self._head = bytearray()
        self._json_len = -1
        self._blob_len = 0
        self._body = bytearray()
        self._blob: bytearray | None = None
        self._blob_pos = 0
        self.frames: list[tuple[dict[str, Any], bytearray | None]] = []

    def feed(self, data: bytes) -> None:
        """Decode as many frames as ``data`` completes; they are appended to :attr:`frames`."""
        view = memoryview(data)
        while len(view):
            view = self._consume(view)

    def blob_target(self) -> memoryview | None:
        """Where the next bytes go when a blob is being read (for ``recv_into``), else ``None``."""
        if self._blob is not None and self._blob_pos < len(self._blob):
            return memoryview(self._blob)[self._blob_pos :]
        return None

    def advance_blob(self, count: int) -> None:
        """Record ``count`` bytes written into :meth:`blob_target`."""
        self._blob_pos += count
        self._maybe_finish()

    def _consume(self, view: memoryview) -> memoryview:
        if self._json_len < 0:
            need = HEADER.size - len(self._head)
            self._head += view[:need]
            view = view[need:]
            if len(self._head) == HEADER.size:
                self._json_len, self._blob_len = HEADER.unpack(self._head)
                if self._json_len > MAX_JSON_BYTES:
                    raise ProtocolError(f"frame announces {self._json_len} bytes of JSON; the stream is corrupt")
                self._head.clear()
                self._maybe_finish()
            return view
        if len(self._body) < self._json_len:
            need = self._json_len - len(self._body)
            self._body += view[:need]
            view = view[need:]
            if len(self._body) == self._json_len and self._blob_len:
                self._blob = bytearray(self._blob_len)
                self._blob_pos = 0
            self._maybe_finish()
            return view
        assert self._blob is not None
        need = self._blob_len - self._blob_pos
        chunk = view[:need]
        self._blob[self._blob_pos : self._blob_pos + len(chunk)] = chunk
        self._blob_pos += len(chunk)
        self._maybe_finish()
        return view[len(chunk) :]

    def _maybe_finish(self) -> None:
        if self._json_len < 0 or len(self._body) < self._json_len:
            return
        if self._blob_len and (self._blob is None or self._blob_pos < self._blob_len):
            return
        try:
            message = json.loads(self._body.decode())
        except ValueError as exc:  # UnicodeDecodeError included
            raise ProtocolError(f"frame is not JSON: {bytes(self._body[:200])!r}") from exc
        if not isinstance(message, dict):
            raise ProtocolError(f"frame is not a JSON object: {message!r}")
        self.frames.append((message, self._blob))
        self._json_len = -1
        self._blob_len = 0
        self._body = bytearray()
        self._blob = None
        self._blob_pos = 0


def config_to_json(config: DesktopConfig) -> dict[str, Any]:
    """A :class:`DesktopConfig` as JSON for the worker; typed options travel with their kind
    (:func:`~legato_gym.options.options_to_json`) and are rebuilt as the same class there.

    Raises:
        ConfigError: ``config.options`` is a mapping holding values that cannot cross a process boundary as JSON.
    """
    data = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    data["timeouts"] = dataclasses.asdict(config.timeouts)
    data["screen"] = list(config.screen)
    data["osworld_path"] = str(config.osworld_path) if config.osworld_path is not None else None
    data["options"] = options_to_json(config.options)
    try:
        json.dumps(data, default=to_jsonable)
    except TypeError as exc:
        raise ConfigError(
            f"DesktopConfig.options={config.options!r:.200} cannot be sent to a worker process ({exc}); "
            "use JSON values (str, numbers, bools, lists, dicts)"
        ) from exc
    return data


def config_from_json(data: Mapping[str, Any]) -> DesktopConfig:
    """The inverse of :func:`config_to_json`."""
    fields = dict(data)
    fields["screen"] = tuple(fields["screen"])
    fields["timeouts"] = Timeouts(**fields["timeouts"])
    path = fields.get("osworld_path")
    fields["osworld_path"] = Path(path) if path else None
    fields["options"] = options_from_json(fields.get("options"))
    return DesktopConfig(**fields)
