"""The local backend on real desktops: OSWorld protocol, task suite grading, fast reset, waits, lifecycle."""

from __future__ import annotations

import io
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop, default_tasks, osworld_tasks, solution
from legato_gym.backends.local.sandbox import atspi_readable
from legato_gym.backends.local.tasks import LOCAL_TASKS
from legato_gym.conformance import check_desktop
from legato_gym.errors import ConfigError, StateError, UnsupportedTaskError

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "xterm")),
        reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool xterm)",
    ),
]

SCREEN = (1280, 720)
OSWORLD = Path(__file__).resolve().parents[3] / "shared" / "osworld"
CONFIG = DesktopConfig(screen=SCREEN, osworld_path=OSWORLD if OSWORLD.is_dir() else None)


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    with LocalDesktop(CONFIG) as d:
        yield d


def infeasible() -> Task:
    return Task("t-infeasible", "Switch on Bluetooth.", {"config": [], "evaluator": {"func": "infeasible"}})


def run(desktop: LocalDesktop, task: Task, actions: list[str]) -> float:
    desktop.reset(task)
    desktop.wait_after_reset()
    for action in actions:
        desktop.act(action)
    desktop.wait_before_eval()
    return desktop.evaluate()


# ----------------------------------------------------------------------------------------- grading


SUITE = {t.task_id: t for t in default_tasks(CONFIG)}


@pytest.mark.parametrize("task_id", list(SUITE))
def test_scripted_solution_scores_one_and_wrong_one_zero(desktop: LocalDesktop, task_id: str) -> None:
    task = SUITE[task_id]
    assert run(desktop, task, solution(task_id, SCREEN, correct=True)) == 1.0
    assert run(desktop, task, solution(task_id, SCREEN, correct=False)) == 0.0


def test_suite_covers_terminal_files_editor_and_real_osworld_tasks() -> None:
    assert set(LOCAL_TASKS) <= set(SUITE)
    if OSWORLD.is_dir():
        assert "e0df059f-28a6-4169-924f-b9623e7184cc" in {t.task_id for t in osworld_tasks(OSWORLD)}


def test_unsupported_tasks_are_refused_at_reset(desktop: LocalDesktop) -> None:
    chrome = Task("t-chrome", "x", {"config": [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": []}}]})
    with pytest.raises(UnsupportedTaskError, match="chrome_open_tabs"):
        desktop.reset(chrome)
    table = Task("t-table", "x", {"config": [], "evaluator": {"func": "compare_table", "result": {"type": "vm_file"}}})
    with pytest.raises(UnsupportedTaskError, match="compare_table"):
        desktop.reset(table)


def test_unknown_option_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match="settle_s"):
        LocalDesktop(DesktopConfig(screen=SCREEN, options={"settle": 0.1}))


# ----------------------------------------------------------------------------------------- protocol


def test_server_speaks_osworlds_protocol(desktop: LocalDesktop) -> None:
    desktop.reset(infeasible())
    c = desktop.client
    assert c.request("GET", "/platform").text == "Linux"
    assert c.post_json("/screen_size", {}).json() == {"width": SCREEN[0], "height": SCREEN[1]}
    shot = c.request("GET", "/screenshot")
    assert shot.status_code == 200 and shot.headers["content-type"] == "image/png"
    assert struct.unpack(">II", shot.content[16:24]) == SCREEN
    result = c.execute(["python", "-c", "import pyautogui; pyautogui.moveTo(123, 45)"])
    assert result["status"] == "success" and result["returncode"] == 0, result
    assert c.request("GET", "/cursor_position").json() == [123, 45]
    assert c.execute("echo $HOME; whoami", shell=True)["output"] == "/home/user\nuser\n"
    assert c.execute("~/nope")["status"] == "error"
    upload = c.request(
        "POST", "/setup/upload", data={"file_path": "~/Documents/a/b.txt"}, files={"file_data": ("f", b"data")}
    )
    assert upload.status_code == 200 and upload.text == "File Uploaded: 4 bytes"
    assert c.file("~/Documents/a/b.txt") == b"data"
    assert c.request("POST", "/file", data={"file_path": "~/missing"}).status_code == 404
    assert c.request("POST", "/file", data={}).status_code == 400
    tree = c.post_json("/list_directory", {"path": "/home/user/Documents"}).json()["directory_tree"]
    assert tree["name"] == "Documents" and tree["children"][0]["children"] == [{"type": "file", "name": "b.txt"}]
    assert c.post_json("/list_directory", {"path": "/nope"}).status_code == 400
    py = c.post_json("/run_python", {"code": "print(6 * 7)"}).json()
    assert (py["status"], py["output"], py["return_code"]) == ("success", "42\n", 0)
    assert c.post_json("/run_python", {}).status_code == 400
    sh = c.post_json("/run_bash_script", {"script": "echo out; echo err >&2; exit 3"})
    assert sh.status_code == 200
    assert sh.json() == {"status": "error", "output": "out\nerr\n", "error": "", "returncode": 3}
    tree = c.request("GET", "/accessibility")  # the apps' AT-SPI tree (test_local_atspi.py); without AT-SPI, 500
    assert tree.status_code == (200 if atspi_readable() else 500)
    assert tree.status_code == 500 or tree.json()["AT"].startswith("<desktop-frame")
    assert c.request("GET", "/terminal").json() == {"output": None, "status": "success"}
    assert c.post_json("/setup/activate_window", {}).status_code == 400
    assert c.post_json("/setup/open_file", {"path": "no-such-app"}).status_code == 404
    assert c.request("GET", "/no/such/route").status_code == 404
    assert c.request("GET", "/execute").status_code == 405
    # `cat`, not a shell: the home's .bashrc (Ubuntu's) would retitle the xterm with its prompt
    launched = c.post_json("/setup/launch", {"command": ["xterm", "-T", "probe-window", "-e", "cat"]})
    assert launched.status_code == 200 and launched.text == "xterm -T probe-window -e cat launched successfully"
    assert desktop.display.wait_windows(1, time.monotonic() + 10)
    assert c.post_json("/window_size", {}).status_code == 400
    closed = c.post_json("/setup/close_window", {"window_name": "probe-window"})
    assert closed.status_code == 200
    assert desktop.display.wait_no_windows(time.monotonic() + 10)


def test_observe_shows_the_screen_and_changes_after_an_action(desktop: LocalDesktop) -> None:
    task = SUITE["local-terminal-create-file"]
    desktop.reset(task)
    waited = desktop.wait_after_reset()
    assert waited.ready
    before = desktop.observe()
    assert before.screenshot.shape == (SCREEN[1], SCREEN[0], 3) and before.screenshot.dtype == np.uint8
    assert before.instruction == task.instruction
    assert before.screenshot.std() > 0  # the xterm is drawn
    result = desktop.act("pyautogui.typewrite('echo visible')")
    assert result.act_s > 0 and result.wait_s == 0
    after = desktop.observe()
    assert not np.array_equal(before.screenshot, after.screenshot)


def test_a_screen_that_never_settles_is_taken_as_it_is_after_busy_s() -> None:
    """A playing video keeps the screen changing: each ready signal gives up after ``busy_s``, not the deadline."""
    config = DesktopConfig(screen=SCREEN, timeouts=Timeouts(ready=120), options={"busy_s": 1.0})
    clock = "while :; do date +%N; done"  # a terminal that scrolls without end
    task = Task("t-busy", "Watch.", {"config": [{"type": "launch", "parameters": {
        "command": ["xterm", "-e", "sh", "-c", clock]}}], "evaluator": {"func": "infeasible"}})  # fmt: skip
    with LocalDesktop(config) as desktop:
        desktop.reset(task)
        waited = desktop.wait_after_reset()
        assert waited.seconds < 60  # windows mapped, then at most busy_s for the screen: not the 120 s deadline
        first = desktop.observe().screenshot
        result = desktop.act("pyautogui.moveTo(10, 10)")
        assert result.ready_s < 60
        assert not np.array_equal(first, desktop.observe().screenshot)  # it really kept changing
        assert desktop.wait_before_eval().seconds < 60


def test_pyautogui_types_less_than_as_less_than(desktop: LocalDesktop) -> None:
    """On Xvfb's keymap pyautogui types "<" as ">"; OSWorld fixes every action for it, and so does legato."""
    launch = {"type": "launch", "parameters": {"command": ["xterm", "-e", "sh", "-c", "cat > ~/typed.txt"]}}
    task = Task("t-less-than", "Type.", {"config": [launch], "evaluator": {"func": "infeasible"}})
    desktop.reset(task)
    assert desktop.wait_after_reset().ready
    desktop.act("pyautogui.typewrite('a<b>c')")
    desktop.act("pyautogui.press('<'); pyautogui.hotkey('shift', ','); pyautogui.write('<', interval=0.01)")
    desktop.act("pyautogui.press('enter'); pyautogui.hotkey('ctrl', 'd')")
    typed = desktop.client.execute(
        "for i in $(seq 100); do [ -s ~/typed.txt ] && break; sleep 0.1; done; cat ~/typed.txt", shell=True
    )
    assert typed["output"] == "a<b>c<<<\n"


def test_an_app_an_action_starts_keeps_writing_output_after_the_action(desktop: LocalDesktop) -> None:
    """An app started by an action inherits its output pipes; closing them would kill it at its next line."""
    desktop.reset(infeasible())
    chatty = "for i in $(seq 30); do echo line $i; echo err $i >&2; sleep 0.05; done; touch ~/survived"
    desktop.act(f"import subprocess; subprocess.Popen(['sh', '-c', {chatty!r}])")
    desktop.act("pyautogui.moveTo(5, 5)")  # the next actions run while it still writes
    desktop.act("pyautogui.moveTo(6, 6)")
    found = desktop.client.execute(
        "for i in $(seq 100); do [ -e ~/survived ] && exit 0; sleep 0.1; done; exit 1", shell=True
    )
    assert found["returncode"] == 0


def test_an_action_is_ready_when_the_apps_it_set_working_are_done() -> None:
    """An app still working after an action, with nothing drawn yet, is not ready: the ready signal waits."""
    config = DesktopConfig(screen=SCREEN, timeouts=Timeouts(ready=300), options={"busy_s": 300.0})  # a loaded CI
    with LocalDesktop(config) as desktop:
        desktop.reset(infeasible())
        busy = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; touch ~/worked"  # CPU only, nothing drawn
        desktop.act(f"import subprocess; subprocess.Popen(['sh', '-c', {busy!r}])")
        assert desktop.client.execute("ls ~/worked", shell=True)["returncode"] == 0


# ----------------------------------------------------------------------------------------- reset


def test_fast_reset_kills_every_app_and_restores_the_home(desktop: LocalDesktop) -> None:
    desktop.reset(infeasible())
    c = desktop.client
    c.post_json("/setup/launch", {"command": "setsid nohup sleep 1000 & xterm", "shell": True})
    assert desktop.display.wait_windows(1, time.monotonic() + 10)
    c.execute("echo junk > ~/junk.txt; rm -r ~/Desktop; echo tmp > /tmp/t", shell=True)
    sandbox = desktop._processes.sandbox
    assert sandbox is not None
    old_init = sandbox.init_pid
    assert len(sandbox.survivors()) >= 4  # init, shell, server, sleep, xterm...
    desktop.reset(infeasible())
    # in place, the last sandbox is dead before the reset returns; switched to a desktop started ahead, the
    # last one is killed in the background
    assert desktop.last_reset_kind in ("fast", "ahead")
    deadline = time.monotonic() + (0 if desktop.last_reset_kind == "fast" else 10)
    while sandbox.survivors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.survivors() == [] and old_init is not None and not Path(f"/proc/{old_init}").exists()
    assert desktop.display.windows() == []
    listing = desktop.client.execute("ls -A ~; ls /tmp", shell=True)["output"].split()
    assert "junk.txt" not in listing and "Desktop" in listing and "t" not in listing


def test_full_restart_when_fast_reset_is_off() -> None:
    config = DesktopConfig(screen=(640, 480), fast_reset=False, ready_signal=False, fixed_wait=0.01)
    with LocalDesktop(config) as d:
        first = set(d.pids)
        d.reset(infeasible())
        assert d.last_reset_kind == "restart"
        assert first.isdisjoint(d.pids)
        assert not any(Path(f"/proc/{pid}").exists() for pid in first)
        waited = d.wait_after_reset()
        assert not waited.ready and waited.seconds > 0
        result = d.act("WAIT")
        assert result.ready_s == 0 and result.wait_s > 0
        assert d.wait_before_eval().ready is False
        d.act("FAIL")
        assert d.evaluate() == 1.0


# ----------------------------------------------------------------------------------------- lifecycle


def test_wrong_order_and_closed_calls_raise_state_error() -> None:
    d = LocalDesktop(DesktopConfig(screen=(640, 480)))
    with pytest.raises(StateError, match="reset"):
        d.observe()
    pids = d.pids
    d.close()
    d.close()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not d.state_dir.exists()
    with pytest.raises(StateError, match="close"):
        d.reset(infeasible())


def test_nothing_survives_when_the_parent_is_killed(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from legato_gym import DesktopConfig\n"
        "from legato_gym.backends.local import LocalDesktop\n"
        "d = LocalDesktop(DesktopConfig(screen=(640, 480)))\n"
        "d.client.post_json('/setup/launch', {'command': ['xterm']})\n"
        "d.client.post_json('/setup/launch', {'command': 'setsid nohup sleep 1000 &', 'shell': True})\n"
        "d.display.wait_windows(1, time.monotonic() + 10)\n"
        "print(' '.join(map(str, d.pids + d._processes.sandbox.survivors())), flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    pids = [int(p) for p in child.stdout.readline().split()]
    assert len(pids) >= 5, pids
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and _not_zombie(p)]
        time.sleep(0.05)
    assert alive == [], f"processes survived their parent: {alive}"


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_conformance() -> None:
    passed = check_desktop(lambda: LocalDesktop(DesktopConfig(screen=(640, 480))))
    assert "episode 1: evaluate() after FAIL == 1.0" in passed


def test_gymnasium_id_is_registered() -> None:
    gymnasium = pytest.importorskip("gymnasium")
    import legato_gym  # noqa: F401

    env = gymnasium.make("legato/LocalDesktop-v0", config=DesktopConfig(screen=(640, 480)))
    try:
        obs, info = env.reset(seed=0, options={"task": SUITE["local-files-rename"]})
        assert obs["screenshot"].shape == (480, 640, 3)
        assert info["task_id"] == "local-files-rename"
    finally:
        env.close()


def test_observations_have_the_pointer_where_osworlds_server_pastes_it(desktop: LocalDesktop) -> None:
    """The pointer's image with its top-left corner at the pointer (OSWorld's paste), also in ``/screenshot``."""
    from legato_gym.desktop_server.pointer import read_pointer

    desktop.reset(infeasible())
    desktop.wait_after_reset()
    desktop.act("pyautogui.moveTo(200, 150)")
    shot = desktop.observe().screenshot
    plain = np.ascontiguousarray(desktop.display._framebuffer()[:, :, 2::-1])
    pointer = read_pointer(desktop.display.name)
    assert pointer is not None and (pointer.x, pointer.y) == (200, 150)
    changed = np.argwhere((shot != plain).any(axis=2))
    assert len(changed) > 0
    assert changed[:, 0].min() >= 150 and changed[:, 1].min() >= 200
    assert changed[:, 0].max() < 150 + pointer.height and changed[:, 1].max() < 200 + pointer.width
    served = desktop.client.request("GET", "/screenshot")
    from PIL import Image

    server_shot = np.asarray(Image.open(io.BytesIO(served.content)).convert("RGB"))
    np.testing.assert_array_equal(server_shot, shot)  # one paste, the same pixels both ways
