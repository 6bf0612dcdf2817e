"""The lookalike session's pictures kept on disk: drawn once per machine, screen size and revision of legato.

Drawing them (:func:`.lookalike.write_lookalike_files`) takes one to two seconds of Pillow, and each process that
starts a lookalike desktop drew them again: every episode runner, ``legato rl collect``, vector and Ray worker.
What they are drawn from is all in the key of a stored copy: the screen size, every file of legato's local
backend (the drawing code, the themes), Pillow's and numpy's versions, the Ubuntu font's folders, and what the
machine has installed (the package database, the desktop files, the icon themes and fallback fonts read).

Example::

    files, manifest = stored(screen, draw)  # draw(screen) only when no copy for this key is on disk
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["KEEP", "Drawn", "cache_dir", "key", "stored"]

logger = logging.getLogger(__name__)

#: The pictures' files (name, bytes) and the manifest's JSON, as :func:`.lookalike._rendered` returns them.
Drawn = tuple[tuple[tuple[str, bytes], ...], str]

_ENV = "LEGATO_DRAWN_CACHE"
#: The local backend's folder: its code and theme files are what the pictures are drawn by.
_BACKEND = Path(__file__).resolve().parent.parent
_FORMAT = 1  # bumped when what is stored changes shape
#: Stored copies kept (the newest): a few screen sizes of a few revisions, about 0.7 MB each.
KEEP = 24


def cache_dir() -> Path:
    """``$LEGATO_DRAWN_CACHE``, else ``~/.cache/legato/lookalike``."""
    return Path(os.environ.get(_ENV) or "~/.cache/legato/lookalike").expanduser()


@functools.cache
def _code_digest() -> str:
    """The digest of every file of the local backend (its code, themes and task data), by relative path."""
    digest = hashlib.sha256()
    for path in sorted(_BACKEND.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(_BACKEND)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _stamp(path: str | Path) -> str:
    """A folder's or file's modification time and size (empty when it is missing): package installs change
    it (dpkg renames each file into place), so a stored copy drawn before an install is not used after it."""
    try:
        info = os.stat(path)
    except OSError:
        return ""
    return f"{info.st_mtime_ns}:{info.st_size}"


def key(screen: tuple[int, int], inputs: Iterable[str | Path]) -> str:
    """The key of the pictures for ``screen``, drawn by this revision from the host paths ``inputs``."""
    import numpy
    import PIL

    parts = {
        "format": _FORMAT,
        "screen": list(screen),
        "code": _code_digest(),
        "pillow": PIL.__version__,
        "numpy": numpy.__version__,
        "inputs": {str(path): _stamp(path) for path in sorted(map(str, inputs))},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _dump(drawn: Drawn) -> bytes:
    files, manifest = drawn
    header = json.dumps({"manifest": manifest, "files": [[name, len(data)] for name, data in files]})
    return header.encode() + b"\n" + b"".join(data for _, data in files)


def _load(blob: bytes) -> Drawn:
    header, _, body = blob.partition(b"\n")
    meta = json.loads(header)
    files, offset = [], 0
    for name, size in meta["files"]:
        files.append((str(name), body[offset : offset + size]))
        offset += size
    if offset != len(body):
        raise ValueError(f"{len(body) - offset} bytes more or less than the header says")
    return tuple(files), str(meta["manifest"])


def _prune(folder: Path) -> None:
    """Remove all but the :data:`KEEP` newest stored copies (each revision of legato stores its own)."""
    copies = []
    for copy in folder.glob("*.drawn"):
        with contextlib.suppress(OSError):
            copies.append((copy.stat().st_mtime, copy))
    for _, copy in sorted(copies, reverse=True)[KEEP:]:
        with contextlib.suppress(OSError):
            copy.unlink()


def stored(
    screen: tuple[int, int], draw: Callable[[tuple[int, int]], Drawn], inputs: Iterable[str | Path] = ()
) -> Drawn:
    """The pictures for ``screen`` from the stored copy of this key, else ``draw(screen)``, then stored.

    A copy that cannot be read is drawn again; one that cannot be written is only logged (the pictures are
    then drawn again by the next process).
    """
    path = cache_dir() / f"{key(screen, inputs)}.drawn"
    try:
        return _load(path.read_bytes())
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.debug("the stored lookalike pictures at %s do not load (%s): drawing them again", path, exc)
    drawn = draw(screen)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(_dump(drawn))
        partial.replace(path)  # whole or not at all, for the processes reading it meanwhile
        _prune(path.parent)
    except OSError as exc:
        logger.debug("could not store the lookalike pictures at %s: %s", path, exc)
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return drawn
