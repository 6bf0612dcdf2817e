"""The osworld backend end to end, with desktop-env in its own venv and local desktops standing in for VMs.

desktop-env's interpreter is built by `legato osworld setup` (once per machine; the session fixture reuses
it). The stand-in VMs are sandboxed local desktops behind a loopback TCP forwarder, speaking OSWorld's
protocol; setup, post-config and grading run desktop-env's own SetupController, getters and metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from osworld_kit import desktop_env_python, needs_local_tools, run_in_venv

import legato_gym  # noqa: F401  (registers legato/OSWorld-v0)
from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import solution
from legato_gym.backends.local.tasks import LOCAL_TASKS, OSWORLD_OS_TASKS, default_tasks
from legato_gym.desktopenv.venv import check_venv

pytestmark = [pytest.mark.osworld_venv, pytest.mark.desktop]

SCREEN = (1024, 768)


@pytest.fixture(scope="module")
def venv_python() -> str:
    return desktop_env_python()


@pytest.fixture(scope="module")
def download_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("osworld-downloads")


def test_check_imports_controllers_getters_and_metrics(venv_python: str) -> None:
    report = check_venv(python=venv_python)
    assert report.ok, report.failed
    assert report.versions["desktop-env"] == "1.0.2"
    assert report.versions["gymnasium"].startswith("0.28")
    assert "desktop_env.evaluators.metrics" in report.imported
    assert report.getters > 40 and report.metrics > 100
    assert "torch" not in report.versions
    assert {"easyocr", "librosa"} <= set(report.stubbed)
    assert report.unavailable_metrics["compare_image_text"] == ["easyocr"]
    assert "exact_match" not in report.unavailable_metrics


def test_local_backend_grades_with_desktop_env(venv_python: str, download_cache: Path, osworld_path: Path) -> None:
    needs_local_tools()
    result = run_in_venv(venv_python, "local_grader", {"cache": str(download_cache), "osworld": str(osworld_path)})
    assert "site-packages/desktop_env" in result["desktop_env"]
    scores = result["scores"]
    assert set(scores) == set(LOCAL_TASKS) | set(OSWORLD_OS_TASKS)
    for task_id, (right, wrong) in scores.items():
        assert (right, wrong) == (1.0, 0.0), task_id


def test_a_task_set_up_ahead_is_graded_by_desktop_env_as_any_other(venv_python: str, download_cache: Path) -> None:
    """desktop-env's SetupController runs the setup on the desktop started ahead; its evaluator grades it."""
    needs_local_tools()
    result = run_in_venv(venv_python, "prepared", {"cache": str(download_cache)})
    assert result["runs"] == [[1.0, "fast"], [0.0, "fast"], [1.0, "prepared"], [0.0, "prepared"]]


def test_dead_vm_is_replaced_and_unverifiable_reset_reverts(venv_python: str, download_cache: Path) -> None:
    needs_local_tools()
    result = run_in_venv(venv_python, "lifecycle", {"cache": str(download_cache)})
    assert result["first"] == [1.0, "fast"]
    assert result["unverifiable"] == [1.0, "fallback"]
    assert result["dead"] == [1.0, "fallback"]
    assert result["again"] == [0.0, "fast"]


def test_windowless_launches_do_not_wait_and_a_failing_probe_reverts(venv_python: str, download_cache: Path) -> None:
    """socat opens no window: the ready signal does not wait for one; wmctrl failing (X full) is no clean reset."""
    needs_local_tools()
    result = run_in_venv(venv_python, "probes", {"cache": str(download_cache)}, timeout=400)
    assert result["windowless"] == [True, "fast"]
    assert result["clean"] == [True, "fast"]
    assert result["screenshots"] == [1, [True, True]]  # the observation's only: the waits watch the screen in the VM
    assert result["x_full"] == "fallback"
    assert result["after"] == [True, "fast"]


def test_a_leaking_server_is_recycled_and_resets_stay_fast(venv_python: str, download_cache: Path) -> None:
    """The stand-in's server leaks an X connection per screenshot as OSWorld's does; the backend restarts it
    before its budget runs out and during fast reset, and re-counts it as a first-boot process."""
    needs_local_tools()
    result = run_in_venv(venv_python, "recycle", {"cache": str(download_cache)}, timeout=400)
    assert result["kinds"] == ["fast"] * 4
    assert result["recycles"][0] >= 1 and result["recycles"] == sorted(set(result["recycles"]))
    assert result["servers"] == 4 and result["xterms_left"] == "0"  # a new server in each episode


def _probe_clean() -> Task:
    """Graded by desktop-env: 1 when no file or app of an earlier episode survived the reset."""
    config = {
        "id": "legato-probe-clean",
        "instruction": "Do nothing.",
        "config": [],
        "evaluator": {
            "func": "exact_match",
            "result": {
                "type": "vm_command_line",
                # killed apps are zombies until the server reaps them: count the live ones
                "command": "ls -A ~ | grep -c hello.txt; ps -u $(id -u) -o stat=,comm= | grep -v '^Z' | grep -c xterm",
                "shell": True,
            },
            "expected": {"type": "rule", "rules": {"expected": "0\n0\n"}},
        },
    }
    return Task("legato-probe-clean", "Do nothing.", config, domain="local")


@pytest.fixture(scope="module")
def osworld_env(venv_python: str, download_cache: Path, osworld_path: Path) -> Iterator[Any]:
    needs_local_tools()
    config = DesktopConfig(
        screen=SCREEN,
        osworld_path=osworld_path,
        worker_python=venv_python,
        options={
            "provider": "local",
            "download_cache": str(download_cache),
            "local": {"sandbox_python": venv_python, "server_mode": "osworld"},
        },
    )
    env = gym.make("legato/OSWorld-v0", config=config, tasks=default_tasks(config), max_steps=5)
    yield env
    env.close()


def _episode(env: Any, task: Task, actions: list[str]) -> tuple[float, str]:
    obs, _ = env.reset(options={"task": task})
    assert obs["screenshot"].shape == (SCREEN[1], SCREEN[0], 3) and obs["screenshot"].dtype == np.uint8
    reward, terminated = 0.0, False
    for action in actions:
        obs, reward, terminated, _, _ = env.step(action)
    assert terminated
    return float(reward), env.unwrapped.desktop.last_reset_kind


def test_gym_custom_loop_fast_reset_and_revert(osworld_env: Any, osworld_path: Path) -> None:
    tasks = {t.task_id: t for t in default_tasks(DesktopConfig(osworld_path=osworld_path))}
    terminal = tasks["local-terminal-create-file"]
    assert _episode(osworld_env, terminal, solution(terminal.task_id, SCREEN)) == (1.0, "fast")
    # the next episode starts clean: the file and the xterm of the last one are gone (graded in the VM)
    assert _episode(osworld_env, _probe_clean(), ["DONE"]) == (1.0, "fast")
    assert _episode(osworld_env, terminal, solution(terminal.task_id, SCREEN, correct=False)) == (0.0, "fast")
    # a real OSWorld os task: snapshot revert, setup by desktop-env (sudo mkdir), graded by desktop-env
    rename = tasks["e0df059f-28a6-4169-924f-b9623e7184cc"]
    assert _episode(osworld_env, rename, solution(rename.task_id, SCREEN)) == (1.0, "revert")
    assert _episode(osworld_env, rename, solution(rename.task_id, SCREEN, correct=False)) == (0.0, "revert")
    infeasible = tasks["b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa"]
    assert _episode(osworld_env, infeasible, ["FAIL"]) == (1.0, "revert")
    assert _episode(osworld_env, infeasible, ["DONE"]) == (0.0, "revert")


def test_observation_matches_the_server_png(osworld_env: Any) -> None:
    obs, _ = osworld_env.reset(options={"task": _probe_clean()})
    desktop = osworld_env.unwrapped.desktop
    observation = desktop.observe()
    assert observation.png is not None and observation.png.startswith(b"\x89PNG")
    assert observation.screenshot.shape == obs["screenshot"].shape


def test_vector_env_workers_run_in_desktop_env_interpreter(
    venv_python: str, download_cache: Path, osworld_path: Path
) -> None:
    needs_local_tools()
    config = DesktopConfig(
        screen=SCREEN,
        osworld_path=osworld_path,
        worker_python=venv_python,
        options={
            "provider": "local",
            "download_cache": str(download_cache),
            "local": {"sandbox_python": venv_python, "server_mode": "osworld"},
        },
    )
    tasks = {t.task_id: t for t in default_tasks(config)}
    rename = tasks["local-files-rename"]
    envs = gym.make_vec("legato/OSWorld-v0", num_envs=2, config=config, tasks=[rename], max_steps=5)
    try:
        obs, _ = envs.reset(options={"task": rename})
        assert obs["screenshot"].shape == (2, SCREEN[1], SCREEN[0], 3)
        right, wrong = solution(rename.task_id, SCREEN), solution(rename.task_id, SCREEN, correct=False)
        _, rewards, terminated, _, _ = envs.step([right[0], wrong[0]])
        _, rewards, terminated, _, _ = envs.step(["DONE", "DONE"])
        assert list(terminated) == [True, True]
        assert list(rewards) == [1.0, 0.0]
    finally:
        envs.close()
