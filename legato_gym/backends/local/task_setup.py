"""Running an OSWorld task's setup (``config``) and post-config steps on a local desktop.

Same step types, parameters and failure rules as OSWorld's ``SetupController``: ``launch``,
``activate_window`` and ``close_window`` failures are only logged, ``open`` and
``execute_with_verification`` failures raise, ``execute``/``command`` substitute ``{CLIENT_PASSWORD}``,
``{SCREEN_WIDTH}``, ``{SCREEN_HEIGHT}`` and their ``_HALF`` forms. Where OSWorld sleeps, the ready-signal
mode waits on conditions instead: a ``sleep`` step, and any step that talks to windows, first waits until
the windows launched so far are mapped and the screen has settled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from legato_gym.backends.local import apps
from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.contract import Task
from legato_gym.errors import SetupError, UnsupportedTaskError

__all__ = ["SETUP_TYPES", "SetupRunner", "check_setup"]

logger = logging.getLogger(__name__)

#: OSWorld setup step types this backend runs.
SETUP_TYPES = frozenset(
    {
        "launch",
        "execute",
        "command",
        "execute_with_verification",
        "open",
        "activate_window",
        "close_window",
        "sleep",
        "upload_file",
        "download",
    }
)
CLIENT_PASSWORD = "password"


def check_setup(task: Task) -> None:
    """Raise :class:`UnsupportedTaskError` when a setup or post-config step type is not supported."""
    steps = list(task.setup) + list(task.evaluator.get("postconfig") or [])
    for step in steps:
        kind = step.get("type")
        if kind not in SETUP_TYPES:
            raise UnsupportedTaskError(
                f"task {task.task_id}: setup step {kind!r} is not supported by the local backend (it runs "
                f"{', '.join(sorted(SETUP_TYPES))}); run this task on the osworld backend"
            )


class SetupRunner:
    """Runs setup steps against one desktop.

    Args:
        client: the desktop's server.
        cache_dir: the task's host-side cache (downloads, gold files, ``stdout``/``stderr`` captures).
        screen: ``(width, height)`` for the placeholders.
        deadline: monotonic time by which every step must be done.
        settle: ``settle(expected_windows, deadline) -> bool``: the ready signal (``None``: fixed sleeps).
        files: the persistent file cache that ``download`` steps read first and fill (default:
            :meth:`FileCache.default`).
    """

    def __init__(
        self,
        client: DesktopClient,
        cache_dir: Path,
        screen: tuple[int, int],
        deadline: float,
        settle: Callable[[int, float], bool] | None,
        files: FileCache | None = None,
    ) -> None:
        self.client = client
        self.files = files if files is not None else FileCache.default()
        self.cache_dir = cache_dir
        self.screen = screen
        self.deadline = deadline
        self.settle = settle
        self.launched = 0
        self.opened = 0
        #: Window titles that show the launched apps have loaded (:func:`.apps.ready_title`).
        self.titles: list[str] = []

    @property
    def expected_windows(self) -> int:
        return self.launched + self.opened

    def _remaining(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise SetupError("task setup overran the reset deadline")
        return remaining

    def _substitute(self, text: str) -> str:
        width, height = self.screen
        for key, value in (
            ("{CLIENT_PASSWORD}", CLIENT_PASSWORD),
            ("{SCREEN_WIDTH_HALF}", str(width // 2)),
            ("{SCREEN_HEIGHT_HALF}", str(height // 2)),
            ("{SCREEN_WIDTH}", str(width)),
            ("{SCREEN_HEIGHT}", str(height)),
        ):
            text = text.replace(key, value)
        return text

    def _ready(self) -> None:
        if self.settle is not None:
            self.settle(self.expected_windows, self.deadline)

    def run(self, steps: Iterable[Mapping[str, Any]]) -> None:
        """Run the steps in order; :class:`SetupError` names the failing step."""
        for index, step in enumerate(steps):
            kind = str(step.get("type"))
            params = dict(step.get("parameters") or {})
            try:
                getattr(self, f"_{kind}")(**params)
            except SetupError as exc:
                raise SetupError(f"setup step {index} ({kind}) failed: {exc}") from exc
            except TypeError as exc:
                raise SetupError(f"setup step {index} ({kind}): bad parameters {sorted(params)}: {exc}") from exc

    # --- step types (names and parameters as OSWorld's SetupController)
    def _launch(self, command: str | list[str], shell: bool = False) -> None:
        response = self.client.post_json(
            "/setup/launch", {"command": command, "shell": shell}, timeout=self._remaining()
        )
        if response.status_code != 200:
            logger.warning("launch %r failed: %s %s", command, response.status_code, response.text[:200])
            return
        if apps.opens_window(command):
            self.launched += 1
        title = apps.ready_title(command)
        if title is not None:
            self.titles.append(title)

    def _execute(
        self,
        command: str | list[str],
        stdout: str = "",
        stderr: str = "",
        shell: bool = False,
        until: Mapping[str, Any] | None = None,
    ) -> None:
        command = self._substitute(command) if isinstance(command, str) else [self._substitute(c) for c in command]
        while True:
            response = self.client.post_json(
                "/setup/execute", {"command": command, "shell": shell}, timeout=self._remaining()
            )
            if response.status_code != 200:
                logger.warning("execute %r failed: %s %s", command, response.status_code, response.text[:200])
                return
            result = response.json()
            if stdout:
                (self.cache_dir / stdout).write_text(result.get("output") or "")
            if stderr:
                (self.cache_dir / stderr).write_text(result.get("error") or "")
            if not until or _until_met(until, result):
                return
            self._remaining()
            time.sleep(0.3)  # OSWorld's re-poll interval for `until`

    _command = _execute

    def _execute_with_verification(
        self,
        command: str | list[str],
        verification: Mapping[str, Any] | None = None,
        max_wait_time: float = 10,
        check_interval: float = 1,
        shell: bool = False,
    ) -> None:
        payload = {
            "command": command,
            "shell": shell,
            "verification": dict(verification or {}),
            "max_wait_time": max_wait_time,
            "check_interval": check_interval,
        }
        response = self.client.post_json("/setup/execute_with_verification", payload, timeout=self._remaining())
        if response.status_code != 200:
            raise SetupError(f"command {command!r} failed verification: {response.text[:200]}")

    def _open(self, path: str) -> None:
        path = self._substitute(path)
        response = self.client.post_json("/setup/open_file", {"path": path}, timeout=self._remaining())
        if response.status_code != 200:
            raise SetupError(f"could not open {path!r}: {response.status_code} {response.text[:200]}")
        self.opened += 1
        self.titles.append(apps.open_title(path))  # the file's name, GIMP's [name], VLC's title

    def _activate_window(self, window_name: str, strict: bool = False, by_class: bool = False) -> None:
        self._ready()
        payload = {"window_name": window_name, "strict": strict, "by_class": by_class}
        response = self.client.post_json("/setup/activate_window", payload, timeout=self._remaining())
        if response.status_code != 200:
            logger.warning("activate_window %r failed: %s", window_name, response.text[:200])

    def _close_window(self, window_name: str, strict: bool = False, by_class: bool = False) -> None:
        self._ready()
        payload = {"window_name": window_name, "strict": strict, "by_class": by_class}
        response = self.client.post_json("/setup/close_window", payload, timeout=self._remaining())
        if response.status_code != 200:
            logger.warning("close_window %r failed: %s", window_name, response.text[:200])

    def _sleep(self, seconds: float) -> None:
        if self.settle is not None:
            self._ready()
        else:
            time.sleep(min(float(seconds), self._remaining()))  # the task's own pause (fixed-wait mode)

    def _upload_file(self, files: list[Mapping[str, str]]) -> None:
        for entry in files:
            local = Path(entry["local_path"]).expanduser()
            if not local.is_file():
                raise SetupError(f"upload_file: local file {local} does not exist")
            self.client.upload(entry["path"], local.read_bytes())

    def _download(self, files: list[Mapping[str, str]]) -> None:
        for entry in files:
            url, path = entry["url"], entry["path"]
            if not url or not path:
                raise SetupError(f"download: url and path are required, got {dict(entry)!r}")
            cached = self.files.fetch(url, timeout=min(self._remaining(), 300.0))
            self.client.upload(path, cached.path.read_bytes())


def _until_met(until: Mapping[str, Any], result: Mapping[str, Any]) -> bool:
    if "returncode" in until and result.get("returncode") != until["returncode"]:
        return False
    if "stdout" in until and until["stdout"] not in (result.get("output") or ""):
        return False
    return not ("stderr" in until and until["stderr"] not in (result.get("error") or ""))
