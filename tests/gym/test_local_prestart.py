"""Desktops started ahead (``LocalOptions.prestart``): a reset switches to a fresh desktop built meanwhile.

What must hold: nothing of an episode reaches the next (files, processes, the X server); the finished
desktop is killed; the ports a grader holds follow the switch; a warm LibreOffice takes the next task's
document, and is gone without a trace when the next task does not open LibreOffice; a desktop started
ahead that dies ends as a restart, not as a crash.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from osworld_kit import needs_local_tools, spreadsheet

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop
from legato_gym.backends.local.prestart import Prestarter, opens_office_first

SCREEN = (1024, 768)
needs_office = pytest.mark.skipif(shutil.which("soffice") is None, reason="needs LibreOffice (apt: libreoffice-calc)")


def _task(task_id: str, steps: list[dict[str, Any]]) -> Task:
    return Task(task_id, "Do nothing.", {"config": steps, "evaluator": {"func": "infeasible"}})


def _download(path: str) -> dict[str, Any]:
    return {"type": "download", "parameters": {"files": [{"url": "https://example.org/f", "path": path}]}}


# ------------------------------------------------------------------------------------ which tasks


def test_a_setup_that_opens_libreoffice_first_may_use_a_warm_one() -> None:
    launch = {"type": "launch", "parameters": {"command": ["libreoffice", "--calc", "/home/user/a.xlsx"]}}
    opened = {"type": "open", "parameters": {"path": "/home/user/Desktop/report.docx"}}
    assert opens_office_first([_download("/home/user/Desktop/a.xlsx"), launch])
    assert opens_office_first([_download("/home/user/Desktop/report.docx"), opened])
    assert opens_office_first([{"type": "execute", "parameters": {"command": "soffice --impress", "shell": True}}])
    assert opens_office_first([{"type": "launch", "parameters": {"command": ["/usr/bin/soffice", "--writer"]}}])


def test_a_setup_that_could_change_what_libreoffice_reads_starts_it_cold() -> None:
    launch = {"type": "launch", "parameters": {"command": ["libreoffice", "--calc"]}}
    assert not opens_office_first([])
    assert not opens_office_first([{"type": "open", "parameters": {"path": "/home/user/notes.txt"}}])
    assert not opens_office_first([{"type": "launch", "parameters": {"command": ["google-chrome"]}}])
    # a command first could write LibreOffice's settings; a download could land in its profile
    assert not opens_office_first([{"type": "execute", "parameters": {"command": ["sh", "-c", "x"]}}, launch])
    assert not opens_office_first([_download("/home/user/.config/libreoffice/4/user/registrymodifications.xcu")])
    assert not opens_office_first([{"type": "launch", "parameters": {"command": "libreoffice 'unclosed"}}])


def test_real_osworld_office_tasks_mostly_qualify(osworld_path: Path) -> None:
    folder = osworld_path / "evaluation_examples" / "examples" / "libreoffice_calc"
    tasks = [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]
    warm = [task for task in tasks if opens_office_first(task.get("config") or [])]
    assert len(warm) >= len(tasks) * 3 // 4, f"{len(warm)} of {len(tasks)} Calc tasks would open LibreOffice warm"


def test_no_prestart_is_the_local_backends_flag(tmp_path: Path) -> None:
    from dataclasses import replace

    from typer.testing import CliRunner

    from legato_gym.backends.local import LocalOptions
    from legato_rl.cli.app import app
    from legato_rl.cli.collect import _prestart_config

    plain = DesktopConfig(options=LocalOptions(grader="local"))
    off = _prestart_config(False, "local", plain)
    assert off.options == replace(LocalOptions(grader="local"), prestart=False)  # the other options kept
    assert _prestart_config(True, "local", plain) is plain
    argv = ["rl", "collect", "--out", str(tmp_path / "x"), "--policy-url", "embedded", "--backend", "fake"]
    fake = CliRunner().invoke(app, [*argv, "--no-prestart"])
    said = " ".join(fake.output.replace("│", " ").split())
    assert fake.exit_code == 2 and "--no-prestart applies to --backend local only, not 'fake'" in said, said
    assert not (tmp_path / "x").exists()


class _Desks:
    """Fake builds for :class:`Prestarter`: records what was built and destroyed; a build may hang or fail."""

    def __init__(self) -> None:
        self.built: list[str] = []
        self.destroyed: list[str] = []
        self.release = threading.Event()
        self.release.set()
        self.fail = False

    def build(self, slot: str, office: bool) -> Any:
        self.release.wait(30)
        if self.fail:
            raise OSError("Xvfb did not start")
        self.built.append(slot)
        return SimpleNamespace(slot=slot, office=office, pids=[])

    def destroy(self, desk: Any) -> None:
        self.destroyed.append(desk.slot)


def _wait_for(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def test_a_build_that_hangs_gives_no_desk_and_is_killed_once_it_ends() -> None:
    desks = _Desks()
    prestart = Prestarter(desks.build, desks.destroy)
    desks.release.clear()  # the build hangs
    prestart.prepare(office=True)
    assert prestart.take(time.monotonic() + 0.2) is None  # the reset restarts the desktop instead
    assert not prestart.pending
    desks.release.set()
    assert _wait_for(lambda: desks.destroyed == desks.built == ["-1"])  # built late: killed, never used
    prestart.prepare(office=False)
    desk = prestart.take(time.monotonic() + 10)
    assert desk is not None and desk.slot == "-2" and not desk.office
    prestart.close()
    assert desks.destroyed == ["-1"]  # the desk taken is the caller's to kill


def test_a_failed_build_gives_no_desk_and_the_next_one_is_built() -> None:
    desks = _Desks()
    prestart = Prestarter(desks.build, desks.destroy)
    desks.fail = True
    prestart.prepare(office=False)
    assert prestart.take(time.monotonic() + 10) is None
    desks.fail = False
    prestart.prepare(office=False)
    assert prestart.take(time.monotonic() + 10) is not None
    prestart.close()


def test_close_kills_the_desk_built_and_the_ones_handed_back() -> None:
    desks = _Desks()
    prestart = Prestarter(desks.build, desks.destroy)
    prestart.prepare(office=False)
    first = prestart.take(time.monotonic() + 10)
    assert first is not None
    prestart.prepare(office=False)  # built and waiting
    assert _wait_for(lambda: desks.built == ["-1", "-2"])
    prestart.retire(first)  # handed back: killed in the background, or by close() if still queued
    prestart.close()
    assert sorted(desks.destroyed) == ["-1", "-2"]  # each once
    prestart.retire(first)  # after close: nothing runs, nothing raises


# ------------------------------------------------------------------------------------ real desktops


@pytest.fixture
def desktop() -> Iterator[LocalDesktop]:
    needs_local_tools()
    config = DesktopConfig(screen=SCREEN, options={"prestart": True, "grader": "local"})
    with LocalDesktop(config) as d:
        yield d


def _wait_gone(pids: list[int], seconds: float = 20.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := [pid for pid in pids if os.path.exists(f"/proc/{pid}")]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _episode(desktop: LocalDesktop, task: Task) -> None:
    desktop.reset(task)
    assert desktop.wait_after_reset().ready


def _first_episodes(desktop: LocalDesktop, task: Task) -> None:
    """A desktop's first episode starts no desktop ahead; its second, made in place too, starts one."""
    _episode(desktop, task)
    assert desktop._processes._prestart is not None and desktop._processes._prestart._next is None
    _episode(desktop, task)
    assert desktop.last_reset_kind == "fast"


def _run(desktop: LocalDesktop, script: str) -> str:
    result = desktop.client.execute(script, shell=True, timeout=30)
    assert result.get("returncode") == 0, result
    return str(result["output"])


@pytest.mark.desktop
def test_a_reset_switches_to_a_fresh_desktop_and_kills_the_last(desktop: LocalDesktop) -> None:
    task = _task("t-prestart", [])
    _first_episodes(desktop, task)
    host, port = desktop.tcp_endpoint()  # a grader's port, made before the switch
    _run(desktop, "touch ~/Desktop/left-behind && (sleep 600 >/dev/null 2>&1 &)")
    first_x, first_pids = desktop.display.pids, list(desktop.pids)
    _episode(desktop, task)
    assert desktop.last_reset_kind == "ahead"
    assert desktop.display.pids != first_x  # a new X server, not the last one put back
    assert _run(desktop, "ls ~/Desktop") == ""
    assert "sleep 600" not in _run(desktop, "ps -eo args")
    assert _run(desktop, "ls /tmp/.X11-unix").split() == [f"X{desktop.display.number}"]  # no other display
    assert not _wait_gone(first_pids[: len(first_x) + 1])  # the last desktop's X server and sandbox
    reply = httpx.get(f"http://{host}:{port}/screenshot", timeout=30)
    assert reply.status_code == 200 and reply.content.startswith(b"\x89PNG")  # the port followed the switch
    _episode(desktop, task)
    assert desktop.last_reset_kind == "ahead"


@pytest.mark.desktop
def test_close_kills_the_desktop_started_ahead(desktop: LocalDesktop) -> None:
    _first_episodes(desktop, _task("t-prestart-close", []))
    prestart = desktop._processes._prestart
    assert prestart is not None and prestart._next is not None
    spare = prestart._next.result(timeout=60)  # the next desktop is up
    pids = list(desktop.pids)
    assert set(spare.pids) < set(pids)
    desktop.close()
    assert not _wait_gone(pids)


@pytest.mark.desktop
def test_a_desktop_started_ahead_that_died_ends_as_a_restart(desktop: LocalDesktop) -> None:
    task = _task("t-prestart-died", [])
    _first_episodes(desktop, task)
    prestart = desktop._processes._prestart
    assert prestart is not None and prestart._next is not None
    spare = prestart._next.result(timeout=60)
    os.kill(spare.display.pids[0], 9)  # its X server
    deadline = time.monotonic() + 10
    while spare.display.alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    _episode(desktop, task)
    assert desktop.last_reset_kind == "fallback"
    _episode(desktop, task)
    assert desktop.last_reset_kind == "ahead"


def _office_processes(desktop: LocalDesktop) -> list[str]:
    return _run(desktop, "ps -eo args | grep '[s]office.bin' || true").splitlines()


@pytest.mark.desktop
@needs_office
def test_a_warm_libreoffice_takes_the_document_and_leaves_no_trace_otherwise(
    desktop: LocalDesktop, tmp_path: Path
) -> None:
    upload = {"type": "upload_file", "parameters": {"files": [{"local_path": str(spreadsheet(tmp_path)),
                                                               "path": "/home/user/Desktop/t.xlsx"}]}}  # fmt: skip
    calc = _task("t-prestart-calc", [upload, {"type": "open", "parameters": {"path": "/home/user/Desktop/t.xlsx"}}])
    plain = _task("t-prestart-plain", [])
    baseline = _run(desktop, "cd ~/.config/libreoffice && find . -type f | sort && md5sum $(find . -type f | sort)")
    _first_episodes(desktop, calc)  # cold: no desktop started ahead had LibreOffice waiting
    assert [w.title for w in desktop.display.windows()] == ["t.xlsx - LibreOffice Calc"]
    _episode(desktop, calc)  # the desktop started ahead after a LibreOffice task has one waiting
    assert desktop.last_reset_kind == "ahead"
    assert [w.title for w in desktop.display.windows()] == ["t.xlsx - LibreOffice Calc"]
    (office,) = _office_processes(desktop)
    assert "--nodefault" in office  # the warm one took the document: no second office started
    desktop.act("import pyautogui; pyautogui.hotkey('ctrl', 'q')")  # closing it ends it, as a cold one
    deadline = time.monotonic() + 30
    while _office_processes(desktop) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _office_processes(desktop) == []
    _episode(desktop, plain)  # one is waiting again, and this task does not open LibreOffice
    assert desktop.last_reset_kind == "ahead"
    assert _office_processes(desktop) == []
    assert _run(desktop, "ls /tmp | grep -c 'OSL_PIPE\\|^lu' || true").strip() == "0"
    after = _run(desktop, "cd ~/.config/libreoffice && find . -type f | sort && md5sum $(find . -type f | sort)")
    assert after == baseline  # its profile as the home baseline has it


@pytest.mark.desktop
def test_the_agent_cannot_reach_the_desktop_started_ahead(desktop: LocalDesktop) -> None:
    """The next episode's desktop runs while the agent works, as the same host uid: nothing of it is in reach."""
    _first_episodes(desktop, _task("t-prestart-reach", []))
    prestart = desktop._processes._prestart
    assert prestart is not None and prestart._next is not None
    spare = prestart._next.result(timeout=60)

    namespaces = "readlink /proc/self/ns/net /proc/self/ns/ipc /proc/self/ns/pid /proc/self/ns/mnt /proc/self/ns/uts"
    theirs = spare.client.execute(namespaces, shell=True)["output"].split()
    ours = _run(desktop, namespaces).split()
    assert len(theirs) == len(ours) == 5
    assert not set(theirs) & set(ours)  # its own network (abstract sockets), IPC, pids, mounts and host name
    assert _run(desktop, "ls /tmp/.X11-unix").split() == [f"X{desktop.display.number}"]  # not its display
    spare_pids = len(spare.sandbox.survivors())
    listed = int(_run(desktop, "ps -e --no-headers | wc -l"))
    assert listed < spare_pids + len(desktop._processes.sandbox.survivors())  # its processes are not listed here
