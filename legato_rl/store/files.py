"""The run directory on disk: its file names, atomic and durable writes, the writer lock, a torn last line.

Nothing here knows what a record holds: :mod:`~legato_rl.store.writer` and :mod:`~legato_rl.store.reader`
build on these.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from legato_gym.errors import ConfigError
from legato_rl.store.errors import storage

__all__ = [
    "IMAGES_DIR",
    "LOCK_FILE",
    "MANIFEST_FILE",
    "MESSAGES_DIR",
    "ROLLOUTS_FILE",
    "SUMMARY_FILE",
    "acquire_writer_lock",
    "cut_torn_tail",
    "is_being_written",
    "make_durable",
    "remove_stale_temporaries",
    "torn_tail_bytes",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_once",
]

log = logging.getLogger(__name__)

ROLLOUTS_FILE = "rollouts.jsonl"
MANIFEST_FILE = "run.json"
SUMMARY_FILE = "summary.json"
MESSAGES_DIR = "messages"
IMAGES_DIR = "images"
LOCK_FILE = ".writer.lock"


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, then: str | None = None) -> None:
    """Write JSON to ``path`` atomically (temporary file, fsync, rename).

    Args:
        path: the file.
        data: the JSON value.
        then: for the error message, what to do once the cause is fixed (see
            :func:`~legato_rl.store.storage_error`).

    Raises:
        StorageError: it cannot be written; no temporary file is left behind.
    """
    text = json.dumps(data, ensure_ascii=False, indent=2, sort_keys=False) + "\n"
    with storage(path, then=then):
        _write_atomic(Path(path), text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, then: str | None = None) -> None:
    """Write bytes to ``path`` atomically (temporary file beside it, fsync, rename).

    Raises:
        StorageError: it cannot be written (``then`` as in :func:`write_json_atomic`); no temporary file is
            left behind.
    """
    with storage(path, then=then):
        _write_atomic(Path(path), data)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        # mkstemp creates 0600; give the file the usual mode (or keep the mode of the file it replaces)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_once(path: Path, data: bytes) -> bool:
    """Write a content-addressed file unless it exists: a temporary name, then a rename, no fsync.

    Returns:
        True when the file was written (it is not durable until :func:`make_durable`), False when it existed.

    Raises:
        OSError: it cannot be written; no temporary file is left behind.
    """
    if path.exists():  # stored by an earlier run of this batch
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def make_durable(root: Path, paths: Iterable[Path]) -> None:
    """Make files written under ``root`` durable, with their names.

    One ``syncfs`` of the filesystem holding ``root`` where there is one (Linux): a tenth of the CPU of an
    ``fsync`` per file and per directory, which is the fallback.

    Raises:
        OSError: a file cannot be synced.
    """
    paths = list(paths)
    if not paths or _syncfs(root):
        return
    for path in paths:
        _fsync_path(path)
    for directory in {path.parent for path in paths}:
        _fsync_path(directory)


_libc_syncfs: Any = None  # the C function once looked up; False where there is none


def _syncfs(path: Path) -> bool:
    """``syncfs(2)`` on the filesystem holding ``path``; ``False`` where it is not available or fails."""
    global _libc_syncfs
    if _libc_syncfs is None:
        _libc_syncfs = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                _libc_syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    if _libc_syncfs is False:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        return bool(_libc_syncfs(fd) == 0)
    finally:
        os.close(fd)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temporaries(root: Path) -> None:
    """Remove the temporary files a killed writer of this run left (call with the writer lock held).

    Only the run's own files: ``messages/`` and ``images/`` wholly, and the temporaries of ``run.json`` and
    ``summary.json`` (an export or a profile may be writing files of its own beside them).
    """
    own = (f".{MANIFEST_FILE}.", f".{SUMMARY_FILE}.")
    for folder, prefixes in ((root / MESSAGES_DIR, (".",)), (root / IMAGES_DIR, (".",)), (root, own)):
        with os.scandir(folder) as entries:
            stale = [e.path for e in entries if e.name.endswith(".tmp") and e.name.startswith(prefixes)]
        for path in stale:
            log.info("removing %s, left by a writer that was killed", path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def cut_torn_tail(path: Path) -> None:
    """Cut a last line that has no newline (its writer was killed mid-record)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with open(path, "r+b") as file:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return
        keep = _after_last_newline(file, size)
        log.warning("%s: cutting a torn last line (%d bytes) left by a killed writer", path, size - keep)
        file.truncate(keep)
        file.flush()
        os.fsync(file.fileno())


def _after_last_newline(file: IO[bytes], size: int) -> int:
    """The offset just after the last newline in the first ``size`` bytes of ``file`` (0 when there is none)."""
    end = size
    block = 1 << 16
    while end > 0:
        start = max(0, end - block)
        file.seek(start)
        index = file.read(end - start).rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def torn_tail_bytes(run_dir: str | os.PathLike[str]) -> int:
    """Bytes after the last newline of ``rollouts.jsonl``: a record cut short by a killed writer (0 when none).

    :func:`~legato_rl.store.read_records` skips such a line; the next :class:`~legato_rl.store.RolloutStore`
    to open the run cuts it off.
    """
    path = Path(run_dir) / ROLLOUTS_FILE
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb") as file:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return 0
        return size - _after_last_newline(file, size)


def acquire_writer_lock(root: Path) -> IO[bytes] | None:
    """Take the run's writer lock, held until the returned file is closed (``None`` where there is no flock).

    Raises:
        ConfigError: another process holds it.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover  (not POSIX: no lock)
        return None
    lock = open(root / LOCK_FILE, "ab")  # noqa: SIM115  (held until close())
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise ConfigError(
            f"another process is writing to {root}; wait for it to finish or give another --out"
        ) from None
    return lock


def is_being_written(run_dir: str | os.PathLike[str]) -> bool:
    """True when a :class:`~legato_rl.store.RolloutStore` (in any process) holds the run open for writing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return False
    path = Path(run_dir) / LOCK_FILE
    if not path.exists():
        return False
    with open(path, "ab") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return False
