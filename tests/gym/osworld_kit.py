"""Shared set-up of the osworld tests: desktop-env's interpreter, built once per machine by `legato osworld setup`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from legato_gym.desktopenv.venv import default_venv, setup_venv
from legato_gym.errors import MissingDependencyError

ROOT = Path(__file__).resolve().parents[2]
LOCAL_TOOLS = ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "xterm")
#: pip's words for "no index reachable / no such package": the set-up then skips instead of failing.
_OFFLINE = (
    "No matching distribution",
    "Could not find a version",
    "Failed to establish",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "ProxyError",
    "Max retries exceeded",
)


def desktop_env_python() -> str:
    """Build (or reuse) desktop-env's venv with legato's own set-up; skip when pip cannot reach an index."""
    try:
        result = setup_venv(default_venv())
    except MissingDependencyError as exc:
        if any(word in str(exc) for word in _OFFLINE):
            pytest.skip(f"pip cannot reach a package index to install desktop-env: {str(exc)[-300:]}")
        raise
    return str(result.python)


def needs_local_tools() -> None:
    missing = [t for t in LOCAL_TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(
            f"the local stand-in desktops need {', '.join(missing)} (apt: xvfb openbox bubblewrap wmctrl xdotool xterm)"
        )


def run_scenarios(python: str, script: str, *argv: str, timeout: float = 180) -> Any:
    """Run ``tests/gym/SCRIPT ARGV...`` in desktop-env's interpreter; its last stdout line as JSON."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
    proc = subprocess.run(
        [python, str(Path(__file__).with_name(script)), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, f"{script} {' '.join(argv)[:200]} failed:\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1])


def run_in_venv(python: str, scenario: str, args: dict[str, Any], timeout: float = 180) -> Any:
    """Run ``osworld_scenarios.py SCENARIO ARGS`` in desktop-env's interpreter; its last stdout line as JSON."""
    return run_scenarios(python, "osworld_scenarios.py", scenario, json.dumps(args), timeout=timeout)


def refused_tasks_file(tmp_path: Path) -> Path:
    """Three tasks: one any grader runs, one no local desktop can (the live web), one only desktop-env grades."""
    tasks = [
        {"task_id": "fine", "config": {"instruction": "Give up.", "config": [], "evaluator": {"func": "infeasible"}}},
        {
            "task_id": "needs-web",
            "config": {
                "instruction": "Open the site.",
                "config": [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://example.org"]}}],
                "evaluator": {"func": "infeasible"},
            },
        },
        {
            "task_id": "odd-metric",
            "config": {
                "instruction": "Edit the sheet.",
                "config": [],
                "evaluator": {"func": "compare_table", "result": {"type": "vm_file", "path": "/a", "dest": "a"}},
            },
        },
    ]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    return path


def spreadsheet(folder: Path, csv: str = "n\n1\n2\n") -> Path:
    """``folder/t.xlsx`` made from ``csv`` by the host's LibreOffice (headless, a profile of its own)."""
    source = folder / "t.csv"
    source.write_text(csv)
    profile = f"-env:UserInstallation={(folder / 'profile').as_uri()}"
    subprocess.run(
        ["soffice", profile, "--headless", "--convert-to", "xlsx", "--outdir", str(folder), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return folder / "t.xlsx"
