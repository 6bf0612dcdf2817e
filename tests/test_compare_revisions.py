"""benchmarks/compare_revisions.py: the figures it reads from a benchmark's tables and the ratios it reports."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("legato_compare", ROOT / "benchmarks" / "compare_revisions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _module()

OUTPUT = """\
Some prose | with a bar that is not a table.

| figure | value | target |
|---|---|---|
| driver CPU per policy step | 1.68 ms | < 2 ms |
| gap (median / max) | 0.1 ms / 11.4 ms | |
| errors | none | none |

| desktops | overhead | worker PSS (MiB) |
|---:|---:|---:|
| 8 | +2.45 | 35 |
| 256 | -0.10 | 1,035 |
"""


def test_every_number_in_every_table_is_read_by_column_and_row() -> None:
    figures = compare.table_figures(OUTPUT)

    assert figures == {
        ("value", "driver CPU per policy step"): 1.68,
        ("value", "gap (median / max)"): 0.1,
        ("overhead", "8"): 2.45,
        ("worker PSS (MiB)", "8"): 35.0,
        ("overhead", "256"): -0.10,
        ("worker PSS (MiB)", "256"): 1035.0,
    }


def test_the_report_gives_medians_and_their_ratio() -> None:
    before = {("overhead", "value", "cpu"): [2.0, 9.0, 1.0], ("overhead", "value", "zero"): [0.0]}
    after = {("overhead", "value", "cpu"): [1.0, 1.5, 0.5], ("overhead", "value", "zero"): [0.0]}

    text = compare.report("base", ".", before, after, rounds=3)

    assert "| overhead | cpu | value | 2 (1–9) | 1 (0.5–1.5) | 0.50 |" in text
    assert "| overhead | zero | value | 0 | 0 | – |" in text


def test_a_revision_that_is_not_a_commit_is_refused_by_name(tmp_path: Path) -> None:
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True, check=False).returncode != 0:
        pytest.skip("not a git checkout")
    with pytest.raises(SystemExit, match="no-such-revision"):
        compare.checkout("no-such-revision", tmp_path)


def test_the_cli_refuses_zero_rounds(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        compare.main(["HEAD", "--rounds", "0"])
    assert "--rounds 0" in capsys.readouterr().err
