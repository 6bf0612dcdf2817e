"""OSWorld's download-free tasks on real local desktops: scripted solutions graded by desktop-env, the CLI's
graded records, and tasks that must not score when nothing was done (a GNOME setting, two Chrome settings).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from desktop_kit import play
from osworld_kit import ROOT, desktop_env_python, needs_local_tools, run_scenarios
from typer.testing import CliRunner

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop
from legato_gym.backends.local.coverage import Capabilities, assess
from legato_gym.backends.local.solutions import OSWORLD_SOLUTIONS, osworld_solution
from legato_gym.errors import UnsupportedTaskError
from legato_rl.cli.app import app

OSWORLD = Path(os.environ.get("LEGATO_OSWORLD") or ROOT.parent / "shared" / "osworld")
EXAMPLES = OSWORLD / "evaluation_examples" / "examples"
pytestmark = pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"no OSWorld task data at {OSWORLD}")
LOCK = "a4d98375-215b-4a4d-aee9-3d4370fccc41"  # gsettings: the screen locks automatically
DARK_MODE_OFF = "93eabf48-6a27-4cb6-b963-7d5fe1e0d3a9"  # chrome_appearance_mode_ui, legato's supplement getter
DELETE_ON_CLOSE = "99146c54-4f37-4ab8-9327-5f3291665e1e"  # data_delete_automacally


def real(task_id: str) -> Task:
    path = next(EXAMPLES.glob(f"*/{task_id}.json"))
    config = json.loads(path.read_text())
    return Task(task_id, config["instruction"], config, domain=path.parent.name)


@pytest.mark.desktop
def test_a_gsettings_task_scores_only_when_the_setting_is_made() -> None:
    """Its setup turns the lock off; without dconf the setting was lost and doing nothing scored 1."""
    needs_local_tools()
    config = DesktopConfig(screen=(1280, 720), options={"grader": "local"}, timeouts=Timeouts(reset=120, ready=60))
    with LocalDesktop(config) as desktop:
        assert play(desktop, real(LOCK), ["DONE"]) == 0.0
        assert play(desktop, real(LOCK), osworld_solution(LOCK, correct=False)) == 0.0
        assert play(desktop, real(LOCK), osworld_solution(LOCK)) == 1.0
        absent = {"type": "execute", "parameters": {"command": "gsettings set org.legato.absent key 1", "shell": True}}
        task = Task("t-absent-schema", "Set it.", {"config": [absent], "evaluator": {"func": "infeasible"}})
        with pytest.raises(UnsupportedTaskError, match=r"GSettings schema org\.legato\.absent is not installed"):
            desktop.reset(task)  # gsettings would fail and print nothing: refused, never scored


@pytest.mark.desktop
@pytest.mark.osworld_venv
@pytest.mark.slow
@pytest.mark.timeout(1800)  # the parity run's own bound below: 30 desktops' episodes, slow on a loaded machine
def test_scripted_download_free_tasks_score_as_the_parity_table_says() -> None:
    """The real download-free tasks with a short scripted solution: 1 right, 0 wrong, under both graders."""
    needs_local_tools()
    python = desktop_env_python()
    caps = Capabilities.detect(grader="osworld")
    keys = [f"osworld:{t}" for t in OSWORLD_SOLUTIONS if assess(real(t).config, caps).status == "runnable"]
    if not keys:
        pytest.skip("none of the scripted download-free tasks runs on this machine (`legato osworld coverage`)")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "parity.py"), "--json", "--only", *keys],
        capture_output=True, text=True, timeout=1800, check=False,
        env=dict(os.environ, LEGATO_OSWORLD_VENV=str(Path(python).parent.parent)),
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"generated"')]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    rows = json.loads(lines[-1])["rows"]
    scores = {(r["key"], r["run"]): (r["osworld"], r["local"]) for r in rows}
    assert {k: v[0] for k, v in scores.items()} == {
        (k, run): float(run == "right") for k in keys for run in ("right", "wrong")
    }
    for (key, run), (osworld, local) in scores.items():  # the built-in grader agrees wherever it can grade
        assert local in (None, osworld), (key, run, local)
    table = json.loads((ROOT / "docs" / "parity.json").read_text())["rows"]
    assert {(r["key"], r["run"]): (r["osworld"], r["local"]) for r in table if r["key"] in keys} == scores


@pytest.mark.desktop
@pytest.mark.osworld_venv
@pytest.mark.slow
def test_the_chrome_tasks_once_solved_at_start_score_0_untouched(tmp_path: Path) -> None:
    """Both scored 1 after DONE alone: Chromium took the classic theme, which OSWorld's appearance getter reads as
    light mode, and wrote a migration marker where the delete-on-close getter looks for any setting made."""
    needs_local_tools()
    python = desktop_env_python()
    args = {"cache": str(tmp_path / "c"), "files": str(tmp_path / "f"), "osworld": str(OSWORLD)}
    out = run_scenarios(
        python, "untouched_scenarios.py", json.dumps({**args, "tasks": [DARK_MODE_OFF, DELETE_ON_CLOSE]}), timeout=600
    )
    assert out["scores"] == {DARK_MODE_OFF: 0.0, DELETE_ON_CLOSE: 0.0}


@pytest.mark.desktop
@pytest.mark.osworld_venv
@pytest.mark.slow
def test_collect_runs_download_free_tasks_to_graded_records_with_desktop_envs_grader(tmp_path: Path) -> None:
    needs_local_tools()
    desktop_env_python()
    ids = ["a462a795-fdc7-4b23-b689-e8b6df786b78", LOCK, "f9be0997-4b7c-45c5-b05c-4612b44a6118"]
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([{"task_id": t, "domain": real(t).domain} for t in ids]))
    out = tmp_path / "run"
    result: Any = CliRunner().invoke(
        app,
        ["rl", "collect", "--backend", "local", "--policy-url", "embedded", "--tasks", str(tasks), "--osworld",
         str(OSWORLD), "--out", str(out), "--group", "1", "--desktops", "1", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = {r["task_id"]: r for r in map(json.loads, (out / "rollouts.jsonl").read_text().splitlines())}
    assert {t: (records[t]["status"], records[t]["reward"]) for t in ids} == {
        ids[0]: ("ok", 1.0),  # infeasible, answered FAIL
        LOCK: ("ok", 0.0),  # no GUI step for it: DONE, the lock still off
        ids[2]: ("ok", 0.0),  # banners still on
    }
    assert json.loads((out / "summary.json").read_text())["grader"] == "osworld"
    assert {r["grader"] for r in records.values()} == {"osworld"}  # each reward names who scored it
    assert json.loads((out / "run.json").read_text())["grader"] == "osworld"
