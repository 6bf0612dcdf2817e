"""A backend is one declared unit (``Backend``), and settings are finished once (``Backend.finish``).

The worked example of docs/backends.md runs here as the page shows it: its ``mydesk`` module, its one
``BackendSpec`` line, and the backend driven by name, by Gymnasium id, on Ray placement and by the CLI.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from legato_gym import ConfigError, DesktopConfig, DesktopEnv, Task
from legato_gym.backends import BACKENDS, Backend, BackendSpec, Finished, get_backend, resolve_backend
from legato_gym.backends.local import LocalOptions
from legato_gym.registration import register_envs
from legato_gym.vector import DesktopVectorEnv, RayPlacement
from legato_rl.cli.app import app
from legato_rl.cli.collect import BACKEND_FLAG_DEFAULTS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
SCREEN = (320, 240)


@pytest.fixture
def mydesk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The page's ``mydesk`` module, importable here and in worker processes, and its one line in ``BACKENDS``."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    (tmp_path / "mydesk.py").write_text(blocks[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the vector env's workers import it too
    table = next(block for block in blocks if block.startswith("BACKENDS:"))
    line = next(line for line in table.splitlines() if line.endswith("# the one line"))
    spec = eval(line.split("#")[0].strip().rstrip(","), {"BackendSpec": BackendSpec})  # the page's line, as written
    monkeypatch.setitem(BACKENDS, spec.name, spec)
    register_envs()
    import mydesk  # type: ignore[import-not-found]

    yield mydesk
    gym.registry.pop(spec.gym_id, None)


def test_the_worked_example_is_one_package_and_one_line(mydesk: Any) -> None:
    unit = resolve_backend("blank")
    assert unit == mydesk.BACKEND and unit.gym_id == "legato/BlankDesktop-v0"
    env = gym.make("legato/BlankDesktop-v0", config=DesktopConfig(screen=SCREEN))  # by the line's id
    env.reset(seed=0)
    assert env.step("DONE")[1:3] == (1.0, True)
    env.close()
    with DesktopEnv("blank", DesktopConfig(screen=SCREEN)) as env2:  # by the line's name
        env2.reset(options={"task": "blank-done"})
        assert env2.step("FAIL")[1] == 0.0
    assert RayPlacement().for_backend("blank") == (0.25, 64 * 2**20, {})  # its declared needs
    with pytest.raises(ConfigError, match=r"--grader local applies to --backend local only, not 'blank'"):
        unit.with_cli(DesktopConfig(), {"--grader": "local"}, BACKEND_FLAG_DEFAULTS)


def test_the_worked_example_collects_by_module_name_with_its_solution(mydesk: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["rl", "collect", "--backend", "mydesk:BACKEND", "--policy-url", "embedded", "--out", str(out),
         "--group", "1", "--desktops", "1", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["status"], r["reward"]) for r in records] == [("blank-done", "ok", 1.0)]


def test_a_backend_that_declares_no_ray_needs_is_never_placed_as_needing_nothing() -> None:
    undeclared = Backend("mine", desktop_class=object)
    with pytest.raises(
        ConfigError, match=r"backend 'mine' declares no Ray needs.*RayPlacement\(cpus=..., memory=...\)"
    ):
        RayPlacement().for_backend(undeclared)
    assert RayPlacement(cpus=2.0, memory=2**30).for_backend(undeclared) == (2.0, 2**30, {})
    assert RayPlacement().for_backend("local") == (1.0, 2**30, {"legato_xvfb": 1.0})


def test_settings_are_finished_once_and_carried_down() -> None:
    checked: list[list[str]] = []

    def check_tasks(tasks: Sequence[Task], config: DesktopConfig) -> list[str]:
        checked.append([t.task_id for t in tasks])
        assert isinstance(config.options, dict) is False  # the options are typed before the check
        return ["fine"] * len(tasks)

    fake = resolve_backend("fake")
    counting = replace(fake, check_tasks=check_tasks)
    tasks = list(fake.default_tasks(DesktopConfig(screen=SCREEN)))[:2]
    finished = counting.finish(DesktopConfig(screen=SCREEN, options={"latency": {"act": 0.0}}), tasks)
    assert (
        isinstance(finished, Finished)
        and finished.verdicts == ("fine", "fine")
        and checked == [[t.task_id for t in tasks]]
    )
    assert counting.finish(finished, tasks) is finished  # carried as it is: no second check
    with DesktopVectorEnv(1, counting, finished, tasks=tasks, seed=0) as venv:
        assert venv.config is finished.config
        venv.reset()
    with DesktopEnv(counting, finished) as env:
        assert env.config is finished.config and env.tasks == tasks
    assert len(checked) == 1
    with pytest.raises(ConfigError, match=r"settings finished for backend 'fake' were given to backend 'local'"):
        resolve_backend("local").finish(finished)


def test_the_osworld_backend_resolves_its_worker_interpreter_when_finished(tmp_path: Path) -> None:
    given = DesktopConfig(worker_python="/opt/desktop-env/bin/python")
    assert resolve_backend("osworld").finish(given).config.worker_python == "/opt/desktop-env/bin/python"
    assert resolve_backend("fake").finish(given).config is given  # fake declares none: kept as given


def test_old_names_are_accepted_for_one_release_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"DesktopConfig\(python=...\) is now DesktopConfig\(worker_python"):
        config = DesktopConfig(python="/usr/bin/python3")
    assert config.worker_python == "/usr/bin/python3"
    with pytest.warns(DeprecationWarning, match=r"DesktopConfig.python is now DesktopConfig.worker_python"):
        assert config.python == "/usr/bin/python3"  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match=r"options.python is now options.sandbox_python"):
        options = LocalOptions.from_mapping({"python": "/usr/bin/python3"})
    assert options.sandbox_python == "/usr/bin/python3"
    with pytest.warns(DeprecationWarning, match=r"LocalOptions\(python=...\) is now LocalOptions\(sandbox_python"):
        assert LocalOptions(python="/x").sandbox_python == "/x"  # type: ignore[call-arg]
    with pytest.warns(DeprecationWarning, match="get_backend"):
        cls, _ = get_backend("fake")
    assert cls is resolve_backend("fake").desktop_class
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing, replace() included
        replaced = replace(DesktopConfig(worker_python="/a"), worker_python="/b")
        assert replaced.worker_python == "/b"
        assert replace(LocalOptions(sandbox_python="/a"), prestart=False).sandbox_python == "/a"
