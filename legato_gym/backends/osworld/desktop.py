"""``OSWorldDesktop``: one OSWorld VM, kept up between rollouts, with fast reset, ready signals and
OSWorld's own setup and grading.

In desktop-env's interpreter (``DesktopConfig.worker_python`` from ``legato osworld setup``: the vector env's
workers run there) the desktop is driven in-process. From any other interpreter (``gymnasium.make`` in
legato's own), :class:`OSWorldDesktop` starts one worker process under desktop-env's interpreter and
drives the same desktop there.

Per rollout:

* **reset.** Fast reset over the VM's server: kill every process of the VM user that was not there at
  first boot, check that none survived and that the windows are those of first boot, restore the
  ``/home/user`` captured at first boot (a tar kept in the VM and checked against its hash, re-uploaded
  from the host copy when it changed), then run the task's setup with desktop-env's ``SetupController``.
  ``os`` and ``multi_apps`` tasks (they change system state a home restore does not undo), any reset that
  cannot be verified clean, a VM that stopped answering, and every reset with ``fast_reset=False`` use a
  snapshot revert instead (docker: a new container from the image, cold boot).
* **ready signals.** After reset: the server answers, the windows the setup launched are mapped (the window
  manager's client list, read over ``/execute``; a launch of a program that opens no window, such as
  ``socat``, is not counted), and the screen is still: one wait in the VM through ``/execute`` that compares
  frames itself, so a ready signal costs OSWorld's server no ``/screenshot`` (each leaks an X connection
  there). After each action:
  the screen is still. The server is recycled during fast reset and before ``screenshot_budget``
  screenshots (:meth:`_VMDesktop._recycle_server`). Before grading: the post-config has run and the screen
  is still. Each wait has a deadline (``Timeouts.ready``). ``ready_signal=False`` sleeps as OSWorld does
  instead: ``fixed_wait`` after each action (twice for ``WAIT``), 30× after reset and 10× before grading
  (60 s and 20 s at 2 s).
* **grading.** desktop-env's ``DesktopEnv.evaluate`` (:mod:`.session`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from legato_gym.backends.osworld.options import REVERT_DOMAINS, OSWorldOptions
from legato_gym.backends.osworld.session_helpers import PROCS_SCRIPT, SUDO_SCRIPT, TMP_SCRIPT
from legato_gym.bounds import ReadCaps, read_capped, write_capped
from legato_gym.config import DesktopConfig
from legato_gym.contract import SPECIAL_ACTIONS, ActResult, Observation, Task, Waited, task_path
from legato_gym.errors import (
    AgentFault,
    DeadlineExceeded,
    DesktopCrashed,
    ReplyTooLarge,
    StateError,
)
from legato_gym.options import typed_options
from legato_gym.png import check_screenshot, decode_png

__all__ = ["REVERT_DOMAINS", "OSWorldDesktop", "OSWorldOptions"]

logger = logging.getLogger(__name__)

BASELINE_TAR = "/tmp/.legato-home-baseline.tar"
#: Interval between the process listings that must agree before the first-boot processes are taken.
BASELINE_SETTLE_S = 0.2
#: The window manager's client list, read from the root (``xprop``), else with ``wmctrl -l`` (see ``_windows``).
WINDOWS_SCRIPT = "if command -v xprop >/dev/null 2>&1; then xprop -root _NET_CLIENT_LIST; else wmctrl -l; fi"
_ACTION_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; {command}"


#: Waits in the VM, with the VM's python, until two frames ``settle_s`` apart are equal or ``timeout`` passed;
#: prints ``{"settled": bool, "frames": n}``. One X connection, closed when it exits (it leaks nothing, unlike
#: the server's ``/screenshot``), and no screenshot through the server per poll.
_SETTLE_SCRIPT = r"""
import ctypes, ctypes.util, hashlib, json, sys, time
settle, timeout = float(sys.argv[1]), float(sys.argv[2])
x11 = ctypes.CDLL(ctypes.util.find_library("X11") or "libX11.so.6")
x11.XOpenDisplay.restype = ctypes.c_void_p
x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
x11.XDefaultRootWindow.restype = ctypes.c_ulong
x11.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
x11.XGetImage.restype = ctypes.c_void_p
x11.XGetImage.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_int, ctypes.c_uint,
                          ctypes.c_uint, ctypes.c_ulong, ctypes.c_int]
x11.XFree.argtypes = x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
x11.XDisplayWidth.argtypes = x11.XDisplayHeight.argtypes = [ctypes.c_void_p, ctypes.c_int]
dpy = x11.XOpenDisplay(None)
if not dpy:
    print(json.dumps({"error": "cannot open the display"}))
    sys.exit(0)
root = x11.XDefaultRootWindow(dpy)
w, h = x11.XDisplayWidth(dpy, 0), x11.XDisplayHeight(dpy, 0)
def frame():
    image = x11.XGetImage(dpy, root, 0, 0, w, h, 0xFFFFFFFF, 2)
    if not image:
        return None
    data = ctypes.c_void_p.from_address(image + 16).value
    stride = ctypes.c_int.from_address(image + 44).value
    digest = hashlib.blake2b(ctypes.string_at(data, stride * h), digest_size=16).digest()
    x11.XFree(data)
    x11.XFree(image)
    return digest
end = time.monotonic() + timeout
previous, frames, settled = frame(), 1, False
while time.monotonic() < end:
    time.sleep(settle)
    current = frame()
    frames += 1
    if current is not None and current == previous:
        settled = True
        break
    previous = current
x11.XCloseDisplay(dpy)
print(json.dumps({"settled": settled, "frames": frames}))
"""


def expected_windows(setup: Sequence[Mapping[str, Any]]) -> int:
    """How many windows a task's setup maps: one per ``open`` step and per ``launch`` of a program that opens
    one (not ``socat``, a daemon or a killer: :func:`~legato_gym.backends.local.apps.opens_window`), so the
    ready signal never waits ``window_timeout`` for a window that never comes."""
    from legato_gym.backends.local.apps import opens_window

    count = 0
    for step in setup:
        params = step.get("parameters") or {}
        if step.get("type") == "open" or (step.get("type") == "launch" and opens_window(params.get("command", ""))):
            count += 1
    return count


class _VMDesktop:
    """The desktop, in desktop-env's interpreter. See the module docstring."""

    def __init__(self, config: DesktopConfig) -> None:
        from legato_gym.desktopenv.session import import_desktop_env

        import_desktop_env()  # fail early, with the fix, outside desktop-env's interpreter
        self.config = config
        self.options = typed_options(config.options, OSWorldOptions, "osworld")
        self.work_dir = Path(tempfile.mkdtemp(prefix="legato-osworld-"))
        self.download_cache = Path(self.options.download_cache).expanduser()
        self.download_cache.mkdir(parents=True, exist_ok=True)
        self._vm: Any = None
        self._session: Any = None
        self._http: httpx.Client | None = None
        #: What the host reads from the VM's server, at most (docs/reliability.md).
        self.caps = ReadCaps.DEFAULT
        self._acted = False  # the agent has acted in this episode: an answer over its cap is then its failure
        self._task: Task | None = None
        self._expected_windows = 0
        self._baseline_pids: list[int] = []
        #: First-boot processes D-Bus/systemd started (pid -> command line): the session's, may exit or restart.
        self._baseline_helpers: dict[str, str] = {}
        self._baseline_tmp = ""  # the VM user's entries of /tmp at first boot, one a line
        self._baseline_sudo = ""  # "cached", "none" or "absent" at first boot (session_helpers.SUDO_SCRIPT)
        self._baseline_windows: set[str] = set()
        self._baseline_hash = ""
        self._baseline_copy = self.work_dir / "home-baseline.tar"
        self._closed = False
        #: ``/screenshot`` calls since the VM's server (re)started: each leaks an X connection on OSWorld's.
        self.screenshots_since_start = 0
        #: How many times the server was recycled (:meth:`_recycle_server`).
        self.server_recycles = 0
        #: The session's helpers a fast reset found restarted (adopted) or exited when idle (session_helpers).
        self.helpers_adopted = 0
        self.helpers_exited = 0
        self._listed_helpers: dict[str, str] = {}
        #: How the last reset went: ``"fast"``, ``"revert"`` (asked for / domain) or ``"fallback"``.
        self.last_reset_kind = ""
        try:
            deadline = time.monotonic() + config.timeouts.reset
            self._boot(deadline, first=True)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ machine
    @property
    def screen_size(self) -> tuple[int, int]:
        return self.config.screen

    @property
    def vm(self) -> Any:
        if self._vm is None:
            raise StateError("the desktop is closed; create a new OSWorldDesktop")
        return self._vm

    def _boot(self, deadline: float, *, first: bool) -> None:
        from legato_gym.backends.osworld.vms import make_vm, wait_server
        from legato_gym.desktopenv.session import OSWorldSession

        if first:
            self._vm = make_vm(self.options, self.config, deadline)
        else:
            self.vm.revert(deadline)
        endpoint = self.vm.endpoint
        wait_server(endpoint, deadline)
        self.screenshots_since_start = 1  # wait_server's answered /screenshot
        if self._http is not None:
            self._http.close()
        self._http = httpx.Client(
            base_url=endpoint.url, timeout=self.config.timeouts.act, headers={"Accept-Encoding": "identity"}
        )
        self._session = OSWorldSession(
            endpoint,
            screen=self.config.screen,
            download_cache=self.download_cache,
            work_dir=self.work_dir / "tasks",
            client_password=self.options.client_password,
        )
        self._capture_baseline(deadline)

    def _execute(self, command: list[str] | str, *, shell: bool = False, timeout: float = 60.0) -> dict[str, Any]:
        assert self._http is not None
        try:
            response = self._call("POST", "/execute", timeout, json={"command": command, "shell": shell})
        except httpx.TimeoutException as exc:
            raise DeadlineExceeded(f"the VM's server took longer than {timeout:g} s to run a command") from exc
        except httpx.HTTPError as exc:
            raise DesktopCrashed(f"the VM's server stopped answering: {exc}") from exc
        data = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if response.status_code != 200 or not isinstance(data, dict):
            raise DesktopCrashed(
                f"the VM's server failed to run a command: {response.status_code} {response.text[:300]}"
            )
        return data

    def _call(
        self, method: str, path: str, timeout: float, *, cap: int | None = None, to: Path | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One call to the VM's server, its answer read against a cap (:class:`~legato_gym.bounds.ReadCaps`):
        held in memory up to ``cap`` (default ``answer_bytes``), or written to ``to`` up to ``file_bytes``
        (the answer then has no content). Transport errors are httpx's.

        Raises:
            ReplyTooLarge: the answer passed its cap; the rest was not read.
        """
        assert self._http is not None
        what = f"the VM's server: {method} {path}"
        with self._http.stream(method, path, timeout=timeout, **kwargs) as response:
            chunks = response.iter_raw(1 << 16)
            declared = response.headers.get("content-length")
            if to is not None and response.status_code == 200:
                with to.open("wb") as out:
                    write_capped(chunks, out, self.caps.file_bytes, what, declared)
                return httpx.Response(response.status_code, headers=response.headers)
            body = read_capped(chunks, self.caps.answer_bytes if cap is None else cap, what, declared)
            return httpx.Response(response.status_code, headers=response.headers, content=body)

    def _procs(self, keep: list[int], kill: bool) -> dict[str, Any]:
        timeout = self.options.kill_timeout
        helpers = json.dumps(self._baseline_helpers)
        result = self._execute(
            ["python3", "-c", PROCS_SCRIPT, json.dumps(keep), "kill" if kill else "list", str(timeout), helpers],
            timeout=timeout + 30,
        )
        try:
            data = json.loads((result.get("output") or "").strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise DesktopCrashed(f"process listing in the VM failed: {(result.get('error') or '')[-300:]}") from exc
        keys = ("killed", "survivors", "missing") if kill else ("pids",)
        if result.get("returncode") != 0 or not isinstance(data, dict) or any(k not in data for k in keys):
            raise DesktopCrashed(
                f"process listing in the VM answered {str(data)[:300]!r} (exit {result.get('returncode')})"
            )
        return dict(data)

    def _windows(self) -> set[str]:
        """The VM's managed windows: the window manager's ``_NET_CLIENT_LIST``, as ``wmctrl -l`` names them.

        Read from the root window with ``xprop`` (one property, so a window destroyed meanwhile cannot fail
        it), or with ``wmctrl -l`` where the VM has no ``xprop``; ``wmctrl`` reads each window too, and a
        killed app's window that vanishes as it reads (BadWindow) is a race retried until ``kill_timeout``.

        Raises:
            DesktopCrashed: the listing failed (X full, no window manager): no listing is not "no windows".
        """
        race_deadline = time.monotonic() + self.options.kill_timeout
        while True:
            result = self._execute(WINDOWS_SCRIPT, shell=True, timeout=30)
            output = str(result.get("output") or "")
            if result.get("returncode") == 0 and output.startswith("_NET_CLIENT_LIST"):
                head, _, ids = output.partition("#")
                if "not found" in head or "(WINDOW)" not in head:  # no window manager keeps the list
                    raise DesktopCrashed(f"the VM's window manager keeps no client list: {output.strip()[:200]}")
                return {f"0x{int(word, 16):08x}" for word in re.findall(r"0x[0-9a-fA-F]+", ids)}
            if result.get("returncode") == 0 or "BadWindow" not in str(result.get("error") or ""):
                break
            if time.monotonic() >= race_deadline:
                break
            time.sleep(0.05)
        if result.get("returncode") != 0:
            error = str(result.get("error") or "")[-300:]
            raise DesktopCrashed(f"listing the VM's windows failed (exit {result.get('returncode')}): {error}")
        return {line.split()[0] for line in output.splitlines() if line.strip()}

    def _settled_pids(self, deadline: float) -> list[int]:
        """The VM's processes once two listings in a row agree.

        A helper that runs for a moment as the desktop comes up (a ``which`` run by an import, say) would
        otherwise count as a first-boot process, and its exit would make the next fast reset unverifiable.
        """
        listing = self._procs([], kill=False)
        settle_deadline = min(deadline, time.monotonic() + self.options.kill_timeout)
        while time.monotonic() < settle_deadline:
            time.sleep(BASELINE_SETTLE_S)
            again = self._procs([], kill=False)
            if again["pids"] == listing["pids"]:
                break
            listing = again
        self._listed_helpers = {str(pid): str(cmd) for pid, cmd in dict(listing.get("helpers") or {}).items()}
        return list(listing["pids"])

    def _capture_baseline(self, deadline: float) -> None:
        """Record the first-boot processes, windows and /home/user (a tar in the VM plus a host copy)."""
        self._baseline_pids = self._settled_pids(deadline)
        self._baseline_helpers = dict(self._listed_helpers)
        while True:  # at first boot the window manager may come up after the server: wait for its listing
            try:
                self._baseline_windows = self._windows()
                break
            except DesktopCrashed:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
        # GNU tar exits 1 when a file changed while it was read (session logs): the copy is still usable.
        made = self._execute(
            f"tar --warning=no-file-changed -cf {BASELINE_TAR} -C /home/user . 2>&1; [ $? -le 1 ]",
            shell=True,
            timeout=300,
        )
        if made.get("returncode") != 0:
            raise DesktopCrashed(f"could not capture the home baseline: {(made.get('output') or '')[-300:]}")
        assert self._http is not None
        response = self._call("POST", "/file", 300, to=self._baseline_copy, data={"file_path": BASELINE_TAR})
        if response.status_code != 200:
            raise DesktopCrashed(f"could not fetch the home baseline: {response.status_code}")
        digest = hashlib.sha256()
        with self._baseline_copy.open("rb") as copy:
            while chunk := copy.read(1 << 20):
                digest.update(chunk)
        self._baseline_hash = digest.hexdigest()
        self._baseline_tmp = str(self._execute(["sh", "-c", TMP_SCRIPT, "tmp", "list"], timeout=60).get("output") or "")
        self._baseline_sudo = str(self._execute(SUDO_SCRIPT, shell=True, timeout=60).get("output") or "").strip()

    def _fast_reset(self, deadline: float) -> bool:
        """Kill the task's apps, verify, restore the home baseline; False when the reset is not verifiable.

        Every probe must answer: a process listing, the window listing or home restore that fails or answers nothing
        makes the reset unverified (then a snapshot revert), never clean.
        """
        try:
            return self._fast_reset_verified(deadline)
        except DesktopCrashed as exc:
            if not self.vm.alive():
                raise
            logger.warning("fast reset not verifiable (%s); reverting", exc)
            return False

    def _fast_reset_verified(self, deadline: float) -> bool:
        result = self._procs(self._baseline_pids, kill=True)
        if result["survivors"] or result["missing"]:
            logger.warning(
                "fast reset not verifiable (survivors %s, first-boot processes gone %s); reverting",
                result["survivors"],
                result["missing"],
            )
            return False
        # the session's helpers that exited when idle, or that it restarted at once (session_helpers)
        adopted = {str(pid): str(cmd) for pid, cmd in dict(result.get("adopted") or {}).items()}
        exited = {int(pid) for pid in result.get("exited") or []}
        self._baseline_pids = sorted((set(self._baseline_pids) - exited) | {int(pid) for pid in adopted})
        self._baseline_helpers = {k: v for k, v in self._baseline_helpers.items() if int(k) not in exited} | adopted
        self.helpers_adopted += len(adopted)
        self.helpers_exited += len(exited)
        window_deadline = min(deadline, time.monotonic() + self.options.kill_timeout)
        while (windows := self._windows()) != self._baseline_windows:
            if time.monotonic() >= window_deadline:
                logger.warning("windows %s differ from first boot %s; reverting", windows, self._baseline_windows)
                return False
            time.sleep(0.05)
        restore = (
            f'[ "$(sha256sum {BASELINE_TAR} | cut -c1-64)" = "{self._baseline_hash}" ] || exit 17; '
            f"find /home/user -mindepth 1 -maxdepth 1 -exec rm -rf {{}} + && tar -xf {BASELINE_TAR} -C /home/user"
        )
        done = self._execute(restore, shell=True, timeout=300)
        if done.get("returncode") == 17:  # the in-VM copy changed or vanished: upload the host copy
            assert self._http is not None
            uploaded = self._http.post(
                "/setup/upload",
                data={"file_path": BASELINE_TAR},
                files={"file_data": ("baseline.tar", self._baseline_copy.read_bytes())},
                timeout=300,
            )
            if uploaded.status_code != 200:
                logger.warning("re-uploading the home baseline answered %s; reverting", uploaded.status_code)
                return False
            done = self._execute(restore, shell=True, timeout=300)
        if done.get("returncode") != 0:
            logger.warning("home restore failed (%s); reverting", (done.get("error") or "")[-300:])
            return False
        tmp = self._execute(["sh", "-c", TMP_SCRIPT, "tmp", "reset", self._baseline_tmp], timeout=120)
        if tmp.get("returncode") != 0:
            logger.warning("/tmp restore left %s; reverting", (tmp.get("output") or "").split())
            return False
        sudo = str(self._execute(SUDO_SCRIPT, shell=True, timeout=60).get("output") or "").strip()
        if sudo not in ("absent", self._baseline_sudo):
            logger.warning(
                "sudo was used during the episode (%s at first boot, %s now); reverting", self._baseline_sudo, sudo
            )
            return False
        budget = self.options.screenshot_budget
        if budget and self.screenshots_since_start >= budget // 2:  # recycle while nothing runs
            self._recycle_server(deadline)
        return True

    # ------------------------------------------------------------------ the contract
    def reset(self, task: Task) -> str:
        """Fast reset (or a snapshot revert) and the task's setup; returns ``fast``, ``revert`` or ``fallback``."""
        if self._closed:
            raise StateError("reset() called after close(); create a new OSWorldDesktop")
        deadline = time.monotonic() + self.config.timeouts.reset
        self._task = None
        self._acted = False
        try:
            if not self.config.fast_reset or task.domain in self.options.revert_domains:
                self._boot(deadline, first=False)
                self.last_reset_kind = "revert"
            elif not self.vm.alive():
                logger.warning("the VM stopped; replacing it")
                self._boot(deadline, first=False)
                self.last_reset_kind = "fallback"
            elif self._fast_reset(deadline):
                self.last_reset_kind = "fast"
            else:
                self._boot(deadline, first=False)
                self.last_reset_kind = "fallback"
        except (httpx.HTTPError, OSError) as exc:
            raise DesktopCrashed(f"reset for task {task.task_id} failed: {exc}") from exc
        except DesktopCrashed:
            logger.warning("the VM failed during reset; replacing it")
            self._boot(deadline, first=False)
            self.last_reset_kind = "fallback"
        from legato_gym.backends.local.tasks import TASK_DATA

        self._session.begin(task.config, task_path(TASK_DATA, task.task_id))
        self._session.setup(task.setup)
        self._expected_windows = expected_windows(task.setup)
        self._task = task
        return self.last_reset_kind

    def _recycle_server(self, deadline: float) -> None:
        """Restart the VM's server, freeing the X connections its screenshots leaked.

        In the VM, detached from the request that asks for it: ``sudo systemctl restart osworld_server``
        with ``OSWorldOptions.client_password`` where that unit exists (OSWorld's VM), else SIGKILL to the
        server, which its supervisor restarts (systemd's ``Restart=on-failure``; the stand-in VM's loop).
        Then wait until it answers again, and take the first-boot processes again: the new server (and
        what it starts) counts as first-boot, the old one is not missing.
        """
        from legato_gym.backends.osworld.vms import wait_server

        inner = (
            "sleep 0.3; if systemctl cat osworld_server >/dev/null 2>&1; then "
            f"echo {shlex.quote(self.options.client_password)} | sudo -S systemctl restart osworld_server; sudo -K; "
            'else kill -9 "$1"; fi'
        )
        result = self._execute(
            f'server=$PPID; nohup sh -c {shlex.quote(inner)} recycle "$server" >/dev/null 2>&1 & echo $server',
            shell=True,
            timeout=30,
        )
        old = (result.get("output") or "").strip()
        time.sleep(0.3)  # the restart is detached: let it begin before polling (else the old server answers)
        while True:
            try:
                pid = self._execute("echo $PPID", shell=True, timeout=10).get("output", "").strip()
            except DesktopCrashed:
                pid = old
            if pid != old:
                break
            if time.monotonic() >= deadline:
                raise DeadlineExceeded("the VM's server did not come back after its restart")
            time.sleep(0.1)
        wait_server(self.vm.endpoint, deadline)
        self.screenshots_since_start = 1
        self.server_recycles += 1
        # the old server's helpers are gone; the new one's count as first boot (the task's apps do not)
        now = set(self._settled_pids(deadline))
        listed = self._execute(f"ps -o pid= --ppid {shlex.quote(pid)}", shell=True, timeout=30)
        helpers = {int(word) for word in (listed.get("output") or "").split() if word.isdigit()}
        self._baseline_pids = sorted((set(self._baseline_pids) & now) | (helpers & now))
        logger.info("recycled the VM's server (pid %s -> %s)", old, pid)

    def _screenshot(self) -> bytes:
        budget = self.options.screenshot_budget
        if budget and self.screenshots_since_start >= budget:
            self._recycle_server(time.monotonic() + self.config.timeouts.reset)
        self.screenshots_since_start += 1
        assert self._http is not None
        try:
            response = self._call("GET", "/screenshot", 30, cap=self.caps.screenshot_bytes)
        except httpx.HTTPError as exc:
            raise DesktopCrashed(f"the VM's server stopped answering /screenshot: {exc}") from exc
        if response.status_code != 200:
            raise DesktopCrashed(f"/screenshot answered {response.status_code}")
        return check_screenshot(response.content, self.config.screen, self.caps)

    def _settle(self, deadline: float) -> bool:
        """Wait until the screen is still: one in-VM wait (:data:`_SETTLE_SCRIPT`, through ``/execute``) that
        costs the server no ``/screenshot`` (each one leaks an X connection on OSWorld's real server); two
        equal ``/screenshot`` frames only where that script cannot run."""
        timeout = max(0.0, deadline - time.monotonic())
        try:
            result = self._execute(
                ["python3", "-c", _SETTLE_SCRIPT, str(self.options.settle_s), f"{timeout:.3f}"], timeout=timeout + 30
            )
            answer = json.loads((result.get("output") or "").strip().splitlines()[-1])
        except (ValueError, IndexError, DeadlineExceeded) as exc:
            logger.debug("in-VM settle unavailable (%s); comparing screenshots", exc)
        else:
            if isinstance(answer, dict) and "settled" in answer:
                return bool(answer["settled"])
            logger.debug("in-VM settle answered %s; comparing screenshots", answer)
        return self._settle_by_screenshots(deadline)

    def _settle_by_screenshots(self, deadline: float) -> bool:
        previous = self._screenshot()
        while time.monotonic() < deadline:
            time.sleep(self.options.settle_s)  # the interval between two frames compared, not a wait
            current = self._screenshot()
            if current == previous:
                return True
            previous = current
        return False

    def _windows_mapped(self, deadline: float) -> bool:
        want = len(self._baseline_windows) + self._expected_windows
        while len(self._windows()) < want:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _fixed(self, seconds: float) -> float:
        start = time.monotonic()
        if seconds > 0:
            time.sleep(seconds)
        return time.monotonic() - start

    def wait_after_reset(self) -> Waited:
        self._require("wait_after_reset")
        if not self.config.ready_signal:
            return Waited(seconds=self._fixed(30 * self.config.fixed_wait), ready=False)
        start = time.monotonic()
        deadline = start + self.config.timeouts.ready
        mapped = self._windows_mapped(min(deadline, start + self.options.window_timeout))
        settled = self._settle(deadline)
        return Waited(seconds=time.monotonic() - start, ready=mapped and settled)

    @contextlib.contextmanager
    def _agent_phase(self) -> Iterator[None]:
        """An answer over its cap once the agent has acted is the agent's failure (docs/reliability.md)."""
        try:
            yield
        except ReplyTooLarge as exc:
            if not self._acted:
                raise
            raise AgentFault("reply_too_large", str(exc)) from exc

    def observe_png(self) -> tuple[bytes, str]:
        """The server's PNG screenshot and the instruction."""
        task = self._require("observe")
        with self._agent_phase():
            return self._screenshot(), task.instruction

    def observe(self) -> Observation:
        png, instruction = self.observe_png()
        return Observation(
            screenshot=decode_png(check_screenshot(png, self.config.screen)), instruction=instruction, png=png
        )

    def act(self, action: str) -> ActResult:
        self._require("act")
        self._session.record(action)
        self._acted = True
        with self._agent_phase():
            return self._act(action)

    def _act(self, action: str) -> ActResult:
        start = time.monotonic()
        if action not in SPECIAL_ACTIONS:
            env = self._session.env
            command = (
                env._fix_pyautogui_less_than_bug(action) if hasattr(env, "_fix_pyautogui_less_than_bug") else action
            )
            result = self._execute(
                ["python3", "-c", _ACTION_PREFIX.format(command=command)], timeout=self.config.timeouts.act
            )
            if result.get("returncode"):
                logger.info("action exited with %s: %s", result.get("returncode"), (result.get("error") or "")[-300:])
        act_s = time.monotonic() - start
        if not self.config.ready_signal:
            pause = self.config.fixed_wait * (2 if action == "WAIT" else 1)
            return ActResult(act_s=act_s, wait_s=self._fixed(pause))
        if action in ("DONE", "FAIL"):
            return ActResult(act_s=act_s)
        settle_start = time.monotonic()
        self._settle(settle_start + self.config.timeouts.ready)
        return ActResult(act_s=act_s, ready_s=time.monotonic() - settle_start)

    def wait_before_eval(self) -> Waited:
        self._require("wait_before_eval")
        with self._agent_phase():
            return self._wait_before_eval()

    def _wait_before_eval(self) -> Waited:
        start = time.monotonic()
        self._session.postconfig()
        if not self.config.ready_signal:
            self._fixed(10 * self.config.fixed_wait)
            return Waited(seconds=time.monotonic() - start, ready=False)
        ready = self._settle(start + self.config.timeouts.ready)
        return Waited(seconds=time.monotonic() - start, ready=ready)

    def evaluate(self) -> float:
        self._require("evaluate")
        with self._agent_phase():
            return float(self._session.evaluate())

    def _require(self, call: str) -> Task:
        if self._closed:
            raise StateError(f"{call}() called after close(); create a new OSWorldDesktop")
        if self._task is None:
            raise StateError(f"{call}() called before reset(task); call reset(task) first")
        return self._task

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._http is not None:
                self._http.close()
            if self._vm is not None:
                self._vm.close()
        finally:
            self._vm = None
            shutil.rmtree(self.work_dir, ignore_errors=True)


def _desktop_env_here() -> bool:
    return importlib.util.find_spec("desktop_env") is not None


class OSWorldDesktop:
    """One OSWorld VM as a legato desktop (see the module docstring).

    Example::

        from legato_gym import DesktopConfig
        from legato_gym.backends.osworld import OSWorldDesktop, default_tasks

        config = DesktopConfig(osworld_path="~/osworld")       # provider "docker"; python: `legato osworld setup`
        with OSWorldDesktop(config) as desktop:
            desktop.reset(default_tasks(config)[0])
            desktop.wait_after_reset()
            desktop.act("pyautogui.hotkey('ctrl', 'alt', 't')")

    Args:
        config: screen, waits, fast reset, deadlines, and ``options``: an
            :class:`~legato_gym.backends.osworld.options.OSWorldOptions` (the provider, ``docker`` or
            ``local``, and its settings), its mapping, or ``None``.
        seed: unused (a VM has no randomness to seed).
    """

    def __init__(self, config: DesktopConfig | None = None, *, seed: int | None = None) -> None:
        config = config or DesktopConfig()
        self.config = replace(config, options=typed_options(config.options, OSWorldOptions, "osworld"))
        self._impl: Any
        if _desktop_env_here():
            self._impl = _VMDesktop(self.config)
        else:
            from legato_gym.backends.osworld.remote import RemoteDesktop

            self._impl = RemoteDesktop(self.config, seed=seed)

    def __enter__(self) -> OSWorldDesktop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def screen_size(self) -> tuple[int, int]:
        return self.config.screen

    @property
    def last_reset_kind(self) -> str:
        """``"fast"``, ``"revert"`` or ``"fallback"``: how the last reset went."""
        return str(self._impl.last_reset_kind)

    def reset(self, task: Task | Mapping[str, Any]) -> str:
        return str(self._impl.reset(task if isinstance(task, Task) else Task.from_json(task)))

    def wait_after_reset(self) -> Waited:
        result: Waited = self._impl.wait_after_reset()
        return result

    def observe(self) -> Observation:
        result: Observation = self._impl.observe()
        return result

    def act(self, action: str) -> ActResult:
        result: ActResult = self._impl.act(action)
        return result

    def wait_before_eval(self) -> Waited:
        result: Waited = self._impl.wait_before_eval()
        return result

    def evaluate(self) -> float:
        return float(self._impl.evaluate())

    def close(self) -> None:
        self._impl.close()

    # --- JSON-friendly calls for a parent in another interpreter (see .remote)
    def remote_reset(self, task: Mapping[str, Any]) -> str:
        return self.reset(task)

    def remote_wait_after_reset(self) -> list[Any]:
        w = self.wait_after_reset()
        return [w.seconds, w.ready]

    def remote_observe(self) -> list[str]:
        import base64

        png, instruction = self._impl.observe_png()
        return [base64.b64encode(png).decode(), instruction]

    def remote_act(self, action: str) -> list[float]:
        r = self.act(action)
        return [r.act_s, r.ready_s, r.wait_s]

    def remote_wait_before_eval(self) -> list[Any]:
        w = self.wait_before_eval()
        return [w.seconds, w.ready]
