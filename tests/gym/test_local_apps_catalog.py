"""One record per app (legato_gym/backends/local/apps/catalog.py): what every consumer reads of it."""

from __future__ import annotations

import re

import pytest

from legato_gym.backends.local import apps, coverage, writeback
from legato_gym.backends.local.apps import catalog, gnome
from legato_gym.backends.local.sandbox import files, shell


def test_each_name_executable_and_spelling_belongs_to_one_app() -> None:
    names = [app.name for app in catalog.APPS]
    assert len(names) == len(set(names))
    for attribute in ("executables", "related", "launchers"):
        values = [value for app in catalog.APPS for value in getattr(app, attribute)]
        assert len(values) == len(set(values)), f"{attribute} claimed by two apps"
    slots = [app.dock_slot for app in catalog.APPS if app.dock_slot is not None]
    assert len(slots) == len(set(slots))
    assert all(spelling == spelling.lower() for app in catalog.APPS for spelling in app.related)
    mimes = [mime for app in catalog.APPS for _, types in app.mime for mime in types]
    assert len(mimes) == len(set(mimes)), "a MIME type opens in two apps"


def test_coverage_knows_the_apps_by_their_records() -> None:
    assert {app.name: app.executables for app in catalog.APPS} == coverage.APPS
    needs = coverage.task_needs(
        {
            "id": "t",
            "related_apps": ["LibreOffice_Calc", "browser", "ubuntu_media_player", "os"],
            "config": [{"type": "launch", "parameters": {"command": ["evince", "/tmp/a.pdf"]}}],
            "evaluator": {"func": "check", "result": {"type": "vm_file", "path": "/tmp/a"}},
        }
    )
    assert {"libreoffice", "chrome", "vlc", "pdf viewer"} <= set(needs.apps)
    assert "os" not in needs.apps


def test_mime_defaults_and_the_baseline_home_come_from_the_records() -> None:
    assert gnome.MIME_DEFAULTS["text/csv"] == "libreoffice-calc.desktop"
    assert gnome.MIME_DEFAULTS["inode/directory"] == "org.gnome.Nautilus.desktop"
    assert gnome.MIME_DEFAULTS["image/x-xcf"] == "gimp.desktop"
    assert gnome.MIME_DEFAULTS["text/plain"] == "org.xfce.mousepad.desktop"
    home = apps.baseline_files()
    for app in catalog.APPS:
        for path, content in (app.files() if app.files else {}).items():
            assert home[path] == content, f"{app.name}'s {path} is not in the baseline home as its record has it"
    mimeapps = home[".config/mimeapps.list"].decode()
    for app in catalog.APPS:
        for desktop, types in app.mime:
            for mime in types:
                assert f"{mime}={desktop}\n" in mimeapps


def test_both_window_managers_place_windows_as_the_records_say() -> None:
    # the GNOME session's table (shell.APP_WINDOWS) is what the records draw, so the session can read them
    assert catalog.window_table() == shell.APP_WINDOWS
    rc = files.OPENBOX_RC.replace("{applications}", shell.openbox_applications())
    maximized = set(re.findall(r'<application class="([^"]+)" type="normal"><maximized>yes</maximized>', rc))
    expected = {
        cls for app in catalog.APPS if app.window is not None and app.window.maximized for cls in app.window.classes
    }
    assert maximized == expected
    assert "Gimp*" in maximized  # GIMP's main window (type normal), not its dialogs
    assert "vlc" not in maximized and "xterm" not in maximized  # the VM opens them at their own size


def test_the_dock_is_the_vms_dock_top_to_bottom() -> None:
    assert catalog.dock_launchers() == shell.FAVORITES
    assert catalog.dock_launchers()[:3] == ("google-chrome.desktop", "thunderbird.desktop", "code.desktop")


def test_ready_rules_are_found_by_the_program_a_launch_runs() -> None:
    assert catalog.app_for_program("soffice") is catalog.app_for_program("libreoffice")
    assert catalog.app_for_program("xterm") is None  # any window of it will do
    assert apps.ready_title("soffice --writer /tmp/a.docx") == "a.docx"
    assert apps.ready_title("libreoffice --headless --convert-to pdf x.docx") is None
    assert apps.ready_title(["env", "LANG=C", "/usr/bin/gimp-2.10", "-n", "/tmp/x.png"]) == "[x]"
    assert apps.ready_title("nautilus ~/Documents/") == "Documents"
    assert apps.ready_title("google-chrome --remote-debugging-port=1337") == "Chromium"


def test_write_back_and_warm_up_come_from_the_records() -> None:
    assert {w.app: w.delay_s for w in writeback.WRITERS} == {"libreoffice": 2.0, "chrome": 11.0}
    reads_bookmarks = {"func": "is_expected_bookmarks", "result": {"type": "bookmarks"}}
    assert writeback.write_back_delay(reads_bookmarks, {"chromium", "Xvfb"}) == 11.0
    assert writeback.write_back_delay(reads_bookmarks, {"soffice.bin"}) == 0.0
    warmed = [app for app in catalog.APPS if app.warm_up is not None]
    assert [app.name for app in warmed] == ["gimp"]
    assert warmed[0].warm_up is not None and warmed[0].warm_up.profile == apps.GIMP_PROFILE


def test_windowless_launches_and_open_titles_follow_the_apps_rules() -> None:
    assert not apps.opens_window("libreoffice --headless --convert-to pdf x.docx")
    assert not apps.opens_window(["code", "--install-extension", "ms-python.python"])
    assert apps.opens_window("code /home/user/project") and not apps.opens_window("socat tcp-listen:9222")
    assert [apps.open_title(p) for p in ("/tmp/a.MKV", "~", "/tmp/x.xcf", "/tmp/r.xlsx")] == [
        "VLC media player",
        "Home",
        "[x]",
        "r.xlsx",
    ]
    assert apps.loads_after_title(["project - Visual Studio Code"]) and not apps.loads_after_title(["a.docx"])
    assert catalog.app_named("libreoffice").executables == ("libreoffice", "soffice")
    with pytest.raises(KeyError, match="no app is called 'word'"):
        catalog.app_named("word")
