"""Per-desktop resource bounds and system-call filter of the local backend.

Each desktop gets:

* a cgroup of its own (v2, or the ``memory`` and ``pids`` hierarchies of v1) whose memory bound counts the
  X server, every process of the sandbox and the pages of its tmpfs (``/home/user``, ``/tmp``,
  ``/dev/shm``), and whose process bound counts every task (threads included). legato creates it under
  its own cgroup when the host lets it (root, or a delegated v2 subtree); otherwise it logs that the bound
  falls back to rlimits;
* rlimits set inside the sandbox, always: ``RLIMIT_NPROC`` (counted per uid, and each desktop has a uid of
  its own when legato is root; per user namespace without root) and ``RLIMIT_DATA`` (per process);
* a size on each tmpfs, so a write stops with ``ENOSPC`` at the bound whether or not cgroups exist;
* a seccomp filter (:func:`seccomp_filter`) that refuses new user namespaces (``unshare -U``, ``clone``
  with ``CLONE_NEWUSER``; ``clone3`` answers ``ENOSYS`` so that libc falls back to ``clone``), foreign
  system-call ABIs, and a few kernel interfaces that desktops do not use and that widen the kernel's
  attack surface (``io_uring``, ``bpf``, ``userfaultfd``, ``perf_event_open``, keyrings), and every way
  into another process's memory or file descriptors (``ptrace``, ``process_vm_readv``/``writev``,
  ``pidfd_getfd``): the agent's actions run as the in-desktop server's uid, and must not take its
  sockets or answer in its place (docs/reliability.md). The server also makes itself non-dumpable, which
  closes ``/proc/PID/mem`` and ``/proc/PID/fd`` of it to the agent as well.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import platform
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from legato_gym.backends.local.reaper import KILL_WAIT_S, kill_cgroup

__all__ = ["BoundHits", "Cgroup", "Limits", "seccomp_filter"]

logger = logging.getLogger(__name__)

_MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """The bounds of one desktop.

    Attributes:
        memory_bytes: memory of the desktop (X server, processes, tmpfs pages).
        max_processes: tasks (processes and threads) of the desktop.
        tmpfs_bytes: size of each of the sandbox's tmpfs (home, ``/tmp``, ``/dev/shm``).
    """

    memory_bytes: int
    max_processes: int
    tmpfs_bytes: int

    @classmethod
    def from_mb(cls, memory_mb: int, max_processes: int, tmpfs_mb: int) -> Limits:
        return cls(memory_mb * _MIB, max_processes, tmpfs_mb * _MIB)


@dataclass(frozen=True)
class BoundHits:
    """How often a desktop's cgroup has hit its bounds so far (the kernel's counters, which only grow).

    Attributes:
        oom_kills: processes the kernel's OOM killer ended at the memory bound (v2 ``memory.events``
            ``oom_kill``; v1 ``memory.oom_control`` ``oom_kill``).
        pid_refusals: forks refused at the process bound (``pids.events`` ``max``).
    """

    oom_kills: int = 0
    pid_refusals: int = 0

    def since(self, earlier: BoundHits) -> list[str]:
        """The bounds hit since ``earlier``, in words (empty: none)."""
        hits = []
        if self.pid_refusals > earlier.pid_refusals:
            hits.append(f"pids: {self.pid_refusals - earlier.pid_refusals} forks refused at the process bound")
        if self.oom_kills > earlier.oom_kills:
            hits.append(f"memory: {self.oom_kills - earlier.oom_kills} processes killed at the memory bound")
        return hits


def _counter(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


# ----------------------------------------------------------------------------------------------- cgroups


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, fs type, super options)`` of every cgroup mount of this process."""
    result = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            result.append((fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    return result


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller (``"0"`` for v2)."""
    paths = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hier, controllers, path = line.split(":", 2)
            if hier == "0":
                paths["0"] = path
            for name in controllers.split(","):
                if name:
                    paths[name] = path
    return paths


def _locate(mount: str, path: str) -> Path | None:
    """The directory of cgroup ``path`` under ``mount`` (the mount may be rooted at that path)."""
    for candidate in (Path(mount) / path.lstrip("/"), Path(mount)):
        if candidate.is_dir():
            return candidate
    return None


class Cgroup:
    """A desktop's cgroup: created by :meth:`create`, joined by writing a pid to :attr:`procs`.

    Args:
        name: unique per desktop; starts with ``legato-<pid>-`` so that leftovers of dead legato
            processes can be swept (their processes killed, the group removed).
        limits: the bounds to set.
    """

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.limits = limits
        self.dirs: list[Path] = []
        self.kind = ""

    @property
    def procs(self) -> list[Path]:
        """The ``cgroup.procs`` files a process writes its pid to, to join (empty: no cgroup)."""
        return [d / "cgroup.procs" for d in self.dirs]

    def create(self) -> bool:
        """Create the cgroup and set its bounds; False (and nothing left behind) when the host refuses."""
        mounts = _mounts()
        own = _own_paths()
        v2 = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
        if v2 is not None and "0" in own and self._create_v2(v2, own["0"]):
            return True
        if self._create_v1(mounts, own):
            return True
        logger.info(
            "no cgroup for desktop %s (not root, or no writable cgroup with the memory and pids controllers); "
            "bounds fall back to rlimits and tmpfs sizes",
            self.name,
        )
        return False

    def _create_v2(self, mount: str, path: str) -> bool:
        parent = _locate(mount, path)
        if parent is None:
            return False
        try:
            controllers = set((parent / "cgroup.controllers").read_text().split())
            if not {"memory", "pids"} <= controllers:
                return False
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
            if not {"memory", "pids"} <= enabled:
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
            _sweep(parent)
            child = parent / self.name
            child.mkdir()
            self.dirs = [child]
            (child / "memory.max").write_text(str(self.limits.memory_bytes))
            with contextlib.suppress(OSError):
                (child / "memory.swap.max").write_text("0")
            (child / "pids.max").write_text(str(self.limits.max_processes))
        except OSError as exc:
            logger.debug("cgroup v2 at %s refused: %s", parent, exc)
            self.remove()
            return False
        self.kind = "v2"
        return True

    def _create_v1(self, mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> bool:
        settings = {
            "memory": [("memory.limit_in_bytes", self.limits.memory_bytes)],
            "pids": [("pids.max", self.limits.max_processes)],
        }
        try:
            for controller, values in settings.items():
                mount = next((m for m, kind, opts in mounts if kind == "cgroup" and controller in opts), None)
                parent = _locate(mount, own.get(controller, "/")) if mount else None
                if parent is None:
                    raise OSError(errno.ENOENT, f"no cgroup v1 {controller} hierarchy")
                _sweep(parent)
                child = parent / self.name
                child.mkdir()
                self.dirs.append(child)
                for key, value in values:
                    (child / key).write_text(str(value))
                with contextlib.suppress(OSError):  # swap accounting is off on many kernels
                    (child / "memory.memsw.limit_in_bytes").write_text(str(self.limits.memory_bytes))
        except OSError as exc:
            logger.debug("cgroup v1 refused: %s", exc)
            self.remove()
            return False
        self.kind = "v1"
        return True

    def members(self) -> list[int]:
        """Pids in the cgroup."""
        pids: set[int] = set()
        for procs in self.procs:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
        return sorted(pids)

    def kill(self, deadline: float) -> list[int]:
        """SIGKILL every process in the cgroup, again until none is left (:func:`.reaper.kill_cgroup`).

        Returns the pids still there at the deadline.
        """
        left: list[int] = []
        for child in self.dirs:
            left += kill_cgroup(child, deadline)
        return left

    def hits(self) -> BoundHits:
        """The cgroup's bound counters now (zeros without a cgroup)."""
        oom = pids = 0
        for child in self.dirs:
            oom += _counter(child / "memory.events", "oom_kill") + _counter(child / "memory.oom_control", "oom_kill")
            pids += _counter(child / "pids.events", "max")
        return BoundHits(oom_kills=oom, pid_refusals=pids)

    def remove(self, deadline: float | None = None) -> None:
        """Remove the cgroup once it is empty (waits for its last processes to be reaped until ``deadline``)."""
        for child in reversed(self.dirs):
            while True:
                try:
                    child.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if deadline is None or time.monotonic() >= deadline:
                        logger.warning("could not remove cgroup %s: %s", child, exc)
                        break
                    time.sleep(0.005)
        self.dirs = []


def _sweep(parent: Path) -> None:
    """Take down cgroups left by legato processes that died (``legato-<pid>-*`` whose pid is gone).

    Their processes are killed first (an X server outlives a SIGKILLed owner); a group whose processes do not
    go within :data:`.reaper.KILL_WAIT_S` is left for a later sweep.
    """
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            parts = entry.name.split("-")
            ours = len(parts) >= 3 and parts[0] == "legato" and parts[1].isdigit() and entry.is_dir()
            if ours and not Path(f"/proc/{parts[1]}").exists():
                if left := kill_cgroup(entry, time.monotonic() + KILL_WAIT_S):
                    logger.warning("pids %s of the stale cgroup %s survived SIGKILL", left, entry)
                    continue
                deadline = time.monotonic() + KILL_WAIT_S
                while True:  # the last killed processes leave the group once reaped
                    try:
                        entry.rmdir()
                        break
                    except OSError:
                        if time.monotonic() >= deadline:
                            break
                        time.sleep(0.005)


# ----------------------------------------------------------------------------------------------- seccomp

_CLONE_NEWUSER = 0x10000000
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_X32_BIT = 0x40000000

#: ``(AUDIT_ARCH, {name: number})`` per machine.
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "clone": 56,
            "unshare": 272,
            "clone3": 435,
            "setns": 308,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "userfaultfd": 323,
            "bpf": 321,
            "perf_event_open": 298,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "clone": 220,
            "unshare": 97,
            "clone3": 435,
            "setns": 268,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "userfaultfd": 282,
            "bpf": 280,
            "perf_event_open": 241,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
        },
    ),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_filter(machine: str | None = None) -> bytes:
    """The sandbox's seccomp program (classic BPF, as ``bwrap --seccomp`` reads it).

    Raises:
        ValueError: no system-call table for ``machine`` (``platform.machine()`` by default).
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise ValueError(f"no seccomp table for machine {machine!r}; known: {', '.join(_ARCHES)}")
    arch, numbers = _ARCHES[machine]
    enosys = _RET_ERRNO | errno.ENOSYS
    eperm = _RET_ERRNO | errno.EPERM
    prog = [
        _insn(_LD_W_ABS, 4),  # seccomp_data.arch
        _insn(_JEQ_K, arch, jt=1),
        _insn(_RET_K, enosys),  # a foreign ABI (i386 on x86_64) would bypass the numbers below
        _insn(_LD_W_ABS, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        prog += [_insn(_JGE_K, _X32_BIT, jf=1), _insn(_RET_K, enosys)]
    for name in ("clone", "unshare"):  # flags are the first argument of both
        prog += [
            _insn(_JEQ_K, numbers[name], jf=4),
            _insn(_LD_W_ABS, 16),  # low 32 bits of args[0]
            _insn(_JSET_K, _CLONE_NEWUSER, jf=1),
            _insn(_RET_K, eperm),
            _insn(_RET_K, _RET_ALLOW),
        ]
    prog += [_insn(_JEQ_K, numbers["clone3"], jf=1), _insn(_RET_K, enosys)]  # its flags are behind a pointer
    for name in sorted(set(numbers) - {"clone", "unshare", "clone3"}):
        prog += [_insn(_JEQ_K, numbers[name], jf=1), _insn(_RET_K, eperm)]
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)


def write_to_pipe(data: bytes) -> int:
    """A pipe's read end holding ``data`` (closed write end), for an fd-reading option such as ``--seccomp``."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
    finally:
        os.close(write_fd)
    return read_fd
