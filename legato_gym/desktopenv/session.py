"""OSWorld's own setup and grading, bound to a desktop that is already running.

:class:`OSWorldSession` is a ``desktop_env.DesktopEnv`` built *without* its constructor (which would start
a VM through a provider) and attached to an OSWorld-protocol server at ``host:port``: its
``PythonController`` and ``SetupController`` are desktop-env's, ``_set_task_info`` resolves the task's
getters and metrics exactly as ``DesktopEnv.reset`` does, and :meth:`OSWorldSession.evaluate` *is*
``DesktopEnv.evaluate``: post-config first, ``infeasible`` scored by a final ``FAIL``, lists of metrics
with ``conj``, ``FileNotFoundError`` from a getter as 0. So a task graded here gets the score OSWorld's code
gives. The VM's lifecycle (start, revert, the ``is_environment_used`` bookkeeping) is not used: legato's
backends own it.

Two cache directories, on purpose: the setup controller's downloads go to a host cache shared by every
desktop and kept across runs (``<download_cache>/<task_id>/``, keyed by URL as OSWorld keys them), while
the getters write the files they fetch from the desktop (``vm_file``'s ``dest``) into this desktop's own
directory, so two desktops grading the same task at once never overwrite each other's result files.

Runs only in desktop-env's interpreter (``legato osworld setup``).
"""

from __future__ import annotations

import logging
import shutil
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from legato_gym.desktopenv import shim, supplements
from legato_gym.errors import MissingDependencyError, SetupError, UnsupportedTaskError

__all__ = ["CLIENT_PASSWORD", "Endpoint", "OSWorldSession", "import_desktop_env"]

logger = logging.getLogger(__name__)

#: The VM user's password in OSWorld's images (``DesktopEnv`` uses it for every provider but aws).
CLIENT_PASSWORD = "password"


def import_desktop_env() -> Any:
    """``desktop_env.desktop_env`` (with the shim installed, and the getters and metrics it lacks added from
    :mod:`.supplements`), or a clear error outside its interpreter."""
    shim.install()
    # desktop-env logs an ERROR at import when OSWorld's private proxy list is absent (legato never uses it),
    # and PyMuPDF warns about its `fitz` name: neither is the user's business.
    logging.getLogger("desktopenv.providers.aws.ProxyPool").addFilter(lambda record: False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import desktop_env.desktop_env as module
    except ImportError as exc:
        raise MissingDependencyError(
            f"desktop-env does not import in this interpreter ({exc}); run the osworld backend with "
            "DesktopConfig.worker_python set to desktop-env's interpreter: create it with `legato osworld setup`"
        ) from exc
    supplements.install(module.metrics, module.getters)
    return module


class Endpoint:
    """Where a desktop's OSWorld-protocol server and companion ports are.

    Attributes:
        host: ``localhost`` for docker VMs and local stand-ins, the VM's address otherwise.
        server_port: the in-VM server (OSWorld's 5000).
        chromium_port: Chrome's DevTools port (OSWorld's 9222).
        vnc_port: the VNC web port (8006).
        vlc_port: VLC's HTTP port (8080).
    """

    def __init__(
        self, host: str, server_port: int, chromium_port: int = 9222, vnc_port: int = 8006, vlc_port: int = 8080
    ) -> None:
        self.host = host
        self.server_port = server_port
        self.chromium_port = chromium_port
        self.vnc_port = vnc_port
        self.vlc_port = vlc_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server_port}"

    def __repr__(self) -> str:
        return f"Endpoint({self.host}:{self.server_port})"


class OSWorldSession:
    """desktop-env's controllers, setup and ``evaluate()`` against one running desktop.

    Args:
        endpoint: the desktop's server.
        screen: ``(width, height)``, for the setup controller's ``{SCREEN_WIDTH}`` placeholders.
        download_cache: host cache for setup downloads, shared by every desktop (``<task_id>/`` below it).
        work_dir: this desktop's own directory for the files getters fetch.
        client_password: the VM user's password (``{CLIENT_PASSWORD}`` in setup commands).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        screen: tuple[int, int],
        download_cache: Path,
        work_dir: Path,
        client_password: str = CLIENT_PASSWORD,
    ) -> None:
        module = import_desktop_env()
        from desktop_env.controllers.python import PythonController
        from desktop_env.controllers.setup import SetupController

        self.endpoint = endpoint
        self.download_cache = download_cache
        self.work_dir = work_dir
        env = module.DesktopEnv.__new__(module.DesktopEnv)
        env.provider_name = "legato"
        env.region = None
        env.snapshot_name = "init_state"
        env.path_to_vm = None
        env.cache_dir_base = str(work_dir)
        env.os_type = "Ubuntu"
        env.action_space = "pyautogui"
        env.require_a11y_tree = False
        env.require_terminal = False
        env.enable_proxy = False
        env.current_use_proxy = False
        env.client_password = client_password
        env.screen_width, env.screen_height = screen
        env.screen_size = screen
        env.vm_ip = endpoint.host
        env.server_port = endpoint.server_port
        env.chromium_port = endpoint.chromium_port
        env.vnc_port = endpoint.vnc_port
        env.vlc_port = endpoint.vlc_port
        env.is_environment_used = False
        env._traj_no = 0
        env._step_no = 0
        env.action_history = []
        env.controller = PythonController(vm_ip=endpoint.host, server_port=endpoint.server_port)
        env.setup_controller = SetupController(
            vm_ip=endpoint.host,
            server_port=endpoint.server_port,
            chromium_port=endpoint.chromium_port,
            vlc_port=endpoint.vlc_port,
            cache_dir=str(download_cache),
            client_password=client_password,
            screen_width=screen[0],
            screen_height=screen[1],
        )
        self.env = env
        self._postconfig_done = False

    @property
    def controller(self) -> Any:
        """desktop-env's ``PythonController`` for this desktop."""
        return self.env.controller

    @property
    def actions(self) -> list[Any]:
        """The episode's action history (what ``evaluate`` reads for ``FAIL``)."""
        return list(self.env.action_history)

    def begin(self, task_config: Mapping[str, Any], gold_dir: Path | None = None) -> None:
        """Start an episode: resolve the task's getters and metrics (as ``DesktopEnv.reset`` does).

        Args:
            task_config: the OSWorld task config.
            gold_dir: files to copy into the task's work directory (``cache_file`` getters read them).

        Raises:
            UnsupportedTaskError: the task names a metric or getter desktop-env 1.0.2 does not have.
        """
        config = dict(task_config)
        env = self.env
        env._traj_no += 1
        env._step_no = 0
        env.action_history = []
        self._postconfig_done = False
        task_dir = self.work_dir / str(config["id"])
        if task_dir.exists():
            shutil.rmtree(task_dir)
        if gold_dir is not None and gold_dir.is_dir():
            shutil.copytree(gold_dir, task_dir)
        try:
            env._set_task_info(config)
        except AttributeError as exc:
            raise UnsupportedTaskError(
                f"task {config.get('id')}: desktop-env {_version()} has no {exc.name or exc}: the task data is "
                "newer than the installed desktop-env; drop the task or run it with a desktop-env that has it"
            ) from exc
        downloads = self.download_cache / str(config["id"])
        downloads.mkdir(parents=True, exist_ok=True)
        env.setup_controller.reset_cache_dir(str(downloads))

    def setup(self, steps: Sequence[Mapping[str, Any]]) -> None:
        """Run setup steps with desktop-env's ``SetupController.setup``.

        Raises:
            SetupError: the server did not answer, or a step failed (OSWorld's message kept).
        """
        try:
            ok = self.env.setup_controller.setup([dict(s) for s in steps], False)
        except Exception as exc:
            raise SetupError(f"OSWorld setup on {self.endpoint}: {exc}") from exc
        if not ok:
            raise SetupError(f"OSWorld setup: the desktop server at {self.endpoint.url} did not answer")

    def record(self, action: Any) -> None:
        """Add an action to the history (``DesktopEnv.step`` does this for every action, special ones too)."""
        self.env._step_no += 1
        self.env.action_history.append(action)

    def postconfig(self) -> None:
        """Run the task's post-config now (the first half of ``DesktopEnv.evaluate``); once per episode."""
        if self._postconfig_done:
            return
        self._postconfig_done = True
        self.setup(self.env.evaluator.get("postconfig", []) or [])

    def evaluate(self) -> float:
        """``DesktopEnv.evaluate()``, with the post-config run first by :meth:`postconfig` if not yet run."""
        self.postconfig()
        env = self.env
        evaluator = env.evaluator
        env.evaluator = {**evaluator, "postconfig": []}  # already run, and OSWorld runs it first too
        try:
            score = env.evaluate()
        finally:
            env.evaluator = evaluator
        return float(score)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("desktop-env")
    except Exception:
        return "(unknown version)"
