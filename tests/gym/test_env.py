"""DesktopEnv and Episode: Gymnasium's contract, task choice, grading on the last step, lifecycle errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import legato_gym
from legato_gym import DesktopConfig, DesktopEnv, Episode, Task
from legato_gym.backends.fake import FakeDesktop, default_tasks, fake_solution
from legato_gym.errors import ActionError, ConfigError, StateError, UnknownTaskError, UnsupportedTaskError

SMALL = DesktopConfig(screen=(320, 240))


def test_make_works_bare_and_passes_check_env() -> None:
    env = gym.make("legato/FakeDesktop-v0")
    assert env.spec is not None and env.spec.vector_entry_point == "legato_gym.vector:make_vector_env"
    assert env.observation_space["screenshot"].shape == (1080, 1920, 3)
    check_env(env.unwrapped)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    env.close()


def test_check_env_on_a_small_screen_with_render() -> None:
    env = gym.make("legato/FakeDesktop-v0", config=SMALL, render_mode="rgb_array").unwrapped
    check_env(env)
    env.reset(seed=1)
    frame = env.render()
    assert frame is not None and frame.shape == (240, 320, 3)
    assert env.render() is not frame


def test_register_envs_is_idempotent() -> None:
    from legato_gym.registration import register_envs

    register_envs()
    register_envs()
    assert "legato/FakeDesktop-v0" in gym.registry


def test_scripted_episode_through_gym_make() -> None:
    env = gym.make("legato/FakeDesktop-v0", config=SMALL)
    for task in default_tasks():
        obs, info = env.reset(options={"task": task.task_id})
        assert info["task_id"] == task.task_id
        assert set(info["timings"]) == {"reset_s", "wait_after_reset_s", "obs_s"}
        assert info["reset_kind"] == "fast"  # the fake desktop redraws its window in place
        assert obs["instruction"] == task.instruction
        steps = fake_solution(task, SMALL.screen)
        for i, step in enumerate(steps):
            obs, reward, terminated, truncated, info = env.step(step.action)
            last = i == len(steps) - 1
            assert terminated is last and truncated is False
            assert reward == (1.0 if last else 0.0)
        assert {"eval_s", "wait_before_eval_s", "act_s", "ready_s", "wait_s", "obs_s"} <= set(info["timings"])
    env.close()


def test_reset_picks_the_task_by_seed() -> None:
    env = DesktopEnv("fake", SMALL)
    picks = [env.reset(seed=s)[1]["task_id"] for s in range(12)]
    assert picks == [env.reset(seed=s)[1]["task_id"] for s in range(12)]
    assert len(set(picks)) > 3
    a, _ = env.reset(seed=5)
    b, _ = env.reset(seed=5)
    assert np.array_equal(a["screenshot"], b["screenshot"]) and a["screenshot"] is not b["screenshot"]


def test_reset_accepts_task_objects_configs_and_json() -> None:
    env = DesktopEnv("fake", SMALL)
    task = default_tasks()[4]
    assert env.reset(options={"task": task})[1]["task_id"] == task.task_id
    assert env.reset(options={"task": task.to_json()})[1]["task_id"] == task.task_id
    assert env.reset(options={"task": dict(task.config)})[1]["task_id"] == task.task_id
    inline = {"task_id": "mine", "config": {"instruction": "Give up.", "evaluator": {"func": "infeasible"}}}
    assert env.reset(options={"task": inline})[1]["task_id"] == "mine"
    assert env.step("FAIL")[1] == 1.0


def test_reset_errors() -> None:
    env = DesktopEnv("fake", SMALL)
    with pytest.raises(UnknownTaskError, match="did you mean 'fake-click-save'"):
        env.reset(options={"task": "fake-click-sav"})
    with pytest.raises(ConfigError, match="unknown option 'tsk'"):
        env.reset(options={"tsk": "x"})
    with pytest.raises(ConfigError, match="unknown option 'next'; did you mean 'next_task'"):
        env.reset(options={"task": "fake-click-save", "next": "fake-click-save"})
    with pytest.raises(UnknownTaskError, match="did you mean 'fake-click-save'"):
        env.reset(options={"task": "fake-click-save", "next_task": "fake-click-sav"})
    unsupported = {"id": "u", "instruction": "x", "evaluator": {"func": "compare_table"}}
    with pytest.raises(UnsupportedTaskError, match="compare_table"):
        env.reset(options={"task": unsupported})
    with pytest.raises(UnsupportedTaskError, match="compare_table"):
        DesktopEnv("fake", SMALL, tasks=[Task("u", "x", unsupported)])
    with pytest.raises(ConfigError, match="render_mode"):
        DesktopEnv("fake", SMALL, render_mode="human")


def test_tasks_argument_limits_the_choice() -> None:
    only = [t for t in default_tasks() if t.task_id.startswith("fake-type")]
    env = DesktopEnv("fake", SMALL, tasks=only)
    assert {env.reset(seed=s)[1]["task_id"] for s in range(20)} <= {t.task_id for t in only}


def test_step_limit_truncates_and_still_grades() -> None:
    env = DesktopEnv("fake", SMALL, max_steps=3)
    task = next(t for t in default_tasks() if t.task_id == "fake-click-save")
    env.reset(options={"task": task})
    click = fake_solution(task, SMALL.screen)[0].action
    assert env.step("WAIT")[1:4] == (0.0, False, False)
    assert env.step(click)[1:4] == (0.0, False, False)
    _, reward, terminated, truncated, info = env.step("WAIT")
    assert (reward, terminated, truncated) == (1.0, False, True)
    assert "eval_s" in info["timings"]
    with pytest.raises(StateError, match=r"reset\(task\)"):
        env.step("WAIT")


# --- step limits through Gymnasium: make(max_episode_steps=N), TimeLimit, spec ---------------------------------


def _click_save() -> tuple[Task, str]:
    task = next(t for t in default_tasks() if t.task_id == "fake-click-save")
    return task, fake_solution(task, SMALL.screen)[0].action


def test_make_with_max_episode_steps_grades_the_step_the_time_limit_truncates() -> None:
    task, click = _click_save()
    env = gym.make("legato/FakeDesktop-v0", config=SMALL, max_episode_steps=2)
    assert isinstance(env, gym.wrappers.TimeLimit)
    env.reset(options={"task": task.task_id})
    assert env.step("WAIT")[1:4] == (0.0, False, False)
    _, reward, terminated, truncated, info = env.step(click)  # solved on the last allowed step
    assert (reward, terminated, truncated) == (1.0, False, True)
    assert "eval_s" in info["timings"]
    assert env.spec is not None and env.spec.max_episode_steps == 2
    assert env.unwrapped.spec is not None and env.unwrapped.spec.max_episode_steps == 2
    env.close()


def test_done_on_the_last_allowed_step_is_graded_and_flagged_as_time_limit_does() -> None:
    task, click = _click_save()
    env = gym.make("legato/FakeDesktop-v0", config=SMALL, max_episode_steps=2)
    env.reset(options={"task": task.task_id})
    env.step(click)
    # TimeLimit marks the step that reaches its limit truncated, whether or not the env terminated on it.
    assert env.step("DONE")[1:4] == (1.0, True, True)
    env.close()


def test_an_explicit_time_limit_longer_than_the_default_is_the_limit() -> None:
    task, click = _click_save()
    env = gym.wrappers.TimeLimit(DesktopEnv("fake", SMALL), max_episode_steps=17)
    env.reset(options={"task": task})
    for _ in range(16):
        assert env.step("WAIT")[1:4] == (0.0, False, False)
    assert env.step(click)[1:4] == (1.0, False, True)
    assert env.unwrapped.max_steps == 17  # type: ignore[attr-defined]
    env.close()


def test_spec_max_episode_steps_is_the_limit_the_env_applies() -> None:
    plain = gym.make("legato/FakeDesktop-v0", config=SMALL)
    assert not isinstance(plain, gym.wrappers.TimeLimit)  # no grading-blind TimeLimit is added
    assert plain.spec is not None and plain.spec.max_episode_steps == legato_gym.env.DEFAULT_MAX_STEPS
    plain.close()
    env = gym.make("legato/FakeDesktop-v0", config=SMALL, max_steps=4)
    assert env.spec is not None and env.spec.max_episode_steps == 4
    env.reset(seed=0)
    flags = [env.step("WAIT")[3] for _ in range(4)]
    assert flags == [False, False, False, True]
    env.close()
    capped = gym.make("legato/FakeDesktop-v0", config=SMALL, max_steps=8, max_episode_steps=3)
    capped.reset(seed=0)
    assert [capped.step("WAIT")[3] for _ in range(3)] == [False, False, True]
    assert capped.unwrapped.spec is not None and capped.unwrapped.spec.max_episode_steps == 3
    capped.close()


def test_max_steps_below_a_time_limit_is_a_clear_error() -> None:
    env = gym.make("legato/FakeDesktop-v0", config=SMALL, max_steps=3, max_episode_steps=5)
    with pytest.raises(ConfigError, match=r"max_steps=3 .*TimeLimit\(max_episode_steps=5\)"):
        env.reset(seed=0)
    env.close()


def test_lifecycle_errors_and_idempotent_close() -> None:
    env = DesktopEnv("fake", SMALL)
    with pytest.raises(StateError, match=r"before reset\(task\)"):
        env.step("WAIT")
    env.reset(seed=0)
    with pytest.raises(ActionError):
        env.step(42)  # type: ignore[arg-type]
    env.close()
    env.close()
    with pytest.raises(StateError, match="closed"):
        env.reset()
    with pytest.raises(StateError, match="closed"):
        env.step("WAIT")


def test_a_given_desktop_is_driven_and_closed() -> None:
    desktop = FakeDesktop(SMALL)
    env = DesktopEnv(desktop=desktop)
    env.reset(seed=0)
    assert env.desktop is desktop
    env.close()
    with pytest.raises(StateError):
        desktop.observe()


def test_episode_timings_and_truncate() -> None:
    desktop = FakeDesktop(SMALL)
    episode = Episode(desktop, max_steps=5)
    task = next(t for t in default_tasks() if t.task_id == "fake-infeasible-bluetooth")
    with pytest.raises(StateError, match=r"reset\(task\) first"):
        episode.truncate()
    obs, info = episode.reset(task)
    assert info["ready"] is True and obs.instruction == task.instruction
    _, reward, _, _, info = episode.step("WAIT")
    assert reward == 0.0 and info["step"] == 1 and info["action"] == "WAIT"
    assert set(info["timings"]) == {"act_s", "ready_s", "wait_s", "obs_s"}
    assert all(v >= 0 for v in info["timings"].values())
    assert episode.truncate() == 0.0
    assert set(episode.last_info["timings"]) == {"wait_before_eval_s", "eval_s"}
    assert episode.done
    with pytest.raises(StateError, match="ended"):
        episode.step("FAIL")
    episode.reset(task)
    assert episode.steps == 0 and not episode.done
    assert episode.step("FAIL")[1:3] == (1.0, True)
    with pytest.raises(ConfigError):
        Episode(desktop, max_steps=0)


def test_episode_after_a_desktop_error_needs_a_reset() -> None:
    config = DesktopConfig(screen=(320, 240), options={"faults": {"crash": 1.0, "phases": ["act"]}})
    episode = Episode(FakeDesktop(config, seed=0))
    episode.reset(default_tasks()[0])
    with pytest.raises(legato_gym.DesktopCrashed):
        episode.step("WAIT")
    with pytest.raises(StateError, match="desktop failed"):
        episode.step("WAIT")


def test_package_imports_without_gymnasium() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['gymnasium'] = None\n"
        "import legato_gym, legato_gym.episode, legato_gym.backends.fake\n"
        "assert 'gymnasium' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "try:\n    legato_gym.DesktopEnv\nexcept ImportError:\n    print('lazy')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "lazy"
