"""The worker pool's handle on one desktop's worker, wherever it runs, and the launcher that starts one.

The pool (:mod:`legato_gym.vector.pool`) is given a :class:`WorkerLauncher`, as an httpx client is given a
transport: :class:`~legato_gym.transport.process.ProcessLauncher` starts worker processes on this host,
:class:`~legato_gym.vector.ray_hosts.RayLauncher` starts them on the hosts of a Ray cluster. Deadlines,
replacement and the episode state stay in the pool; a handle only moves protocol frames
(:mod:`legato_gym.transport.protocol`) and ends its worker.

A handle is watched through file descriptors: when one of :meth:`WorkerHandle.fds` is readable the pool
calls :meth:`WorkerHandle.receive` with it, from its selector (synchronous calls) or its event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Frame", "WorkerHandle", "WorkerLauncher"]

#: One protocol message and the blob that came with it (raw pixels, a PNG, or both), if any.
Frame = tuple[dict[str, Any], bytearray | None]


@runtime_checkable
class WorkerHandle(Protocol):
    """One started desktop worker, as the pool sees it.

    Attributes:
        pid: the worker's process id (``-1`` while not known, e.g. before a remote worker said hello).
        alive: ``False`` once the worker was killed or found gone.
        shm_fd: the descriptor of the shared screenshot buffer as the worker sees it (``None``: screenshots
            come as framed bytes).
    """

    pid: int
    alive: bool
    shm_fd: int | None

    @property
    def name(self) -> str:
        """How messages name the worker: ``worker 123``, plus where it runs for a remote one."""
        ...

    @property
    def exit_status(self) -> int | None:
        """The worker's exit status, once known."""
        ...

    def fds(self) -> tuple[int, ...]:
        """The descriptors to watch for reading now (a stream that ended is no longer listed)."""
        ...

    def receive(self, fd: int) -> tuple[list[Frame], bool]:
        """Read what ``fd`` holds: the frames that completed, and ``False`` once the worker is gone."""
        ...

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Send one request by ``deadline`` (monotonic seconds).

        Raises:
            OSError: the worker is gone.
            TimeoutError: the worker does not take the request by ``deadline``.
        """
        ...

    def screen(self, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
        """The screenshot of ``shape`` in the shared buffer (a view the worker overwrites on its next request).

        Raises:
            ValueError: the worker has no shared buffer.
        """
        ...

    def stderr_text(self) -> str:
        """The end of what the worker wrote to stderr (for error messages)."""
        ...

    def kill(self) -> None:
        """End the worker and everything it started; idempotent."""
        ...

    def wait_exit(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the worker to exit after ``close``, then kill what is left."""
        ...


@runtime_checkable
class WorkerLauncher(Protocol):
    """Starts desktop workers for a pool."""

    def start(self, env_id: int) -> WorkerHandle:
        """Start a worker for desktop ``env_id``.

        Raises:
            DesktopError: no worker can be started for it now (the pool then calls it unavailable).
            ConfigError: no worker can ever start as configured.
        """
        ...

    def close(self) -> None:
        """Release what the launcher holds (its workers were killed first); idempotent."""
        ...
