"""The fake backend: real pixels, real goals, deterministic layouts, latencies and seeded faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from legato_gym import DesktopConfig, Episode, Task
from legato_gym.backends.fake import (
    CRASH_EXIT_CODE,
    FakeDesktop,
    check_task,
    default_tasks,
    fake_solution,
    fake_task,
)
from legato_gym.config import OSWORLD_ENV_VAR, Timeouts
from legato_gym.errors import (
    ConfigError,
    DeadlineExceeded,
    DesktopCrashed,
    SetupError,
    StateError,
    UnsupportedTaskError,
)

SMALL = DesktopConfig(screen=(320, 240))
ROOT = Path(__file__).resolve().parents[2]
OSWORLD = Path(os.environ.get(OSWORLD_ENV_VAR) or ROOT.parent / "shared" / "osworld")
EXAMPLES = OSWORLD / "evaluation_examples" / "examples"


def run(desktop: FakeDesktop, task: Task, actions: list[str], max_steps: int = 15) -> float:
    episode = Episode(desktop, max_steps=max_steps)
    episode.reset(task)
    reward = 0.0
    for action in actions:
        _, reward, terminated, truncated, _ = episode.step(action)
        if terminated or truncated:
            break
    else:
        reward = episode.truncate()
    return reward


def by_id(task_id: str) -> Task:
    return next(t for t in default_tasks() if t.task_id == task_id)


@pytest.mark.parametrize("screen", [(320, 240), (1280, 720), (1920, 1080)])
def test_scripted_solution_scores_one_on_every_default_task(screen: tuple[int, int]) -> None:
    config = DesktopConfig(screen=screen)
    desktop = FakeDesktop(config, seed=0)
    tasks = default_tasks(config)
    assert 8 <= len(tasks) <= 12
    for task in tasks:
        steps = fake_solution(task, screen)
        assert run(desktop, task, [s.action for s in steps]) == 1.0, task.task_id


def test_solution_clicks_survive_the_relative_grid() -> None:
    # The Qwen harness maps 0..999 back with int(v * size / 999); the click must still land on its target.
    screen = (1920, 1080)
    desktop = FakeDesktop(DesktopConfig(screen=screen), seed=0)
    for task in default_tasks():
        steps = fake_solution(task, screen)
        actions = []
        for step in steps:
            if step.kind == "click":
                rx, ry = step.relative(screen)
                assert 0 <= rx <= 999 and 0 <= ry <= 999
                actions.append(f"pyautogui.click({int(rx * screen[0] / 999)}, {int(ry * screen[1] / 999)})")
            else:
                actions.append(step.action)
            assert step.description
        assert run(desktop, task, actions) == 1.0, task.task_id


def random_action(rng: np.random.Generator, screen: tuple[int, int]) -> str:
    kind = rng.integers(6)
    if kind <= 2:
        return f"pyautogui.click({rng.integers(screen[0])}, {rng.integers(screen[1])})"
    if kind == 3:
        word = "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=int(rng.integers(1, 8))))
        return f"pyautogui.typewrite({word!r})"
    if kind == 4:
        return f"pyautogui.press({rng.choice(['enter', 'tab', 'backspace', 'a', 'space'])!r})"
    return str(rng.choice(["WAIT", "DONE", "pyautogui.scroll(-3)"]))


def test_random_actions_almost_always_score_zero() -> None:
    screen = (640, 480)
    desktop = FakeDesktop(DesktopConfig(screen=screen), seed=0)
    rng = np.random.default_rng(1234)
    tasks = [t for t in default_tasks() if t.evaluator["func"] != "infeasible"]
    rewards = [run(desktop, t, [random_action(rng, screen) for _ in range(15)]) for t in tasks for _ in range(20)]
    assert len(rewards) == 180
    assert sum(rewards) <= 0.05 * len(rewards)


def test_wrong_answers_score_zero() -> None:
    desktop = FakeDesktop(SMALL, seed=0)
    typing = by_id("fake-type-banana")
    field = desktop_layout(desktop, typing).field
    assert field is not None
    fx, fy = field.center
    click_field = f"pyautogui.click({fx}, {fy})"
    assert run(desktop, typing, [click_field, "pyautogui.typewrite('banan')", "pyautogui.press('enter')", "DONE"]) == 0
    # Typed without focusing the field: the text goes nowhere.
    assert run(desktop, typing, ["pyautogui.typewrite('banana\\n')", "DONE"]) == 0
    # Right answer, then FAIL: OSWorld scores 0 after FAIL on a feasible task.
    assert run(desktop, typing, [click_field, "pyautogui.typewrite('banana\\n')", "FAIL"]) == 0
    assert run(desktop, typing, [click_field, "pyautogui.typewrite('banana\\n')", "DONE"]) == 1
    click = by_id("fake-click-save")
    layout = desktop_layout(desktop, click)
    other = next(rect for label, rect in layout.buttons if label != "SAVE")
    save = layout.button("SAVE")
    assert save is not None
    assert run(desktop, click, [f"pyautogui.click{other.center}", f"pyautogui.click{save.center}", "DONE"]) == 0
    seq = by_id("fake-click-open-then-close")
    steps = fake_solution(seq, SMALL.screen)
    assert run(desktop, seq, [steps[1].action, steps[0].action, "DONE"]) == 0  # wrong order
    infeasible = by_id("fake-infeasible-bluetooth")
    assert run(desktop, infeasible, ["DONE"]) == 0
    assert run(desktop, infeasible, ["pyautogui.click(5, 5)", "FAIL"]) == 1


def desktop_layout(desktop: FakeDesktop, task: Task):  # type: ignore[no-untyped-def]
    desktop.reset(task)
    return desktop.layout


def test_keyboard_editing() -> None:
    desktop = FakeDesktop(SMALL, seed=0)
    task = by_id("fake-type-quartz")
    layout = desktop_layout(desktop, task)
    assert layout.field is not None
    fx, fy = layout.field.center
    desktop.act(f"pyautogui.click({fx}, {fy})")
    desktop.act("pyautogui.typewrite('quartzz'); pyautogui.press('backspace')")
    assert desktop.state["field_text"] == "quartz"
    desktop.act("pyautogui.hotkey('ctrl', 'a'); pyautogui.typewrite('new')")
    assert desktop.state["field_text"] == "new"
    desktop.act("pyautogui.keyDown('shift'); pyautogui.typewrite('x'); pyautogui.keyUp('shift')")
    assert desktop.state["field_text"] == "newX"
    desktop.act(f"pyautogui.doubleClick({fx}, {fy}); pyautogui.press('delete')")
    assert desktop.state["field_text"] == ""
    desktop.act("pyautogui.typewrite('quartz'); pyautogui.press('enter')")
    assert desktop.state["submitted"] == ["quartz"]
    assert desktop.state["field_text"] == ""
    desktop.act("pyautogui.press('escape'); pyautogui.typewrite('lost')")
    assert desktop.state["field_text"] == ""


def test_mouse_down_up_and_drag_press_a_button_only_when_both_ends_are_on_it() -> None:
    desktop = FakeDesktop(SMALL, seed=0)
    layout = desktop_layout(desktop, by_id("fake-click-save"))
    save = layout.button("SAVE")
    assert save is not None
    sx, sy = save.center
    desktop.act(f"pyautogui.moveTo({sx}, {sy}); pyautogui.dragTo(1, 1)")
    assert desktop.state["pressed"] == []
    desktop.act(f"pyautogui.mouseDown({sx}, {sy}); pyautogui.mouseUp({sx + 1}, {sy})")
    assert desktop.state["pressed"] == ["SAVE"]
    desktop.act(f"pyautogui.rightClick({sx}, {sy})")
    assert desktop.state["pressed"] == ["SAVE"]
    assert desktop.state["cursor"] == (sx, sy)


def test_invalid_actions_change_nothing_and_count_as_actions() -> None:
    desktop = FakeDesktop(SMALL, seed=0)
    task = by_id("fake-infeasible-bluetooth")
    desktop.reset(task)
    before = desktop.observe().screenshot
    result = desktop.act("import os; os.system('touch /tmp/legato-pwned')")
    assert result.act_s >= 0
    assert not Path("/tmp/legato-pwned").exists()
    assert np.array_equal(desktop.observe().screenshot, before)
    assert desktop.state["actions"] == 1
    desktop.act("FAIL")
    assert desktop.evaluate() == 1.0
    desktop.act("not python at all (")
    assert desktop.evaluate() == 0.0  # the last action is no longer FAIL


def test_pixels_are_real_deterministic_and_change_with_state() -> None:
    task = by_id("fake-type-violet")
    a, b = FakeDesktop(SMALL, seed=1), FakeDesktop(SMALL, seed=2)
    a.reset(task)
    b.reset(task)
    shot = a.observe().screenshot
    assert shot.shape == (240, 320, 3) and shot.dtype == np.uint8
    assert len(np.unique(shot.reshape(-1, 3), axis=0)) > 5
    assert np.array_equal(shot, b.observe().screenshot)
    assert a.observe().screenshot is not shot
    field = a.layout.field
    assert field is not None
    a.act(f"pyautogui.click({field.x + 2}, {field.y + 2}); pyautogui.typewrite('violet')")
    typed = a.observe().screenshot
    changed = np.any(typed != shot, axis=2)
    ys, xs = np.nonzero(changed)
    assert changed.sum() > 50
    # Everything that changed is in the field or under the pointer (where it went, and where it was).
    pointer = (xs >= field.x + 2) & (xs < field.x + 12) & (ys >= field.y + 2) & (ys < field.y + 15)
    was = (xs >= 160) & (xs < 170) & (ys >= 120) & (ys < 133)
    inside = (xs >= field.x) & (xs < field.x + field.w) & (ys >= field.y) & (ys < field.y + field.h)
    assert np.all(inside | pointer | was)
    assert np.any(inside & ~pointer)
    other = by_id("fake-type-banana")
    b.reset(other)
    assert not np.array_equal(b.observe().screenshot, shot)


def test_layout_depends_on_task_and_screen_only() -> None:
    task = by_id("fake-click-export")
    layouts = []
    for screen in [(320, 240), (320, 240), (640, 480)]:
        desktop = FakeDesktop(DesktopConfig(screen=screen))
        layouts.append(desktop_layout(desktop, task))
    assert layouts[0] == layouts[1]
    assert layouts[0] != layouts[2]


def test_screen_too_small_for_the_window() -> None:
    desktop = FakeDesktop(DesktopConfig(screen=(64, 64)))
    with pytest.raises(UnsupportedTaskError, match="does not fit"):
        desktop.reset(by_id("fake-click-save"))


def test_lifecycle_errors() -> None:
    desktop = FakeDesktop(SMALL)
    for call in (desktop.observe, desktop.evaluate, desktop.wait_after_reset, lambda: desktop.act("WAIT")):
        with pytest.raises(StateError, match=r"reset\(task\)"):
            call()
    desktop.close()
    desktop.close()
    with pytest.raises(StateError, match="closed"):
        desktop.reset(by_id("fake-click-save"))


def test_fixed_wait_follows_osworld_ratios() -> None:
    config = DesktopConfig(screen=(320, 240), ready_signal=False, fixed_wait=0.001)
    desktop = FakeDesktop(config)
    desktop.reset(by_id("fake-click-save"))
    waited = desktop.wait_after_reset()
    assert waited.ready is False and waited.seconds == pytest.approx(0.03)
    result = desktop.act("pyautogui.click(1, 1)")
    assert result.ready_s == 0 and result.wait_s > 0
    waited = desktop.wait_before_eval()
    assert waited.ready is False and waited.seconds == pytest.approx(0.01)
    ready = FakeDesktop(SMALL)
    ready.reset(by_id("fake-click-save"))
    assert ready.wait_after_reset().ready is True
    assert ready.act("WAIT").wait_s == 0


def test_latency_is_seeded_and_heavy_tailed() -> None:
    config = DesktopConfig(screen=(320, 240), options={"latency": {"settle": {"median": 1e-4, "sigma": 1.5}}})

    def settles(seed: int) -> list[float]:
        desktop = FakeDesktop(config, seed=seed)
        desktop.reset(by_id("fake-click-save"))
        return [desktop.wait_after_reset().seconds for _ in range(30)]

    first = settles(7)
    assert first == settles(7)
    assert first != settles(8)
    assert max(first) / min(first) > 5  # lognormal: a long tail


def test_latency_over_the_deadline_is_a_deadline_error() -> None:
    config = DesktopConfig(screen=(320, 240), timeouts=Timeouts(act=0.01), options={"latency": {"act": 5.0}})
    desktop = FakeDesktop(config)
    desktop.reset(by_id("fake-click-save"))
    with pytest.raises(DeadlineExceeded, match=r"options\.latency\.act"):
        desktop.act("WAIT")
    slow_settle = DesktopConfig(screen=(320, 240), timeouts=Timeouts(ready=0.01), options={"latency": {"settle": 5}})
    desktop = FakeDesktop(slow_settle)
    desktop.reset(by_id("fake-click-save"))
    assert desktop.wait_after_reset().ready is False


def fault_trace(seed: int, faults: dict[str, object], calls: int = 60) -> list[str]:
    config = DesktopConfig(screen=(320, 240), options={"faults": faults})
    desktop = FakeDesktop(config, seed=seed)
    task = by_id("fake-click-save")
    trace = []
    for _ in range(calls):
        try:
            desktop.reset(task)
            desktop.act("WAIT")
            desktop.evaluate()
            trace.append("ok")
        except (DesktopCrashed, SetupError) as exc:
            trace.append(type(exc).__name__)
    return trace


def test_faults_are_deterministic_for_a_seed() -> None:
    faults = {"crash": 0.1, "setup": 0.1}
    first = fault_trace(3, faults)
    assert first == fault_trace(3, faults)
    assert first != fault_trace(4, faults)
    assert {"ok", "DesktopCrashed", "SetupError"} <= set(first)
    assert fault_trace(3, {}) == ["ok"] * 60


def test_crash_leaves_the_desktop_down_until_reset() -> None:
    config = DesktopConfig(screen=(320, 240), options={"faults": {"crash": 1.0, "phases": ["act"]}})
    desktop = FakeDesktop(config, seed=0)
    desktop.reset(by_id("fake-click-save"))
    with pytest.raises(DesktopCrashed, match="during act"):
        desktop.act("WAIT")
    with pytest.raises(DesktopCrashed, match=r"reset\(task\)"):
        desktop.observe()
    desktop.reset(by_id("fake-click-save"))
    desktop.observe()


def test_setup_failure() -> None:
    config = DesktopConfig(screen=(320, 240), options={"faults": {"setup": 1.0}})
    desktop = FakeDesktop(config, seed=0)
    with pytest.raises(SetupError, match="fake-click-save"):
        desktop.reset(by_id("fake-click-save"))
    with pytest.raises(StateError):
        desktop.observe()


def test_hang_blocks_then_raises_and_close_ends_it() -> None:
    config = DesktopConfig(
        screen=(320, 240), options={"faults": {"hang": 1.0, "hang_seconds": 0.05, "phases": ["evaluate"]}}
    )
    desktop = FakeDesktop(config, seed=0)
    desktop.reset(by_id("fake-click-save"))
    with pytest.raises(DeadlineExceeded, match="hung"):
        desktop.evaluate()
    forever = DesktopConfig(screen=(320, 240), options={"faults": {"hang": 1.0, "phases": ["act"]}})
    desktop = FakeDesktop(forever, seed=0)
    desktop.reset(by_id("fake-click-save"))
    errors: list[BaseException] = []

    def act() -> None:
        try:
            desktop.act("WAIT")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=act)
    thread.start()
    thread.join(0.05)
    assert thread.is_alive()  # hung (hang_seconds defaults to an hour)
    desktop.close()
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(errors[0], DeadlineExceeded)


def test_crash_mode_exit_kills_the_process() -> None:
    code = (
        "from legato_gym import DesktopConfig\n"
        "from legato_gym.backends.fake import FakeDesktop, default_tasks\n"
        "c = DesktopConfig(screen=(320, 240), options={'faults': {'crash': 1.0, 'crash_mode': 'exit'}})\n"
        "FakeDesktop(c, seed=0).reset(default_tasks()[0])\n"
        "print('survived')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == CRASH_EXIT_CODE
    assert "survived" not in proc.stdout


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"latncy": {}}, "did you mean 'latency'"),
        ({"faults": {"hang_s": 1}}, "did you mean 'hang_seconds'"),  # a prefix is suggested as legato_gym.tasks does
        ({"latency": {"act": -1}}, "options.latency.act"),
        ({"latency": {"walk": 1}}, "unknown key 'walk'"),
        ({"latency": {"act": {"median": 1, "sigmaa": 1}}}, "options.latency.act"),
        ({"faults": {"crash": 2}}, "options.faults.crash"),
        ({"faults": {"crash_mode": "boom"}}, "crash_mode"),
        ({"faults": {"phases": ["nap"]}}, "unknown phase 'nap'"),
        ({"faults": {"hang_seconds": "long"}}, "hang_seconds"),
    ],
)
def test_bad_options_are_named(options: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        FakeDesktop(DesktopConfig(options=options))


def test_inline_evaluators_the_fake_can_honour() -> None:
    task = fake_task(
        "inline-include",
        "Type something with cat in it and press Enter.",
        {
            "func": ["check_include_exclude", "exact_match"],
            "conj": "and",
            "result": [{"type": "fake_state", "key": "last_submitted"}, {"type": "fake_state", "key": "pressed"}],
            "expected": [
                {"type": "rule", "rules": {"include": ["cat"], "exclude": ["dog"]}},
                {"type": "rule", "rules": {"expected": []}},
            ],
        },
    )
    desktop = FakeDesktop(SMALL)
    field = desktop_layout(desktop, task).field
    assert field is not None
    focus = f"pyautogui.click{field.center}"
    assert run(desktop, task, [focus, "pyautogui.typewrite('a cat\\n')", "DONE"]) == 1
    assert run(desktop, task, [focus, "pyautogui.typewrite('a cat dog\\n')", "DONE"]) == 0


@pytest.mark.parametrize(
    ("evaluator", "named"),
    [
        ({"func": "compare_table", "result": {"type": "vm_file"}, "expected": {"type": "cloud_file"}}, "compare_table"),
        (
            {"func": "exact_match", "result": {"type": "vm_command_line"}, "expected": {"type": "rule"}},
            "vm_command_line",
        ),
        ({"func": "exact_match", "result": {"type": "fake_state", "key": "x"}, "expected": {}}, "'x'"),
        ({"func": "exact_match", "result": {"type": "fake_state", "key": "pressed"}, "expected": {}}, "expected"),
    ],
)
def test_unsupported_evaluators_are_named_at_check_and_reset(evaluator: dict[str, object], named: str) -> None:
    task = fake_task("inline-x", "Do it.", evaluator)
    with pytest.raises(UnsupportedTaskError, match=named):
        check_task(task)
    with pytest.raises(UnsupportedTaskError, match=named):
        FakeDesktop(SMALL).reset(task)


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"no OSWorld task data at {OSWORLD}; set ${OSWORLD_ENV_VAR}")
def test_real_osworld_tasks_infeasible_run_others_are_refused() -> None:
    from legato_gym.tasks import load_tasks

    tasks = load_tasks(OSWORLD / "evaluation_examples" / "test_all.json", osworld_path=OSWORLD)
    desktop = FakeDesktop(DesktopConfig(screen=(640, 480)))
    infeasible = [t for t in tasks if t.evaluator["func"] == "infeasible"]
    assert len(infeasible) == 29
    for task in infeasible:
        assert run(desktop, task, ["pyautogui.click(10, 10)", "FAIL"]) == 1.0
        assert run(desktop, task, ["DONE"]) == 0.0
        assert [s.action for s in fake_solution(task, desktop.screen_size)] == ["FAIL"]
    refused = [t for t in tasks if t.evaluator["func"] != "infeasible"]
    for task in refused:
        func = task.evaluator["func"]
        with pytest.raises(UnsupportedTaskError, match=json.dumps(func if isinstance(func, str) else func[0])[1:-1]):
            check_task(task)
