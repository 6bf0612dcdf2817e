"""Desktops started ahead (``LocalOptions.prestart``): a reset switches to a fresh desktop built meanwhile.

What must hold: nothing of an episode reaches the next (files, processes, the X server); the finished
desktop is killed; the ports a grader holds follow the switch; a warm LibreOffice takes the next task's
document, and is gone without a trace when the next task does not open LibreOffice; a desktop started
ahead that dies ends as a restart, not as a crash; a desktop given the same task again gets it set up ahead,
exactly as a reset would have set it up, and one given another task meanwhile gets a bare desktop.
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

from legato_gym import DesktopConfig, Task, resolve_backend
from legato_gym.backends.local import LocalDesktop
from legato_gym.backends.local.prestart import Prestarter, SetupGuess, opens_office_first, task_key
from legato_gym.errors import ConfigError

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
    from legato_rl.cli.collect import BACKEND_FLAG_DEFAULTS

    local = resolve_backend("local")
    plain = DesktopConfig(options=LocalOptions(grader="local"))
    off = local.with_cli(plain, {"--prestart": False}, BACKEND_FLAG_DEFAULTS)
    assert off.options == replace(LocalOptions(grader="local"), prestart=False)  # the other options kept
    assert local.with_cli(plain, {"--prestart": True}, BACKEND_FLAG_DEFAULTS) == plain
    argv = ["rl", "collect", "--out", str(tmp_path / "x"), "--policy-url", "embedded", "--backend", "fake"]
    fake = CliRunner().invoke(app, [*argv, "--no-prestart"])
    said = " ".join(fake.output.replace("│", " ").split())
    assert fake.exit_code == 2 and "--no-prestart applies to --backend local only, not 'fake'" in said, said
    assert not (tmp_path / "x").exists()


def test_pyautogui_pause_is_the_local_backends_flag_and_osworlds_by_default(tmp_path: Path) -> None:
    from dataclasses import replace

    from typer.testing import CliRunner

    from legato_gym.backends.local import LocalOptions
    from legato_rl.cli.app import app
    from legato_rl.cli.collect import BACKEND_FLAG_DEFAULTS

    assert LocalOptions().pyautogui_pause is None  # pyautogui's own 0.1 s, as OSWorld runs actions
    local = resolve_backend("local")
    plain = DesktopConfig(options=LocalOptions(grader="local"))
    fast = local.with_cli(plain, {"--pyautogui-pause": 0.0}, BACKEND_FLAG_DEFAULTS)
    assert fast.options == replace(LocalOptions(grader="local"), pyautogui_pause=0.0)  # the other options kept
    assert local.with_cli(plain, {"--pyautogui-pause": None}, BACKEND_FLAG_DEFAULTS) == plain
    with pytest.raises(ConfigError, match=r"--pyautogui-pause -1(\.0)?: give seconds >= 0"):
        local.with_cli(plain, {"--pyautogui-pause": -1.0}, BACKEND_FLAG_DEFAULTS)
    argv = ["rl", "collect", "--out", str(tmp_path / "x"), "--policy-url", "embedded", "--backend", "fake"]
    fake = CliRunner().invoke(app, [*argv, "--pyautogui-pause", "0"])
    said = " ".join(fake.output.replace("│", " ").split())
    assert fake.exit_code == 2 and "--pyautogui-pause applies to --backend local only, not 'fake'" in said, said
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match=r"pyautogui_pause=-1.*seconds >= 0"):
        LocalOptions(pyautogui_pause=-1)


def test_session_is_the_local_backends_flag(tmp_path: Path) -> None:
    from dataclasses import replace

    from typer.testing import CliRunner

    from legato_gym.backends import resolve_backend
    from legato_gym.backends.local import LocalOptions
    from legato_rl.cli.app import app

    session_flag = resolve_backend("local").cli_options["--session"]  # as the backend's unit declares it
    plain = DesktopConfig(options=LocalOptions(grader="local"))
    gnome = session_flag(plain, "gnome")
    assert gnome.options == replace(LocalOptions(grader="local"), session="gnome")  # the other options kept
    assert LocalOptions().session == "lookalike"  # the default: openbox with the VM's top bar and dock
    argv = ["rl", "collect", "--out", str(tmp_path / "x"), "--policy-url", "embedded", "--backend", "fake"]
    fake = CliRunner().invoke(app, [*argv, "--session", "gnome"])
    said = " ".join(fake.output.replace("│", " ").split())
    assert fake.exit_code == 2 and "--session gnome applies to --backend local only, not 'fake'" in said, said
    local = CliRunner().invoke(app, [*argv[:-1], "local", "--session", "kde"])
    said = " ".join(local.output.replace("│", " ").split())
    assert local.exit_code == 2 and "--session 'kde'" in said and "'openbox', 'gnome'" in said, said
    assert not (tmp_path / "x").exists()


class _Desks:
    """Fake builds for :class:`Prestarter`: records what was built and destroyed; a build may hang or fail."""

    def __init__(self) -> None:
        self.built: list[str] = []
        self.destroyed: list[str] = []
        self.release = threading.Event()
        self.release.set()
        self.fail = False

    def build(self, slot: str, office: bool, task: Task | None) -> Any:
        self.release.wait(30)
        if self.fail:
            raise OSError("Xvfb did not start")
        self.built.append(slot)
        return SimpleNamespace(slot=slot, office=office, task=task, pids=[])

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


def _guesses(tasks: str) -> str:
    """What :class:`SetupGuess` sets the next desk up for during each episode of ``tasks`` (a letter each)."""
    made = {name: _task(f"t-{name}", []) for name in set(tasks)}
    guess, out = SetupGuess(), ""
    for name in tasks:
        guess.reset(made[name])
        ahead = guess.next_task(made[name])
        out += "." if ahead is None else ahead.task_id[-1]
    return out


def test_a_desk_is_set_up_ahead_while_a_run_of_one_task_should_go_on() -> None:
    assert _guesses("abcabc") == "......"  # varied tasks: never a guess, never a miss
    # runs of 4: from the second episode of a run on; after the first run, not past the last run's length
    assert _guesses("aaaabbbbcccc") == ".aaa.bb..cc."
    assert _guesses("aabbccdd") == ".a......"  # runs of 2 (right and wrong): one miss, then none
    assert _guesses("aaaaaaaabb") == ".aaaaaaa.b"  # b may run as long as a did
    assert _guesses("aaabbbbbb") == ".aa.b...."  # a longer run than the last: guessed while under its length


def test_the_same_id_with_another_setup_is_another_task() -> None:
    guess, a = SetupGuess(), _task("t-a", [])
    guess.reset(a)
    guess.reset(a)
    assert guess.next_task(a) is a
    other = Task("t-a", "Do nothing.", {"config": [{"type": "sleep", "parameters": {"seconds": 1}}]})
    guess.reset(other)
    assert guess.next_task(other) is None


def test_a_tasks_key_is_its_id_and_its_whole_config() -> None:
    assert task_key(_task("t-a", [])) == task_key(_task("t-a", []))
    assert task_key(_task("t-a", [])) != task_key(_task("t-b", []))
    assert task_key(_task("t-a", [])) != task_key(_task("t-a", [_download("/home/user/x")]))


def test_the_build_is_given_the_task_to_set_up() -> None:
    desks = _Desks()
    prestart = Prestarter(desks.build, desks.destroy)
    task = _task("t-a", [])
    prestart.prepare(office=False, task=task)
    desk = prestart.take(time.monotonic() + 10)
    assert desk is not None and desk.task is task
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
    _episode(desktop, _task("t-prestart-2", []))  # another task: a bare desktop started ahead
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
    _episode(desktop, _task("t-prestart-died-2", []))
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
    calc_b = Task("t-prestart-calc-b", calc.instruction, calc.config)  # not a repeat: no setup ahead
    _episode(desktop, calc)  # cold: no desktop started ahead had LibreOffice waiting
    _episode(desktop, calc_b)
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


# ------------------------------------------------------------------------------------ set up ahead


def _counted_task(task_id: str) -> Task:
    """A task whose setup leaves a count of its runs, a window, and a capture the grader reads; graded on
    the agent's answer file."""
    steps = [
        {"type": "execute", "parameters": {"command": "echo ran >> ~/Desktop/setup.log", "shell": True}},
        {"type": "execute", "parameters": {"command": ["cat", "/home/user/Desktop/setup.log"], "stdout": "ran.txt"}},
        {"type": "launch", "parameters": {"command": ["xterm", "-title", f"setup of {task_id}", "-e", "cat"]}},
    ]
    evaluator = {
        "func": ["check_include_exclude", "compare_text_file"],
        "result": [
            {"type": "vm_command_line", "command": "cat ~/Desktop/answer.txt ~/Desktop/setup.log", "shell": True},
            {"type": "cache_file", "path": "ran.txt"},
        ],
        "expected": [
            {"type": "rule", "rules": {"include": ["42", "ran"], "exclude": ["ran\nran"]}},
            {"type": "cache_file", "path": "ran.txt"},
        ],
    }
    return Task(task_id, "Write 42 into ~/Desktop/answer.txt.", {"config": steps, "evaluator": evaluator})


ANSWER = "import os; open(os.path.expanduser('~/Desktop/answer.txt'), 'w').write('{}')"


def _attempt(desktop: LocalDesktop, task: Task, answer: str) -> float:
    _episode(desktop, task)
    desktop.act(ANSWER.format(answer))
    desktop.wait_before_eval()
    return desktop.evaluate()


@pytest.mark.desktop
def test_a_task_given_again_is_set_up_ahead_as_a_reset_would(desktop: LocalDesktop) -> None:
    task = _counted_task("t-prestart-again")
    assert [_attempt(desktop, task, "42"), _attempt(desktop, task, "41")] == [1.0, 0.0]
    assert desktop.last_reset_kind == "fast"  # the first two: in place; the second's spare is set up for it
    _run(desktop, "touch ~/Desktop/left-behind && (sleep 600 >/dev/null 2>&1 &)")
    first_x = desktop.display.pids
    assert _attempt(desktop, task, "42") == 1.0  # graded as any other attempt
    assert desktop.last_reset_kind == "prepared"
    assert desktop.display.pids != first_x  # a fresh desktop, not the last one
    assert _run(desktop, "cat ~/Desktop/setup.log") == "ran\n"  # its setup ran once, on it
    assert "left-behind" not in _run(desktop, "ls ~/Desktop")
    assert "sleep 600" not in _run(desktop, "ps -eo args")
    assert [w.title for w in desktop.display.windows()] == ["setup of t-prestart-again"]
    assert _attempt(desktop, task, "41") == 0.0
    assert desktop.last_reset_kind == "prepared"


@pytest.mark.desktop
def test_another_task_after_a_desktop_set_up_ahead_gets_a_bare_one(desktop: LocalDesktop) -> None:
    task, other = _counted_task("t-prestart-miss"), _counted_task("t-prestart-other")
    for _ in range(2):
        _episode(desktop, task)
    prestart = desktop._processes._prestart
    assert prestart is not None and prestart._next is not None
    spare = prestart._next.result(timeout=60)
    assert spare.prepared is not None  # set up for `task`, which does not come
    assert _attempt(desktop, other, "42") == 1.0
    assert desktop.last_reset_kind == "ahead"
    assert [w.title for w in desktop.display.windows()] == ["setup of t-prestart-other"]  # only its own setup
    assert _run(desktop, "cat ~/Desktop/setup.log") == "ran\n"
    assert not _wait_gone(spare.pids)  # the desktop set up for nothing is killed


@pytest.mark.desktop
def test_a_desktop_told_its_next_task_sets_that_up_instead_of_guessing(desktop: LocalDesktop) -> None:
    a, b = _counted_task("t-prestart-told-a"), _counted_task("t-prestart-told-b")
    _episode(desktop, a)
    desktop.expect_next(b)  # a scheduler's word: after the coming episode of a, b
    _episode(desktop, a)
    desktop.expect_next(b)
    assert _attempt(desktop, b, "42") == 1.0  # b never ran on this desktop, and is set up already
    assert desktop.last_reset_kind == "prepared"
    assert _run(desktop, "cat ~/Desktop/setup.log") == "ran\n"
    desktop.expect_next(None)  # told: not known; a guess would set b up (its run has two episodes)
    _episode(desktop, b)
    assert desktop.last_reset_kind == "prepared"
    _episode(desktop, b)
    assert desktop.last_reset_kind == "ahead"


#: A setup that takes memory in touched 16 MiB pieces until the desktop's memory bound's OOM killer ends it (its
#: cgroup's bound comes before the process's own RLIMIT_DATA: the desk's X server and server count too).
HOG = "chunks = []\nfor i in range(64):\n    chunks.append(bytearray(16 << 20))\n"


@pytest.mark.desktop
def test_a_bound_hit_by_the_desktop_built_ahead_is_not_the_agents() -> None:
    """The desktop started ahead is built (and set up) during the agent's episode: a bound it hits is counted
    in its own cgroup, never as evidence against the agent (docs/reliability.md, "A desktop the agent
    destroys"); once the reset switches to it, only what the agent does there counts."""
    needs_local_tools()
    options = {"prestart": True, "grader": "local", "memory_mb": 384}
    bomb = _task("t-prestart-bound", [{"type": "execute", "parameters": {"command": ["python", "-c", HOG]}}])
    plain = _task("t-prestart-bound-plain", [])
    with LocalDesktop(DesktopConfig(screen=(640, 480), options=options)) as desktop:
        _episode(desktop, plain)
        desktop.expect_next(bomb)  # the desktop built during the next episode is set up for it
        _episode(desktop, plain)
        desktop.act("pyautogui.moveTo(4, 4)")
        prestart = desktop._processes._prestart
        assert prestart is not None and prestart._next is not None
        spare = prestart._next.result(timeout=300)
        assert spare.prepared is not None
        assert desktop._processes._desk_cgroup(spare.slot).hits().oom_kills > 0  # its setup hit the bound
        desktop.act("pyautogui.moveTo(5, 5)")  # not an AgentFault: the agent's own desk hit nothing
        desktop.wait_before_eval()
        assert desktop.evaluate() == 0.0  # graded as it stands (infeasible, not declared)
        desktop.reset(bomb)
        assert desktop.last_reset_kind == "prepared"
        desktop.act("pyautogui.moveTo(6, 6)")  # the setup's hits came before the agent's phase
