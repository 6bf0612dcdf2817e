"""A local desktop owned by an unprivileged user, for real: legato's run folder for non-root, the records that
track process groups where there is no cgroup, the sweep at the next start, and the evidence that the agent
killed its server without root (the sandbox's pid 1 tells, :mod:`legato_gym.desktop_server.supervise`).

The test runs as root (as in CI) and runs :mod:`unprivileged_owner` as a user of its own, ``legato-unpriv``
(made if missing). When a folder the user must traverse to reach the interpreter or this checkout is closed
to it (``/root``, where pyenv keeps Python), the owner runs in a mount namespace of its own where that folder
is a tmpfs holding only what is needed, bound read-only from the host: nothing on the host changes mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from desktop_kit import wait_for

from legato_gym.backends.local import reaper

USER = "legato-unpriv"
ROOT = Path(__file__).resolve().parents[2]
OWNER = Path(__file__).with_name("unprivileged_owner.py")

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs a desktop as another user, made for it (root only)"),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "setpriv", "unshare")),
        reason="needs the local backend's Debian packages (xvfb openbox bubblewrap ...) and util-linux",
    ),
]


def _user() -> pwd.struct_passwd:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(USER)
    if shutil.which("useradd") is None:
        pytest.skip(f"no user {USER} and no useradd to make one")
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", USER],
        check=True,
    )
    return pwd.getpwnam(USER)


def _closed_to(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first folder on the way to ``path`` that ``user`` cannot traverse (``None``: it reaches it)."""
    for folder in [*reversed(path.parents), path]:
        info = folder.stat()
        if not stat.S_ISDIR(info.st_mode):
            break
        bit = (
            stat.S_IXUSR if info.st_uid == user.pw_uid else stat.S_IXGRP if info.st_gid == user.pw_gid else stat.S_IXOTH
        )
        if not info.st_mode & bit:
            return folder
    return None


@dataclass
class Unprivileged:
    """Runs commands as :data:`USER`, with a home, ``$TMPDIR`` and ``$XDG_RUNTIME_DIR`` of the test's own."""

    user: pwd.struct_passwd
    work: Path
    script: str  # the mount namespace's set-up, then ``exec setpriv ... "$@"``

    @property
    def tmp(self) -> Path:
        return self.work / "tmp"

    @property
    def runtime(self) -> Path:
        return self.work / "run"

    def argv(self, *command: str) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", self.script, "sh", *command]

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.work),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.tmp),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "PYTHONPATH": str(ROOT),
        }

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*command), env=self.env(), capture_output=True, text=True, timeout=120)

    def owner(self, *args: str) -> subprocess.Popen[str]:
        """:mod:`unprivileged_owner` as the user (the namespace's set-up execs it: the pid is the owner's)."""
        return subprocess.Popen(
            self.argv(sys.executable, str(OWNER), *args),
            env=self.env(),
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def processes(self) -> list[int]:
        return reaper.uid_pids(self.user.pw_uid)

    def records(self) -> list[Path]:
        return sorted((self.runtime / "legato" / "desktops").glob("*.json"))

    def state(self) -> list[Path]:
        return [p for p in (self.tmp / "legato-local").iterdir() if not p.name.startswith("gimp-profile-")]


@pytest.fixture(scope="module")
def unprivileged() -> Iterator[Unprivileged]:
    user = _user()
    work = Path(tempfile.mkdtemp(prefix="lku", dir="/tmp"))  # short: unix socket paths live under it
    stage = Path(tempfile.mkdtemp(prefix="lku-stage", dir="/tmp"))  # root's only
    try:
        work.chmod(0o755)
        for folder in (work / "tmp", work / "tmp" / "legato-local", work / "run"):
            folder.mkdir(mode=0o700)
            os.chown(folder, user.pw_uid, user.pw_gid)
        (work / "tmp").chmod(0o711)  # the sandbox's X server reaches its state folder
        for cached in (Path(tempfile.gettempdir()) / "legato-local").glob("gimp-profile-*.tar"):
            copy = work / "tmp" / "legato-local" / cached.name  # else the first desktop builds GIMP's profile
            shutil.copy(cached, copy)
            os.chown(copy, user.pw_uid, user.pw_gid)
        # what the user must reach: the interpreter, its venv, this checkout
        needed = {Path(sys.base_prefix), Path(sys.prefix), Path(os.path.realpath(sys.executable)).parent, ROOT}
        closed: dict[Path, list[Path]] = {}
        for path in sorted(needed):
            if (folder := _closed_to(path, user)) is not None:
                closed.setdefault(folder, []).append(path)
        lines = ["set -e"]
        for n, (folder, paths) in enumerate(closed.items()):
            # a tmpfs over the closed folder holds only the paths needed, bound from the host as they are
            for i, path in enumerate(paths):
                lines.append(f"mkdir -p {stage}/{n}-{i} && mount --rbind {path} {stage}/{n}-{i}")
            lines.append(f"mount -t tmpfs -o mode=0755 legato-test {folder}")
            for i, path in enumerate(paths):
                lines.append(f"mkdir -p {path} && mount --move {stage}/{n}-{i} {path}")
        lines.append(f'exec setpriv --reuid={user.pw_uid} --regid={user.pw_gid} --clear-groups -- "$@"')
        runner = Unprivileged(user, work, "\n".join(lines))
        probe = runner.run(sys.executable, "-c", "import legato_gym.backends.local")
        if probe.returncode != 0:
            pytest.skip(f"{USER} cannot import legato from {ROOT} with {sys.executable}: {probe.stderr[-500:]}")
        bwrap = runner.run("bwrap", "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "true")
        if bwrap.returncode != 0:
            pytest.skip(f"unprivileged user namespaces are not available here (bwrap as {USER}): {bwrap.stderr}")
        yield runner
    finally:
        for pid in reaper.uid_pids(user.pw_uid):  # the test's own user: whatever a failed test left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)


def _report(owner: subprocess.Popen[str], seconds: float = 300) -> dict[str, object]:
    """The owner's JSON line, once its desktop is up."""
    assert owner.stdout is not None
    ready, _, _ = select.select([owner.stdout], [], [], seconds)
    line = owner.stdout.readline() if ready else ""
    if not line:
        owner.kill()
        _, err = owner.communicate()
        raise AssertionError(f"the owner did not start its desktop: {err[-3000:]}")
    return dict(json.loads(line))


def _reaper_of(owner: int) -> int:
    """The pid of the reaper that waits for ``owner`` (its command line names it)."""
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError):
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            if entry.name.isdigit() and b"--owner" in argv and argv[argv.index(b"--owner") + 1] == str(owner).encode():
                return int(entry.name)
    raise AssertionError(f"no reaper for {owner}")


def _killed(owner: subprocess.Popen[str]) -> None:
    """SIGKILL the owner by pid and reap it (what it started may still hold its pipes: they are closed, not read)."""
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    for pipe in (owner.stdout, owner.stderr):
        if pipe is not None:
            pipe.close()


def test_an_unprivileged_desktop_tells_the_agents_server_kill_and_nothing_outlives_its_owner(
    unprivileged: Unprivileged,
) -> None:
    user = unprivileged.user
    # an owner whose desktop meets the agent killing its server, then the host killing its sandbox
    a = unprivileged.owner("faults")
    seen = _report(a)
    assert seen["euid"] == user.pw_uid and seen["run_dir"] == str(unprivileged.runtime / "legato"), seen
    assert str(seen["pid1_probe"]).startswith("refused") and "State:\tS" in str(seen["pid1_probe"]), seen
    assert seen["after_pid1_probe"] == "returned", seen
    assert str(seen["server_killed_inside"]).startswith("AgentFault server_killed"), seen
    assert str(seen["sandbox_killed_outside"]).startswith("DesktopCrashed"), seen
    assert seen["cgroups"] == [] and seen["tracked"], seen  # no cgroup without root: its processes are tracked
    # the owner and its reaper SIGKILLed (a whole session killed): its record and state folder are left, and
    # whatever of its processes outlives it (its X server's and sandbox's bwrap die with their parent)
    os.kill(_reaper_of(a.pid), signal.SIGKILL)
    _killed(a)
    left = {pid: reaper.start_ticks(pid) for pid in unprivileged.processes()}
    assert unprivileged.records() and unprivileged.state(), "the kill left nothing for the sweep"
    # the next start sweeps it all
    b = unprivileged.owner()
    try:
        seen_b = _report(b)
        survivors = [pid for pid, start in left.items() if start is not None and reaper.start_ticks(pid) == start]
        assert survivors == [], survivors
        assert unprivileged.records() == [Path(str(seen_b["record"]))]
        assert unprivileged.state() == [Path(str(seen_b["state_dir"]))]
        # and its own desktop, its owner SIGKILLed, is taken down by its reaper
    finally:
        _killed(b)
    assert wait_for(lambda: not unprivileged.processes(), 60), unprivileged.processes()
    assert unprivileged.records() == [] and unprivileged.state() == []
