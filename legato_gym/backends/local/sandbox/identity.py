"""Who a sandbox runs as, and in which cgroups: the host uid it leases, the drop to it, the cgroup join."""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import time
from pathlib import Path

from legato_gym.backends.local import reaper
from legato_gym.errors import ConfigError

__all__ = ["UidLease", "drop_to", "joined_cgroup"]


class UidLease:
    """An unprivileged host uid that no other live desktop of this host uses.

    The lease is a lock file in legato's run folder (:func:`..reaper.run_dir`, ``/run/legato/uids`` for root),
    which every legato process shares whatever its ``$TMPDIR``; it is held open and locked, and names its
    owner (pid and start time). A lease whose owner died is taken again only once no process runs as its
    uid any more (they are killed first): a desktop's orphans never share a uid with a new desktop. A uid
    that processes use without a lease (an older legato's desktop, a host user) is skipped.

    Args:
        first: the first uid of the range.
        count: how many uids the range has.
        lock_dir: where the lock files live (default: ``uids`` in the run folder).
        owner: the process the lease is for (default: this one).
    """

    def __init__(self, first: int, count: int, lock_dir: Path | None = None, owner: reaper.Owner | None = None) -> None:
        try:
            directory = lock_dir or reaper.run_dir() / "uids"
            directory.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot use legato's run folder for the sandbox uid leases: {exc}") from exc
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise ConfigError(
                f"{directory} (the sandbox uid locks) is not a folder of this user's that only it can write; "
                "remove it (it holds only lock files) and start again"
            )
        owner = owner or reaper.Owner.current()
        stuck: list[int] = []
        for uid in range(first, first + count):

            def ready(previous: reaper.Owner | None, uid: int = uid) -> bool:
                if previous is None:  # processes with no lease: not legato's (or an older legato's) to kill
                    busy = bool(reaper.uid_pids(uid))
                else:  # its owner died: what its desktop left runs as the uid
                    busy = bool(reaper.kill_uid(uid, time.monotonic() + reaper.KILL_WAIT_S))
                if busy:
                    stuck.append(uid)
                return not busy

            lease = reaper.Lease.try_take(directory / f"{uid}.lock", owner, ready)
            if lease is None:
                continue
            legacy = _legacy_locks(uid) if lock_dir is None else []
            if legacy is None:
                lease.release()
                continue
            self.uid, self.path, self._lease, self._legacy = uid, lease.path, lease, legacy
            return
        where = f" ({len(stuck)} of them run processes without a live lease: {stuck[:5]})" if stuck else ""
        raise ConfigError(
            f"all {count} sandbox uids from {first} are in use by running desktops{where}; raise the local option "
            "uid_count or close desktops"
        )

    def release(self) -> None:
        """Let another desktop take the uid (idempotent); its processes must be gone."""
        self._lease.release()
        for fd in self._legacy:
            os.close(fd)
        self._legacy = []


def _legacy_locks(uid: int) -> list[int] | None:
    """The locks of ``uid`` where older legato kept them (``legato-uids`` in ``$TMPDIR``, or in ``/tmp``, its
    usual value), held so that desktops of an older legato on this host do not take the uid too; ``None``
    when one of them holds one."""
    held: list[int] = []
    for directory in dict.fromkeys((Path(tempfile.gettempdir()) / "legato-uids", Path("/tmp/legato-uids"))):
        try:
            info = os.lstat(directory)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            fd = os.open(directory / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            for other in held:
                os.close(other)
            return None
        held.append(fd)
    return held


def joined_cgroup(procs: list[Path], argv: list[str]) -> list[str]:
    """``argv`` run by a shell that first joins the cgroups (writes its pid to each ``cgroup.procs``)."""
    if not procs:
        return argv
    script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 121; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "legato-cgroup", *map(str, procs), "--", *argv]


def drop_to(uid: int | None, argv: list[str]) -> list[str]:
    """``argv`` run as ``uid`` with no capabilities and ``no_new_privs`` (unchanged when ``uid`` is None)."""
    if uid is None:
        return argv
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        *argv,
    ]
