"""The osworld backend's container lifecycle against a real Docker engine.

The fixture starts its own dockerd (scratch data-root, ``--iptables=false --bridge=none``, a user bridge
network for published ports) and builds a small stand-in image without a registry: ``docker import`` of a
minimal rootfs (symlinks, legato's in-desktop server and an entry script) that runs the host's ``/usr``
(Xvfb, python3) read-only. It serves OSWorld's protocol on port 5000 like OSWorld's image does.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from osworld_kit import ROOT, desktop_env_python, run_in_venv

pytestmark = [pytest.mark.docker, pytest.mark.osworld_venv]

IMAGE = "legato-osworld-standin:test"
NETWORK = "legato-osworld-test"
_ENTRY = """#!/bin/sh
mkdir -p /home/user
export HOME=/home/user DISPLAY=:0
Xvfb :0 -fbdir /tmp -screen 0 1024x768x24 -nolisten tcp >/dev/null 2>&1 &
while [ ! -f /tmp/Xvfb_screen0 ]; do sleep 0.05; done
openbox >/dev/null 2>&1 &  # a window manager, as the VM's GNOME: wmctrl's listing is a probe of the reset
cd /home/user
exec python3 /app/server --listen tcp:0.0.0.0:5000 --fb /tmp/Xvfb_screen0 --mode osworld
"""


def _rootfs() -> bytes:
    """A tar of the stand-in's rootfs: the host's /usr is mounted over /usr at run time."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:

        def add(name: str, data: bytes | None = None, mode: int = 0o755, link: str | None = None) -> None:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        for name in ("etc", "app", "proc", "dev", "sys", "usr", "home"):
            add(name)
        add("tmp", mode=0o1777)
        for name in ("bin", "lib", "lib64", "sbin"):
            add(name, link=f"usr/{name}")
        add("etc/passwd", b"root:x:0:0::/root:/bin/sh\n", 0o644)
        add("app/server")  # the in-desktop server's folder, run as `python3 /app/server`
        for module in sorted((ROOT / "legato_gym/desktop_server").glob("*.py")):
            add(f"app/server/{module.name}", module.read_bytes(), 0o644)
        add("app/start.sh", _ENTRY.encode())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        pytest.skip("no Docker engine: `apt-get install -y docker.io` (the fixture starts dockerd itself)")
    if os.geteuid() != 0:
        pytest.skip("starting dockerd needs root")
    for tool in ("Xvfb", "python3", "openbox"):
        if not Path(f"/usr/bin/{tool}").exists():
            pytest.skip(f"the stand-in image runs the host's /usr/bin/{tool}: apt-get install -y xvfb python3 openbox")
    scratch = Path(tempfile_dir := str(tmp_path_factory.mktemp("dockerd")))
    sock = scratch / "docker.sock"
    log = (scratch / "dockerd.log").open("wb")
    daemon = subprocess.Popen(
        [
            "dockerd",
            "--data-root",
            str(scratch / "data"),
            "--exec-root",
            str(scratch / "exec"),
            "-H",
            f"unix://{sock}",
            "--pidfile",
            str(scratch / "docker.pid"),
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    env = dict(os.environ, DOCKER_HOST=f"unix://{sock}")
    docker = ["docker", "-H", f"unix://{sock}"]
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([*docker, "info"], capture_output=True, env=env).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"dockerd did not start: {(scratch / 'dockerd.log').read_text()[-800:]}")
            time.sleep(0.1)
        built = subprocess.run(
            [*docker, "import", "-c", 'CMD ["/app/start.sh"]', "-", IMAGE], input=_rootfs(), capture_output=True
        )
        assert built.returncode == 0, built.stderr.decode()
        net = subprocess.run([*docker, "network", "create", NETWORK], capture_output=True)
        assert net.returncode == 0, net.stderr.decode()
        yield {"DOCKER_HOST": env["DOCKER_HOST"], "tmp": tempfile_dir}
    finally:
        with contextlib.suppress(Exception):
            ids = subprocess.run([*docker, "ps", "-aq"], capture_output=True, text=True).stdout.split()
            if ids:
                subprocess.run([*docker, "rm", "-f", *ids], capture_output=True)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        for mount in (scratch / "exec", scratch / "data"):
            subprocess.run(["umount", "-R", "-l", str(mount)], capture_output=True)


@pytest.fixture(scope="module")
def venv_python() -> str:
    return desktop_env_python()


def _args(engine: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"image": IMAGE, "network": NETWORK, "cache": engine["tmp"], **extra}


@pytest.fixture
def docker_env(engine: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("DOCKER_HOST", engine["DOCKER_HOST"])
    return engine


def test_desktop_on_containers_labels_ports_fast_reset_and_replacement(venv_python: str, docker_env: Any) -> None:
    result = run_in_venv(venv_python, "docker_desktop", _args(docker_env))
    labels = result["labels"]
    assert labels["dev.legato.osworld"] == "osworld"
    assert int(labels["dev.legato.owner-pid"]) > 0 and labels["dev.legato.boot-id"]
    (binding,) = result["ports"]["5000/tcp"]
    assert binding["HostIp"] == "127.0.0.1" and int(binding["HostPort"]) > 0
    assert result["made"] == [1.0, "fast"]
    assert result["clean"] == [1.0, "fast"]  # the home was restored: the last episode's file is gone
    assert result["replaced"] == [1.0, "fallback"]
    assert result["new_container"] and result["old_gone"] and result["closed_gone"]


def test_many_containers_start_at_once_on_their_own_ports(venv_python: str, docker_env: Any) -> None:
    result = run_in_venv(venv_python, "docker_many", _args(docker_env, count=3))
    assert result["started"] == 3
    assert len(set(result["ports"])) == 3


def test_containers_leaked_by_a_killed_run_are_removed_at_next_start(venv_python: str, docker_env: Any) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
    script = Path(__file__).with_name("osworld_scenarios.py")
    child = subprocess.Popen(
        [venv_python, str(script), "docker_leak", json.dumps(_args(docker_env))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        leaked = json.loads(line)["name"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"name={leaked}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert leaked in listed.stdout  # the killed run left it behind
    result = run_in_venv(venv_python, "docker_sweep", _args(docker_env, leaked=leaked))
    assert result["leaked_left"] is False
