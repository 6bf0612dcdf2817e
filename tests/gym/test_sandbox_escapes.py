"""Escapes from a local desktop's sandbox, each attempted through the agent's own channel: an action
(``desktop.act``: pyautogui code, which is arbitrary Python), keys and clicks on the screen, or a task's
setup or grading command (the in-desktop server's ``/execute`` and ``/run_bash_script``). None succeeds.

Every probe has a positive control run the same way (an allowed write, a reachable in-sandbox server,
...), so a probe that fails for an unrelated reason (the command not running at all) fails the test.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from desktop_kit import wait_for

from legato_gym import DesktopConfig, Episode, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions
from legato_gym.backends.local.sandbox import xfwm
from legato_gym.bounds import ReadCaps
from legato_gym.errors import AgentFault, DesktopCrashed, DesktopError

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "xterm")),
        reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool xterm)",
    ),
]

#: Small bounds, so that the attempts to exceed them stay cheap. No desktop started ahead: it has a cgroup of its
#: own, but runs as the desktop's uid, whose RLIMIT_NPROC would race the fork bomb for the last pids while it builds.
OPTIONS = LocalOptions(memory_mb=384, max_processes=96, tmpfs_mb=64, prestart=False)
CONFIG = DesktopConfig(screen=(640, 480), options=OPTIONS)
#: The default (lookalike) session's window manager: xfwm4, or openbox where xfwm4 is not installed.
WM = "xfwm4" if xfwm.installed() else "openbox"
TASK = Task("t-escape", "Try to get out.", {"config": [], "evaluator": {"func": "infeasible"}})
PROBE = "/home/user/.escape-probe"


@pytest.fixture(scope="module")
def desktops() -> Iterator[tuple[LocalDesktop, LocalDesktop]]:
    a = LocalDesktop(CONFIG)
    try:
        b = LocalDesktop(CONFIG)
    except BaseException:
        a.close()
        raise
    try:
        a.reset(TASK)
        b.reset(TASK)
        yield a, b
    finally:
        a.close()
        b.close()


def agent(desktop: LocalDesktop, script: str, timeout: float = 60, fault: str | None = None) -> tuple[int, str]:
    """Run a shell script as the agent would: from an action (pyautogui code is Python).

    With ``fault``, the action must end as the agent's failure of that cause (it hit the desktop's bounds)."""
    code = (
        "import subprocess\n"
        f"r = subprocess.run({script!r}, shell=True, capture_output=True, text=True, timeout={timeout})\n"
        f"open({PROBE!r}, 'w').write('%d\\n' % r.returncode + r.stdout + r.stderr)\n"
    )
    desktop.client.execute(["rm", "-f", PROBE])
    if fault is None:
        desktop.act(code)
    else:
        with pytest.raises(AgentFault) as caught:
            desktop.act(code)
        assert caught.value.cause == fault, caught.value
    data = desktop.client.file(PROBE)
    assert data is not None, "the action did not run"
    code_line, _, out = data.decode(errors="replace").partition("\n")
    return int(code_line), out


def setup_command(desktop: LocalDesktop, script: str) -> tuple[int, str]:
    """Run a shell script as a task's setup or grading command does (``/run_bash_script``)."""
    data = desktop.client.post_json("/run_bash_script", {"script": script, "timeout": 60}).json()
    return int(data["returncode"]), str(data["output"])


def host_processes_on(display: str) -> list[tuple[int, int, str]]:
    """``(pid, pid namespace inode, command)`` of every host process whose environment has ``DISPLAY``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
            if f"DISPLAY={display}".encode() not in environ:
                continue
            ns = os.stat(f"/proc/{entry.name}/ns/pid").st_ino
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append((int(entry.name), ns, cmd))
    return found


def outside_sandbox(desktop: LocalDesktop) -> list[str]:
    """Commands running on this desktop's display outside its sandbox (the X server has no DISPLAY)."""
    sandbox = desktop._processes.sandbox
    assert sandbox is not None and sandbox.pidns is not None
    own = os.stat("/proc/self/ns/pid").st_ino
    return [
        cmd
        for pid, ns, cmd in host_processes_on(desktop.display.name)
        if ns != sandbox.pidns and not (ns == own and pid == os.getpid())
    ]


# ------------------------------------------------------------------------ the window manager (item 2)


def test_window_manager_runs_inside_the_sandbox(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    code, out = agent(a, "ps -eo comm")
    assert code == 0 and WM in out.split(), out  # control: it runs, and the agent sees it inside
    assert outside_sandbox(a) == []


def test_desktop_menu_and_key_bindings_start_nothing_outside(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    a.reset(TASK)
    before = a.display.windows()
    w, h = a.screen_size
    # openbox's stock menu: right-click on the desktop, the first item is a terminal
    a.act(f"pyautogui.rightClick({w // 2}, {h // 2}); pyautogui.click({w // 2 + 20}, {h // 2 + 10})")
    a.act("pyautogui.press('enter')")
    for keys in (("win", "e"), ("ctrl", "alt", "t"), ("alt", "f2"), ("ctrl", "alt", "delete"), ("win", "r")):
        a.act(f"pyautogui.hotkey(*{keys!r})")
    marker = f"/tmp/menu-escape-{uuid.uuid4().hex}"
    a.act(f"pyautogui.typewrite('id > {marker}\\n')")
    wait_for(lambda: len(a.display.windows()) > len(before), 1)
    assert outside_sandbox(a) == []
    assert not Path(marker).exists()
    assert a.display.alive()


def test_exiting_or_killing_the_window_manager_does_not_end_the_desktop(
    desktops: tuple[LocalDesktop, LocalDesktop],
) -> None:
    a, _ = desktops
    a.reset(TASK)
    # asked to end (openbox's --exit; xfwm4 has no such option: SIGTERM), then killed
    quit_wm = "pkill -TERM -x xfwm4" if WM == "xfwm4" else "openbox --exit"
    _, out = agent(a, f"{quit_wm}; sleep 0.3; pkill -KILL -x {WM}; echo tried")
    assert "tried" in out
    assert a.display.alive()

    def managed() -> bool:
        return subprocess.run(["wmctrl", "-m"], env=a.display.env(), capture_output=True).returncode == 0

    assert wait_for(managed)  # a window manager is back, inside the sandbox again
    assert outside_sandbox(a) == []
    a.client.post_json("/setup/launch", {"command": ["xterm", "-T", "after-exit"]})
    assert a.display.wait_windows(1, time.monotonic() + 15)


def test_terminal_typed_commands_stay_inside(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    a.reset(TASK)
    a.client.post_json("/setup/launch", {"command": ["xterm", "-T", "agent-terminal"]})
    assert a.display.wait_windows(1, time.monotonic() + 15)
    marker = f"/tmp/typed-{uuid.uuid4().hex}"
    a.act(f"pyautogui.typewrite('id > {marker}; echo $? >> {marker}\\n', interval=0.01)")
    assert wait_for(lambda: a.client.file(marker) is not None)  # control: the terminal ran it
    assert b"uid=0" not in (a.client.file(marker) or b"")
    assert not Path(marker).exists()  # it ran in the sandbox's /tmp, not the host's


# ------------------------------------------------------------------------ the control socket (item 3)


def test_server_socket_cannot_be_redirected_to_a_host_socket(
    desktops: tuple[LocalDesktop, LocalDesktop], tmp_path: Path
) -> None:
    a, _ = desktops
    a.reset(TASK)
    bait_path = tmp_path / "host-service.sock"
    bait = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bait.bind(str(bait_path))
    bait.listen(8)
    bait.setblocking(False)
    try:
        script = (
            f"find / -xdev -type s 2>/dev/null | grep -v X11-unix; "
            f"for d in /run /run/legato /tmp /home/user /dev/shm; do "
            f"rm -f $d/server.sock; ln -sf {bait_path} $d/server.sock 2>/dev/null && echo linked-$d; done; "
            "echo tried"
        )
        _, out = setup_command(a, script)
        assert "tried" in out and "control/server.sock" not in out  # the host's socket is not in the sandbox
        with contextlib.suppress(DesktopError):  # the server dies while it answers
            setup_command(a, "kill -9 $(pgrep -f /run/legato-server)")
        # killed from inside: the agent's doing, which the sandbox's root part tells (legato as root)
        with pytest.raises(AgentFault if os.geteuid() == 0 else DesktopError):
            a.act("pyautogui.moveTo(5, 5)")  # the server is gone: the host reports it, on its own path
        try:
            bait.accept()
            connected = True
        except BlockingIOError:
            connected = False
        assert not connected, "the host connected to a socket the sandbox pointed it at"
    finally:
        bait.close()
    a.reset(TASK)  # the next episode gets a new server
    assert a.client.request("GET", "/platform").text == "Linux"


# ------------------------------------------------------------------------ the file system (item 4)


def test_host_folders_outside_the_desktops_needs_are_invisible(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    secret = uuid.uuid4().hex
    new_root_dir = Path(f"/legato-escape-{secret[:8]}")
    files = [new_root_dir / "data.txt", Path("/root") / f".legato-escape-{secret[:8]}"]
    if Path("/home").is_dir():
        files.append(Path("/home") / f"legato-escape-{secret[:8]}.txt")
    checkout = Path(__file__).resolve().parents[2] / "README.md"
    try:
        new_root_dir.mkdir()
        for path in files:
            path.write_text(secret)
            path.chmod(0o644)
        new_root_dir.chmod(0o755)
        code, out = agent(a, "ls -a / /root /home")
        assert code == 0 and "usr" in out.split()  # control: the probe ran
        assert new_root_dir.name not in out and files[1].name not in out, out
        code, out = agent(a, f"cat {' '.join(map(str, files))} {checkout}; echo searched")
        assert "searched" in out and "No such file" in out  # control: the probe ran
        assert secret not in out, out
        if checkout.exists():
            assert checkout.read_text().splitlines()[0] not in out  # the project checkout is not there
    finally:
        for path in files:
            path.unlink(missing_ok=True)
        if new_root_dir.exists():
            new_root_dir.rmdir()


def test_only_home_tmp_and_shm_are_writable(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    code, out = agent(a, "touch ~/w /tmp/w /dev/shm/w /tmp/runtime-user/w && echo CONTROL-OK")
    assert code == 0 and "CONTROL-OK" in out, out
    interpreter = os.path.dirname(os.path.dirname(sys.executable))
    targets = ["/", "/etc", "/usr", "/run", "/var", "/dev", "/home", "/root", interpreter, "/tmp/.X11-unix"]
    for target in targets:
        code, out = agent(a, f"touch {target}/legato-w 2>&1 || mkdir {target}/legato-d 2>&1 || echo REFUSED")
        assert "REFUSED" in out, f"the agent wrote into {target}: {out}"
    assert not Path(interpreter, "legato-w").exists()


@pytest.mark.parametrize("folder", ["/tmp", "/home/user", "/dev/shm"])
def test_writes_stop_at_the_tmpfs_bound(desktops: tuple[LocalDesktop, LocalDesktop], folder: str) -> None:
    a, _ = desktops
    a.reset(TASK)
    # 200 MB into a 64 MB folder (the bound itself stops it, whatever the host's disk)
    script = f"dd if=/dev/zero of={folder}/fill bs=1M count=200 2>&1; stat -c %s {folder}/fill; rm {folder}/fill"
    _, out = agent(a, script)
    size = int(out.split()[-1])
    assert "No space left" in out and size <= OPTIONS.tmpfs_mb << 20, out
    a.reset(TASK)


# ------------------------------------------------------------------------ namespaces and limits (item 5)


def test_new_user_namespaces_are_refused(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    _, out = agent(a, "unshare --help >/dev/null && echo HAVE-UNSHARE; unshare -Ur id 2>&1; echo rc=$?")
    assert "HAVE-UNSHARE" in out and "rc=0" not in out and "uid=0" not in out, out
    _, out = agent(a, "bwrap --ro-bind / / --unshare-user --uid 0 id 2>&1; echo rc=$?")
    assert "rc=0" not in out and "uid=0" not in out, out
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"  # CLONE_NEWUSER
    )
    _, out = agent(a, f"python -c {shlex.quote(probe)}")
    assert "unshare -1" in out, out


def test_fork_bomb_is_bounded_and_the_others_go_on(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, b = desktops
    a.reset(TASK)
    bomb = (
        "import os, time\n"
        "n = 0\n"
        "deadline = time.monotonic() + 20\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print('forked', n, flush=True)\n"
    )
    # the children keep the output file open, not the action's pipe; hitting the bound is the agent's failure
    _, out = agent(a, f"python -c {shlex.quote(bomb)} </dev/null >/tmp/bomb 2>&1; cat /tmp/bomb", fault="pids")
    forked = int(out.split("forked")[1].split()[0])
    assert 0 < forked < OPTIONS.max_processes, out  # it hit the bound, not the deadline
    b.act("pyautogui.moveTo(7, 7)")  # the other desktop still runs actions
    assert b.client.request("GET", "/cursor_position").json() == [7, 7]
    assert subprocess.run(["true"]).returncode == 0  # and the host still forks
    a.reset(TASK)


def test_memory_is_bounded_per_desktop(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, b = desktops
    a.reset(TASK)
    hog = (
        "chunks = []\n"
        "for i in range(64):\n"  # 1 GiB in 16 MiB pieces, touched
        "    chunks.append(bytearray(16 << 20))\n"
        "print('ALLOCATED', flush=True)\n"
    )
    # the cgroup's memory bound (the whole desktop's) comes before the process's own RLIMIT_DATA: the OOM killer
    # ends the hog, which is the agent's failure; without a cgroup the rlimit refuses the allocation
    fault = "memory" if a._processes._cgroup.dirs else None
    _, out = agent(a, f"python -c {shlex.quote(hog)}; echo rc=$?", fault=fault)
    assert "ALLOCATED" not in out and "rc=0" not in out, out
    b.act("pyautogui.moveTo(9, 9)")
    assert b.client.request("GET", "/cursor_position").json() == [9, 9]
    a.reset(TASK)
    a.act("pyautogui.moveTo(3, 3)")  # and the desktop itself recovers at reset


def test_desktops_have_their_own_uid_and_cgroup(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, b = desktops
    code_a, uid_a = agent(a, "id -u")
    code_b, uid_b = agent(b, "id -u")
    assert code_a == code_b == 0
    if os.geteuid() == 0:
        assert uid_a.strip() != uid_b.strip() and "0" not in (uid_a.strip(), uid_b.strip())
        sandbox, cgroup = a._processes.sandbox, a._processes._cgroup
        assert sandbox is not None and sandbox.init_pid is not None
        if cgroup.dirs:
            assert sandbox.init_pid in cgroup.members()
            assert a.display.pids[0] in cgroup.members()


# ------------------------------------------------------------------------ desktops and each other (item 7)


FIRST = """
import sys
from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop
task = Task("t", "x", {"config": [], "evaluator": {"func": "infeasible"}})
with LocalDesktop(DesktopConfig(screen=(640, 480))) as d:
    print(d.display.number, flush=True)
    sys.stdin.readline()  # the other desktop comes and goes
    d.reset(task)  # a fresh sandbox binds this desktop's X socket again
    d.act("pyautogui.moveTo(11, 11)")
    print(d.client.request("GET", "/cursor_position").json(), flush=True)
"""
SECOND = """
from legato_gym import DesktopConfig
from legato_gym.backends.local import LocalDesktop
with LocalDesktop(DesktopConfig(screen=(640, 480))) as d:
    print(d.display.number, flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for network namespaces")
def test_a_desktop_that_exits_leaves_the_others_socket_alone() -> None:
    # two legato processes, each in a network namespace of its own: their X servers get the same display
    # number (the abstract sockets do not collide), and the second one starts and exits while the first runs
    first = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", FIRST], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert first.stdin is not None and first.stdout is not None
    try:
        number = first.stdout.readline().strip()
        second = subprocess.run(
            ["unshare", "--net", sys.executable, "-c", SECOND], capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 0, second.stderr[-2000:]
        assert second.stdout.strip() == number  # the same display number: the case that broke
        first.stdin.write("\n")
        first.stdin.flush()
        out, _ = first.communicate(timeout=120)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0 and "[11, 11]" in out, out


# ------------------------------------------------------------------------ the first five (from the old suite)


def test_writes_outside_home_and_tmp_fail(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    code, out = setup_command(a, "touch ~/allowed /tmp/allowed && echo CONTROL-OK")
    assert code == 0 and "CONTROL-OK" in out
    for target in ("/etc/legato-escape", "/usr/legato-escape", "/var/legato-escape", "/opt/legato-escape", "/legato"):
        code, out = setup_command(a, f"echo x > {target}")
        assert code != 0, f"wrote {target}: {out}"
        assert not os.path.exists(target)
    code, out = setup_command(a, "mount -o remount,rw / 2>&1; echo x > /etc/legato-escape")
    assert code != 0 and not os.path.exists("/etc/legato-escape")


def test_host_and_other_desktop_files_are_invisible(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, b = desktops
    code, _ = setup_command(b, "echo top-secret-b > ~/secret.txt")
    assert code == 0
    assert b.client.file("~/secret.txt") == b"top-secret-b\n"  # control: B reads its own file
    assert a.client.file("~/secret.txt") is None
    for path in (b.state_dir, b.state_dir.parent, b.display.fb_path):
        code, out = setup_command(a, f"ls {path} || cat {path}")
        assert code != 0, f"desktop A could read {path}: {out}"
    # the pattern is built at run time so that the script file itself (in A's /tmp) does not match
    code, out = setup_command(a, 's=top-secret; grep -rs "$s-b" /home /tmp /run /var/tmp /dev/shm; echo searched')
    assert "searched" in out and "top-secret-b" not in out
    if os.geteuid() == 0:
        code, out = setup_command(a, "cat /etc/shadow")
        assert code != 0, "root-only host files are readable from the sandbox"


def test_other_desktops_display_is_unreachable(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, b = desktops
    code, _ = setup_command(a, f"xdpyinfo -display {a.display.name} >/dev/null")
    assert code == 0  # control: its own display works
    code, out = setup_command(a, f"xdpyinfo -display {b.display.name}")
    assert code != 0 or a.display.name == b.display.name, out


def test_host_processes_are_invisible_and_unsignallable(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    me = os.getpid()
    code, out = setup_command(a, "ls /proc | grep -E '^[0-9]+$' | wc -l")
    # its own: the session (server, window manager and their loops, the panel, buses, xfconfd...), not the host's
    assert code == 0 and int(out.strip()) < 40, f"the sandbox sees {out.strip()} processes"
    code, out = setup_command(a, f"kill -0 {me} 2>&1; kill -9 {me} 2>&1; echo done")
    assert "done" in out
    code, out = setup_command(a, f"test -e /proc/{me}/cmdline && cat /proc/{me}/cmdline | tr '\\0' ' '")
    assert "pytest" not in out
    os.kill(me, 0)  # still alive
    code, out = setup_command(a, "kill -9 1 2>&1; grep CapEff /proc/self/status")
    assert "0000000000000000" in out, out
    assert a.display.alive()


def test_network_and_host_loopback_are_unreachable(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    server = socket.create_server(("127.0.0.1", 0))  # the host's loopback service
    port = server.getsockname()[1]
    probe = (
        "import socket, sys\n"
        "def tryit(addr):\n"
        "    try:\n"
        "        socket.create_connection(addr, timeout=3).close(); return 'CONNECTED'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "srv = socket.create_server(('127.0.0.1', 0))\n"  # control: the sandbox's own loopback works
        "print('own', tryit(srv.getsockname()))\n"
        f"print('host', tryit(('127.0.0.1', {port})))\n"
        "print('net', tryit(('1.1.1.1', 53)))\n"
        "try:\n"
        "    socket.getaddrinfo('pypi.org', 443); print('dns CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('dns', type(exc).__name__)\n"
    )
    response = a.client.post_json("/run_python", {"code": probe})
    output = response.json()["output"]
    server.setblocking(False)
    try:
        server.accept()  # a connection from the sandbox would be queued here
        reached = True
    except BlockingIOError:
        reached = False
    finally:
        server.close()
    lines = dict(line.split(" ", 1) for line in output.strip().splitlines())
    assert lines["own"] == "CONNECTED", output
    assert lines["host"] != "CONNECTED" and not reached, output
    assert lines["net"] != "CONNECTED", output
    assert lines["dns"] != "CONNECTED", output


# ------------------------------------------------------------------------ the server's descriptors (issue 27)

#: Finds the in-desktop server (its argv has ``--listen``) and tries every way into its descriptors and memory.
TAKEOVER = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    r = libc.syscall(*args)
    return r, (ctypes.get_errno() if r < 0 else 0)
server = next(int(p) for p in os.listdir('/proc') if p.isdigit()
              and b'\x00--listen\x00' in open(f'/proc/{p}/cmdline', 'rb').read())
pidfd, e = call(434, server, 0)                      # pidfd_open: allowed (the control)
print('pidfd_open', pidfd >= 0, e)
print('pidfd_getfd', *call(438, pidfd, 3, 0))          # the listening socket is fd 3
print('ptrace', *call(101, 16, server, 0, 0))          # PTRACE_ATTACH
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
print('process_vm_readv', *call(310, server, iov, 1, iov, 1, 0))
try:
    os.listdir(f'/proc/{server}/fd'); print('proc_fd', 0, 0)
except OSError as exc:
    print('proc_fd', -1, exc.errno)
try:
    open(f'/proc/{server}/mem', 'rb'); print('proc_mem', 0, 0)
except OSError as exc:
    print('proc_mem', -1, exc.errno)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe's system-call numbers are x86_64's")
def test_the_agent_cannot_take_the_servers_descriptors_or_memory(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    code, out = agent(a, f"python -c {shlex.quote(TAKEOVER)}")
    results = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert code == 0 and results["pidfd_open"] == ["True", "0"], out  # the control: the server was found
    refused = {str(errno.EPERM), str(errno.ENOSYS), str(errno.EACCES)}
    for name in ("pidfd_getfd", "ptrace", "process_vm_readv", "proc_fd", "proc_mem"):
        result, err = results[name]
        assert result == "-1" and err in refused, f"{name} reached the server: {out}"


def _server_pid(desktop: LocalDesktop, inside: bool = False) -> int:
    """The in-desktop server's pid on the host (``inside``: in the sandbox's pid namespace)."""
    sandbox = desktop._processes.sandbox
    assert sandbox is not None
    for pid in sandbox.survivors():
        with contextlib.suppress(OSError):
            if b"\x00--listen\x00" in Path(f"/proc/{pid}/cmdline").read_bytes():
                if not inside:
                    return pid
                status = Path(f"/proc/{pid}/status").read_text()
                return int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1])
    raise AssertionError("no server in the sandbox")


def _refused(path: Path) -> bool:
    """Whether connecting to the server's socket is refused at once (nobody holds it listening any more)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return True
    return False


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's root part tells how its server ended (legato as root)")
def test_a_server_the_agent_kills_is_its_failure_noticed_at_once(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    a.reset(TASK)
    assert a._processes.sandbox is not None
    path, server = a._processes.sandbox.socket_path, _server_pid(a)
    with pytest.raises(AgentFault) as caught:
        a.act(f"import os; os.kill({_server_pid(a, inside=True)}, 9)")
    assert caught.value.cause == "server_killed" and "status 137" in str(caught.value), caught.value
    assert not Path(f"/proc/{server}").exists()
    assert _refused(path), "the host still holds the server's socket listening: connections would queue"
    a.reset(TASK)
    a.act("pyautogui.moveTo(4, 4)")


def test_a_sandbox_killed_from_outside_is_a_desktop_failure(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    a.reset(TASK)
    sandbox = a._processes.sandbox
    assert sandbox is not None and sandbox.init_pid is not None
    os.kill(sandbox.init_pid, signal.SIGKILL)  # not the agent: the host (an operator, an OOM of the host)
    assert wait_for(lambda: _refused(sandbox.socket_path)), "connections to the dead server still queue"
    with pytest.raises(DesktopCrashed) as caught:
        a.act("pyautogui.moveTo(6, 6)")
    assert not isinstance(caught.value, AgentFault)
    a.reset(TASK)
    a.act("pyautogui.moveTo(6, 6)")


def test_a_fork_bomb_ends_the_episode_graded_zero_and_an_outside_kill_does_not(
    desktops: tuple[LocalDesktop, LocalDesktop],
) -> None:
    # the same desktops through Episode, as every env and vector-env worker drives them
    a, _ = desktops
    episode = Episode(a, max_steps=5)
    episode.reset(TASK)
    bomb = (
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
    )
    _, reward, terminated, truncated, info = episode.step(bomb)
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["agent_fault"]["cause"] == "pids" and "process bound" in info["agent_fault"]["message"]
    episode.reset(TASK)  # a fresh sandbox: the bomb's processes are gone
    episode.step("pyautogui.moveTo(8, 8)")
    sandbox = a._processes.sandbox
    assert sandbox is not None and sandbox.init_pid is not None
    os.kill(sandbox.init_pid, signal.SIGKILL)  # from outside: the desktop's failure, which the episode raises
    with pytest.raises(DesktopCrashed) as caught:
        episode.step("pyautogui.moveTo(9, 9)")
    assert not isinstance(caught.value, AgentFault)
    episode.reset(TASK)


def test_a_forwarded_answer_over_its_cap_is_cut_and_the_agents_failure(
    desktops: tuple[LocalDesktop, LocalDesktop],
) -> None:
    # desktop-env's getters read the desktop through a loopback forwarder: a file the agent made too large is
    # cut at the forwarder's cap (small here), and the episode's next call ends as the agent's failure
    _, b = desktops
    b.reset(TASK)
    assert "server" not in b._processes._forwarders, "the forwarder must be made with the small cap"
    b._processes.caps = ReadCaps(file_bytes=1 << 20)
    try:
        host, port = b.tcp_endpoint()
    finally:
        b._processes.caps = ReadCaps.DEFAULT
    b.act("open('/tmp/big.bin', 'wb').write(b'x' * (16 << 20))")
    body = b"file_path=%2Ftmp%2Fbig.bin"
    received = 0
    with socket.create_connection((host, port), timeout=60) as conn:
        conn.sendall(
            b"POST /file HTTP/1.1\r\nHost: desktop\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        while data := conn.recv(1 << 16):
            received += len(data)
    assert 0 < received <= (1 << 20), received  # the head and the first MiB at most, never the 16 MiB
    with pytest.raises(AgentFault, match="reply_too_large"):
        b.observe()
    b.reset(TASK)


# ------------------------------------------------------------------------ the GNOME session's ways to run things


@pytest.fixture(scope="module")
def gnome() -> Iterator[LocalDesktop]:
    from legato_gym.backends.local.sandbox.shell import gnome_installed

    if not gnome_installed():
        pytest.skip("needs GNOME Shell and the Ubuntu dock (gnome-shell gnome-shell-extension-dashtodock)")
    options = LocalOptions(memory_mb=2048, max_processes=512, tmpfs_mb=256, prestart=False, session="gnome")
    with LocalDesktop(DesktopConfig(screen=(1920, 1080), options=options)) as desktop:
        desktop.reset(TASK)
        yield desktop


def mousepad_shown(desktop: LocalDesktop) -> bool:
    return any(w.wm_class.startswith("mousepad.") for w in desktop.display.windows())


def test_gnome_shell_and_what_it_starts_run_inside_the_sandbox(gnome: LocalDesktop) -> None:
    code, out = agent(gnome, "ps -eo comm")
    assert code == 0 and "gnome-shell" in out.split(), out  # control: the shell runs, and inside
    assert outside_sandbox(gnome) == []


def test_gnome_run_dialog_runs_commands_inside(gnome: LocalDesktop) -> None:
    gnome.reset(TASK)
    marker = f"/tmp/run-dialog-{uuid.uuid4().hex}"
    for _ in range(3):  # the dialog may drop keys typed while it takes the focus, on a loaded machine
        gnome.act("pyautogui.press('escape')")
        before = gnome.display.fingerprint()
        gnome.act("pyautogui.hotkey('alt', 'f2')")
        wait_for(lambda shown=before: gnome.display.fingerprint() != shown, 10)  # the dialog shown
        time.sleep(1.0)  # and taking keys (its entry gets the focus after it is drawn)
        gnome.act(f"pyautogui.typewrite(\"sh -c 'id > {marker}'\\n\", interval=0.05)")
        if wait_for(lambda: gnome.client.file(marker) is not None, 10):
            break
    assert gnome.client.file(marker) is not None  # control: the dialog ran it
    assert b"uid=0" not in (gnome.client.file(marker) or b"")
    assert not Path(marker).exists()  # the sandbox's /tmp, not the host's
    assert outside_sandbox(gnome) == []


def test_gnome_overview_search_launches_inside(gnome: LocalDesktop) -> None:
    gnome.reset(TASK)
    gnome.act("pyautogui.click(38, 13)")  # Activities: the overview, its search focused
    time.sleep(0.5)
    gnome.act("pyautogui.typewrite('mousepad', interval=0.05)")
    time.sleep(1.0)  # the search's results
    gnome.act("pyautogui.press('enter')")
    assert wait_for(lambda: mousepad_shown(gnome))  # control: the search launched it
    assert outside_sandbox(gnome) == []


def test_gnome_dock_context_menu_starts_nothing_outside(gnome: LocalDesktop) -> None:
    gnome.reset(TASK)
    before = gnome.display.fingerprint()
    gnome.act(f"pyautogui.rightClick(35, {65 + 68 * 8})")  # Files' launcher: New Window, Show Details, ...
    assert wait_for(lambda: gnome.display.fingerprint() != before, 5)  # control: the menu opened
    for item in range(1, 5):  # each of the menu's first items, from a fresh menu
        gnome.act("pyautogui.press('escape')")
        gnome.act(f"pyautogui.rightClick(35, {65 + 68 * 8})")
        gnome.act(f"pyautogui.press('down', presses={item}); pyautogui.press('enter')")
    time.sleep(1.0)
    assert outside_sandbox(gnome) == []
    assert gnome.display.alive()


def terminal_shortcut_opens_inside(desktop: LocalDesktop) -> None:
    """ctrl+alt+t opens GNOME Terminal, as on the VM, and it runs inside the sandbox."""
    desktop.reset(TASK)
    desktop.act("pyautogui.hotkey('ctrl', 'alt', 't')")
    assert wait_for(lambda: any(w.wm_class.endswith(".Gnome-terminal") for w in desktop.display.windows()), 30)
    code, out = agent(desktop, "ps -eo args")
    assert code == 0 and "gnome-terminal-server" in out, out  # control: the terminal runs, and inside
    assert outside_sandbox(desktop) == []


@pytest.mark.skipif(shutil.which("gnome-terminal") is None, reason="needs GNOME Terminal (apt: gnome-terminal)")
def test_gnome_terminal_shortcut_opens_the_terminal_inside(gnome: LocalDesktop) -> None:
    terminal_shortcut_opens_inside(gnome)


def test_gnome_extension_settings_and_shell_eval_stay_inside(gnome: LocalDesktop) -> None:
    gnome.reset(TASK)
    marker = f"/tmp/shell-eval-{uuid.uuid4().hex}"
    script = (
        "gnome-extensions prefs dash-to-dock@micxgx.gmail.com; "
        "gdbus call --session --dest org.gnome.Shell --object-path /org/gnome/Shell --method org.gnome.Shell.Eval "
        f"\"imports.gi.GLib.spawn_command_line_async('touch {marker}')\"; "
        "echo tried"
    )
    _, out = agent(gnome, script)
    assert "tried" in out and "(false," in out, out  # control: the shell answered, refusing Eval
    time.sleep(2.0)  # the settings window, if any, starting
    assert not Path(marker).exists()  # Eval (refused outside unsafe mode) ran nothing on the host
    assert outside_sandbox(gnome) == []
    assert gnome.display.alive()


# ------------------------------------------------------------------------ the lookalike session's ways to run things


@pytest.fixture(scope="module")
def lookalike() -> Iterator[LocalDesktop]:
    options = LocalOptions(memory_mb=2048, max_processes=512, tmpfs_mb=256, prestart=False, session="lookalike")
    with LocalDesktop(DesktopConfig(screen=(1920, 1080), options=options)) as desktop:
        desktop.reset(TASK)
        yield desktop


@pytest.mark.skipif(shutil.which("gnome-terminal") is None, reason="needs GNOME Terminal (apt: gnome-terminal)")
def test_lookalike_terminal_shortcut_opens_the_terminal_inside(lookalike: LocalDesktop) -> None:
    terminal_shortcut_opens_inside(lookalike)


def test_lookalike_panel_and_what_it_launches_run_inside_the_sandbox(lookalike: LocalDesktop) -> None:
    code, out = agent(lookalike, "ps -eo args")
    assert code == 0 and "panel.py" in out, out  # control: the panel runs, and inside
    assert "xsettingsd" in out or not shutil.which("xsettingsd"), out  # the apps' GTK settings: inside too
    files = 65 + 68 * 8
    lookalike.act(f"pyautogui.click(35, {files})")  # a launcher
    lookalike.act("pyautogui.press('win'); pyautogui.typewrite('mousepad\\n', interval=0.02)")  # the overview
    assert wait_for(lambda: mousepad_shown(lookalike))  # control: the overview's search launched it
    assert wait_for(lambda: any(w.wm_class.startswith("org.gnome.Nautilus.") for w in lookalike.display.windows()))
    # the menu's New Window, under Files' window: its second row of five (then Unpin, Show Details, Quit)
    lookalike.act(f"pyautogui.rightClick(35, {files}); pyautogui.click(150, {files - 86 + 6 + 32 + 16})")
    time.sleep(1.0)
    assert outside_sandbox(lookalike) == []
    code, out = agent(lookalike, "ps -eo args")
    assert "nautilus" in out and "mousepad" in out, out  # what the panel started is in the sandbox's processes
    assert lookalike.display.alive()


def _shown(desktop: LocalDesktop, x: int, y: int, colour: tuple[int, int, int]) -> bool:
    """Whether the screen at ``(x, y)`` is ``colour`` (a menu's, a submenu's)."""
    pixel = desktop.display.screenshot()[y, x].astype(int)
    return sum(abs(int(a) - b) for a, b in zip(pixel, colour, strict=True)) <= 6


def _dialog_buttons(desktop: LocalDesktop, count: int) -> list[tuple[int, int]]:
    """The centres of the end-session dialog's ``count`` buttons, found by their colour under the screen's centre
    (waited for: the dialog is drawn once the menu has closed)."""
    import numpy as np

    from legato_gym.backends.local.sandbox.lookalike import BUTTON_COLOUR

    found: list[tuple[int, int]] = []

    def look() -> bool:
        screen = desktop.display.screenshot().astype(int)
        is_button = np.abs(screen - np.array(BUTTON_COLOUR)).sum(axis=2) <= 3
        rows = np.nonzero(is_button[540:].sum(axis=1) >= 200)[0] + 540  # the buttons' row, a dialog's width
        if not rows.size:
            return False
        top, bottom = int(rows.min()), int(rows.max())
        columns = np.nonzero(is_button[top])[0]
        left, right = int(columns.min()), int(columns.max())
        span = (right - left + 1) / count
        found[:] = [(round(left + span * (i + 0.5)), (top + bottom) // 2) for i in range(count)]
        return True

    assert wait_for(look, 30), "no dialog under the screen's centre"
    return found


def test_lookalike_top_bar_menus_end_nothing_and_run_nothing_outside(lookalike: LocalDesktop) -> None:
    """Every entry of the system menu (Power Off / Log Out's submenu and each button of its dialogs, Lock,
    Settings, the network's, the volume slider), the date menu's arrows, a day, Do Not Disturb and Clear, the app
    menu's entries (Files' desktop action New Window, Show Details, Quit) and the dock menu's: the session, its
    panel and the X server go on, and nothing runs outside the sandbox."""
    from legato_gym.backends.local.sandbox.panel import GAP, PAD, ROW, SEPARATOR

    lookalike.reset(TASK)
    first = 27 + GAP + PAD + ROW // 2  # a menu's first row
    power = first + 4 * ROW + 2 * SEPARATOR  # the system menu's "Power Off / Log Out"
    wired = first + ROW + SEPARATOR

    def session() -> list[str]:  # the panel's and the window manager's processes, as the sandbox lists them
        code, out = agent(lookalike, "ps -eo pid=,args=")
        assert code == 0, out
        lines = [line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2]
        panel = [f"{pid} {args}" for pid, args in lines if args.split()[1:2] == ["/run/legato-lookalike/panel.py"]]
        return panel + [f"{pid} {args}" for pid, args in lines if args.startswith(f"{WM} ")]

    before = session()
    assert len(before) == 2, before  # control: the panel and the window manager, inside

    from legato_gym.backends.local.sandbox.lookalike import BUTTON_COLOUR, MENU_COLOUR, SUBMENU_COLOUR

    def menu_shown() -> bool:
        return _shown(lookalike, 1628, first, MENU_COLOUR)  # left of the volume's icon

    def system(*rows: int, submenu: int = 0, then: str = "closed") -> None:
        """Open the system menu, click its rows (the first opening ``submenu``'s, if given), wait for ``then``."""
        lookalike.act("pyautogui.click(1860, 13)")
        assert wait_for(menu_shown, 30)
        for y in rows:
            lookalike.act(f"pyautogui.click(1700, {y})")
            if y == submenu:
                assert wait_for(lambda: _shown(lookalike, 1890, submenu + ROW, SUBMENU_COLOUR), 30)
        if then == "closed":
            assert wait_for(lambda: not menu_shown(), 30)

    dialogs = 0
    for row, buttons in ((power + 2 * ROW, 2), (power + 3 * ROW, 3), (power + 4 * ROW + SEPARATOR, 2)):
        for button in range(buttons):  # Restart…, Power Off…, Log Out: each button of their dialog
            system(power, row, submenu=power, then="dialog")
            spots = _dialog_buttons(lookalike, buttons)
            dialogs += 1
            x, y = spots[0]
            assert _shown(lookalike, x, y - 20, BUTTON_COLOUR)  # control: the spot is the dialog's Cancel
            lookalike.act(f"pyautogui.click{spots[button]}")
            assert wait_for(lambda: not _shown(lookalike, x, y - 20, BUTTON_COLOUR), 30)  # noqa: B023
    assert dialogs == 7  # control: each dialog was found, with its buttons
    system(power, power + ROW, submenu=power)  # Suspend
    system(power - 2 * ROW)  # Settings
    system(power - ROW)  # Lock
    system(wired, wired + ROW, submenu=wired)  # the network's Turn Off
    system(wired, wired + 2 * ROW, submenu=wired)  # and Wired Settings
    lookalike.act("pyautogui.click(1860, 13)")  # the volume slider, dragged to its end: pactl, inside
    assert wait_for(menu_shown, 30)
    lookalike.act(f"pyautogui.moveTo(1700, {first}); pyautogui.dragTo(1905, {first}, duration=0.2)")
    lookalike.act("pyautogui.press('escape')")
    assert wait_for(lambda: not menu_shown(), 30)
    if shutil.which("pactl") and shutil.which("pulseaudio"):  # control: the sound server took it, in the sandbox
        assert wait_for(lambda: "100%" in agent(lookalike, "pactl get-sink-volume @DEFAULT_SINK@")[1], 30)
    date_menu = (70 + 1850 // 2 - 360, 27 + GAP)  # centred on the work area's middle: its arrows, Do Not Disturb, Clear

    def calendar_shown() -> bool:
        return _shown(lookalike, 700, 200, MENU_COLOUR)

    lookalike.act("pyautogui.click(960, 13)")
    assert wait_for(calendar_shown, 30)
    day = (438 + 3 * 37 + 18, PAD + 80 + 32 + 24 + 2 * 32 + 8)  # a day of the grid's third week: selected
    for x, y in ((450, PAD + 88), (690, PAD + 88), day, (60, 420 - PAD - 30), (375, 420 - PAD - 30)):
        lookalike.act(f"pyautogui.click({date_menu[0] + x}, {date_menu[1] + y})")
    lookalike.act("pyautogui.press('escape')")
    assert wait_for(lambda: not calendar_shown(), 30)
    files = 65 + 68 * 8
    lookalike.act(f"pyautogui.click(35, {files})")  # Files, focused: its app menu has New Window, then Quit

    def nautilus() -> int:
        return sum(w.wm_class.startswith("org.gnome.Nautilus.") for w in lookalike.display.windows())

    def app_menu(row: int) -> None:
        lookalike.act("pyautogui.click(120, 13)")  # the focused app's name
        assert wait_for(lambda: _shown(lookalike, 250, first, MENU_COLOUR), 30)
        lookalike.act(f"pyautogui.click(150, {row})")

    assert wait_for(lambda: nautilus() == 1)
    assert wait_for(lambda: bool((lookalike.display.screenshot()[3:24, 100:150] > 200).any()), 30)  # "Files"
    app_menu(first)
    assert wait_for(lambda: nautilus() == 2)  # control: the app menu's New Window (Files' desktop action), inside
    app_menu(first + ROW + SEPARATOR)  # Show Details
    assert wait_for(lambda: not _shown(lookalike, 250, first, MENU_COLOUR), 30)
    from legato_gym.backends.local.sandbox.panel import MENU_ROW

    for entry in ("window", "New Window", "Show Details"):  # the dock's menu of Files (and Quit, below)
        rows = [*["window"] * nautilus(), "New Window", "Unpin", "Show Details", "Quit"]
        lookalike.act(f"pyautogui.rightClick(35, {files})")
        assert wait_for(lambda: _shown(lookalike, 280, files, MENU_COLOUR), 30)
        y = files - (MENU_ROW * len(rows) + 12) // 2 + 6 + rows.index(entry) * MENU_ROW + 16
        lookalike.act(f"pyautogui.click(150, {y})")
        assert wait_for(lambda: not _shown(lookalike, 280, files, MENU_COLOUR), 30)
    assert wait_for(lambda: nautilus() == 3)  # control: the dock menu's New Window, inside
    app_menu(first + 2 * ROW + 2 * SEPARATOR)
    assert wait_for(lambda: nautilus() == 0)  # control: Quit closed them all
    time.sleep(0.5)
    assert outside_sandbox(lookalike) == []
    assert lookalike.display.alive()
    assert session() == before  # the same panel and window manager: nothing ended or restarted


def test_lookalike_dock_favourites_pin_and_unpin_run_inside(lookalike: LocalDesktop) -> None:
    """A favourite whose desktop file the agent wrote (its Exec a probe) launches from the dock inside the
    sandbox; Unpin and Pin to Dash write the favourites with ``gsettings`` inside (the session's dconf, not the
    host's); a favourite's id that is a path is no launcher."""
    from legato_gym.backends.local.sandbox.lookalike import MENU_COLOUR
    from legato_gym.backends.local.sandbox.panel import MENU_ROW, format_favorites, parse_favorites

    if shutil.which("gsettings") is None:
        pytest.skip("needs gsettings (apt: libglib2.0-bin)")
    lookalike.reset(TASK)
    probe = "[Desktop Entry]\nType=Application\nName=Probe\nExec=sleep 4321\n"
    code, out = agent(
        lookalike,
        f"mkdir -p ~/.local/share/applications && printf '{probe}' > ~/.local/share/applications/legato-probe.desktop"
        " && gsettings get org.gnome.shell favorite-apps",
    )
    assert code == 0, out
    ids = [
        *(parse_favorites(out) or []),
        "../../../../usr/share/applications/debian-xterm.desktop",
        "legato-probe.desktop",
    ]
    code, out = agent(lookalike, f"gsettings set org.gnome.shell favorite-apps {shlex.quote(format_favorites(ids))}")
    assert code == 0, out
    probe_y = 65 + 68 * (len(ids) - 2)  # the path is left out: the probe is right after the VM's launchers
    time.sleep(1.0)
    lookalike.act(f"pyautogui.click(35, {probe_y})")
    assert wait_for(lambda: "sleep 4321" in agent(lookalike, "ps -eo args")[1], 30)  # control: it ran, inside
    lookalike.act(f"pyautogui.rightClick(35, {probe_y})")  # its window-less menu: New Window, Unpin, Show Details
    assert wait_for(lambda: _shown(lookalike, 280, probe_y, MENU_COLOUR), 30)
    lookalike.act(f"pyautogui.click(150, {probe_y - (MENU_ROW * 3 + 12) // 2 + 6 + MENU_ROW + 16})")
    assert wait_for(
        lambda: "legato-probe" not in agent(lookalike, "gsettings get org.gnome.shell favorite-apps")[1], 30
    )
    host_dconf = Path.home() / ".config" / "dconf" / "user"  # the host's settings: untouched
    assert not host_dconf.is_file() or b"legato-probe" not in host_dconf.read_bytes()
    time.sleep(0.5)
    assert outside_sandbox(lookalike) == []
    assert lookalike.display.alive()
