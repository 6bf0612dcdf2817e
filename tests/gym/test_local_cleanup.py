"""Nothing of a local desktop outlives it: its uid lease, what a dead owner left, a collect killed and resumed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from legato_gym.backends.local import reaper
from legato_gym.backends.local.sandbox import UidLease
from legato_gym.errors import ConfigError

sys.path.insert(0, str(Path(__file__).parent))
from leftovers import Storm

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="runs processes as other uids (root only)")
HAVE_TOOLS = all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "setpriv"))

#: a uid range no other test or desktop of this host uses
FIRST_UID = 5_310_000


def _as_uid(uid: int) -> subprocess.Popen[bytes]:
    """A process running as ``uid`` (as an X server of a desktop would), in a session of its own."""
    return subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "600"], start_new_session=True
    )


def _dead_owner() -> reaper.Owner:
    """An owner that is gone: a process that ran and was reaped."""
    proc = subprocess.Popen(["sleep", "30"])
    owner = reaper.Owner(proc.pid, reaper.start_ticks(proc.pid) or 0)
    proc.kill()
    proc.wait()
    return owner


@pytest.fixture
def strays() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_uid_leases_live_outside_tmpdir_and_name_their_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert tempfile.gettempdir() == str(tmp_path)
    lease = UidLease(FIRST_UID, 4)
    try:
        assert not lease.path.is_relative_to(tmp_path) and lease.path.parent == reaper.run_dir() / "uids"
        assert reaper.Owner.parse(lease.path.read_text()) == reaper.Owner.current()
        other = UidLease(FIRST_UID, 4)  # a second desktop of this process: another uid
        assert other.uid != lease.uid
        other.release()
        assert not other.path.exists()
    finally:
        lease.release()
    assert not lease.path.exists()


def test_a_uid_whose_lock_an_older_legato_holds_under_tmpdir_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    uid = FIRST_UID + 40
    (tmp_path / "legato-uids").mkdir(mode=0o700)
    with open(tmp_path / "legato-uids" / f"{uid}.lock", "w") as held:  # an older legato's desktop has it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lease = UidLease(uid, 2)
        try:
            assert lease.uid == uid + 1
            assert not (reaper.run_dir() / "uids" / f"{uid}.lock").exists()  # its own lease was let go
        finally:
            lease.release()


@root_only
def test_a_dead_owners_lease_is_taken_again_only_once_its_processes_are_gone(
    tmp_path: Path, strays: list[subprocess.Popen[bytes]]
) -> None:
    uid = FIRST_UID + 10
    live = reaper.Owner(os.getppid(), reaper.start_ticks(os.getppid()) or 0)
    (tmp_path / f"{uid}.lock").write_text(str(live))  # another live owner, its lock not held
    with pytest.raises(ConfigError, match="in use"):
        UidLease(uid, 1, tmp_path)
    orphan = _as_uid(uid)  # the X server of a desktop whose owner was SIGKILLed
    strays.append(orphan)
    deadline = time.monotonic() + 30
    while orphan.pid not in reaper.uid_pids(uid) and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / f"{uid}.lock").write_text(str(_dead_owner()))
    lease = UidLease(uid, 1, tmp_path)
    try:
        assert lease.uid == uid
        assert orphan.poll() == -signal.SIGKILL  # killed (and gone) before the lease was taken
        assert reaper.uid_pids(uid) == []
    finally:
        lease.release()


@root_only
def test_a_uid_that_runs_processes_without_a_lease_is_skipped(
    tmp_path: Path, strays: list[subprocess.Popen[bytes]]
) -> None:
    uid = FIRST_UID + 20
    foreign = _as_uid(uid)  # not legato's (an older legato's desktop, with its lease elsewhere)
    strays.append(foreign)
    deadline = time.monotonic() + 30
    while foreign.pid not in reaper.uid_pids(uid) and time.monotonic() < deadline:
        time.sleep(0.01)
    lease = UidLease(uid, 2, tmp_path)
    try:
        assert lease.uid == uid + 1 and foreign.poll() is None
        assert not (tmp_path / f"{uid}.lock").exists()  # the refused attempt left no file
    finally:
        lease.release()


@root_only
def test_the_sweep_takes_down_a_dead_owners_desktop_and_nothing_of_a_live_one(
    tmp_path: Path, strays: list[subprocess.Popen[bytes]]
) -> None:
    """What a SIGKILLed owner's record names is killed and removed; a live owner's record is left whole."""
    made: list[tuple[reaper.DesktopRecord, subprocess.Popen[bytes]]] = []
    for i, owner in enumerate((_dead_owner(), reaper.Owner.current())):
        uid = FIRST_UID + 30 + i
        lease = tmp_path / f"{uid}.lock"
        lease.write_text(str(owner))
        state = tmp_path / f"state{i}"
        state.mkdir()
        orphan = _as_uid(uid)
        strays.append(orphan)
        record = reaper.DesktopRecord.create(f"legato-test-{os.getpid()}-{i}", owner)
        record.state_dir, record.uid, record.uid_lease = str(state), uid, str(lease)
        record.save()
        made.append((record, orphan))
    try:
        assert reaper.sweep() == []
        (dead, orphan), (live, kept) = made
        assert orphan.wait(timeout=30) == -signal.SIGKILL
        assert not dead.path.exists() and not Path(dead.state_dir).exists() and not Path(dead.uid_lease).exists()
        assert kept.poll() is None and live.path.exists() and Path(live.state_dir).exists()
        assert Path(live.uid_lease).exists()
    finally:
        for record, _ in made:
            record.path.unlink(missing_ok=True)


def test_without_cgroups_the_sweep_kills_a_dead_owners_tracked_processes_and_only_them(
    strays: list[subprocess.Popen[bytes]],
) -> None:
    """Without cgroups a record names its desktop's top processes (the X server's process group, the sandbox's
    bwrap) by pid and start time: the sweep kills those, the X server's whole group, and never a process that
    took a recorded pid later."""
    group = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600 & wait"], start_new_session=True)
    single, bystander = subprocess.Popen(["sleep", "600"]), subprocess.Popen(["sleep", "600"])
    strays += [group, single, bystander]
    deadline = time.monotonic() + 30
    while len(members := _group_members(group.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(members) == 3, members
    owner = _dead_owner()
    record = reaper.DesktopRecord.create(f"legato-test-{os.getpid()}-tracked", owner)
    start = reaper.start_ticks
    processes = [[group.pid, start(group.pid), 1], [single.pid, start(single.pid), 0]]
    processes.append([bystander.pid, (start(bystander.pid) or 0) - 1, 0])  # a pid the record had, now another's
    data = {"owner": owner.pid, "start": owner.start, "processes": processes}
    record.path.write_text(json.dumps(data))
    try:
        assert reaper.sweep(owner) == []
        assert group.wait(timeout=30) == -signal.SIGKILL and single.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while _group_members(group.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _group_members(group.pid) == []  # the leader's children too
        assert bystander.poll() is None and not record.path.exists()
    finally:
        record.path.unlink(missing_ok=True)


def _group_members(pgid: int) -> list[int]:
    """Live pids of process group ``pgid``."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = Path(entry.path, "stat").read_bytes().rpartition(b")")[2].split()
                if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                    pids.append(int(entry.name))
    return pids


@pytest.mark.desktop
@pytest.mark.slow
@pytest.mark.timeout(1500)
@root_only
@pytest.mark.skipif(not HAVE_TOOLS, reason="needs the local backend's Debian packages (xvfb openbox bubblewrap ...)")
def test_a_collect_killed_by_sigkill_sigterm_and_sigint_leaves_nothing_and_resumes_complete() -> None:
    """A kill storm, short: each kill of ``legato rl collect`` on real desktops leaves no process, cgroup, record,
    lease, state folder or mount once its reaper is done; the resumed batch is complete, with no attempt twice.
    The whole storm, and main's numbers, are ``benchmarks/kill_storm.py``."""
    try:
        storm = Storm(group=2, desktops=2)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        for sig, after in ((signal.SIGKILL, 12.0), (signal.SIGTERM, 16.0), (signal.SIGINT, 14.0)):
            storm.start()
            code = storm.kill(sig, after)
            left = storm.settled_leftovers(time.monotonic() + 60)
            assert left.total == 0, (sig.name, code, left)
        code, err = storm.finish()
        assert code == 0, err
        assert storm.settled_leftovers(time.monotonic() + 60).total == 0
        records = storm.records()
        assert len(records) == 3 * 2
        assert len({(r["task_id"], r["group_id"], r["attempt"]) for r in records}) == len(records)
    finally:
        storm.close()


@pytest.mark.desktop
@pytest.mark.slow
@pytest.mark.timeout(900)
@root_only
@pytest.mark.skipif(not HAVE_TOOLS, reason="needs the local backend's Debian packages (xvfb openbox bubblewrap ...)")
def test_a_replaced_worker_a_crashed_desktop_and_a_closed_vector_env_leave_nothing() -> None:
    try:
        storm = Storm()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        code, out = storm.finish(argv=[sys.executable, str(Path(__file__).with_name("cleanup_scenario.py"))])
        assert code == 0, out
        seen = json.loads(out.splitlines()[-1])
        assert seen["replaced"] and seen["lost_worker_desktop_gone"], seen
        assert seen["lost_worker_cgroups_left"] == [], seen
        assert seen["xservers"] == 1 and seen["records_while_open"] == 2, seen
        assert seen["records_after_close"] == 0, seen
        assert storm.settled_leftovers(time.monotonic() + 60).total == 0
    finally:
        storm.close()
