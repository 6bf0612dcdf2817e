"""Host side of OSWorld's in-VM HTTP protocol, spoken over the desktop server's unix socket."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from legato_gym.errors import DeadlineExceeded, DesktopCrashed

__all__ = ["DesktopClient"]

logger = logging.getLogger(__name__)


class DesktopClient:
    """Calls to one desktop's server (OSWorld ``PythonController``/``SetupController`` endpoints).

    Transport errors become :class:`DesktopCrashed` (the server or its sandbox died) or
    :class:`DeadlineExceeded` (a call overran ``timeout``); HTTP error statuses are returned to the caller,
    which decides, as OSWorld's controllers do, whether a failed call is fatal.

    Args:
        socket_path: the server's unix socket on the host.
        timeout: default per-request timeout in seconds.
    """

    def __init__(self, socket_path: Path, timeout: float) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(socket_path)), base_url="http://desktop", timeout=timeout
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, timeout=timeout or self.timeout, **kwargs)
        except httpx.TimeoutException as exc:
            raise DeadlineExceeded(
                f"desktop server: {method} {path} took longer than {timeout or self.timeout:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise DesktopCrashed(f"desktop server unreachable at {self.socket_path}: {exc}") from exc

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
                if self._http.get("/platform", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
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
        """``POST /file`` (form ``file_path``): the file's bytes, or ``None`` when it does not exist."""
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
