"""Shared screenshot buffers: one anonymous shared-memory segment per worker.

The parent creates the segment (``memfd_create`` on Linux, an unlinked temporary file elsewhere), maps
it, and hands the worker the file descriptor when it starts it. The worker writes each screenshot into
the segment; the parent copies it out before it sends that worker its next request. No name exists in
``/dev/shm``, so nothing leaks when either process is killed. Stdlib and numpy only.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import tempfile

import numpy as np
import numpy.typing as npt

__all__ = ["ScreenBuffer"]


class ScreenBuffer:
    """A shared ``size``-byte segment holding one ``uint8`` screenshot.

    Args:
        size: bytes (``height * width * 3``).
        fd: an inherited descriptor of an existing segment (the worker side); ``None`` creates one.
    """

    def __init__(self, size: int, fd: int | None = None) -> None:
        self.size = size
        if fd is None:
            fd = _anonymous_segment(size)
        self.fd: int | None = fd
        self._map: mmap.mmap | None = mmap.mmap(fd, size)

    def close_fd(self) -> None:
        """Close the descriptor; the mapping stays valid."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        """Unmap and close. Idempotent."""
        self.close_fd()
        if self._map is not None:
            with contextlib.suppress(BufferError):  # an array still views it; it goes with the last view
                self._map.close()
            self._map = None

    def array(self, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
        """A view of the first ``prod(shape)`` bytes as a ``uint8`` array of ``shape``."""
        if self._map is None:
            raise ValueError("ScreenBuffer is closed")
        count = math.prod(shape)
        return np.frombuffer(self._map, dtype=np.uint8, count=count).reshape(shape)

    def write(self, image: npt.NDArray[np.uint8]) -> bool:
        """Copy ``image`` in; ``False`` (nothing written) when it does not fit."""
        if image.nbytes > self.size:
            return False
        np.copyto(self.array(image.shape), image, casting="unsafe")
        return True


def _anonymous_segment(size: int) -> int:
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = int(memfd_create("legato-screen"))
    else:  # pragma: no cover - non-Linux
        fd, path = tempfile.mkstemp(prefix="legato-screen-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd
