"""legato_rl.integrations.trl_environment: legato desktops as TRL's ``environment_factory`` (no trainer, no torch).

The fake backend's desktops run in worker processes. The schema test reads the tools as TRL does, with
transformers (``pip install 'legatolabs[trl]'``); the GRPO training run through the adapter is
tests/examples/test_example_trl_environment.py.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from typing import Any

import pytest

from legato_gym import ActionError, ConfigError, DesktopConfig, DesktopError, StateError, Task, resolve_backend
from legato_gym.backends.fake import fake_solution
from legato_rl.integrations.trl_environment import DesktopEnvironments, DesktopTools
from legato_rl.integrations.trl_tasks import task_dataset

SCREEN = (320, 240)
DESKTOP = DesktopConfig(screen=SCREEN)
TASKS = resolve_backend("fake").default_tasks(DESKTOP)
TOOLS = {"click", "double_click", "right_click", "drag_to", "scroll", "type_text", "press", "hotkey", "wait"}
TOOLS |= {"done", "fail"}


def _task(task_id: str) -> Task:
    return next(t for t in TASKS if t.task_id == task_id)


@pytest.fixture(scope="module")
def environments() -> Iterator[DesktopEnvironments]:
    with DesktopEnvironments(TASKS, backend="fake", desktops=2, max_steps=6, desktop=DESKTOP) as running:
        yield running


@pytest.fixture(scope="module")
def tools(environments: DesktopEnvironments) -> DesktopTools:
    return environments()


def _image(blocks: Any) -> Any:
    images = [b["image"] for b in blocks if b["type"] == "image"]
    assert len(images) == 1
    return images[0]


def _solve(tools: DesktopTools, task: Task) -> list[Any]:
    results = []
    for step in fake_solution(task, SCREEN):
        if step.kind == "click":
            results.append(tools.click(*step.relative(SCREEN)))
        elif step.kind == "type":
            assert step.text is not None
            results.append(tools.type_text(step.text))
        elif step.kind == "key":
            results.append(tools.press(list(step.keys)))
        else:
            results.append(tools.done() if step.kind == "done" else tools.fail())
    return results


def test_trl_sees_the_computer_use_actions_as_tools_with_schemas() -> None:
    pytest.importorskip(
        "transformers", reason="TRL reads tool schemas with transformers: pip install 'legatolabs[trl]'"
    )
    from transformers.utils.chat_template_utils import get_json_schema

    # TRL's rule: every public function of the environment's class but reset and get_reward is a tool
    names = {
        name for name, _ in inspect.getmembers(DesktopTools, predicate=inspect.isfunction) if not name.startswith("_")
    }
    assert names - {"reset", "get_reward"} == TOOLS
    click = get_json_schema(DesktopTools.click)["function"]
    assert click["parameters"]["required"] == ["x", "y"]
    assert "0 (left edge) to 999" in click["parameters"]["properties"]["x"]["description"]
    for name in TOOLS:  # a docstring TRL cannot read would fail GRPOTrainer's init
        get_json_schema(getattr(DesktopTools, name))


def test_reset_returns_the_first_screenshot_and_the_instruction(tools: DesktopTools) -> None:
    task = _task("fake-click-save")
    blocks = tools.reset(prompt=[{"role": "user", "content": ""}], task_id=task.task_id)
    assert isinstance(blocks, list)
    assert _image(blocks).size == SCREEN
    assert {"type": "text", "text": f"Instruction: {task.instruction}"} in blocks


@pytest.mark.parametrize("task_id", ["fake-click-save", "fake-type-banana", "fake-click-open-then-close"])
def test_the_solution_through_the_tools_is_graded_one(tools: DesktopTools, task_id: str) -> None:
    task = _task(task_id)
    first = _image(tools.reset(task_id=task_id))
    results = _solve(tools, task)
    # every action but the last returned a new screenshot of the desktop; the last ended the episode
    screens = [_image(r) for r in results[:-1]]
    assert all(s.size == SCREEN for s in screens)
    assert screens[0].tobytes() != first.tobytes()  # the desktop changed under the first action
    assert isinstance(results[-1], str) and "graded" in results[-1]
    assert tools.get_reward() == 1.0
    episode = tools._episode
    assert episode is not None and len(episode.actions) == len(episode.timings) == len(results)
    assert all("act_s" in t for t in episode.timings)


def test_giving_up_and_stopping_early_are_graded_as_the_desktop_stands(tools: DesktopTools) -> None:
    tools.reset(task_id="fake-click-save")
    assert tools.fail() == "The episode is over (it was ended) and was graded."
    assert tools.get_reward() == 0.0
    assert tools.click(10, 10) == "The episode is over; no more actions run."

    tools.reset(task_id="fake-click-export")
    (click,) = [s for s in fake_solution(_task("fake-click-export"), SCREEN) if s.kind == "click"]
    tools.click(*click.relative(SCREEN))  # the model stops calling tools here, without done()
    assert tools.get_reward() == 1.0  # graded now (the desktop truncates the episode)


def test_the_step_limit_ends_the_episode(environments: DesktopEnvironments, tools: DesktopTools) -> None:
    tools.reset(task_id="fake-click-save")
    results = [tools.wait() for _ in range(environments.env.max_steps)]
    assert all(isinstance(r, list) for r in results[:-1])
    assert results[-1] == "The episode is over (the step limit was reached) and was graded."
    assert tools.get_reward() == 0.0


def test_a_bad_action_is_refused_before_the_desktop_sees_it(tools: DesktopTools) -> None:
    tools.reset(task_id="fake-type-banana")
    episode = tools._episode
    assert episode is not None
    with pytest.raises(ActionError, match="unknown key 'nokey'"):
        tools.press(["nokey"])
    with pytest.raises(ActionError, match="must be a number"):
        tools.click("left", 3)  # type: ignore[arg-type]
    with pytest.raises(ActionError, match="both x and y"):
        tools.scroll(3, x=10)
    assert episode.actions == []
    assert tools.hotkey(["ctrl", "a"])  # the episode goes on
    assert episode.actions == ["pyautogui.hotkey('ctrl', 'a')"]


def test_actions_run_in_the_desktops_worker_processes(environments: DesktopEnvironments) -> None:
    pids = environments.env.worker_pids
    assert len(pids) == 2 and os.getpid() not in pids and all(p > 0 for p in pids)


def test_the_factory_hands_out_one_desktop_per_environment() -> None:
    with DesktopEnvironments(TASKS[:2], backend="fake", desktops=2, desktop=DESKTOP) as factory:
        first, second = factory(), factory()
        first.reset(task_id=TASKS[0].task_id)
        second.reset(task_id=TASKS[1].task_id)
        assert [e.desktop for e in factory.episodes] == [0, 1]
        with pytest.raises(ConfigError, match=r"only 2 desktops .* per_device_train_batch_size \* steps_per_gen"):
            factory()
    factory.close()  # idempotent
    assert factory.env.closed and factory.env.worker_pids == [-1, -1]
    with pytest.raises(StateError, match="the desktops were closed"):
        first.click(1, 1)


def test_a_vector_env_of_the_callers_is_driven_but_not_closed() -> None:
    from legato_gym.vector import DesktopVectorEnv

    with DesktopVectorEnv(1, "fake", DESKTOP, tasks=TASKS) as env:
        with DesktopEnvironments(TASKS, vector_env=env) as factory:
            tools = factory()
            tools.reset(task_id="fake-click-save")
            assert tools.done() == "The episode is over (it was ended) and was graded."
            assert tools.get_reward() == 0.0  # nothing was clicked
        assert not env.closed and env.worker_pids[0] > 0


def test_rows_must_name_a_known_task(tools: DesktopTools) -> None:
    with pytest.raises(ConfigError, match="give each row a 'task_id' column"):
        tools.reset(prompt=[])
    with pytest.raises(ConfigError, match=r"unknown task id 'fake-click-sav'.*fake-click-save"):
        tools.reset(task_id="fake-click-sav")
    assert task_dataset(TASKS[:2], prompt="")[1] == {
        "prompt": [{"role": "user", "content": ""}],
        "task_id": TASKS[1].task_id,
    }


def test_a_desktop_that_dies_mid_episode_makes_it_unscorable() -> None:
    crashing = DesktopConfig(screen=SCREEN, options={"faults": {"crash": 1.0, "phases": ["act"]}})
    with DesktopEnvironments(TASKS, backend="fake", desktops=1, desktop=crashing) as factory:
        tools = factory()
        tools.reset(task_id="fake-click-save")
        with pytest.raises(DesktopError):  # TRL shows the model the error; the episode is over
            tools.click(500, 500)
        assert tools.get_reward() is None  # left out of its GRPO group, never scored as the agent's failure
        assert factory.episodes[0].error is not None


def test_a_desktop_that_cannot_reset_is_tried_again_then_left_unscored() -> None:
    failing = DesktopConfig(screen=SCREEN, options={"faults": {"setup": 1.0}})
    with DesktopEnvironments(TASKS, backend="fake", desktops=1, desktop=failing, env_retries=1) as factory:
        tools = factory()
        assert tools.reset(task_id="fake-click-save") == "The desktop could not be started; this episode is not graded."
        assert tools.get_reward() is None
        assert "SetupError" in str(factory.episodes[0].error)
