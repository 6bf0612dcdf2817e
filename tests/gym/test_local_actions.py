"""Agent actions on real desktops: each runs in a fresh child of a warm fork server inside the sandbox.

The fork server has imported pyautogui once; every action is a new process forked from it (its own
memory, its own X connection), reports exit status and output as ``python -c`` would, and is killed with
everything it started when it overruns ``timeouts.act``.
"""

from __future__ import annotations

import ast
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop
from legato_gym.config import Timeouts
from legato_gym.errors import ConfigError, DeadlineExceeded

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool")),
        reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool)",
    ),
]

ACT_TIMEOUT = 3.0
CONFIG = DesktopConfig(screen=(640, 480), timeouts=Timeouts(act=ACT_TIMEOUT))
TASK = Task("t-actions", "Do nothing.", {"config": [], "evaluator": {"func": "infeasible"}})

#: An action that records facts about the process it runs in, for the host to read back.
PROBE = (
    "import os, sys, random; "
    "parent = open(f'/proc/{{os.getppid()}}/cmdline', 'rb').read().replace(b'\\0', b' ').decode(); "
    "leaked = hasattr(pyautogui, 'legato_marker'); pyautogui.legato_marker = True; "
    "open('/home/user/{name}', 'w').write(repr(dict(pid=os.getpid(), ppid=os.getppid(), parent=parent, "
    "pause=pyautogui.PAUSE, leaked=leaked, argv=sys.argv, main=__name__, rnd=random.random())))"
)


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    with LocalDesktop(CONFIG) as d:
        d.reset(TASK)
        yield d


def probe(desktop: LocalDesktop, name: str) -> dict[str, object]:
    desktop.act(PROBE.format(name=name))
    data = desktop.client.file(f"/home/user/{name}")
    assert data is not None, f"the probe action did not run: no ~/{name}"
    facts = ast.literal_eval(data.decode())
    assert isinstance(facts, dict)
    return facts


def cmdlines(desktop: LocalDesktop) -> list[str]:
    """Command lines of every process in the desktop's sandbox, read from the host."""
    assert desktop._processes.sandbox is not None
    lines = []
    for pid in desktop._processes.sandbox.survivors():
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if state != "Z":
            lines.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return lines


def test_each_action_is_a_fresh_child_of_the_warm_fork_server(desktop: LocalDesktop) -> None:
    first, second = probe(desktop, "probe-1"), probe(desktop, "probe-2")
    assert "--fork-server" in str(first["parent"]), first  # forked from the warm process, not exec'd
    assert first["ppid"] == second["ppid"]  # one fork server ...
    assert first["pid"] != second["pid"]  # ... and a new process per action
    assert second["leaked"] is False  # module state set by one action is gone in the next
    assert first["rnd"] != second["rnd"]  # not the same random stream in every child
    assert (first["argv"], first["main"]) == (["-c"], "__main__")  # what `python -c` gives the code
    assert first["pause"] == 0.1  # pyautogui's own pause after every call, as OSWorld's `python -c` has it


def test_exit_status_output_and_errors_are_reported_as_python_c_does(desktop: LocalDesktop) -> None:
    def run(code: str) -> dict[str, object]:
        response = desktop.client.post_json("/legato/action", {"code": code, "timeout": ACT_TIMEOUT})
        assert response.status_code == 200, response.text
        result = response.json()
        assert isinstance(result, dict)
        return result

    ok = run("print('out'); import sys; print('err', file=sys.stderr)")
    assert (ok["status"], ok["returncode"], ok["output"], ok["error"], ok["timed_out"]) == (
        "success",
        0,
        "out\n",
        "err\n",
        False,
    )
    assert run("raise SystemExit(3)")["returncode"] == 3
    assert (run("import sys; sys.exit('bye')")["returncode"], run("import sys; sys.exit('bye')")["error"]) == (
        1,
        "bye\n",
    )
    failed = run("x = 1\n1 / 0")
    assert failed["returncode"] == 1
    assert str(failed["error"]).startswith('Traceback (most recent call last):\n  File "<string>", line 2')
    assert str(failed["error"]).endswith("ZeroDivisionError: division by zero\n")
    assert desktop.client.post_json("/legato/action", {"timeout": 1}).status_code == 400


def test_a_hung_action_is_killed_with_what_it_started_and_earlier_apps_stay(desktop: LocalDesktop) -> None:
    desktop.act("import subprocess; subprocess.Popen(['sleep', '1003'])")  # an app an earlier action left
    hung = (
        "import os, subprocess; subprocess.Popen(['sleep', '1001']); os.system('setsid sleep 1002 &'); time.sleep(1000)"
    )
    with pytest.raises(DeadlineExceeded, match=r"timeouts\.act"):
        desktop.act(hung)
    deadline = time.monotonic() + 10
    while any("sleep 1001" in c or "sleep 1002" in c for c in cmdlines(desktop)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = cmdlines(desktop)
    assert not [c for c in left if "sleep 1001" in c or "sleep 1002" in c or "time.sleep(1000)" in c], left
    assert any("sleep 1003" in c for c in left), left
    assert probe(desktop, "after-hang")["pid"]  # the fork server still runs actions


#: An action that draws after its last pyautogui call and pyautogui's pause: a window of its own, mapped and
#: filled (and gone again when the action's X connection closes), as an app's late redraw would. Not managed
#: (override-redirect), so it is on the screen at once: a managed one waits for the window manager to map it,
#: and may be gone before it is (then nothing was drawn, and the X server draws no pointer that would count).
DRAW_LATE = (
    "import pyautogui; pyautogui.FAILSAFE = False; pyautogui.moveTo(5, 5)\n"
    "from Xlib import display\n"
    "d = display.Display(); s = d.screen()\n"
    "w = s.root.create_window(0, 0, 60, 60, 0, s.root_depth, background_pixel=s.white_pixel, override_redirect=True)\n"
    "w.map(); d.sync()\n"
    "w.fill_rectangle(w.create_gc(foreground=s.black_pixel), 0, 0, 20, 20); d.sync()\n"
)
CALM = "import pyautogui; pyautogui.FAILSAFE = False; pyautogui.moveTo({x}, 9)"


def test_the_wait_after_an_action_counts_from_its_last_input_through_x_damage(desktop: LocalDesktop) -> None:
    def still_after(code: str, timeout: float) -> dict[str, object]:
        still = {"quiet": 0.1, "timeout": timeout, "poll": 0.02, "allowance": 2}
        reply = desktop.client.post_json("/legato/action", {"code": code, "timeout": ACT_TIMEOUT, "still": still})
        assert reply.status_code == 200, reply.text
        result = reply.json()["still"]
        assert isinstance(result, dict) and result["how"] == "damage", result
        return result

    assert still_after(CALM.format(x=8), 30)["ready"]  # whatever earlier tests left drawing has settled
    # a wait whose deadline is over at once: what it reports is what happened before it began
    calm = still_after(CALM.format(x=9), 0.001)  # pyautogui's 0.1 s pause after the input, nothing drawn
    assert calm["ready"] and float(str(calm["quiet_for"])) >= 0.1, calm
    late = still_after(DRAW_LATE, 0.001)  # drawn after the input was taken and the pause was over
    assert not late["ready"] and float(str(late["quiet_for"])) < 0.1, late
    waited = still_after(DRAW_LATE, 30)
    assert waited["ready"] and float(str(waited["quiet_for"])) >= 0.1, waited
    plain = desktop.client.post_json("/legato/action", {"code": CALM.format(x=10), "timeout": ACT_TIMEOUT}).json()
    assert "still" not in plain and "input_taken" not in plain  # asked for no wait: none, and no internals
    bad = {"code": "pass", "timeout": ACT_TIMEOUT, "still": {"quiet": 0, "timeout": 1, "poll": 0.02}}
    assert desktop.client.post_json("/legato/action", bad).status_code == 400


def test_screen_watch_is_damage_or_frames() -> None:
    with pytest.raises(ConfigError, match=r"screen_watch='pixels'.*'damage'.*'frames'"):
        LocalDesktop(DesktopConfig(screen=(640, 480), options={"screen_watch": "pixels"}))


def test_the_exec_runner_keeps_osworlds_python_c_and_pause() -> None:
    config = DesktopConfig(screen=(640, 480), options={"action_runner": "exec", "pyautogui_pause": None})
    with LocalDesktop(config) as d:
        d.reset(TASK)
        facts = probe(d, "probe-exec")
    assert "--fork-server" not in str(facts["parent"])
    assert facts["pause"] == 0.1


def test_unknown_action_runner_is_named() -> None:
    with pytest.raises(ConfigError, match=r"action_runner='spawn'.*'fork' or 'exec'"):
        LocalDesktop(DesktopConfig(screen=(640, 480), options={"action_runner": "spawn"}))
