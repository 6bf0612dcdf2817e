"""What a desktop's worker answered: a :class:`Result` built from its reply, or the error it reported."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from legato_gym import errors
from legato_gym.errors import DesktopError, LegatoError
from legato_gym.transport.handles import WorkerHandle
from legato_gym.transport.protocol import ProtocolError

__all__ = ["Result", "copy_error", "read_reply", "remote_error"]

Screens = npt.NDArray[np.uint8]


@dataclass
class Result:
    """One finished request of one desktop (``error`` set when it failed)."""

    env_id: int
    op: str
    screen: Screens | None = None
    instruction: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] | None = None
    value: Any = None
    error: LegatoError | None = None
    from_shm: bool = False
    png: bytes | None = None
    lazy: bool = False  # the screenshot (of ``shape``) is in ``png`` only; ``decode()`` makes ``screen``
    shape: tuple[int, ...] = ()

    def decode(self) -> Screens | None:
        """The screenshot's pixels, decoded from ``png`` first if it came as a PNG only."""
        if self.lazy and self.png is not None:
            from legato_gym.vector.ray_host import LazyScreenshot

            self.screen = LazyScreenshot(self.png, self.shape).array()
            self.lazy = False
        return self.screen

    def own_screen(self) -> None:
        """Copy the screenshot out of the worker's shared buffer (before the worker may overwrite it)."""
        if self.from_shm and self.screen is not None:
            self.screen = self.screen.copy()
            self.from_shm = False


def read_reply(
    result: Result,
    payload: Mapping[str, Any],
    blob: bytearray | None,
    handle: WorkerHandle,
    pixels: Literal["eager", "lazy"],
) -> None:
    """Fill ``result`` from a successful reply's ``payload`` and the blob that came with it.

    Raises:
        ProtocolError: the reply's observation does not match its blob.
    """
    obs = payload.get("obs")
    if obs is not None:
        shape = tuple(obs["shape"])
        data = memoryview(blob if blob is not None else b"")
        png_bytes = int(obs.get("png", 0))
        if png_bytes:
            if not 0 < png_bytes <= len(data):
                raise ProtocolError(f"observation announces {png_bytes} PNG bytes in a {len(data)}-byte blob")
            result.png = bytes(data[len(data) - png_bytes :])
            data = data[: len(data) - png_bytes]
        if obs["where"] == "shm":
            result.screen, result.from_shm = handle.screen(shape), True
        elif obs["where"] == "png":  # a remote worker sent its PNG alone: the pixels are decoded from it
            if result.png is None:
                raise ProtocolError("observation says its pixels are in its PNG but has no PNG")
            result.lazy, result.shape = True, shape
            if pixels == "eager":
                result.decode()
        else:
            result.screen = np.frombuffer(data, dtype=np.uint8).reshape(shape)
        result.instruction = str(obs["instruction"])
    result.reward = float(payload.get("reward", 0.0))
    result.terminated = bool(payload.get("terminated", False))
    result.truncated = bool(payload.get("truncated", False))
    result.info = payload.get("info")
    if result.png is not None:
        result.info = {**(result.info or {}), "screenshot_png": result.png}
    result.value = payload.get("value")


def remote_error(env_id: int, data: Mapping[str, Any]) -> LegatoError:
    """The error a worker reported (type, message, traceback), as legato's exception carrying ``env_id``."""
    name, message = str(data.get("type", "Exception")), str(data.get("message", ""))
    tb = data.get("traceback")
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, DesktopError):
        return cls(message, env_id=env_id, remote_traceback=tb)
    if isinstance(cls, type) and issubclass(cls, LegatoError):
        error = cls(f"[env {env_id}] {message}")
        error.env_id = env_id  # type: ignore[attr-defined]
        error.remote_traceback = tb  # type: ignore[attr-defined]
        return error
    return DesktopError(f"{name}: {message}", env_id=env_id, remote_traceback=tb)


def copy_error(error: DesktopError) -> DesktopError:
    """A fresh exception like ``error`` (each request raises its own: tracebacks are not shared)."""
    return type(error)(*error.args, env_id=error.env_id, remote_traceback=error.remote_traceback)
