"""What a local desktop leaves on the host, and how it is taken down when its owner process is gone.

Every desktop writes a *record* (:class:`DesktopRecord`) in legato's run folder (:func:`run_dir`): the
process that owns it (pid and start time, so that a reused pid is not taken for it), its cgroup folders,
its uid lease, its state folder and, for hosts without cgroups, its top processes. Whatever ends the owner
(SIGKILL, SIGTERM, Ctrl-C, a worker replaced by its pool), the desktop is taken down by:

* the owner's *reaper* (:func:`start_reaper`): one small process per owner, in a session of its own, that
  waits on the owner's pidfd and, once the owner is gone, kills what the owner's records name (every pid of
  their cgroups until they are empty, then the processes running as their uid), and removes the cgroups,
  the state folders, the leases and the records;
* the sweep at the start of every local desktop (:func:`sweep`), which does the same for any record whose
  owner is gone (a reaper that was itself killed, a host that rebooted mid-run), and for cgroups named
  ``legato-<pid>-*`` whose pid is gone.

Nothing of an owner that is alive is ever touched. This module uses the standard library only: the reaper
runs it as a script (``python -I reaper.py --owner PID --start TICKS``), without importing legato.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DesktopRecord",
    "Owner",
    "kill_cgroup",
    "kill_uid",
    "records",
    "run_dir",
    "start_reaper",
    "sweep",
    "uid_pids",
]

logger = logging.getLogger(__name__)

_POLL_S = 0.01
#: How long a sweep waits for one desktop's processes to be gone.
KILL_WAIT_S = 10.0


class RunDirError(OSError):
    """legato's run folder exists but is not safe to use (another owner, or writable by others)."""


def run_dir() -> Path:
    """The folder every legato process of this user shares for desktop records and uid leases.

    ``/run/legato`` for root (root-only, on the tmpfs that a reboot empties, as the processes it names are
    gone then too); for another user ``$XDG_RUNTIME_DIR/legato``, or ``/tmp/legato-<uid>`` without one. Never
    under ``$TMPDIR``, which differs between processes (the test runner sets its own).

    Raises:
        RunDirError: the folder is not a folder of this user's that only it can write.
    """
    euid = os.geteuid()
    if euid == 0:
        directory = Path("/run/legato")
    elif (runtime := os.environ.get("XDG_RUNTIME_DIR")) and Path(runtime).is_dir():
        directory = Path(runtime) / "legato"
    else:
        directory = Path("/tmp") / f"legato-{euid}"
    return _private_dir(directory)


def _private_dir(directory: Path) -> Path:
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700, parents=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise RunDirError(
            errno.EPERM,
            f"{directory} (legato's desktop records and uid leases) is not a folder of this user's that only it "
            "can write; remove it (with no legato running) and start again",
        )
    return directory


# ----------------------------------------------------------------------------------------------- owners


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks after boot), ``None`` when it is gone or a zombie."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data.rpartition(b")")[2].split()  # the name before ")" may hold spaces
    if fields[0] in (b"Z", b"X"):  # exited, not yet reaped by its parent: gone, for what it held
        return None
    return int(fields[19])  # field 22


@dataclass(frozen=True)
class Owner:
    """A process, told from a later one that reuses its pid by its start time."""

    pid: int
    start: int

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, start_ticks(pid) or 0)

    def alive(self) -> bool:
        return start_ticks(self.pid) == self.start

    def __str__(self) -> str:
        return f"{self.pid} {self.start}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        parts = text.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        return cls(int(parts[0]), int(parts[1]))


# ----------------------------------------------------------------------------------------------- killing


def cgroup_members(directory: Path) -> list[int]:
    """Pids in one cgroup folder (v1 or v2), none when it is gone."""
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup(directory: Path, deadline: float) -> list[int]:
    """SIGKILL every process of a cgroup (``cgroup.kill`` on v2, else each pid, again until none is left).

    Returns the pids still there at the deadline (a process that forks as fast as it is killed is stopped
    by the cgroup's ``pids`` bound; one stuck in the kernel is reported).
    """
    with contextlib.suppress(OSError):
        (directory / "cgroup.kill").write_text("1")
    while True:
        pids = cgroup_members(directory)
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= deadline:
            return pids
        time.sleep(_POLL_S)


def uid_pids(uid: int) -> list[int]:
    """Pids of processes whose real, effective or saved uid is ``uid`` (zombies, which hold nothing, aside)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                break
            if line.startswith("Uid:"):
                if str(uid) in line.split()[1:4]:
                    pids.append(int(entry.name))
                break
    return pids


def kill_uid(uid: int, deadline: float) -> list[int]:
    """SIGKILL every process running as ``uid``, again until none is left; the pids left at the deadline."""
    while True:
        pids = [p for p in uid_pids(uid) if p != os.getpid()]
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= deadline:
            return pids
        time.sleep(_POLL_S)


def _kill_process(pid: int, start: int, group: bool) -> None:
    """SIGKILL a process (its group with ``group``) if it is still the one started at ``start``."""
    if start_ticks(pid) != start:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


# ----------------------------------------------------------------------------------------------- leases


class Lease:
    """A lock file ``<folder>/<name>.lock`` held open and locked, naming its owner.

    A lease whose owner is gone is free again, but only once :meth:`try_take`'s ``reclaim`` returned True
    (its processes are gone). The file is removed on :meth:`release`.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def try_take(cls, path: Path, owner: Owner, ready: Callable[[Owner | None], bool] | None = None) -> Lease | None:
        """Take the lease at ``path`` for ``owner``; ``None`` when a live owner holds it, or ``ready`` says no.

        Args:
            path: the lock file.
            owner: who takes it (written in the file).
            ready: called, with the lock held, with the previous owner the file names (gone) or ``None``; the
                lease is taken only if it returns True (what the previous owner left is gone).
        """
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(path, flags, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    return None
                raise
            try:  # removed (released) between our open and our lock: that file is no lease any more
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    os.close(fd)
                    return None
            except FileNotFoundError:
                os.close(fd)
                return None
            previous = Owner.parse(os.pread(fd, 64, 0).decode(errors="replace"))
            if previous is not None and previous.alive() and previous != owner:
                os.close(fd)
                return None
            if previous != owner and ready is not None and not ready(previous):
                if previous is None:  # an empty file (ours, or a crashed taker's) is no lease: leave none
                    path.unlink(missing_ok=True)
                os.close(fd)
                return None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(owner).encode(), 0)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return cls(path, fd)

    def release(self) -> None:
        """Remove the file and unlock it (idempotent)."""
        if self._fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            os.close(self._fd)
            self._fd = -1


# ----------------------------------------------------------------------------------------------- records


@dataclass
class DesktopRecord:
    """What one desktop holds on the host, kept in ``<run dir>/desktops/<name>.json`` while it lives.

    Attributes:
        path: the record's file.
        owner: the process that owns the desktop.
        state_dir: the desktop's state folder (removed with it).
        cgroups: its cgroup folders.
        uid: its leased host uid (``None`` without root).
        uid_lease: the uid's lock file.
        processes: ``[pid, start, group]`` of its top processes (killed, their group with ``group``, when no
            cgroup holds them).
    """

    path: Path
    owner: Owner
    state_dir: str = ""
    cgroups: list[str] = field(default_factory=list)
    uid: int | None = None
    uid_lease: str = ""
    processes: list[list[int]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def create(cls, name: str, owner: Owner) -> DesktopRecord:
        folder = run_dir() / "desktops"
        folder.mkdir(mode=0o700, exist_ok=True)
        record = cls(folder / f"{name}.json", owner)
        record.save()
        return record

    @classmethod
    def load(cls, path: Path) -> DesktopRecord | None:
        try:
            data = json.loads(path.read_text())
            return cls(
                path,
                Owner(int(data["owner"]), int(data["start"])),
                str(data.get("state_dir", "")),
                [str(c) for c in data.get("cgroups", [])],
                None if data.get("uid") is None else int(data["uid"]),
                str(data.get("uid_lease", "")),
                [[int(v) for v in p] for p in data.get("processes", [])],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self) -> None:
        """Write the record (atomically: a reader never sees half of it)."""
        with self._lock:
            self.processes = [p for p in self.processes if start_ticks(p[0]) == p[1]]
            data = {
                "owner": self.owner.pid,
                "start": self.owner.start,
                "state_dir": self.state_dir,
                "cgroups": self.cgroups,
                "uid": self.uid,
                "uid_lease": self.uid_lease,
                "processes": self.processes,
            }
            partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
            partial.write_text(json.dumps(data))
            partial.replace(self.path)

    def track(self, pid: int, group: bool) -> None:
        """Add a top process of the desktop (its process group with ``group``)."""
        start = start_ticks(pid)
        if start is not None:
            with self._lock:
                self.processes.append([pid, start, int(group)])
            self.save()

    def take_down(self, deadline: float) -> list[str]:
        """Kill everything the record names and remove it all; what could not be removed (empty: all gone).

        Only for a record whose owner is gone, or by its owner once it has closed the desktop.
        """
        left: list[str] = []
        for pid, start, group in self.processes:
            _kill_process(pid, start, bool(group))
        for folder in self.cgroups:
            if survivors := kill_cgroup(Path(folder), deadline):
                left.append(f"pids {survivors} in cgroup {folder}")
        if self.uid is not None and self.uid_lease:
            left += _free_uid(Path(self.uid_lease), self.uid, self.owner, deadline)
        for folder in reversed(self.cgroups):
            while Path(folder).exists():
                try:
                    Path(folder).rmdir()
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() >= deadline:
                        left.append(f"cgroup {folder}: {exc}")
                        break
                    time.sleep(_POLL_S)
        if self.state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            if Path(self.state_dir).exists():
                left.append(f"state folder {self.state_dir}")
        if not left:
            self.path.unlink(missing_ok=True)
        return left


def _free_uid(lease: Path, uid: int, owner: Owner, deadline: float) -> list[str]:
    """Kill the processes of ``uid`` and remove its lease, if the lease still names ``owner`` (dead)."""
    try:
        fd = os.open(lease, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []  # held: a live desktop took the uid (after freeing it itself)
        if Owner.parse(os.pread(fd, 64, 0).decode(errors="replace")) != owner:
            return []
        if survivors := kill_uid(uid, deadline):
            return [f"pids {survivors} of uid {uid}"]
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lease).st_ino == os.fstat(fd).st_ino:
                lease.unlink()
        return []
    finally:
        os.close(fd)


def records() -> list[DesktopRecord]:
    """Every desktop record of this user's legato processes."""
    try:
        folder = run_dir() / "desktops"
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    return [r for p in paths if (r := DesktopRecord.load(p)) is not None]


def sweep(owner: Owner | None = None, deadline: float | None = None) -> list[str]:
    """Take down the desktops whose owner is gone (only ``owner``'s, when given, once it is gone).

    Returns what could not be removed, for a warning.
    """
    left: list[str] = []
    for record in records():
        if (owner is not None and record.owner != owner) or record.owner.alive():
            continue
        left += record.take_down(deadline if deadline is not None else time.monotonic() + KILL_WAIT_S)
    return left


# ----------------------------------------------------------------------------------------------- reaper

_started: set[int] = set()
_started_lock = threading.Lock()


def start_reaper() -> None:
    """Start this process's reaper (once per process): it takes down this process's desktops once it is gone.

    The reaper is a grandchild in a session of its own, so no signal sent to this process's group or
    session reaches it, and it is nobody's zombie.
    """
    pid = os.getpid()
    with _started_lock:
        if pid in _started:
            return
        owner = Owner.current()
        argv = [sys.executable, "-I", "-S", __file__, "--owner", str(owner.pid), "--start", str(owner.start)]
        launcher = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert launcher.stdout is not None
        launcher.stdout.read()  # the reaper's launcher exits once the reaper waits on us
        launcher.stdout.close()
        launcher.wait()
        _started.add(pid)


def _wait_gone(owner: Owner) -> None:
    try:
        pidfd = os.pidfd_open(owner.pid)
    except (OSError, AttributeError):
        pidfd = -1
    if pidfd >= 0 and owner.alive():  # the pidfd is the owner's, not a later process's with its pid
        select.select([pidfd], [], [])
        os.close(pidfd)
        return
    while owner.alive():
        time.sleep(0.5)


def _main(argv: list[str]) -> int:
    owner = Owner(int(argv[argv.index("--owner") + 1]), int(argv[argv.index("--start") + 1]))
    if os.fork():
        return 0  # the launcher: its parent waits for it
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # closes the pipe to the launcher's parent: it goes on
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _wait_gone(owner)
    sweep(owner)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
