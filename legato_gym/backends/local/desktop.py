"""``LocalDesktop``: a real, sandboxed X desktop on this host, driven through OSWorld's protocol."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legato_gym.backends.local import apps, grading, relay, vscode, writeback, xstate
from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.coverage import Capabilities, Verdict
from legato_gym.backends.local.coverage import check_tasks as _check_tasks
from legato_gym.backends.local.display import Display, require_tools
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.backends.local.forward import UnixForwarder
from legato_gym.backends.local.limits import Cgroup, Limits
from legato_gym.backends.local.options import LocalOptions, resolve_grader
from legato_gym.backends.local.sandbox import (
    DEVTOOLS_PORT,
    VLC_HTTP_PORT,
    Sandbox,
    SandboxSpec,
    UidLease,
)
from legato_gym.backends.local.task_setup import SetupRunner, check_setup
from legato_gym.backends.local.tasks import TASK_DATA
from legato_gym.backends.local.xstate import XBaseline
from legato_gym.config import DesktopConfig
from legato_gym.contract import SPECIAL_ACTIONS, ActResult, Observation, Task, Waited, task_path
from legato_gym.errors import (
    DeadlineExceeded,
    DesktopCrashed,
    DesktopError,
    MissingDependencyError,
    StateError,
)

if TYPE_CHECKING:
    from legato_gym.backends.osworld.session import OSWorldSession

__all__ = ["LocalDesktop"]

logger = logging.getLogger(__name__)

#: The folders of a fresh Ubuntu home, as OSWorld's VM user has them (tasks write to ~/Desktop).
HOME_DIRS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Public", "Templates", "Videos")
#: OSWorld's ``PythonController`` prefix for ``pyautogui`` actions (``python -c`` inside the desktop), with the
#: fix OSWorld's ``DesktopEnv.step`` makes to every action (``_fix_pyautogui_less_than_bug``): on an X keymap
#: with the 105th key, pyautogui types "<" as ">" (shift and the key whose first level is "<"). The fix here
#: is in pyautogui's own table, "<" is shift and the comma key, so press, typewrite and hotkey all get it.
ACTION_PREFIX = (
    "import pyautogui; import time; pyautogui.FAILSAFE = False; "
    "_x11 = getattr(pyautogui, '_pyautogui_x11', None); "
    "_x11 is None or _x11.keyboardMapping.update({{'<': _x11.keyboardMapping[',']}}); {command}"
)
#: The sandbox counts as idle (its apps done loading) while its processes use at most this many clock
#: ticks (10 ms each) per ``settle_s`` (at least 0.1 s): browsers keep a little background work going.
IDLE_TICKS = 2


class LocalDesktop:
    """A real desktop on this host: Xvfb + openbox, apps and an OSWorld-protocol server in a bwrap sandbox.

    ``reset`` kills every process of the previous episode (the sandbox's pid namespace), checks that none
    survived and that their windows are gone (else restarts the whole desktop), starts a fresh sandbox whose
    ``/home/user`` is a new tmpfs filled from the home baseline captured at first boot, and runs the task's
    setup. ``config.fast_reset=False`` restarts the whole desktop (X server included) on every reset.

    Example::

        from legato_gym import DesktopConfig
        from legato_gym.backends.local import LocalDesktop, default_tasks

        config = DesktopConfig(screen=(1280, 720))
        with LocalDesktop(config) as desktop:
            task = default_tasks(config)[0]
            desktop.reset(task)
            desktop.wait_after_reset()
            desktop.act("pyautogui.typewrite('echo Hello, legato! > ~/hello.txt\\\\n')")

    Args:
        config: screen size, ready signals / fixed waits, fast reset, deadlines, and ``options``
            (see :class:`LocalOptions`).
        seed: unused (a real desktop has no randomness to seed); accepted for the backend signature.
    """

    def __init__(self, config: DesktopConfig | None = None, *, seed: int | None = None) -> None:
        self.config = config or DesktopConfig()
        self.options = LocalOptions.from_mapping(self.config.options)
        #: The grader that grades this desktop's tasks: ``"osworld"`` (desktop-env's) or ``"local"``.
        self.grader = resolve_grader(self.options.grader)
        if self.options.grader == "auto" and self.grader == "local":
            logger.info(
                "grading with the built-in grader: desktop-env does not import in this interpreter (run the "
                "desktops in desktop-env's, from `legato osworld setup`, to grade with OSWorld's own)"
            )
        require_tools(["Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "setpriv"])
        python = self.options.python or self.config.python or sys.executable
        limits = Limits.from_mb(self.config.memory_mb, self.config.max_processes, self.config.tmpfs_mb)
        self._uid: UidLease | None = None
        if os.geteuid() == 0:
            self._uid = UidLease(self.options.uid_first, self.options.uid_count)
        self._spec = SandboxSpec(
            python=python,
            host_uid=self._uid.uid if self._uid is not None else None,
            limits=limits,
            system_paths=self.options.system_paths,
            extra_paths=(*self.options.extra_paths, *vscode.sandbox_paths()),  # code-server, for `code`
            open_file_timeout=min(self.config.timeouts.reset, 1800.0),
        )
        root = Path(self.options.state_dir or tempfile.gettempdir()) / "legato-local"
        root.mkdir(mode=0o711, parents=True, exist_ok=True)
        root.chmod(0o711)  # the X server, run as the desktop's uid, reaches its folder; nobody lists them
        _sweep_stale(root)
        self.state_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        self.state_dir.chmod(0o711)
        (self.state_dir / "owner.pid").write_text(str(os.getpid()))
        self._cgroup = Cgroup(f"legato-{os.getpid()}-{self.state_dir.name.rpartition('-')[2]}", limits)
        self._cgroup.create()
        self._display: Display | None = None
        self._sandbox: Sandbox | None = None
        self._client: DesktopClient | None = None
        self._task: Task | None = None
        self._expected_windows = 0
        self._expected_titles: list[str] = []
        self._actions: list[str] = []
        self._last_input = 0.0  # monotonic time the last action or setup step ended
        self._closed = False
        self._checked_python = False
        self._forwarder: UnixForwarder | None = None
        self._devtools_forwarder: UnixForwarder | None = None
        self._vlc_forwarder: UnixForwarder | None = None
        self._osworld: OSWorldSession | None = None
        self._x_baseline: XBaseline | None = None
        self.files = _file_cache(self.options)
        self._capabilities: Capabilities | None = None
        #: How the last reset went: ``"fast"``, ``"restart"`` (asked for) or ``"fallback"`` (survivors, or
        #: X server state that could not be put back).
        self.last_reset_kind = ""
        try:
            deadline = time.monotonic() + self.config.timeouts.reset
            self._boot(deadline)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle helpers
    def __enter__(self) -> LocalDesktop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def screen_size(self) -> tuple[int, int]:
        """``(width, height)`` of the screen."""
        return self.config.screen

    @property
    def display(self) -> Display:
        if self._display is None:
            raise StateError("the desktop is closed; create a new LocalDesktop")
        return self._display

    @property
    def client(self) -> DesktopClient:
        if self._client is None:
            raise StateError("the desktop is closed; create a new LocalDesktop")
        return self._client

    @property
    def pids(self) -> list[int]:
        """Host pids of this desktop's top processes (X server, window manager, sandbox init)."""
        pids = list(self._display.pids) if self._display else []
        if self._sandbox is not None and self._sandbox.init_pid is not None:
            pids.append(self._sandbox.init_pid)
        return pids

    def _boot(self, deadline: float) -> None:
        self._display = Display(self.state_dir / "display", self.config.screen, self._spec.host_uid, self._cgroup.procs)
        self._display.start(deadline)
        # The window manager lives in the sandbox and dies with it: the X baseline is the server as a
        # first, untouched sandbox leaves it (the window manager's root properties, the repainted root),
        # which is what every fast reset's kill leaves too.
        self._start_sandbox(deadline)
        if not self._spec_baseline_exists():
            self._capture_baseline(deadline)
        if not self._kill_sandbox(deadline):
            raise DesktopCrashed("the first sandbox of the desktop did not die when killed")
        self._x_baseline = XBaseline.capture(self._display.name, self._display.fingerprint)
        self._start_sandbox(deadline)

    def _spec_baseline_exists(self) -> bool:
        return (self.state_dir / "baseline.tar").exists()

    def _start_sandbox(self, deadline: float) -> None:
        display = self.display
        assert display.number is not None
        self._sandbox = Sandbox(
            self._spec, self.state_dir, display.number, display.socket_path, display.fb_path, self._cgroup.procs
        )
        self._sandbox.start(deadline)
        self._client = DesktopClient(self._sandbox.socket_path, timeout=self.config.timeouts.act)
        self._client.wait_up(deadline, self._sandbox.check_alive)
        if self._checked_python:
            return
        self._checked_python = True
        check = self._client.execute(
            ["python", "-c", "import pyautogui"], timeout=max(1.0, deadline - time.monotonic())
        )
        if check.get("returncode") != 0:
            raise MissingDependencyError(
                f"the desktop interpreter {self._spec.python} cannot import pyautogui: "
                f"{(check.get('error') or check.get('message') or '').strip()[-300:]}; "
                "install it with `pip install 'legatolabs[local]'`"
            )

    def _capture_baseline(self, deadline: float) -> None:
        """Snapshot the freshly booted home, set up as OSWorld's VM home, as the baseline every reset restores.

        The apps' first-run settings, profiles and MIME defaults (:func:`.apps.baseline_files`) are written
        into it first, so every episode starts from them.
        """
        for path, content in apps.baseline_files().items():
            self.client.upload(f"/home/user/{path}", content)
        self._warm_gimp(deadline)
        tar = "/tmp/.legato-baseline.tar"
        script = f"mkdir -p {' '.join(HOME_DIRS)} && tar -cf {tar} -C /home/user ."
        result = self.client.execute(script, shell=True, timeout=max(1.0, deadline - time.monotonic()))
        if result.get("returncode") != 0:
            raise DesktopCrashed(f"could not capture the home baseline: {result}")
        data = self.client.file(tar)  # read through the server: the host follows no path of the sandbox's
        if data is None:
            raise DesktopCrashed(f"could not read the home baseline {tar} from the desktop")
        assert self._sandbox is not None
        self._sandbox.baseline.write_bytes(data)

    def _warm_gimp(self, deadline: float) -> None:
        """Give the baseline GIMP's profile as its first start leaves it (:data:`.apps.GIMP_WARMUP`).

        GIMP builds its plug-in database at the first start of a profile, which takes seconds, and every
        episode's GIMP would otherwise be a first start. The profile is made once per host and GIMP install,
        by a headless GIMP inside this first sandbox (before any agent runs), and kept beside the desktops'
        state folders; later desktops unpack it into their baseline. Without GIMP, nothing.
        """
        key = apps.gimp_profile_key()
        if key is None:
            return
        cached = self.state_dir.parent / f"gimp-profile-{key}.tar"
        tar, remaining = "/tmp/.legato-gimp.tar", max(1.0, deadline - time.monotonic())
        if cached.exists():
            self.client.upload(tar, cached.read_bytes())
            result = self.client.execute(f"tar -xf {tar} -C /home/user && rm {tar}", shell=True, timeout=remaining)
        else:
            script = f"{apps.GIMP_WARMUP}; tar -cf {tar} -C /home/user {apps.GIMP_PROFILE}"
            result = self.client.execute(script, shell=True, timeout=remaining)
            data = self.client.file(tar) if result.get("returncode") == 0 else None
            if data:
                partial = cached.with_name(f"{cached.name}.{os.getpid()}")
                partial.write_bytes(data)
                partial.replace(cached)
            self.client.execute(["rm", "-f", tar])
        if result.get("returncode") != 0:
            logger.warning("GIMP's profile could not be prepared (GIMP will build it at its first start): %s", result)

    def _kill_sandbox(self, deadline: float) -> bool:
        ok = True
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._sandbox is not None:
            ok = self._sandbox.kill(deadline)
            if ok and self._display is not None and self._display.alive():
                ok = self._display.wait_no_windows(deadline)
            self._sandbox = None
        return ok

    def _restart(self, deadline: float) -> None:
        self._kill_sandbox(deadline)
        if self._display is not None:
            self._display.stop()
        self._boot(deadline)

    def tcp_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of a loopback TCP forwarder to the in-desktop server (started on first use).

        The port outlives fast resets and restarts; it is what OSWorld's controllers, which speak HTTP over
        TCP, connect to (see :mod:`.forward`).
        """
        if self._closed:
            raise StateError("tcp_endpoint() called after close(); create a new LocalDesktop")
        if self._forwarder is None:
            self._forwarder = UnixForwarder(self.state_dir / "control" / "server.sock")
        return str(self._forwarder.host), int(self._forwarder.port)

    def devtools_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of a loopback TCP forwarder to Chrome's DevTools port inside the desktop.

        OSWorld's tasks start Chrome with ``--remote-debugging-port=1337`` and ``socat`` from 9222 to it,
        as on the VM; this port reaches the sandbox's 9222 (through :mod:`.relay`), and is what
        desktop-env's Chrome getters get as ``chromium_port``. It outlives fast resets and restarts.
        """
        if self._closed:
            raise StateError("devtools_endpoint() called after close(); create a new LocalDesktop")
        if self._devtools_forwarder is None:
            self._devtools_forwarder = UnixForwarder(
                self.state_dir / "control" / "devtools.sock", preamble=relay.preamble(DEVTOOLS_PORT)
            )
        return str(self._devtools_forwarder.host), int(self._devtools_forwarder.port)

    def vlc_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of a loopback TCP forwarder to VLC's HTTP interface inside the desktop.

        The baseline ``vlcrc`` turns the interface on, on port 8080 with the password ``password``, as on
        OSWorld's VM (:mod:`.apps`); this port reaches it (through :mod:`.relay`), and is what desktop-env's
        ``vlc_playing_info`` getter gets as ``vlc_port``. It outlives fast resets and restarts.
        """
        if self._closed:
            raise StateError("vlc_endpoint() called after close(); create a new LocalDesktop")
        if self._vlc_forwarder is None:
            self._vlc_forwarder = UnixForwarder(
                self.state_dir / "control" / "devtools.sock", preamble=relay.preamble(VLC_HTTP_PORT)
            )
        return str(self._vlc_forwarder.host), int(self._vlc_forwarder.port)

    def _osworld_session(self) -> OSWorldSession:
        if self._osworld is None:
            from legato_gym.backends.osworld.session import Endpoint, OSWorldSession

            host, port = self.tcp_endpoint()
            cache = self.options.download_cache or "~/.cache/legato/osworld-downloads"
            self._osworld = OSWorldSession(
                Endpoint(host, port, chromium_port=self.devtools_endpoint()[1], vlc_port=self.vlc_endpoint()[1]),
                screen=self.config.screen,
                download_cache=Path(cache).expanduser(),
                work_dir=self.state_dir / "osworld",
            )
        return self._osworld

    def close(self) -> None:
        """Kill the sandbox (its whole pid namespace), the window manager and the X server. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for forwarder in (self._forwarder, self._devtools_forwarder, self._vlc_forwarder):
            if forwarder is not None:
                forwarder.close()
        try:
            self._kill_sandbox(time.monotonic() + self.options.kill_timeout)
        finally:
            if self._display is not None:
                self._display.stop()
                self._display = None
            self._cgroup.remove(time.monotonic() + self.options.kill_timeout)
            if self._uid is not None:
                self._uid.release()
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # ------------------------------------------------------------------ the contract
    @classmethod
    def check_tasks(
        cls, tasks: Sequence[Task], config: DesktopConfig | None = None, *, python: str | None = None
    ) -> list[Verdict]:
        """Refuse, at load time and all at once, the tasks this machine's local desktop cannot run faithfully.

        Checks every task's apps, setup steps, getters, metrics, services and live-web or Google needs
        against this host and the grader the desktops will use (:mod:`.coverage`) without booting a desktop.
        ``DesktopEnv``, the vector env and ``legato rl collect`` call it on the tasks they are given.

        Args:
            tasks: the tasks.
            config: the desktops' config (its ``options`` pick the grader and the file cache).
            python: the interpreter the desktops will run in (a vector env's workers); default: this one.

        Raises:
            UnsupportedTaskError: one line per refused task, with the reason.
        """
        options = LocalOptions.from_mapping((config or DesktopConfig()).options)
        grader = resolve_grader(options.grader, python)
        return _check_tasks(tasks, Capabilities.detect(grader=grader, cache=_file_cache(options)))

    def check_task(self, task: Task) -> None:
        """Raise :class:`~legato_gym.errors.UnsupportedTaskError` if this desktop cannot run or grade ``task``.

        The same check as :meth:`check_tasks` (with this desktop's grader), for a task given at reset.
        """
        if self._capabilities is None:
            self._capabilities = Capabilities.detect(grader=self.grader, cache=self.files)
        _check_tasks([task], self._capabilities)
        if self.grader == "local":
            check_setup(task)
            grading.check_evaluator(task)

    def reset(self, task: Task) -> None:
        """Kill the last episode's apps, restore the home baseline, then run the task's setup."""
        if self._closed:
            raise StateError("reset() called after close(); create a new LocalDesktop")
        self.check_task(task)
        deadline = time.monotonic() + self.config.timeouts.reset
        self._task, self._actions, self._expected_windows, self._expected_titles = None, [], 0, []
        try:
            if not self.config.fast_reset or self._display is None or not self._display.alive():
                self._restart(deadline)
                self.last_reset_kind = "restart"
            else:
                kill_deadline = min(deadline, time.monotonic() + self.options.kill_timeout)
                if not self._kill_sandbox(kill_deadline):
                    logger.warning("processes or windows survived the sandbox kill; restarting the whole desktop")
                    self._restart(deadline)
                    self.last_reset_kind = "fallback"
                elif left := self._restore_x_state():
                    logger.warning("X server state could not be put back (%s); restarting it", "; ".join(left))
                    self._restart(deadline)
                    self.last_reset_kind = "fallback"
                else:
                    self._start_sandbox(deadline)
                    self.last_reset_kind = "fast"
            if self.grader == "osworld":
                self._osworld_reset(task)
                self._task = task
                return
            cache = self._cache_dir(task)
            runner = SetupRunner(self.client, cache, self.config.screen, deadline, None, files=self.files)
            if self.config.ready_signal:
                runner.settle = lambda windows, until: self._settle_windows(windows, until, runner.titles)
            runner.run(task.setup)
        except DesktopError:
            raise
        except (OSError, ValueError) as exc:
            raise DesktopCrashed(f"reset for task {task.task_id} failed: {exc}") from exc
        self._expected_windows = runner.expected_windows
        self._expected_titles = list(runner.titles)
        self._task = task

    def _restore_x_state(self) -> list[str]:
        """Put back what the episode changed in the X server (it outlives the sandbox); what is still off."""
        if self._x_baseline is None:
            return ["no X server baseline"]
        return xstate.restore(self.display.name, self._x_baseline, self.display.fingerprint)

    def _osworld_reset(self, task: Task) -> None:
        session = self._osworld_session()
        session.begin(task.config, task_path(TASK_DATA, task.task_id))
        _prefill_osworld(self.files, task.config, session.download_cache, session.work_dir)
        session.setup(task.setup)
        self._expected_windows = sum(
            1
            for step in task.setup
            if step.get("type") == "open"
            or (step.get("type") == "launch" and apps.opens_window((step.get("parameters") or {}).get("command", "")))
        )
        self._expected_titles = apps.ready_titles(task.setup)

    def _cache_dir(self, task: Task) -> Path:
        cache = task_path(self.state_dir / "cache", task.task_id)
        if cache.exists():
            shutil.rmtree(cache)
        gold = task_path(TASK_DATA, task.task_id)
        if gold.is_dir():
            shutil.copytree(gold, cache)
        else:
            cache.mkdir(parents=True)
        return cache

    def _settle_windows(self, windows: int, deadline: float, titles: Sequence[str] = ()) -> bool:
        """The launched windows mapped, each app's document loaded (its title shown), then the screen settled."""
        display = self.display
        window_deadline = min(deadline, time.monotonic() + self.options.window_timeout)
        mapped = display.wait_windows(windows, window_deadline)
        loaded = display.wait_titles(titles, window_deadline)
        if titles:  # an app drawn is not yet an app that takes input: wait until it stops computing
            loaded = self._wait_idle(self._busy_deadline(window_deadline)) and loaded
        settled = display.wait_settled(self._busy_deadline(deadline), self.options.settle_s, self.options.poll_s)
        return mapped and loaded and settled

    def _busy_deadline(self, deadline: float) -> float:
        """``deadline``, or sooner: a screen or app still busy after ``busy_s`` (a video) is taken as it is."""
        return min(deadline, time.monotonic() + self.options.busy_s)

    def _wait_idle(self, deadline: float) -> bool:
        """Wait until the sandbox's processes use at most :data:`IDLE_TICKS` clock ticks in ``settle_s``.

        LibreOffice maps, titles and draws its window before it has finished setting up the document
        view; keys sent in between are lost. Its CPU time stops growing once it is done.
        """
        sandbox = self._sandbox
        if sandbox is None:
            return False
        last, since = _cpu_ticks(sandbox.survivors()), time.monotonic()
        while True:
            time.sleep(self.options.poll_s)
            now, ticks = time.monotonic(), _cpu_ticks(sandbox.survivors())
            if ticks - last > IDLE_TICKS:
                last, since = ticks, now
            elif now - since >= max(self.options.settle_s, 0.1):
                return True
            if now >= deadline:
                return False

    def _fixed_wait(self, seconds: float) -> Waited:
        start = time.monotonic()
        if seconds > 0:
            time.sleep(seconds)
        return Waited(seconds=time.monotonic() - start, ready=False)

    def wait_after_reset(self) -> Waited:
        """Ready signal: the setup's windows mapped and the screen settled (else OSWorld's scaled sleep)."""
        self._require_task("wait_after_reset")
        if not self.config.ready_signal:
            return self._fixed_wait(30 * self.config.fixed_wait)
        start = time.monotonic()
        ready = self._settle_windows(self._expected_windows, start + self.config.timeouts.ready, self._expected_titles)
        self._last_input = time.monotonic()
        return Waited(seconds=time.monotonic() - start, ready=ready)

    def observe(self) -> Observation:
        """The screen (read from the X server's framebuffer) and the instruction."""
        task = self._require_task("observe")
        return Observation(screenshot=self.display.screenshot(), instruction=task.instruction)

    def act(self, action: str) -> ActResult:
        """Run one ``pyautogui`` action inside the sandbox (a fresh process), then wait for the screen."""
        self._require_task("act")
        self._actions.append(action)
        if self._osworld is not None:
            self._osworld.record(action)
        start = time.monotonic()
        if action not in SPECIAL_ACTIONS:
            prefix = ACTION_PREFIX
            if self.options.pyautogui_pause is not None:
                set_pause = f"pyautogui.PAUSE = {float(self.options.pyautogui_pause)!r}; "
                prefix = prefix.replace("{command}", set_pause + "{command}")
            command = prefix.format(command=action)
            result = self._run_action(command)
            if result.get("status") != "success":
                raise DesktopCrashed(f"the desktop could not run the action: {result.get('message')}")
            if result.get("returncode"):
                logger.info("action exited with %s: %s", result.get("returncode"), (result.get("error") or "")[-300:])
        act_s = time.monotonic() - start
        self._last_input = time.monotonic()
        if not self.config.ready_signal:
            pause = self.config.fixed_wait * (2 if action == "WAIT" else 1)
            return ActResult(act_s=act_s, wait_s=self._fixed_wait(pause).seconds)
        if action in ("DONE", "FAIL"):
            return ActResult(act_s=act_s)
        settle_start = time.monotonic()
        self._wait_quiet(self._busy_deadline(settle_start + self.config.timeouts.ready))
        return ActResult(act_s=act_s, ready_s=time.monotonic() - settle_start)

    def _wait_quiet(self, deadline: float) -> bool:
        """Wait until the screen is unchanged and the apps idle (:data:`IDLE_TICKS`) for ``settle_s`` together.

        After an action an app may still be working with nothing new drawn yet (LibreOffice opening its
        Options dialog on a loaded machine): keys the agent sends then are lost, and its next screenshot
        is stale. Both signals are read in the same polls, so an app that is done costs no extra wait.
        """
        sandbox = self._sandbox

        def ticks() -> int:
            return _cpu_ticks(sandbox.survivors()) if sandbox is not None else 0

        settle = max(self.options.settle_s, 0.1)
        return self.display.wait_settled(deadline, settle, self.options.poll_s, work=ticks, allowance=IDLE_TICKS)

    def _run_action(self, command: str) -> dict[str, Any]:
        timeout = self.config.timeouts.act
        if self.options.action_runner == "exec":
            return self.client.execute(["python", "-c", command], timeout=timeout)
        # the server kills the action at `timeout`; the margin lets its answer arrive
        response = self.client.post_json("/legato/action", {"code": command, "timeout": timeout}, timeout=timeout + 15)
        result = response.json()
        if not isinstance(result, dict):
            return {"status": "error", "message": repr(result)}
        if result.get("timed_out"):
            raise DeadlineExceeded(
                f"the action ran longer than timeouts.act={timeout:g} s and was killed with the processes it "
                f"started; raise DesktopConfig.timeouts.act if actions need longer: {command[-200:]!r}"
            )
        return result

    def wait_before_eval(self) -> Waited:
        """Run the task's post-config, then wait until the screen settles (or OSWorld's scaled sleep)."""
        task = self._require_task("wait_before_eval")
        start = time.monotonic()
        deadline = start + self.config.timeouts.ready
        postconfig = list(task.evaluator.get("postconfig") or [])
        if self.grader == "osworld":
            self._osworld_session().postconfig()
        elif postconfig:
            settle = self._settle_windows if self.config.ready_signal else None
            runner = SetupRunner(
                self.client,
                task_path(self.state_dir / "cache", task.task_id),
                self.config.screen,
                deadline,
                settle,
                files=self.files,
            )
            runner.launched = self._expected_windows
            runner.run(postconfig)
        if postconfig:
            self._last_input = time.monotonic()
        if not self.config.ready_signal:
            self._fixed_wait(10 * self.config.fixed_wait)
            return Waited(seconds=time.monotonic() - start, ready=False)
        ready = self.display.wait_settled(self._busy_deadline(deadline), self.options.settle_s, self.options.poll_s)
        ready = self._wait_write_back(task, deadline) and ready
        return Waited(seconds=time.monotonic() - start, ready=ready)

    def _wait_write_back(self, task: Task, deadline: float) -> bool:
        """Wait until the running apps whose files the grader reads have written them (:mod:`.writeback`)."""
        sandbox = self._sandbox
        if sandbox is None:
            return True
        running = set()
        for pid in sandbox.survivors():
            with contextlib.suppress(OSError):
                running.add(Path(f"/proc/{pid}/comm").read_text().strip())
        delay = writeback.write_back_delay(task.evaluator, running)
        if not delay:
            return True
        until = min(deadline, self._last_input + delay)
        files = writeback.written_files(task.evaluator, running)
        since = time.time() - (time.monotonic() - self._last_input)  # the last input, on the file clock
        logger.debug("waiting up to %.1f s for %s to write %s", until - time.monotonic(), sorted(running), files)
        while time.monotonic() < until and not (files and self._written_since(files, since)):
            time.sleep(min(0.1, max(0.0, until - time.monotonic())))
        return self._wait_idle(self._busy_deadline(deadline))

    def _written_since(self, files: Sequence[str], since: float) -> bool:
        """Whether every one of ``files`` (home-relative) was modified at or after ``since`` (epoch seconds)."""
        script = "; ".join(f"date -r {shlex.quote('/home/user/' + f)} +%s.%N" for f in files)
        result = self.client.execute(script, shell=True, timeout=10)
        try:
            stamps = [float(line) for line in result.get("output", "").split()]
        except ValueError:
            return False
        return len(stamps) == len(files) and min(stamps) >= since

    def evaluate(self) -> float:
        """Grade the task with OSWorld's getter and metric semantics (see :mod:`.grading`)."""
        task = self._require_task("evaluate")
        if self.grader == "osworld":
            return self._osworld_session().evaluate()
        cache = task_path(self.state_dir / "cache", task.task_id)
        return grading.evaluate(task, self.client, cache, self._actions, files=self.files)

    def grade_locally(self) -> float:
        """Grade the desktop as it is now with the built-in grader (:mod:`.grading`), whatever ``grader`` is.

        For comparing the two graders on one end state (``benchmarks/parity.py``): call it after
        :meth:`evaluate`, which has run the task's post-config.

        Raises:
            UnsupportedTaskError: the built-in grader lacks one of the task's getters or metrics.
        """
        task = self._require_task("grade_locally")
        grading.check_evaluator(task)
        cache = self._cache_dir(task)
        return grading.evaluate(task, self.client, cache, self._actions, files=self.files)

    def _require_task(self, call: str) -> Task:
        if self._closed:
            raise StateError(f"{call}() called after close(); create a new LocalDesktop")
        if self._task is None:
            raise StateError(f"{call}() called before reset(task); call reset(task) first")
        return self._task


def _cpu_ticks(pids: Sequence[int]) -> int:
    """User plus system clock ticks the processes have used (those gone meanwhile count as 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total


def _file_cache(options: LocalOptions) -> FileCache:
    return FileCache(options.file_cache) if options.file_cache else FileCache.default()


def _prefill_osworld(files: FileCache, config: Mapping[str, Any], download_cache: Path, work_dir: Path) -> None:
    """Put what the file cache holds where desktop-env's setup controller and ``cloud_file`` look first.

    desktop-env skips a setup download whose ``<download_cache>/<task_id>/<uuid5(url)>_<basename(path)>``
    exists, and a ``cloud_file`` whose ``<work_dir>/<task_id>/<dest>`` exists; what the cache lacks,
    desktop-env downloads itself.
    """
    task_id = str(config["id"])
    evaluator = config.get("evaluator") or {}
    steps = list(config.get("config") or []) + list(evaluator.get("postconfig") or [])
    targets: list[tuple[str, Path]] = []
    for step in steps:
        if step.get("type") == "download":
            for entry in (step.get("parameters") or {}).get("files") or []:
                url, path = str(entry.get("url")), str(entry.get("path"))
                name = f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"
                targets.append((url, download_cache / task_id / name))
    for key in ("result", "expected"):
        specs = evaluator.get(key)
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, Mapping) and spec.get("type") == "cloud_file":
                urls, dests = spec.get("path"), spec.get("dest")
                pairs = zip(urls or [], dests or [], strict=False) if spec.get("multi") else [(urls, dests)]
                targets += [(str(u), work_dir / task_id / str(d)) for u, d in pairs]
    for url, target in targets:
        source = files.path(url)
        if source is not None and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def _sweep_stale(root: Path) -> None:
    """Remove state dirs left by legato processes that were killed (their owner pid is gone)."""
    for entry in root.iterdir():
        try:
            owner = int((entry / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            shutil.rmtree(entry, ignore_errors=True)
