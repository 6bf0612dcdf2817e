"""The processes of one local desktop and their lifecycle: boot, fast reset or restart, the ports, close.

A desktop is an X server (Xvfb) on the host and a bwrap sandbox on it (window manager, apps, the
OSWorld-protocol server), in one cgroup (a desk started ahead has its own), with a state folder of its own. A
fast reset kills the sandbox (its pid namespace), checks that nothing survived and that the X server is as the
first sandbox left it, and starts a fresh sandbox; anything else restarts the whole desktop, X server
included. With ``LocalOptions.prestart`` a reset switches to a whole desktop started ahead instead
(:mod:`.prestart`), which may have the task set up already.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from legato_gym.backends.local import apps, reaper, relay, vscode, xstate
from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.display import Display, require_tools
from legato_gym.backends.local.forward import UnixForwarder
from legato_gym.backends.local.limits import BoundHits, Cgroup, Limits
from legato_gym.backends.local.options import LocalOptions
from legato_gym.backends.local.prestart import (
    Desk,
    Prepared,
    Prestarter,
    SetupGuess,
    cool_office,
    task_key,
    warm_office,
)
from legato_gym.backends.local.sandbox import (
    DEVTOOLS_PORT,
    VLC_HTTP_PORT,
    Sandbox,
    SandboxSpec,
    UidLease,
    fonts,
)
from legato_gym.backends.local.sandbox.lookalike import wallpaper
from legato_gym.backends.local.sandbox.spec import NO_TKINTER_FIX
from legato_gym.backends.local.xstate import Wallpaper, XBaseline
from legato_gym.bounds import ReadCaps
from legato_gym.config import DesktopConfig
from legato_gym.contract import Task
from legato_gym.episode import UNKNOWN, Unknown
from legato_gym.errors import ConfigError, DesktopCrashed, MissingDependencyError, StateError

__all__ = ["HOME_DIRS", "DesktopProcesses", "Port", "sweep_stale"]

logger = logging.getLogger(__name__)

#: The folders of a fresh Ubuntu home, as OSWorld's VM user has them (tasks write to ~/Desktop).
HOME_DIRS = tuple(sorted(folder for _, folder in apps.USER_DIRS))

#: The desktop's ports that a loopback TCP forwarder reaches: its server, Chrome's DevTools, VLC's HTTP.
Port = Literal["server", "devtools", "vlc"]

#: Runs a task's setup on a desk started ahead and waits for its ready signal (given by the desktop, which
#: knows the grader): ``setup_ahead(desk, task, deadline)``.
SetupAhead = Callable[[Desk, Task, float], Prepared]


class DesktopProcesses:
    """The X server, the sandbox and its client, the cgroup and the state folder of one desktop.

    Nothing runs until :meth:`boot`. ``display``, ``client`` and ``sandbox`` change at every reset; the
    forwarders of :meth:`endpoint` outlive resets and restarts.

    Args:
        config: the desktop's config (screen, limits, deadlines, interpreter).
        options: the local backend's options.
    """

    def __init__(self, config: DesktopConfig, options: LocalOptions) -> None:
        self.config = config
        self.options = options
        require_tools(["Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "setpriv"])
        python = options.sandbox_python or config.worker_python or sys.executable
        limits = Limits.from_mb(options.memory_mb, options.max_processes, options.tmpfs_mb)
        # what killed legato processes left is taken down first; this process's own reaper takes this
        # desktop down if the process dies without closing it (SIGKILL included)
        if left := reaper.sweep():
            logger.warning("leftovers of dead legato processes could not be removed: %s", "; ".join(left))
        reaper.start_reaper()
        self._uid: UidLease | None = None
        if os.geteuid() == 0:
            self._uid = UidLease(options.uid_first, options.uid_count)
        self.spec = SandboxSpec(
            python=python,
            host_uid=self._uid.uid if self._uid is not None else None,
            limits=limits,
            system_paths=options.system_paths,
            # code-server, for `code`; the Ubuntu fonts, for the lookalike session
            extra_paths=(*options.extra_paths, *vscode.sandbox_paths(), *fonts.sandbox_paths(options.session)),
            open_file_timeout=min(config.timeouts.reset, 1800.0),
            server_mode=options.server_mode,
            pointer=options.pointer,
            session=options.session,
            screen=config.screen,
        )
        root = Path(options.state_dir or tempfile.gettempdir()) / "legato-local"
        root.mkdir(mode=0o711, parents=True, exist_ok=True)
        root.chmod(0o711)  # the X server, run as the desktop's uid, reaches its folder; nobody lists them
        sweep_stale(root)
        self.state_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        self.state_dir.chmod(0o711)
        (self.state_dir / "owner.pid").write_text(str(os.getpid()))
        #: What the host reads from the desktop, at most (docs/reliability.md).
        self.caps = ReadCaps.DEFAULT
        name = f"legato-{os.getpid()}-{self.state_dir.name.rpartition('-')[2]}"
        try:
            self.record = reaper.DesktopRecord.create(name, reaper.Owner.current())
        except OSError as exc:
            raise ConfigError(f"cannot record the desktop in legato's run folder: {exc}") from exc
        self.record.state_dir = str(self.state_dir)
        if self._uid is not None:
            self.record.uid, self.record.uid_lease = self._uid.uid, str(self._uid.path)
        self.record.save()
        # one cgroup per desk (X server and sandbox): a desk built ahead hits its own bounds, never the bounds
        # whose counters are the evidence against the current episode's agent (docs/reliability.md)
        self._limits, self._cgroup_name = limits, name
        self._cgroups: dict[str, Cgroup] = {}
        self._cgroups_lock = threading.Lock()  # the prestart thread adds and removes desks' cgroups too
        self._desk_cgroup("")
        self._display: Display | None = None
        self.sandbox: Sandbox | None = None
        self._client: DesktopClient | None = None
        self._checked_python = False
        self._x_baseline: XBaseline | None = None
        self._forwarders: dict[Port, UnixForwarder] = {}
        self._slot = ""  # names the current desk's folders (:attr:`.sandbox.SandboxLayout.slot`)
        self._prestart: Prestarter | None = None
        self._next_office = False
        self._resets = 0  # so far: the first episode starts no desktop ahead (start_next)
        self._x_display: Display | None = None  # the X server the X baseline was captured on
        #: With ``prestart``: runs a task's setup on a desk started ahead (``None``: desks are left bare).
        self.setup_ahead: SetupAhead | None = None
        #: The task setup the current desk came with (a reset that switched to a desk set up ahead for it).
        self.prepared: Prepared | None = None
        self._guess = SetupGuess()
        if options.prestart and config.fast_reset:
            self._prestart = Prestarter(self._build_desk, self._destroy_desk)

    @property
    def display(self) -> Display:
        """The X server (raises :class:`StateError` once closed)."""
        if self._display is None:
            raise StateError("the desktop is closed; create a new LocalDesktop")
        return self._display

    @property
    def client(self) -> DesktopClient:
        """The client of the current sandbox's server (raises :class:`StateError` once closed)."""
        if self._client is None:
            raise StateError("the desktop is closed; create a new LocalDesktop")
        return self._client

    @property
    def _cgroup(self) -> Cgroup:
        """The current desk's cgroup (its X server and sandbox; a desk started ahead has its own); one with no
        folder once it is removed."""
        with self._cgroups_lock:
            return self._cgroups.get(self._slot) or Cgroup(f"{self._cgroup_name}{self._slot}", self._limits)

    def _desk_cgroup(self, slot: str) -> Cgroup:
        """The cgroup of the desk in ``slot``, made (and named in the record) on first use."""
        with self._cgroups_lock:
            cgroup = self._cgroups.get(slot)
            if cgroup is None:
                cgroup = self._cgroups[slot] = Cgroup(f"{self._cgroup_name}{slot}", self._limits)
                cgroup.create()
                self.record.cgroups += [str(d) for d in cgroup.dirs]
                self.record.save()
            return cgroup

    def _drop_cgroup(self, slot: str, deadline: float) -> list[int]:
        """Kill what is left in the cgroup of the desk in ``slot`` and remove it; the pids that survived."""
        with self._cgroups_lock:
            cgroup = self._cgroups.get(slot)
        if cgroup is None:
            return []
        dirs = [str(d) for d in cgroup.dirs]
        left = cgroup.kill(deadline)
        if left:  # kept in the record, for the sweep once this process is gone
            return left
        cgroup.remove(deadline)
        with self._cgroups_lock:
            self._cgroups.pop(slot, None)
            self.record.cgroups = [c for c in self.record.cgroups if c not in dirs or Path(c).exists()]
            self.record.save()
        return []

    def bound_hits(self) -> BoundHits:
        """The current desk's cgroup's bound counters (:meth:`.limits.Cgroup.hits`).

        Only the desk the agent drives: a desk built ahead meanwhile (``prestart``) has a cgroup of its own,
        and the bounds it hits while it is built or set up are not the agent's doing.
        """
        return self._cgroup.hits()

    def overflows(self) -> int:
        """Connections of the loopback forwarders cut at their cap so far (:attr:`.UnixForwarder.overflows`)."""
        return sum(forwarder.overflows for forwarder in self._forwarders.values())

    def server_ended(self, timeout: float) -> str | None:
        """Why the current sandbox exited, if its server ended from inside it (:meth:`.Sandbox.server_ended`)."""
        return self.sandbox.server_ended(timeout) if self.sandbox is not None else None

    @property
    def pids(self) -> list[int]:
        """Host pids of the desktop's top processes (X server, window manager, sandbox init)."""
        pids = list(self._display.pids) if self._display else []
        if self.sandbox is not None and self.sandbox.init_pid is not None:
            pids.append(self.sandbox.init_pid)
        if self._prestart is not None:
            pids += self._prestart.pids  # the desktop started ahead, and the last one until it is killed
        return pids

    def alive(self) -> bool:
        """Whether the X server and the sandbox are both running."""
        if self._display is None or not self._display.alive():
            return False
        return self.sandbox is not None and self.sandbox.alive()

    def boot(self, deadline: float) -> None:
        """Start the X server and a sandbox; capture the home baseline and the X baseline the first time."""
        self._display = self._new_display(self._slot)
        self._display.start(deadline)
        self._prepare_display(self._display)
        # The window manager lives in the sandbox and dies with it: the X baseline is the server as a
        # first, untouched sandbox leaves it (the window manager's root properties, the repainted root),
        # which is what every fast reset's kill leaves too.
        self._start_sandbox(deadline)
        if not (self.state_dir / "baseline.tar").exists():
            self._capture_baseline(deadline)
        if not self._kill_sandbox(deadline):
            raise DesktopCrashed("the first sandbox of the desktop did not die when killed")
        self._x_baseline = XBaseline.capture(self._display.name, self._display.digest, self._wallpaper())
        self._x_display = self._display
        self._start_sandbox(deadline)

    def reset(self, deadline: float, *, office: bool = False, task: Task | None = None) -> str:
        """Kill the episode's processes and start a fresh sandbox, or restart the whole desktop.

        A restart when ``config.fast_reset`` is off or the X server died, and as a fallback when processes
        or windows survive the kill or the X server's state cannot be put back.

        With ``LocalOptions.prestart``, a fast reset switches to the desktop started ahead (:mod:`.prestart`);
        the first two resets after boot, before one is started, are fast resets in place.

        Args:
            deadline: monotonic time to be done by.
            office: the task's setup opens LibreOffice first (:func:`.prestart.opens_office_first`): it may
                use a warm LibreOffice of the desktop started ahead, and the next one starts one too.
            task: the task the reset is for: a desk started ahead and set up for it is used as it is
                (:attr:`prepared`), and the next one may be set up for it (:class:`.prestart.SetupGuess`).

        Returns:
            ``"fast"``, ``"ahead"`` (switched to the desktop started ahead), ``"prepared"`` (switched to the
            desktop started ahead, with ``task`` set up on it: :attr:`prepared`), ``"restart"`` (asked for,
            or the X server gone) or ``"fallback"``.
        """
        self.prepared = None
        if task is not None:
            self._guess.reset(task)
        if not self.config.fast_reset or self._display is None or not self._display.alive():
            self._restart(deadline)
            return "restart"
        self._resets += 1
        if self._prestart is not None:
            self._next_office = office  # the next desktop's build starts with start_next()
            if self._prestart.pending or self._display is not self._x_display:
                return self._switch(deadline, office, task)
        kill_deadline = min(deadline, time.monotonic() + self.options.kill_timeout)
        if not self._kill_sandbox(kill_deadline):
            logger.warning("processes or windows survived the sandbox kill; restarting the whole desktop")
            self._restart(deadline)
            return "fallback"
        if left := self._restore_x_state():
            logger.warning("X server state could not be put back (%s); restarting it", "; ".join(left))
            self._restart(deadline)
            return "fallback"
        self._start_sandbox(deadline)
        return "fast"

    def endpoint(self, port: Port) -> tuple[str, int]:
        """``(host, port)`` of a loopback TCP forwarder to one of the desktop's ports (started on first use).

        ``"server"`` is the in-desktop server; ``"devtools"`` and ``"vlc"`` reach the sandbox's 9222 and
        VLC's HTTP interface through :mod:`.relay`. The port outlives fast resets and restarts.
        """
        forwarder = self._forwarders.get(port)
        if forwarder is None:
            control = self.state_dir / f"control{self._slot}"
            if port == "server":
                forwarder = UnixForwarder(control / "server.sock", limit=self.caps.file_bytes)
            else:
                inside = DEVTOOLS_PORT if port == "devtools" else VLC_HTTP_PORT
                forwarder = UnixForwarder(
                    control / "devtools.sock", preamble=relay.preamble(inside), limit=self.caps.file_bytes
                )
            self._forwarders[port] = forwarder
        return str(forwarder.host), int(forwarder.port)

    def close(self) -> None:
        """Kill the sandbox (its whole pid namespace), the window manager and the X server; remove the state."""
        for forwarder in self._forwarders.values():
            forwarder.close()
        if self._prestart is not None:
            self._prestart.close()
        try:
            self._kill_sandbox(time.monotonic() + self.options.kill_timeout)
        finally:
            if self._display is not None:
                self._display.stop()
                self._display = None
            # whatever escaped the kills above (a process of the sandbox's session the namespace's end did not
            # reach, a desk started ahead mid-build) is in the cgroup, and runs as the desktop's uid
            deadline = time.monotonic() + self.options.kill_timeout
            left = [pid for slot in list(self._cgroups) for pid in self._drop_cgroup(slot, deadline)]
            if self._uid is not None:
                left += reaper.kill_uid(self._uid.uid, deadline)
                if not left:
                    self._uid.release()
            shutil.rmtree(self.state_dir, ignore_errors=True)
            if left:  # the lease and the record stay: the next sweep kills them once this process is gone
                logger.warning("pids %s of desktop %s survived SIGKILL", left, self.state_dir.name)
            else:
                self.record.path.unlink(missing_ok=True)

    def _new_display(self, slot: str) -> Display:
        procs = self._desk_cgroup(slot).procs
        display = Display(self.state_dir / f"display{slot}", self.config.screen, self.spec.host_uid, procs)
        display.pointer = self.options.pointer
        return display

    def _open_sandbox(self, display: Display, slot: str, deadline: float) -> tuple[Sandbox, DesktopClient]:
        """Start a sandbox on ``display`` and wait for its server."""
        assert display.number is not None
        cgroup = self._desk_cgroup(slot)
        sandbox = Sandbox(
            self.spec, self.state_dir, display.number, display.socket_path, display.fb_path, cgroup.procs, slot
        )
        try:
            sandbox.start(deadline)
            if not cgroup.dirs:  # else the cgroup holds them: the record need not name each
                self.record.track(display.pids[0], group=True)
                if sandbox.pid is not None:
                    self.record.track(sandbox.pid, group=False)
            client = DesktopClient(sandbox.socket_path, timeout=self.config.timeouts.act, caps=self.caps)
            client.wait_up(deadline, sandbox.check_alive)
        except BaseException:
            sandbox.kill(time.monotonic() + self.options.kill_timeout)
            raise
        return sandbox, client

    def _start_sandbox(self, deadline: float) -> None:
        self.sandbox, client = self._open_sandbox(self.display, self._slot, deadline)
        self._client = client
        if self._checked_python:
            return
        self._checked_python = True
        check = client.execute(["python", "-c", "import pyautogui"], timeout=max(1.0, deadline - time.monotonic()))
        if check.get("returncode") != 0:
            said = (check.get("error") or check.get("message") or "").strip()
            # pyautogui imports MouseInfo, which exits on Linux where the interpreter has no tkinter (Debian's
            # python3 without python3-tk): the package is there, the interpreter lacks a part of its own
            fix = NO_TKINTER_FIX if "tkinter" in said else "install it with `pip install 'legatolabs[local]'`"
            raise MissingDependencyError(
                f"the desktop interpreter {self.spec.python} cannot import pyautogui: {said[-300:]}; {fix}"
            )

    def _capture_baseline(self, deadline: float) -> None:
        """Snapshot the freshly booted home, set up as OSWorld's VM home, as the baseline every reset restores.

        The apps' first-run settings, profiles and MIME defaults (:func:`.apps.baseline_files`) are written
        into it first, the apps' warmed-up profiles (GIMP's) and the sound server's volume
        (:data:`.apps.AUDIO_BASELINE`) made, so every episode starts from them.
        """
        for path, content in apps.baseline_files().items():
            self.client.upload(f"/home/user/{path}", content)
        for app in apps.APPS:
            if app.warm_up is not None:
                self._warm_up(app, deadline)
        if shutil.which("pulseaudio") and shutil.which("pactl"):  # the sound server's volume, as the VM keeps it
            audio = self.client.execute(apps.AUDIO_BASELINE, shell=True, timeout=max(1.0, deadline - time.monotonic()))
            if audio.get("returncode") != 0:
                logger.warning("the sound server's volume could not be set in the baseline home: %s", audio)
        tar = "/tmp/.legato-baseline.tar"
        # GNU tar exits 1 when a file changed as it read it (GNOME Shell's shader cache): the copy is usable
        archive = f"tar --warning=no-file-changed -cf {tar} -C /home/user .; [ $? -le 1 ]"
        script = f"mkdir -p {' '.join(HOME_DIRS)} && {{ {archive}; }}"
        result = self.client.execute(script, shell=True, timeout=max(1.0, deadline - time.monotonic()))
        if result.get("returncode") != 0:
            raise DesktopCrashed(f"could not capture the home baseline: {result}")
        assert self.sandbox is not None
        # read through the server (the host follows no path of the sandbox's), to disk, capped
        if not self.client.fetch_file(tar, self.sandbox.baseline):
            raise DesktopCrashed(f"could not read the home baseline {tar} from the desktop")

    def _warm_up(self, app: apps.App, deadline: float) -> None:
        """Give the baseline the app's profile as its first start leaves it (:attr:`.apps.App.warm_up`: GIMP's).

        GIMP builds its plug-in database at the first start of a profile, which takes seconds, and every
        episode's GIMP would otherwise be a first start. The profile is made once per host and install, by a
        headless start inside this first sandbox (before any agent runs), and kept beside the desktops'
        state folders; later desktops unpack it into their baseline. Without the app, nothing.
        """
        warm_up = app.warm_up
        assert warm_up is not None
        key = warm_up.key()
        if key is None:
            return
        cached = self.state_dir.parent / f"{app.name}-profile-{key}.tar"
        tar, remaining = f"/tmp/.legato-{app.name}.tar", max(1.0, deadline - time.monotonic())
        if cached.exists():
            self.client.upload(tar, cached.read_bytes())
            result = self.client.execute(f"tar -xf {tar} -C /home/user && rm {tar}", shell=True, timeout=remaining)
        else:
            script = f"{warm_up.command}; tar -cf {tar} -C /home/user {warm_up.profile}"
            result = self.client.execute(script, shell=True, timeout=remaining)
            partial = cached.with_name(f"{cached.name}.{os.getpid()}")
            if result.get("returncode") == 0 and self.client.fetch_file(tar, partial):
                partial.replace(cached)
            self.client.execute(["rm", "-f", tar])
        if result.get("returncode") != 0:
            logger.warning(
                "%s's profile could not be prepared (it will build it at its first start): %s", app.name, result
            )

    def _kill_sandbox(self, deadline: float) -> bool:
        ok = True
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.sandbox is not None:
            ok = self.sandbox.kill(deadline)
            if ok and self._display is not None and self._display.alive():
                ok = self._display.wait_no_windows(deadline)
            self.sandbox = None
        return ok

    def _restart(self, deadline: float) -> None:
        self._kill_sandbox(deadline)
        if self._display is not None:
            self._display.stop()
        self.boot(deadline)

    def _switch(self, deadline: float, office: bool, task: Task | None) -> str:
        """Switch to the desktop started ahead; hand this one to be killed; start the next one."""
        assert self._prestart is not None
        self._prestart.prepare(office)  # (when start_next() was not called: the build starts now)
        # a build that hangs leaves half the reset's time to restart the whole desktop instead
        desk = self._prestart.take(deadline - (deadline - time.monotonic()) / 2)
        if desk is not None and desk.prepared is not None and (task is None or desk.prepared.key != task_key(task)):
            logger.info("the desktop started ahead was set up for another task; starting a bare one now")
            self._prestart.prepare(office)
            self._prestart.retire(desk)  # killed once the bare one is built (one thread does both, in turn)
            desk = self._prestart.take(deadline - (deadline - time.monotonic()) / 2)
        if desk is not None and not desk.alive():
            logger.warning("the desktop started ahead died before its episode; restarting the whole desktop")
            self._destroy_desk(desk)
            desk = None
        if desk is None:
            self._restart(deadline)
            return "fallback"
        if self._display is not None and self.sandbox is not None and self._client is not None:
            self._prestart.retire(Desk(self._display, self.sandbox, self._client, self._slot))
        else:  # what a failed reset left: kill it here
            self._kill_sandbox(time.monotonic() + self.options.kill_timeout)
            if self._display is not None:
                self._display.stop()
            self._drop_cgroup(self._slot, time.monotonic() + self.options.kill_timeout)
        self._display, self.sandbox, self._client, self._slot = desk.display, desk.sandbox, desk.client, desk.slot
        for port, forwarder in self._forwarders.items():
            forwarder.retarget(self.sandbox.socket_path if port == "server" else self.sandbox.devtools_path)
        if desk.office and not office:
            cool_office(desk.client, timeout=max(1.0, deadline - time.monotonic()))
        if desk.prepared is not None:
            self.prepared = desk.prepared
            return "prepared"
        return "ahead"

    def start_next(self, task: Task | None = None, hint: Task | Unknown | None = UNKNOWN) -> None:
        """With ``prestart``, start building the next episode's desktop (no-op if one is built or under way).

        Called once the episode's own setup is ready, so that the build does not slow it down. Not in the
        first episode after boot: a desktop used for one episode (a test, a one-off evaluation) never pays
        for a second one, and a collection's desktops start theirs from their second episode.

        Args:
            task: the episode's task: the next desktop is set up for it too when the desktop's runs of tasks
                say it comes again (:class:`.prestart.SetupGuess`) and :attr:`setup_ahead` is set.
            hint: the next episode's task as the caller knows it (``None``: not known), instead of a guess.
        """
        if self._prestart is None or self._resets < 2:
            return
        ahead = hint if not isinstance(hint, Unknown) else self._guess.next_task(task) if task is not None else None
        self._prestart.prepare(self._next_office, ahead if self.setup_ahead is not None else None)

    @contextlib.contextmanager
    def desk_endpoints(self, desk: Desk) -> Iterator[dict[Port, tuple[str, int]]]:
        """Loopback TCP forwarders to a desk's ports (as :meth:`endpoint` gives the current one's), while open."""
        forwarders: dict[Port, UnixForwarder] = {
            "server": UnixForwarder(desk.sandbox.socket_path),
            "devtools": UnixForwarder(desk.sandbox.devtools_path, preamble=relay.preamble(DEVTOOLS_PORT)),
            "vlc": UnixForwarder(desk.sandbox.devtools_path, preamble=relay.preamble(VLC_HTTP_PORT)),
        }
        try:
            yield {port: (str(f.host), int(f.port)) for port, f in forwarders.items()}
        finally:
            for forwarder in forwarders.values():
                forwarder.close()

    def _build_desk(self, slot: str, office: bool, task: Task | None = None) -> Desk:
        """A whole desktop (X server, sandbox, server) for a later episode, set up for ``task`` if given.

        Run by :class:`.Prestarter`.
        """
        deadline = time.monotonic() + self.config.timeouts.reset
        try:
            display = self._new_display(slot)
            display.start(deadline)
            try:
                self._prepare_display(display)
                sandbox, client = self._open_sandbox(display, slot, deadline)
            except BaseException:
                display.stop()
                raise
        except BaseException:
            self._drop_cgroup(slot, time.monotonic() + self.options.kill_timeout)
            raise
        desk = Desk(display, sandbox, client, slot)
        if task is not None and self.setup_ahead is not None:
            try:
                desk.prepared = self.setup_ahead(desk, task, deadline)
            except BaseException:
                self._destroy_desk(desk)
                raise
        elif office and shutil.which("soffice") is not None:
            try:
                desk.office = warm_office(client, sandbox, deadline)
                if not desk.office:
                    cool_office(client, timeout=max(1.0, deadline - time.monotonic()))
            except BaseException:
                self._destroy_desk(desk)
                raise
        return desk

    def _destroy_desk(self, desk: Desk) -> None:
        desk.client.close()
        desk.sandbox.kill(time.monotonic() + self.options.kill_timeout)
        desk.display.stop()
        if left := self._drop_cgroup(desk.slot, time.monotonic() + self.options.kill_timeout):
            logger.warning("pids %s of the desktop %s survived SIGKILL", left, desk.slot)
        for folder in (f"display{desk.slot}", f"control{desk.slot}"):
            shutil.rmtree(self.state_dir / folder, ignore_errors=True)

    def _restore_x_state(self) -> list[str]:
        """Put back what the episode changed in the X server (it outlives the sandbox); what is still off."""
        if self._x_baseline is None:
            return ["no X server baseline"]
        return xstate.restore(self.display.name, self._x_baseline, self.display.digest)

    def _wallpaper(self) -> Wallpaper | None:
        """The root window's background of the session (the lookalike's wallpaper; ``None``: the server's black)."""
        return wallpaper(self.config.screen) if self.spec.session == "lookalike" else None

    def _prepare_display(self, display: Display) -> None:
        """Set up a new X server before its first sandbox (:func:`.xstate.prepare_display`): the session's
        wallpaper, which it keeps across fast resets, and its keyboard's source."""
        xstate.prepare_display(display.name, self._wallpaper())


def sweep_stale(root: Path) -> None:
    """Remove state dirs left by legato processes that were killed (their owner pid is gone)."""
    for entry in root.iterdir():
        try:
            owner = int((entry / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            shutil.rmtree(entry, ignore_errors=True)
