"""Host side of OSWorld's in-VM HTTP protocol, spoken over the desktop server's unix socket."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from legato_gym.bounds import ReadCaps, read_capped, write_capped
from legato_gym.errors import DeadlineExceeded, DesktopCrashed

__all__ = ["DesktopClient"]

logger = logging.getLogger(__name__)


class DesktopClient:
    """Calls to one desktop's server (OSWorld ``PythonController``/``SetupController`` endpoints).

    Transport errors become :class:`DesktopCrashed` (the server or its sandbox died) or
    :class:`DeadlineExceeded` (a call overran ``timeout``); HTTP error statuses are returned to the caller,
    which decides, as OSWorld's controllers do, whether a failed call is fatal.

    Every answer is read streaming against a cap (:class:`~legato_gym.bounds.ReadCaps`): an answer held in
    memory stops at ``caps.answer_bytes``, a file fetched with :meth:`fetch_file` is written to disk as it
    arrives and stops at ``caps.file_bytes``; past a cap the call raises
    :class:`~legato_gym.errors.ReplyTooLarge` and the rest is never read.

    Args:
        socket_path: the server's unix socket on the host.
        timeout: default per-request timeout in seconds.
        caps: the read caps.
    """

    def __init__(self, socket_path: Path, timeout: float, caps: ReadCaps = ReadCaps.DEFAULT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.caps = caps
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(socket_path)),
            base_url="http://desktop",
            timeout=timeout,
            headers={"Accept-Encoding": "identity"},
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self, method: str, path: str, *, timeout: float | None = None, cap: int | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One call; its answer read whole, up to ``cap`` bytes (default ``caps.answer_bytes``)."""
        limit = self.caps.answer_bytes if cap is None else cap
        what = f"desktop server: {method} {path}"
        with self._stream(method, path, timeout, kwargs) as response:
            body = read_capped(self._raw(response), limit, what, response.headers.get("content-length"))
            return httpx.Response(response.status_code, headers=response.headers, content=body)

    def fetch_file(self, path: str, target: Path) -> bool:
        """``POST /file`` (form ``file_path``) streamed into ``target``; False when the file does not exist.

        Raises:
            ReplyTooLarge: the file is over ``caps.file_bytes`` (``target`` is then removed).
        """
        what = f"desktop server: POST /file {path!r}"
        with self._stream("POST", "/file", None, {"data": {"file_path": path}}) as response:
            if response.status_code != 200:
                read_capped(self._raw(response), self.caps.answer_bytes, what)
                return False
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.{os.getpid()}.part")
            try:
                with partial.open("wb") as out:
                    write_capped(
                        self._raw(response), out, self.caps.file_bytes, what, response.headers.get("content-length")
                    )
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
        return True

    @contextlib.contextmanager
    def _stream(
        self, method: str, path: str, timeout: float | None, kwargs: dict[str, Any]
    ) -> Iterator[httpx.Response]:
        seconds = timeout or self.timeout
        try:
            with self._http.stream(method, path, timeout=seconds, **kwargs) as response:
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise DesktopCrashed(f"desktop server: {method} {path} answered in an encoding not asked for")
                yield response
        except httpx.TimeoutException as exc:
            raise DeadlineExceeded(f"desktop server: {method} {path} took longer than {seconds:g} s") from exc
        except httpx.TransportError as exc:
            raise DesktopCrashed(f"desktop server unreachable at {self.socket_path}: {exc}") from exc

    @staticmethod
    def _raw(response: httpx.Response) -> Iterator[bytes]:
        return response.iter_raw(1 << 16)

    def wait_up(self, deadline: float, check: Callable[[], None] | None = None) -> None:
        """Wait until the server answers ``GET /platform``.

        Args:
            deadline: ``time.monotonic()`` deadline.
            check: called between attempts; raises when the server can no longer come up (its sandbox died).
        """
        while True:
            if check is not None:
                check()
            try:
                if self.request("GET", "/platform", timeout=1.0).status_code == 200:
                    return
            except (DesktopCrashed, DeadlineExceeded):  # not up yet
                pass
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(f"desktop server at {self.socket_path} did not answer before the deadline")
            time.sleep(0.005)

    # --- OSWorld endpoints
    def execute(self, command: list[str] | str, *, shell: bool = False, timeout: float | None = None) -> dict[str, Any]:
        """``POST /execute``: ``{status, output, error, returncode}`` (or ``{status: error, message}``)."""
        response = self.request("POST", "/execute", json={"command": command, "shell": shell}, timeout=timeout)
        data = response.json()
        return data if isinstance(data, dict) else {"status": "error", "message": repr(data)}

    def file(self, path: str) -> bytes | None:
        """``POST /file`` (form ``file_path``): the file's bytes (at most ``caps.answer_bytes``: a larger file
        goes to disk with :meth:`fetch_file`), or ``None`` when it does not exist."""
        response = self.request("POST", "/file", data={"file_path": path})
        return response.content if response.status_code == 200 else None

    def upload(self, path: str, data: bytes) -> None:
        """``POST /setup/upload`` (multipart ``file_path`` + ``file_data``)."""
        response = self.request("POST", "/setup/upload", data={"file_path": path}, files={"file_data": ("file", data)})
        if response.status_code != 200:
            raise DesktopCrashed(f"upload of {path!r} failed: {response.status_code} {response.text[:200]}")

    def post_json(self, path: str, payload: dict[str, Any], *, timeout: float | None = None) -> httpx.Response:
        return self.request("POST", path, json=payload, timeout=timeout)

    def terminal_output(self) -> str | None:
        response = self.request("GET", "/terminal")
        if response.status_code != 200:
            return None
        output = response.json().get("output")
        return output if isinstance(output, str) else None
