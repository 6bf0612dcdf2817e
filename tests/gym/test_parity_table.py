"""docs/backends.md's parity table is what benchmarks/parity.py measured, for every task with a scripted solution.

The numbers come from ``python benchmarks/parity.py --write`` (real desktops, desktop-env's interpreter);
this test fails when the table was edited by hand or a scripted task was added without measuring it again.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def parity() -> Any:
    spec = importlib.util.spec_from_file_location("legato_parity", ROOT / "benchmarks" / "parity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("legato_parity", module)
    spec.loader.exec_module(module)
    return module


def test_the_table_in_the_docs_is_the_measured_one() -> None:
    module = parity()
    data = json.loads(module.PARITY_JSON.read_text())
    page = module.BACKENDS_MD.read_text()
    block = page.split(module.START, 1)[1].split(module.END, 1)[0]
    assert block == "\n" + module.render(data), "run `python benchmarks/parity.py --write`"


def test_every_scripted_task_is_in_the_table_right_and_wrong() -> None:
    module = parity()
    rows = json.loads(module.PARITY_JSON.read_text())["rows"]
    measured = {(row["key"], row["run"]) for row in rows}
    expected = {(key, run) for key in module.scenario_keys() for run in ("right", "wrong")}
    assert measured == expected, "a scripted task was added or removed: run `python benchmarks/parity.py --write`"
    for row in rows:  # a reward of each grader, or the reason the built-in one cannot grade the task
        assert row["osworld"] is not None, row
        assert row["local"] is not None or row["note"], row
