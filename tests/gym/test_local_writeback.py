"""Grading waits for apps that write their settings late, and only when the grader reads them (writeback.py)."""

from __future__ import annotations

import json
from pathlib import Path

from legato_gym.backends.local.writeback import files_read, write_back_delay, written_files

AUTOSAVE = {  # OSWorld's libreoffice_impress/2cd43775: graded from LibreOffice's registry file
    "func": "check_auto_saving_time",
    "result": {
        "type": "vm_file",
        "path": "/home/user/.config/libreoffice/4/user/registrymodifications.xcu",
        "dest": "registrymodifications.xcu",
    },
    "expected": {"type": "rule", "rules": {"minutes": 3}},
}


def test_libreoffice_registry_waits_while_libreoffice_runs() -> None:
    assert files_read(AUTOSAVE) == ({".config/libreoffice/4/user/registrymodifications.xcu"}, {"vm_file", "rule"})
    assert write_back_delay(AUTOSAVE, {"Xvfb", "soffice.bin"}) >= 1.5
    # a post-config that closed LibreOffice made it write on exit: nothing to wait for
    assert write_back_delay(AUTOSAVE, {"Xvfb", "python3"}) == 0.0


def test_a_document_file_or_a_devtools_getter_reads_at_once() -> None:
    document = {"func": "compare_table", "result": {"type": "vm_file", "path": "/home/user/Desktop/a.xlsx"}}
    assert write_back_delay(document, {"soffice.bin"}) == 0.0
    tabs = {"func": "is_expected_tabs", "result": {"type": "open_tabs_info"}}
    assert write_back_delay(tabs, {"chromium"}) == 0.0


def test_chrome_preferences_getters_wait_for_the_delayed_writer() -> None:
    evaluator = {"func": "exact_match", "result": {"type": "enable_do_not_track"}, "expected": {"type": "rule"}}
    assert write_back_delay(evaluator, {"chromium"}) >= 10.0
    assert write_back_delay(evaluator, {"soffice.bin"}) == 0.0
    listed = {"func": "check", "result": [{"type": "vm_file", "path": ["~/.config/google-chrome/Default/Bookmarks"]}]}
    assert write_back_delay(listed, {"chrome"}) >= 10.0


def test_every_real_task_reading_libreoffice_settings_is_covered(osworld_path: Path) -> None:
    found = 0
    for path in sorted((osworld_path / "evaluation_examples" / "examples").glob("*/*.json")):
        evaluator = json.loads(path.read_text())["evaluator"]
        paths, _ = files_read(evaluator)
        if any("registrymodifications.xcu" in p for p in paths):
            found += 1
            assert write_back_delay(evaluator, {"soffice.bin"}) > 0, path.name
    assert found >= 3


def test_the_files_to_watch_are_those_a_running_late_writer_writes() -> None:
    assert written_files(AUTOSAVE, {"soffice.bin"}) == [".config/libreoffice/4/user/registrymodifications.xcu"]
    assert written_files(AUTOSAVE, {"chromium"}) == []
    getter_only = {"func": "exact_match", "result": {"type": "enable_do_not_track"}}
    assert written_files(getter_only, {"chromium"}) == []  # waited for in full: no file named to watch
