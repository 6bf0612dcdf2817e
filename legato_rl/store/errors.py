"""The store's errors: a run or record that cannot be read, and a file that cannot be written or read.

::

    LegatoError                       (legato_gym.errors)
    ├── RecordError                   not a run, a damaged line, a missing or altered file (also a ValueError)
    │   └── RunInProgressError        a ``legato rl collect`` still holds the run's writer lock
    └── StorageError                  the disk is full, the folder is read-only, ... (also an OSError)
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from legato_gym.errors import LegatoError

__all__ = ["RecordError", "RunInProgressError", "StorageError", "storage", "storage_error"]


class RecordError(LegatoError, ValueError):
    """A run directory or record that cannot be read: not a run, a corrupt line, a missing or altered file, or
    an image reference that is not a plain sha256 hash."""


class RunInProgressError(RecordError):
    """The run is still being written: a ``legato rl collect`` holds its writer lock (see
    :func:`~legato_rl.store.is_being_written`). Wait for it to finish, or stop it."""


class StorageError(LegatoError, OSError):
    """A file of a run (or of an export) cannot be written or read: the disk is full, the folder is
    read-only, or a part of the path is a file. The message names the path, the cause and the fix; the
    ``errno`` and ``filename`` of the :class:`OSError` behind it are kept. Built by :func:`storage_error`."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # OSError's own form ("[Errno 28] ...") would hide the fix


#: Why a write failed, by errno, in words a user acts on.
_CAUSES: dict[int, str] = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "a file is in the way of a folder",
    errno.EISDIR: "it is a folder, not a file",
    errno.ENAMETOOLONG: "the name is too long",
}
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def storage_error(
    exc: OSError, path: str | os.PathLike[str], *, doing: str = "write", then: str | None = None
) -> StorageError:
    """The :class:`StorageError` for an :class:`OSError` met while reading or writing ``path``.

    Args:
        exc: the error.
        path: the file or folder being written (the error's own ``filename`` is named too when it differs).
        doing: ``write`` or ``read``.
        then: what to do once the cause is fixed; default: run the same command again to resume.
    """
    if isinstance(exc, StorageError):
        return exc
    code = exc.errno
    filename = exc.filename if isinstance(exc.filename, (str, bytes, os.PathLike)) else None
    where = str(path)
    if filename is not None and os.fsdecode(filename) != where:
        where = f"{where} ({os.fsdecode(filename)})"
    cause = _CAUSES.get(code, exc.strerror or str(exc)) if code is not None else (exc.strerror or str(exc))
    detail = f" [{errno.errorcode.get(code, code)}]" if code is not None else ""
    after = then or "then run the same command again to resume: what was written so far is kept"
    if code in _FULL:
        fix = f"free some space on that disk, {after}"
    elif code in _READ_ONLY:
        fix = f"make the folder writable (or give another --out for a new batch), {after}"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        fix = "give an --out whose every part is a folder (or does not exist yet)"
    else:
        fix = f"fix the cause, {after}"
    error = StorageError(f"cannot {doing} {where}: {cause}{detail}; {fix}")
    error.errno = code
    error.filename = filename
    return error


@contextlib.contextmanager
def storage(path: str | os.PathLike[str], doing: str = "write", then: str | None = None) -> Iterator[None]:
    """Raise an :class:`OSError` in the block as a :class:`StorageError` naming ``path``."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, StorageError):
            raise
        raise storage_error(exc, path, doing=doing, then=then) from exc
