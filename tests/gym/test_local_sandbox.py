"""Escapes from a local desktop's sandbox, attempted through its own server (as an agent would): each fails.

Every probe has a positive control run the same way (an allowed write, a reachable in-sandbox server, ...)
so a probe that fails for an unrelated reason (the command not running at all) fails the test.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator

import pytest

from legato_gym import DesktopConfig
from legato_gym.backends.local import LocalDesktop

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool")),
        reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool)",
    ),
]

CONFIG = DesktopConfig(screen=(640, 480))


@pytest.fixture(scope="module")
def desktops() -> Iterator[tuple[LocalDesktop, LocalDesktop]]:
    a = LocalDesktop(CONFIG)
    try:
        b = LocalDesktop(CONFIG)
    except BaseException:
        a.close()
        raise
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def bash(desktop: LocalDesktop, script: str) -> tuple[int, str]:
    response = desktop.client.post_json("/run_bash_script", {"script": script, "timeout": 30})
    data = response.json()
    return int(data["returncode"]), str(data["output"])


def test_writes_outside_home_and_tmp_fail(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    code, out = bash(a, "touch ~/allowed /tmp/allowed && echo CONTROL-OK")
    assert code == 0 and "CONTROL-OK" in out
    for target in ("/etc/legato-escape", "/usr/legato-escape", "/var/legato-escape", "/opt/legato-escape", "/legato"):
        code, out = bash(a, f"echo x > {target}")
        assert code != 0, f"wrote {target}: {out}"
        assert not os.path.exists(target)
    code, out = bash(a, "mount -o remount,rw / 2>&1; echo x > /etc/legato-escape")
    assert code != 0 and not os.path.exists("/etc/legato-escape")


def test_host_and_other_desktop_files_are_invisible(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, b = desktops
    code, _ = bash(b, "echo top-secret-b > ~/secret.txt")
    assert code == 0
    assert b.client.file("~/secret.txt") == b"top-secret-b\n"  # control: B reads its own file
    assert a.client.file("~/secret.txt") is None
    for path in (b.state_dir, b.state_dir.parent, b.display.fb_path):
        code, out = bash(a, f"ls {path} || cat {path}")
        assert code != 0, f"desktop A could read {path}: {out}"
    # the pattern is built at run time so that the script file itself (in A's /tmp) does not match
    code, out = bash(a, 's=top-secret; grep -rs "$s-b" /home /tmp /run/legato /var/tmp /dev/shm; echo searched')
    assert "searched" in out and "top-secret-b" not in out
    if os.geteuid() == 0:
        code, out = bash(a, "cat /etc/shadow")
        assert code != 0, "root-only host files are readable from the sandbox"


def test_other_desktops_display_is_unreachable(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, b = desktops
    code, _ = bash(a, f"xdpyinfo -display {a.display.name} >/dev/null")
    assert code == 0  # control: its own display works
    code, out = bash(a, f"xdpyinfo -display {b.display.name}")
    assert code != 0, out


def test_host_processes_are_invisible_and_unsignallable(desktops: tuple[LocalDesktop, LocalDesktop]) -> None:
    a, _ = desktops
    me = os.getpid()
    code, out = bash(a, "ls /proc | grep -E '^[0-9]+$' | wc -l")
    assert code == 0 and int(out.strip()) < 20, f"the sandbox sees {out.strip()} processes"
    code, out = bash(a, f"kill -0 {me} 2>&1; kill -9 {me} 2>&1; echo done")
    assert "done" in out
    code, out = bash(a, f"test -e /proc/{me}/cmdline && cat /proc/{me}/cmdline | tr '\\0' ' '")
    assert "pytest" not in out
    os.kill(me, 0)  # still alive
    code, out = bash(a, "kill -9 1 2>&1; grep CapEff /proc/self/status")
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
