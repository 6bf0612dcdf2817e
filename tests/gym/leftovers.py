"""A collect run on real local desktops killed by pid and resumed, and what its desktops left on the host.

Used by ``test_local_cleanup.py`` (a few kills) and ``benchmarks/kill_storm.py`` (the whole storm). Everything
counted is this run's own, never another process's on the same host: the run is started in a cgroup of its
own (:class:`Storm`), so its desktops' cgroups, made under the cgroup of the process that makes them, are
made under it, and every process of its desktops is in it; its desktops' state folders are under a
``$TMPDIR`` of its own. Works on any revision of legato (the counts do not rely on legato's own records).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from legato_gym.backends.local.limits import Cgroup, Limits
from legato_gym.backends.local.sandbox import joined_cgroup

RUN_DIR = Path("/run/legato")


def _start_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    except OSError:
        return None
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def _tree(folder: Path) -> Iterator[Path]:
    for entry in folder.iterdir():
        if entry.is_dir():
            yield entry
            yield from _tree(entry)


@dataclass(frozen=True)
class Leftovers:
    """What desktops of the run left: processes, cgroups, records, leases, state folders, mounts."""

    processes: list[str]
    cgroups: list[str]
    records: list[str]
    leases: list[str]
    state: list[str]
    mounts: list[str]

    @property
    def total(self) -> int:
        return sum(len(v) for v in (self.processes, self.cgroups, self.records, self.leases, self.state, self.mounts))

    def counts(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in ("processes", "cgroups", "records", "leases", "state", "mounts")}


class Storm:
    """``legato rl collect --backend local --policy-url embedded`` into one run folder, killed and resumed.

    Args:
        group: attempts per task.
        desktops: desktops at once.
        legato: the project folder whose code runs (this one by default; another revision's worktree to
            compare).
    """

    def __init__(self, group: int = 2, desktops: int = 2, legato: Path | None = None) -> None:
        self.legato = legato or Path(__file__).resolve().parents[2]
        self.root = Path(tempfile.mkdtemp(prefix="lks", dir="/tmp"))  # short: unix socket paths live under it
        self.tmp = self.root / "tmp"
        (self.tmp / "legato-local").mkdir(parents=True)
        for folder in (self.root, self.tmp):
            folder.chmod(0o711)  # the X server, run as the desktop's uid, reaches its state folder
        for cached in (Path(tempfile.gettempdir()) / "legato-local").glob("gimp-profile-*.tar"):
            shutil.copy(cached, self.tmp / "legato-local")  # else the first desktop builds GIMP's profile
        self.out = self.root / "run"
        self.cgroup = Cgroup(f"legatotest-{self.root.name}", Limits.from_mb(64 * 1024, 100_000, 1))
        if not self.cgroup.create():
            shutil.rmtree(self.root)
            raise RuntimeError("no cgroup: the kill storm counts the run's processes through its cgroup")
        self.group, self.desktops = group, desktops
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return [
            sys.executable, "-c", "from legato_rl.cli.app import main; main()",
            "rl", "collect", "--backend", "local", "--policy-url", "embedded", "--out", str(self.out),
            "--group", str(self.group), "--desktops", str(self.desktops), "--quiet",
        ]  # fmt: skip

    def start(self, argv: list[str] | None = None) -> int:
        """Start (or resume) the run (or ``argv``) in the storm's cgroup; its pid."""
        env = dict(os.environ, TMPDIR=str(self.tmp), PYTHONPATH=str(self.legato))
        env.pop("LEGATO_OSWORLD", None)  # the local suite's 3 tasks, not OSWorld's download-free ones too
        self.proc = subprocess.Popen(
            joined_cgroup(self.cgroup.procs, argv or self.argv()),  # the shell execs it: the pid is its own
            env=env,
            cwd=self.root,  # not a checkout: ``python -c`` imports from its folder before PYTHONPATH
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if argv else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        return self.proc.pid

    def kill(self, sig: signal.Signals, after: float, exit_timeout: float = 120.0) -> int | None:
        """Send ``sig`` to the run ``after`` seconds in (by pid); its exit status (None: finished first)."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout=after)
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
            os.kill(self.proc.pid, sig)
        try:
            code = self.proc.wait(timeout=exit_timeout)
        except subprocess.TimeoutExpired:  # a run that does not end on SIGTERM / SIGINT: ended here
            os.kill(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return None if finished else code

    def finish(self, timeout: float = 600.0, argv: list[str] | None = None) -> tuple[int, str]:
        """Resume the run (or run ``argv``) to its end; ``(exit status, its output or the end of its errors)``."""
        self.start(argv)
        assert self.proc is not None and self.proc.stderr is not None
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
        if self.proc.returncode == 0 and out:
            return 0, out.decode(errors="replace")
        return self.proc.returncode, err.decode(errors="replace")[-3000:]

    def leftovers(self) -> Leftovers:
        """What the run's desktops left now (with no collect of the run alive)."""
        processes, cgroups = [], []
        for folder in self.cgroup.dirs:
            for child in [folder, *_tree(folder)]:
                if child != folder:
                    cgroups.append(str(child))
                for pid in (child / "cgroup.procs").read_text().split():
                    try:
                        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
                    except OSError:
                        continue
                    processes.append(f"{pid} {cmd}")
        root = str(self.root)
        records, uids = [], set()
        for path in (RUN_DIR / "desktops").glob("*.json") if (RUN_DIR / "desktops").is_dir() else []:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if str(data.get("state_dir", "")).startswith(root):
                records.append(path.name)
                uids.add(data.get("uid"))
        leases = []
        for folder in (RUN_DIR / "uids", self.tmp / "legato-uids"):
            for path in folder.glob("*.lock") if folder.is_dir() else []:
                text = path.read_text().split()  # "<owner pid> <start>"; a revision without owners: every file
                dead = len(text) == 2 and _start_ticks(int(text[0])) != int(text[1])
                if folder != RUN_DIR / "uids" or dead:
                    leases.append(path.name)
        state = [p.name for p in (self.tmp / "legato-local").iterdir() if not p.name.startswith("gimp-profile-")]
        # temp folders (a file such as ``.ses``, one per run that a grader's library writes, is no desktop's)
        state += [p.name for p in self.tmp.iterdir() if p.is_dir() and p.name not in ("legato-local", "legato-uids")]
        mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if root in line]
        return Leftovers(processes, cgroups, records, leases, state, mounts)

    def settled_leftovers(self, deadline: float) -> Leftovers:
        """:meth:`leftovers`, once none is left or at ``deadline`` (a killed run's reaper works for a moment)."""
        while (found := self.leftovers()).total and time.monotonic() < deadline:
            time.sleep(0.2)
        return found

    def records(self) -> list[dict[str, object]]:
        path = self.out / "rollouts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def close(self) -> None:
        """Kill what is left in the storm's cgroup, remove it and the storm's folder."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for folder in self.cgroup.dirs:
            for child in reversed([folder, *_tree(folder)]):
                deadline = time.monotonic() + 10
                while (child / "cgroup.procs").exists():
                    for pid in (child / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
                    try:
                        child.rmdir()
                    except OSError:
                        if time.monotonic() >= deadline:
                            break
                        time.sleep(0.05)
        self.cgroup.dirs = []
        shutil.rmtree(self.root, ignore_errors=True)
