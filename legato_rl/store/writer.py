"""The one writer of a run directory: :class:`RolloutStore`, and :class:`BackgroundWriter` that keeps its disk
writes off the event loop.

A request body's messages are stored once each, content-addressed: ``DIR/messages/<sha>.json`` is named by
the sha256 of its bytes, and each PNG data URL in it is replaced by ``legato-image://<sha>`` with the image's
bytes in ``DIR/images/<sha>.png``. A record is appended to ``rollouts.jsonl`` when a try ends, after every
file it refers to has been made durable.

An image URL that is a :class:`~legato_rl.images.PngDataURL` (what the harnesses make) brings its PNG bytes
and their sha256 along: they are filed as they are, with no base64 decoding. Any other PNG data URL is
decoded to find its bytes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from legato_rl import _json
from legato_rl.images import PNG_DATA_URL, PngDataURL
from legato_rl.store.errors import RecordError, StorageError, storage, storage_error
from legato_rl.store.fields import clip
from legato_rl.store.files import (
    IMAGES_DIR,
    MESSAGES_DIR,
    ROLLOUTS_FILE,
    acquire_writer_lock,
    cut_torn_tail,
    make_durable,
    remove_stale_temporaries,
    write_once,
)
from legato_rl.store.schema import IMAGE_SCHEME, SAMPLING_KEYS, RequestRef, RolloutRecord

__all__ = ["BackgroundWriter", "RolloutStore"]

log = logging.getLogger(__name__)


class RolloutStore:
    """Writes one run directory: message and image files as requests happen, a record when a try ends.

    Opening a store takes the run's writer lock (a second writer is refused) and cuts off a torn last line
    left by a killed writer. Use it as a context manager, or call :meth:`close`. :meth:`put_request` (or
    :meth:`prepare_request`) and :meth:`append` (or :meth:`write_files`) touch separate state, so one thread
    may run each at the same time; neither may run in two threads at once.

    Durability: message and image files are written (to a temporary name, then renamed) without waiting
    for the disk; :meth:`append` makes every file written so far durable before the record that may
    refer to them. A record on disk therefore never points at a message lost to a power cut, and a step
    costs no ``fsync`` of its own.

    Args:
        run_dir: the run directory (created if missing).
        image_cache_bytes: how many characters of plain-string image data URLs to remember as already
            stored, so that a screenshot re-sent at every step is decoded and hashed once (a
            :class:`~legato_rl.images.PngDataURL` needs no cache). Only a cache: a miss costs a re-hash.

    A write that fails (a full disk, a folder made read-only) raises a :class:`StorageError`, and every
    later write of this store raises it again: a record is never appended after a file it may refer to
    failed. A record cut short is cut off, so the run resumes cleanly once the cause is fixed.

    Raises:
        ConfigError: another process is writing to ``run_dir``.
        StorageError: the run directory cannot be made or written.

    Example:
        >>> import tempfile
        >>> from legato_rl.store import RolloutStore, load_request
        >>> with RolloutStore(tempfile.mkdtemp()) as store:
        ...     ref = store.put_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        ...     load_request(store.run_dir, ref) == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        True
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, image_cache_bytes: int = 256 * 2**20) -> None:
        self.run_dir = Path(run_dir)
        self._messages = self.run_dir / MESSAGES_DIR
        self._images = self.run_dir / IMAGES_DIR
        self._path = self.run_dir / ROLLOUTS_FILE
        self._lock: IO[bytes] | None = None
        self._failed: StorageError | None = None
        with storage(self.run_dir):
            self._messages.mkdir(parents=True, exist_ok=True)
            self._images.mkdir(parents=True, exist_ok=True)
            self._lock = acquire_writer_lock(self.run_dir)
            try:
                remove_stale_temporaries(self.run_dir)
                cut_torn_tail(self._path)
                # unbuffered: a write that fails leaves no bytes behind in a buffer for close() to write later
                self._file: IO[bytes] | None = open(self._path, "ab", buffering=0)  # noqa: SIM115  (close())
            except BaseException:
                if self._lock is not None:
                    self._lock.close()
                raise
        self._known_messages: set[str] = set()
        self._known_images: set[str] = set()
        self._image_cache: OrderedDict[str, str] = OrderedDict()
        self._image_cache_chars = 0
        self._image_cache_limit = image_cache_bytes
        self._warned_order = False
        self._unsynced: list[Path] = []  # files written since the last record, not yet fsynced
        self._unsynced_lock = threading.Lock()

    def __enter__(self) -> RolloutStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._file is None

    def close(self) -> None:
        """Flush and release the run (idempotent).

        Raises:
            StorageError: the files written since the last record cannot be made durable.
        """
        try:
            if self._file is not None and self._failed is None:
                with storage(self.run_dir):
                    self._sync_files()
        finally:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def put_request(self, body: Mapping[str, Any]) -> RequestRef:
        """Store a request body's messages (and their images) and return its reference for the step record.

        Each message is written once to ``DIR/messages/<sha>.json`` (atomically; an existing file is kept),
        with every PNG data URL replaced by ``legato-image://<sha>`` and its bytes in ``DIR/images/<sha>.png``.
        Other images (JPEG, remote URLs) stay inline in the message.

        Raises:
            RecordError: the body has no ``messages`` list, or already holds a ``legato-image://`` reference.
        """
        ref, files = self.prepare_request(body)
        self.write_files(files)
        return ref

    def prepare_request(self, body: Mapping[str, Any]) -> tuple[RequestRef, list[tuple[Path, bytes]]]:
        """:meth:`put_request` in two halves: this one hashes, the files it returns go to :meth:`write_files`.

        A writer that keeps the disk off its event loop calls this on the loop and hands the files to a
        thread; every file must be written before a record that refers to it is appended (the files are
        remembered as stored as soon as they are returned).

        Raises:
            RecordError: as :meth:`put_request`.
        """
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise RecordError(f"a request body needs a 'messages' list, got {type(messages).__name__}")
        files: list[tuple[Path, bytes]] = []
        try:
            hashes = tuple(self._put_message(message, files) for message in messages)
        except BaseException:  # the files of the messages read so far are not written: forget them
            for path, _ in files:
                self._known_messages.discard(path.stem)
                self._known_images.discard(path.stem)
            if files:
                self._image_cache.clear()  # only a cache: it may name an image just forgotten
                self._image_cache_chars = 0
            raise
        sampling: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        for key, value in body.items():
            if key in ("model", "messages"):
                continue
            (sampling if key in SAMPLING_KEYS else extras)[key] = value
        keys = list(body)
        canonical = [k for k in ("model", "messages") if k in body] + list(sampling) + list(extras)
        order = None if keys == canonical else tuple(keys)
        if order is not None and not self._warned_order:
            self._warned_order = True
            log.debug("request bodies are not in model/messages/sampling/extras order; recording their key order")
        ref = RequestRef(model=body.get("model"), messages=hashes, sampling=sampling, extras=extras, order=order)
        return ref, files

    def write_files(self, files: Iterable[tuple[Path, bytes]]) -> None:
        """Write the message and image files :meth:`prepare_request` returned (fsynced by the next append).

        Raises:
            StorageError: a file cannot be written; the store then refuses every later write.
        """
        self._check_failed()
        for path, data in files:
            try:
                self._write_file(path, data)
            except OSError as exc:
                raise self._fail(exc, path) from exc

    def append(self, record: RolloutRecord) -> None:
        """Append one record to ``rollouts.jsonl`` and make it durable (flush and fsync).

        Raises:
            StateError: the store is closed.
            StorageError: the record (or a file before it) cannot be written; nothing of the record is left
                in ``rollouts.jsonl``, and the store refuses every later write.
        """
        if self._file is None:
            from legato_gym.errors import StateError

            raise StateError(f"RolloutStore for {self.run_dir} is closed; open a new one to append")
        self._check_failed()
        line = _json.dumps(record.to_json()) + b"\n"
        fd = self._file.fileno()
        start: int | None = None
        try:
            self._sync_files()
            start = os.fstat(fd).st_size
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            if start is not None:  # take back the part of the line that was written
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
            raise self._fail(exc, self._path) from exc

    def _check_failed(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _fail(self, exc: OSError, path: Path) -> StorageError:
        self._failed = storage_error(exc, path)
        return self._failed

    def _sync_files(self) -> None:
        """Make the message and image files written since the last record durable, with their names."""
        with self._unsynced_lock:
            paths, self._unsynced = self._unsynced, []
        make_durable(self.run_dir, paths)

    def _write_file(self, path: Path, data: bytes) -> None:
        """Write a content-addressed file once: a temporary name, then a rename (fsynced by the next append)."""
        if not write_once(path, data):
            return
        with self._unsynced_lock:
            self._unsynced.append(path)

    # -- content addressing ------------------------------------------------------------------------------

    def _put_message(self, message: Any, files: list[tuple[Path, bytes]]) -> str:
        if not _is_mapping(message):
            raise RecordError(f"a message must be a JSON object, got {clip(message)}")
        stored = self._externalize(message, files)
        data = _json.dumps(stored)
        sha = hashlib.sha256(data).hexdigest()
        if sha not in self._known_messages:
            files.append((self._messages / f"{sha}.json", data))
            self._known_messages.add(sha)
        return sha

    def _externalize(self, message: Mapping[str, Any], files: list[tuple[Path, bytes]]) -> dict[str, Any]:
        content = message.get("content")
        if not isinstance(content, list):  # text content: nothing to take out
            return message if type(message) is dict else dict(message)
        out = dict(message)
        out["content"] = [self._externalize_part(part, files) for part in content]
        return out

    def _externalize_part(self, part: Any, files: list[tuple[Path, bytes]]) -> Any:
        if not _is_mapping(part) or part.get("type") != "image_url":
            return part
        image = part.get("image_url")
        url = image.get("url") if _is_mapping(image) else image
        if not isinstance(url, str):
            return part
        if url.startswith(IMAGE_SCHEME):
            raise RecordError(
                f"a request already holds an image reference ({clip(url)}); send the image itself as a data URL"
            )
        sha = self._put_png(url.png, url.sha256, files) if isinstance(url, PngDataURL) else self._put_image(url, files)
        if sha is None:
            return part
        ref = IMAGE_SCHEME + sha
        out = dict(part)
        out["image_url"] = {**image, "url": ref} if _is_mapping(image) else ref
        return out

    def _put_png(self, data: bytes, sha: str, files: list[tuple[Path, bytes]]) -> str:
        """File PNG bytes under their sha256 (once) and return the sha."""
        if sha not in self._known_images:
            files.append((self._images / f"{sha}.png", data))
            self._known_images.add(sha)
        return sha

    def _put_image(self, url: str, files: list[tuple[Path, bytes]]) -> str | None:
        """File the PNG a plain-string data URL encodes; ``None`` when it is not a canonical PNG data URL."""
        cached = self._image_cache.get(url)
        if cached is not None:
            self._image_cache.move_to_end(url)
            return cached
        if not url.startswith(PNG_DATA_URL):
            return None
        payload = url[len(PNG_DATA_URL) :]
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return None
        # Only canonical base64 is externalized, so that restoring it gives the very same characters. With
        # validate=True every full 4-character group maps one to one to its 3 bytes; only the last group can
        # hide non-zero padding bits, so checking it is checking the whole.
        tail = len(data) % 3 or 3
        if base64.b64encode(data[-tail:]) != payload[-4:].encode("ascii") or len(payload) % 4:
            return None
        sha = self._put_png(data, hashlib.sha256(data).hexdigest(), files)
        self._image_cache[url] = sha
        self._image_cache_chars += len(url)
        while self._image_cache_chars > self._image_cache_limit and self._image_cache:
            old, _ = self._image_cache.popitem(last=False)
            self._image_cache_chars -= len(old)
        return sha


class BackgroundWriter:
    """A :class:`RolloutStore` written from one thread in submission order, so that no step waits for the disk.

    A request's messages are hashed on the loop (cheap, and the step record needs the reference); the files
    they need and the records go to the thread in order, so a record is written after every file it refers
    to, and :meth:`RolloutStore.append` makes those durable before the record. Nothing waits for a write
    unless the disk falls ``max_backlog`` writes behind (:meth:`wait_backlog`), which bounds the memory the
    queue holds. The first failure (a full disk) is raised by the next call and by :meth:`aclose`.

    Args:
        store: the open store; the caller closes it after :meth:`aclose`.
        max_backlog: writes queued before :meth:`wait_backlog` waits.
    """

    def __init__(self, store: RolloutStore, max_backlog: int = 512) -> None:
        self.store = store
        self.max_backlog = max_backlog
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="legato-store")
        self._queued: deque[Future[None]] = deque()  # submitted writes, oldest first (they finish in order)
        self._error: BaseException | None = None

    def put_request(self, body: Mapping[str, Any]) -> RequestRef:
        """:meth:`RolloutStore.put_request`, its files written by the thread."""
        self._raise()
        ref, files = self.store.prepare_request(body)
        if files:
            self._submit(self.store.write_files, files)
        return ref

    def append(self, record: RolloutRecord) -> None:
        """:meth:`RolloutStore.append`, by the thread once the files queued before it are written."""
        self._raise()
        self._submit(self.store.append, record)

    async def wait_backlog(self) -> None:
        """Wait while the disk is more than ``max_backlog`` writes behind."""
        queued = self._queued
        while queued and queued[0].done():
            queued.popleft()
        while len(queued) > self.max_backlog:
            await asyncio.wrap_future(queued[len(queued) - self.max_backlog // 2])
            while queued and queued[0].done():
                queued.popleft()
        self._raise()

    async def flush(self) -> None:
        """Wait until every write submitted so far is done (they finish in order); raise the first failure."""
        if self._queued:
            await asyncio.wrap_future(self._queued[-1])
        self._raise()

    def _submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        future = self._thread.submit(fn, arg)
        future.add_done_callback(self._done)
        self._queued.append(future)

    async def aclose(self) -> None:
        """Wait for every write; raise the first failure."""
        await asyncio.to_thread(self._thread.shutdown, True)
        self._raise()

    def _done(self, future: Future[None]) -> None:
        if self._error is None and not future.cancelled() and future.exception() is not None:
            self._error = future.exception()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, with the common case (a dict) checked first: the ABC check is slow."""
    return type(value) is dict or isinstance(value, Mapping)
