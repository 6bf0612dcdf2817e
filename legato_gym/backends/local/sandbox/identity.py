"""Who a sandbox runs as, and in which cgroups: the host uid it leases, the drop to it, the cgroup join."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from pathlib import Path

from legato_gym.errors import ConfigError

__all__ = ["UidLease", "drop_to", "joined_cgroup"]


class UidLease:
    """An unprivileged host uid that no other live desktop of this host uses (a lock file held open).

    Args:
        first: the first uid of the range.
        count: how many uids the range has.
        lock_dir: where the lock files live (root-only; the system temp dir by default).
    """

    def __init__(self, first: int, count: int, lock_dir: Path | None = None) -> None:
        directory = lock_dir or Path(tempfile.gettempdir()) / "legato-uids"
        directory.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise ConfigError(
                f"{directory} (the sandbox uid locks) is not a folder of this user's that only it can write; "
                "remove it (it holds only lock files) and start again"
            )
        for uid in range(first, first + count):
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(directory / f"{uid}.lock", flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            self.uid, self._fd = uid, fd
            return
        raise ConfigError(
            f"all {count} sandbox uids from {first} are in use by running desktops; raise the local option "
            "uid_count or close desktops"
        )

    def release(self) -> None:
        """Let another desktop take the uid (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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
