"""An export's output file: a temporary file beside the target, locked while it is written, renamed over the
target when complete; the temporary files of exports that were killed are removed by the next one."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from legato_rl.store import StorageError, storage_error

__all__ = ["atomic_output"]

log = logging.getLogger(__name__)

_AGAIN = "then export again"


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` that replaces it only when the body completes.

    The temporary file is removed when the body fails or is interrupted. An export killed outright (SIGKILL,
    a power cut) cannot remove it, so each export first removes the temporary files of ``path`` that no
    live export holds: every export holds a lock on its own temporary file while it writes.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(path)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise storage_error(exc, path, then=_AGAIN) from exc
    tmp = Path(name)
    try:
        _lock(fd, block=True)
        try:
            yield tmp
            with open(tmp, "rb") as file:
                os.fsync(file.fileno())
            mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except StorageError:
            raise
        except OSError as exc:
            raise storage_error(exc, path, then=_AGAIN) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, *, block: bool) -> bool:
    """An exclusive ``flock`` on ``fd``; False when another process holds one (``block=False``)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover  (not POSIX: no lock, no clean-up of others' files)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _remove_stale(path: Path) -> None:
    """Remove the temporary files of ``path`` left by exports that were killed (no live export locks them)."""
    prefix = f".{path.name}."
    with os.scandir(path.parent) as entries:
        stale = [e.path for e in entries if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    for name in stale:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:  # gone meanwhile
            continue
        try:
            if _lock(fd, block=False):
                log.info("removing %s, left by an export that was killed", name)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        finally:
            os.close(fd)
