"""Input reaches apps in order: one-action keyboard solutions score 1 every time on real desktops.

Each app's task (app_scenarios.py) is solved by one action that moves and then types
(keys_scenarios.ONE_ACTION), three times in a row on one desktop (the later runs on desktops set up ahead),
graded by desktop-env. Before the action runner waited for the focused app between pyautogui calls
(legato_gym.desktop_server.input_sync), Calc typed the formula before it moved and scored 0 in most runs;
benchmarks/keys_in_order.py runs the same 20 times per app on a loaded machine (docs/backends.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from osworld_kit import desktop_env_python, needs_local_tools, run_scenarios

from legato_gym.backends.local import apps

RUNS = 3


@pytest.mark.desktop
@pytest.mark.skipif(shutil.which("soffice") is None, reason="needs LibreOffice (apt: libreoffice-calc ...)")
@pytest.mark.skipif(apps.chromium_binary() is None, reason="needs Chromium (apt: chromium)")
@pytest.mark.skipif(shutil.which("socat") is None, reason="needs socat (apt: socat), which Chrome tasks run")
@pytest.mark.timeout(900)  # the scenario's own bound: twelve office and Chrome episodes, minutes on a loaded machine
def test_one_action_keyboard_solutions_score_1_every_time(tmp_path: Path) -> None:
    needs_local_tools()
    python = desktop_env_python()
    names = ["calc", "writer", "impress", "chrome"]
    args = {"cache": str(tmp_path / "cache"), "files": str(tmp_path / "files"), "apps": names, "runs": RUNS}
    result = run_scenarios(python, "keys_scenarios.py", json.dumps(args), timeout=900)
    scores = {name: [run["score"] for run in result[name]] for name in names}
    held = {name: [run["saved"] for run in result[name] if run["score"] != 1.0] for name in names}
    assert scores == {name: [1.0] * RUNS for name in names}, held
