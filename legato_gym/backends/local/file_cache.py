"""A persistent cache of OSWorld's task files, keyed by URL, shared by every desktop and never wiped by a reset.

OSWorld's tasks download their input files (setup ``download`` steps) and their gold files (``cloud_file``
getters) from Hugging Face at every reset. Machines that cannot reach it (CI, many training hosts) run
those tasks from this cache: fill it where the internet is reachable (``legato osworld cache``), copy the
folder, and point ``--file-cache DIR`` (or ``$LEGATO_FILE_CACHE``) at it.

Layout (one content file and one index entry per URL, so no lock is needed and a crash leaves no half
entry: both are written to a temporary name and renamed into place, content first)::

    <root>/files/<sha256 of the URL>          the bytes the URL served
    <root>/index/<sha256 of the URL>.json     {"url", "size", "sha256"} (sha256 of the content)
    <root>/partial/<sha256 of the URL>        an interrupted download, resumed with an HTTP Range request

An entry counts only if its content matches its index (size and sha256 are checked on first use per
process). Only the standard library is used: the module also runs in desktop-env's interpreter.

Example::

    from legato_gym.backends.local.file_cache import FileCache
    cache = FileCache("~/osworld-files")
    cache.fetch("https://example.org/report.docx", timeout=120)
    cache.path("https://example.org/report.docx")  # -> Path of the cached bytes
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from legato_gym.errors import SetupError

__all__ = [
    "FETCH_CONNECT_TIMEOUT",
    "FETCH_TIMEOUT",
    "FILE_CACHE_ENV_VAR",
    "CacheEntry",
    "FileCache",
    "default_file_cache_dir",
    "url_key",
]

#: Environment variable naming the cache folder (``--file-cache`` wins over it).
FILE_CACHE_ENV_VAR = "LEGATO_FILE_CACHE"
#: Default seconds one download may take, and one connect or stalled read (:meth:`FileCache.fetch`).
FETCH_TIMEOUT = 300.0
FETCH_CONNECT_TIMEOUT = 10.0
_DEFAULT_DIR = Path("~/.cache/legato/files")
_CHUNK = 1 << 20


def default_file_cache_dir() -> Path:
    """``$LEGATO_FILE_CACHE``, else ``~/.cache/legato/files``."""
    value = os.environ.get(FILE_CACHE_ENV_VAR)
    return Path(value).expanduser() if value else _DEFAULT_DIR.expanduser()


def url_key(url: str) -> str:
    """The cache key of a URL: the hex sha256 of its UTF-8 text."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """One cached URL: where its bytes are, how many, and their sha256."""

    url: str
    path: Path
    size: int
    sha256: str


class FileCache:
    """A content store keyed by URL (see the module docstring for the layout).

    Args:
        root: the cache folder (created on first write).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()
        self._verified: set[str] = set()

    @classmethod
    def default(cls) -> FileCache:
        """The cache at :func:`default_file_cache_dir`."""
        return cls(default_file_cache_dir())

    def __repr__(self) -> str:
        return f"FileCache({str(self.root)!r})"

    def _file(self, key: str) -> Path:
        return self.root / "files" / key

    def _index(self, key: str) -> Path:
        return self.root / "index" / f"{key}.json"

    def entry(self, url: str) -> CacheEntry | None:
        """The entry for ``url``, or ``None`` when it is absent or its content does not match its index."""
        key = url_key(url)
        try:
            meta = json.loads(self._index(key).read_text(encoding="utf-8"))
            size = self._file(key).stat().st_size
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("url") != url or meta.get("size") != size:
            return None
        if key not in self._verified:
            if _sha256_file(self._file(key)) != meta.get("sha256"):
                return None
            self._verified.add(key)
        return CacheEntry(url=url, path=self._file(key), size=size, sha256=str(meta["sha256"]))

    def path(self, url: str) -> Path | None:
        """Where the bytes of ``url`` are, or ``None`` when the cache does not hold it."""
        entry = self.entry(url)
        return entry.path if entry is not None else None

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and self.entry(url) is not None

    def entries(self) -> Iterator[CacheEntry]:
        """Every valid entry, in key order."""
        index = self.root / "index"
        if not index.is_dir():
            return
        for meta_path in sorted(index.glob("*.json")):
            try:
                url = json.loads(meta_path.read_text(encoding="utf-8"))["url"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            entry = self.entry(str(url))
            if entry is not None:
                yield entry

    def put(self, url: str, data: bytes) -> CacheEntry:
        """Store ``data`` as what ``url`` serves (atomically; replaces an older entry)."""
        key = url_key(url)
        self._file(key).parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._file(key).parent, prefix=f".{key}.")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return self._commit(url, Path(tmp), hashlib.sha256(data).hexdigest(), len(data))

    def put_file(self, url: str, source: Path) -> CacheEntry:
        """Store a copy of the file ``source`` as what ``url`` serves."""
        key = url_key(url)
        self._file(key).parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._file(key).parent, prefix=f".{key}.")
        os.close(fd)
        shutil.copyfile(source, tmp)
        return self._commit(url, Path(tmp), _sha256_file(Path(tmp)), Path(tmp).stat().st_size)

    def _commit(self, url: str, tmp: Path, digest: str, size: int) -> CacheEntry:
        key = url_key(url)
        self._file(key).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, self._file(key))
        self._index(key).parent.mkdir(parents=True, exist_ok=True)
        fd, meta_tmp = tempfile.mkstemp(dir=self._index(key).parent, prefix=f".{key}.")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"url": url, "size": size, "sha256": digest}, out)
        os.replace(meta_tmp, self._index(key))
        self._verified.add(key)
        return CacheEntry(url=url, path=self._file(key), size=size, sha256=digest)

    def fetch(
        self, url: str, *, timeout: float = FETCH_TIMEOUT, connect_timeout: float = FETCH_CONNECT_TIMEOUT
    ) -> CacheEntry:
        """Download ``url`` into the cache (resuming an interrupted download) unless it is already there.

        ``file://`` URLs (and plain paths) are copied from this host's disk.

        Args:
            url: the URL.
            timeout: the whole download must finish within this many seconds.
            connect_timeout: bound on connecting and on each read that makes no progress.

        Raises:
            SetupError: the URL cannot be reached or read in time; the message names the URL and the fix.
        """
        entry = self.entry(url)
        if entry is not None:
            return entry
        parsed = urlparse(url)
        if parsed.scheme in ("", "file"):
            source = Path(unquote(parsed.path))
            if not source.is_file():
                raise SetupError(f"{url}: no such file on this host")
            return self.put_file(url, source)
        if parsed.scheme not in ("http", "https"):
            raise SetupError(f"{url}: unsupported URL scheme {parsed.scheme!r} (use http, https or file)")
        return self._download(url, timeout, connect_timeout)

    def _download(self, url: str, timeout: float, connect_timeout: float) -> CacheEntry:
        key = url_key(url)
        partial = self.root / "partial" / key
        partial.parent.mkdir(parents=True, exist_ok=True)
        # one download per URL at a time across processes: desktops resetting the same task share the file
        with (self.root / "partial" / f"{key}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entry = self.entry(url)  # another process may have finished it while this one waited
            if entry is not None:
                return entry
            return self._download_locked(url, partial, timeout, connect_timeout)

    def _download_locked(self, url: str, partial: Path, timeout: float, connect_timeout: float) -> CacheEntry:
        deadline = time.monotonic() + timeout
        have = partial.stat().st_size if partial.exists() else 0
        request = urllib.request.Request(url, headers={"User-Agent": "legato-file-cache"})
        if have:
            request.add_header("Range", f"bytes={have}-")
        hint = "fill the cache where the internet is reachable (`legato osworld cache`) and copy it here"
        try:
            with urllib.request.urlopen(request, timeout=connect_timeout) as response:
                mode = "ab" if have and response.status == 206 else "wb"
                with partial.open(mode) as out:
                    while chunk := response.read(_CHUNK):
                        out.write(chunk)
                        if time.monotonic() > deadline:
                            raise SetupError(
                                f"{url}: download did not finish within {timeout:g} s (kept "
                                f"{partial.stat().st_size} bytes; run again to resume)"
                            )
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # the partial file is already whole
                pass
            else:
                raise SetupError(f"{url}: HTTP {exc.code} {exc.reason}; {hint}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SetupError(f"{url}: unreachable ({reason}); {hint}") from exc
        return self._commit(url, partial, _sha256_file(partial), partial.stat().st_size)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
