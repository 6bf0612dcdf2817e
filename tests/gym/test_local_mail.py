"""Thunderbird, the file manager, the PDF viewer and the terminal on local desktops, as OSWorld's VM has them.

The per-app knowledge (the apps package) is checked without a desktop; the rest runs the real apps in the sandbox:
Thunderbird on its baseline profile, nautilus and evince by MIME type, gnome-terminal on the sandbox's
session bus and on ctrl+alt+t. The graded tasks (Thunderbird, the terminal, the text editor) live in
app_scenarios.py and run in desktop-env's interpreter, which grades them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from osworld_kit import desktop_env_python, needs_local_tools, run_scenarios

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, apps
from legato_gym.backends.local.coverage import Capabilities, assess, task_needs
from legato_gym.backends.local.sandbox.lookalike import layout

SCREEN = (1280, 720)
PROFILE = "/home/user/.thunderbird/t5q2a5hp.default-release"

needs_thunderbird = pytest.mark.skipif(apps.thunderbird_dir() is None, reason="needs Thunderbird (apt: thunderbird)")
needs_gnome_terminal = pytest.mark.skipif(
    shutil.which("gnome-terminal") is None, reason="needs gnome-terminal (apt: gnome-terminal)"
)
needs_nautilus_evince = pytest.mark.skipif(
    shutil.which("nautilus") is None or shutil.which("evince") is None, reason="needs apt: nautilus evince"
)


def _pdf(text: str) -> bytes:
    """A one-page PDF that shows ``text``."""
    stream = f"BT /F1 24 Tf 72 700 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    table = b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"xref\n0 %d\n0000000000 65535 f \n%s" % (len(objects) + 1, table)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, len(out))


# ------------------------------------------------------------------------------------ per-app knowledge


def test_install_hash_is_the_one_thunderbird_keys_its_profile_with() -> None:
    # what Thunderbird wrote into profiles.ini for Debian's (and Ubuntu's) /usr/lib/thunderbird
    assert apps.install_hash("/usr/lib/thunderbird") == "FDC34C9F024745EB"
    folders = ["/t", "/opt/tb", "/usr/lib/thunderbird-esr", "/" + "x" * 40, "/opt/" + "long/" * 20 + "thunderbird"]
    hashes = {apps.install_hash(folder) for folder in folders}  # every length branch of CityHash64
    assert len(hashes) == len(folders) and all(len(h) == 16 for h in hashes)


def test_the_baseline_profile_is_where_osworlds_getters_read_and_is_set_up() -> None:
    files = apps.thunderbird_files("/usr/lib/thunderbird")
    profiles = files[".thunderbird/profiles.ini"].decode()
    assert "Path=t5q2a5hp.default-release" in profiles
    assert "[InstallFDC34C9F024745EB]\nDefault=t5q2a5hp.default-release\n" in profiles
    assert files[".thunderbird/installs.ini"].decode().startswith("[FDC34C9F024745EB]\n")
    prefs = files[f"{apps.THUNDERBIRD_PROFILE}/prefs.js"].decode()
    assert 'user_pref("mail.server.server1.type", "none");' in prefs  # Local Folders: not a first run
    assert f"/home/user/{apps.THUNDERBIRD_PROFILE}" == PROFILE


@needs_thunderbird
def test_usr_bin_thunderbird_gives_the_vms_window_class_and_defaults_without_first_run_dialogs() -> None:
    files = apps.system_files()
    script = files["/usr/bin/thunderbird"]
    assert script.startswith("#!/bin/sh\n") and '--class thunderbird "$@"' in script
    syspref = files[apps.THUNDERBIRD_SYSPREF]
    assert syspref.startswith(Path(apps.THUNDERBIRD_SYSPREF).read_text())  # the host's own defaults kept
    assert 'pref("mail.provider.suppress_dialog_on_startup", true);' in syspref
    assert 'pref("mail.rights.override", true);' in syspref
    assert "lockPref" not in syspref  # defaults only: a task's profile still sets what it sets
    tracker = f"{apps.DBUS_SERVICES}/org.freedesktop.Tracker3.Miner.Files.service"
    assert tracker not in files  # the file indexer starts on demand, as on the VM (GNOME Videos browses with it)


def test_ready_titles_of_thunderbird_the_file_manager_and_the_pdf_viewer() -> None:
    assert apps.ready_title(["/usr/bin/thunderbird"]) == "Mozilla Thunderbird"
    assert apps.ready_title("nautilus /home/user/Documents/reports/") == "reports"
    assert apps.ready_title(["nautilus", "--new-window"]) == "Home"
    assert apps.ready_title("evince ~/Desktop/paper.pdf") == "paper.pdf"
    assert apps.ready_title("evince") is None
    steps = [{"type": "open", "parameters": {"path": p}} for p in ("/home/user/", "/home/user/Desktop/a.pdf")]
    assert apps.ready_titles(steps) == ["Home", "a.pdf"]


def test_folders_pdfs_and_mail_open_in_gnomes_apps() -> None:
    mime = apps.baseline_files()[".config/mimeapps.list"].decode().splitlines()
    assert "application/pdf=org.gnome.Evince.desktop" in mime  # not GIMP, which also takes PDFs
    assert "inode/directory=org.gnome.Nautilus.desktop" in mime
    assert "x-scheme-handler/mailto=thunderbird.desktop" in mime


def test_ctrl_alt_t_runs_gnomes_terminal_or_else_xterm() -> None:
    def which_of(*names: str) -> Callable[[str], str | None]:
        return lambda name: f"/usr/bin/{name}" if name in names else None

    keybind = apps.openbox_keybinds(which_of("gnome-terminal", "xterm"))
    assert keybind.strip() == (
        '<keybind key="C-A-t"><action name="Execute"><command>gnome-terminal</command></action></keybind>'
    )
    assert "<command>xterm</command>" in apps.openbox_keybinds(which_of("xterm"))
    assert apps.openbox_keybinds(which_of()) == ""


def test_the_home_has_ubuntus_shell_start_up_files() -> None:
    if not Path("/etc/skel/.bashrc").is_file():
        pytest.skip("this host has no /etc/skel/.bashrc")
    assert apps.baseline_files()[".bashrc"] == Path("/etc/skel/.bashrc").read_bytes()


def test_coverage_names_the_pdf_viewer_and_the_file_manager() -> None:
    config = {
        "id": "t",
        "related_apps": ["pdf"],
        "config": [{"type": "launch", "parameters": {"command": "evince a.pdf"}}],
    }
    assert task_needs(config).apps == {"pdf viewer"}
    assert task_needs({"config": [{"type": "launch", "parameters": {"command": ["nautilus"]}}]}).apps == {
        "file manager"
    }
    verdict = assess(config, Capabilities.detect(which=lambda name: None))
    assert (
        verdict.status == "refused" and "app 'pdf viewer' is not installed (none of evince on PATH)" in verdict.reason
    )


# ------------------------------------------------------------------------------------ real desktops


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    needs_local_tools()
    with LocalDesktop(DesktopConfig(screen=SCREEN)) as d:
        yield d


def _task(steps: list[dict[str, Any]]) -> Task:
    return Task("legato-mail-probe", "Do nothing.", {"config": steps, "evaluator": {"func": "infeasible"}})


def _poll(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.1)
    return value


def _geometry(desktop: LocalDesktop) -> list[list[str]]:
    return [line.split(None, 7) for line in desktop.client.execute(["wmctrl", "-lG"])["output"].splitlines()]


@pytest.mark.desktop
@needs_thunderbird
def test_thunderbird_starts_on_its_baseline_profile_without_first_run_dialogs(desktop: LocalDesktop) -> None:
    desktop.reset(_task([{"type": "launch", "parameters": {"command": ["/usr/bin/thunderbird"]}}]))
    assert desktop.wait_after_reset().ready
    # the baseline's Local Folders account is shown: no account wizard, no second window, no new profile
    shown = _poll(lambda: [w for w in desktop.display.windows() if "Local Folders" in w.title], "Local Folders shown")
    assert [(w.wm_class, w.title) for w in desktop.display.windows()] == [
        ("Mail.thunderbird", "Local Folders - Mozilla Thunderbird")
    ], shown
    assert int(_geometry(desktop)[0][4]) == layout(SCREEN).work_area[2]  # maximized
    listing = desktop.client.execute("ls ~/.thunderbird", shell=True)["output"].split()
    assert "t5q2a5hp.default-release" in listing and not [n for n in listing if n.endswith(".default-default")]
    # OSWorld's post-config closes it by its class, and the getters then read the profile's files
    response = desktop.client.post_json(
        "/setup/close_window", {"window_name": "Mail.thunderbird", "strict": True, "by_class": True}
    )
    assert response.status_code == 200
    assert desktop.display.wait_no_windows(time.monotonic() + 60)
    written = desktop.client.file(f"{PROFILE}/prefs.js") or b""
    assert b'"mail.server.server1.type", "none"' in written and b"toolkit.startup.last_success" in written
    desktop.reset(_task([]))  # the fast reset puts the baseline profile back
    baseline = apps.thunderbird_files()[f"{apps.THUNDERBIRD_PROFILE}/prefs.js"]
    assert desktop.client.file(f"{PROFILE}/prefs.js") == baseline != written


@pytest.mark.desktop
def test_the_users_folders_have_their_xdg_names_as_after_the_vms_first_login(desktop: LocalDesktop) -> None:
    if subprocess.run(["/usr/bin/python3", "-c", "import gi"], capture_output=True).returncode != 0:
        pytest.skip("this host's /usr/bin/python3 has no gi (python3-gi) to ask GLib with")
    desktop.reset(_task([]))
    ask = "from gi.repository import GLib; print(GLib.get_user_special_dir(GLib.UserDirectory.DIRECTORY_{}))"
    for key, folder in (("DOCUMENTS", "Documents"), ("DOWNLOAD", "Downloads"), ("VIDEOS", "Videos")):
        result = desktop.client.execute(["/usr/bin/python3", "-c", ask.format(key)])
        assert result["output"].strip() == f"/home/user/{folder}", result


@pytest.mark.desktop
@needs_gnome_terminal
def test_ctrl_alt_t_opens_gnome_terminal_and_what_is_typed_runs(desktop: LocalDesktop) -> None:
    desktop.reset(_task([]))
    desktop.act("pyautogui.hotkey('ctrl', 'alt', 't')")  # as OSWorld's os tasks open their terminal
    windows = _poll(lambda: [w for w in desktop.display.windows() if w.title.startswith("user@")], "a terminal")
    assert windows[0].wm_class == "gnome-terminal-server.Gnome-terminal"
    assert windows[0].title.endswith(": ~")  # the VM's .bashrc titles it user@host: dir
    desktop.act("pyautogui.typewrite('echo typed > ~/Desktop/typed.txt\\n')")
    _poll(lambda: desktop.client.file("/home/user/Desktop/typed.txt") == b"typed\n", "the typed command")


@pytest.mark.desktop
@needs_gnome_terminal
def test_gnome_terminal_started_as_osworlds_tasks_start_it(desktop: LocalDesktop) -> None:
    start = (
        "export DBUS_SESSION_BUS_ADDRESS='unix:path=/run/user/1000/bus'\n"
        "gnome-terminal --maximize --working-directory=/home/user/Desktop"
    )
    desktop.reset(_task([{"type": "execute", "parameters": {"command": start, "shell": True}}]))
    rows = _poll(lambda: [r for r in _geometry(desktop) if len(r) == 8 and r[7].endswith("~/Desktop")], "its window")
    assert int(rows[0][4]) == layout(SCREEN).work_area[2]
    killed = desktop.client.execute(["/bin/bash", "-c", "killall gnome-terminal-server"])
    assert killed["returncode"] == 0, killed
    assert desktop.display.wait_no_windows(time.monotonic() + 30)


@pytest.mark.desktop
@needs_nautilus_evince
def test_pdfs_open_in_evince_and_folders_in_nautilus(desktop: LocalDesktop, tmp_path: Path) -> None:
    (tmp_path / "paper.pdf").write_bytes(_pdf("Hello"))
    upload = {"local_path": str(tmp_path / "paper.pdf"), "path": "/home/user/Desktop/paper.pdf"}
    steps = [
        {"type": "upload_file", "parameters": {"files": [upload]}},
        {"type": "open", "parameters": {"path": "/home/user/Desktop/paper.pdf"}},
    ]
    desktop.reset(_task(steps))
    assert desktop.wait_after_reset().ready
    assert [(w.wm_class, w.title) for w in desktop.display.windows()] == [("evince.Evince", "paper.pdf")]
    assert int(_geometry(desktop)[0][4]) == layout(SCREEN).work_area[2]  # maximized
    desktop.reset(_task([{"type": "open", "parameters": {"path": "/home/user/Documents"}}]))
    assert desktop.wait_after_reset().ready
    assert [(w.wm_class, w.title) for w in desktop.display.windows()] == [
        ("org.gnome.Nautilus.org.gnome.Nautilus", "Documents")
    ]


# ------------------------------------------------------------------------------------ graded by desktop-env


@pytest.mark.desktop
@pytest.mark.osworld_venv
def test_thunderbird_terminal_and_editor_tasks_score_one_for_the_right_solution_zero_for_the_wrong(
    tmp_path: Path,
) -> None:
    needs_local_tools()
    missing = [name for name in ("thunderbird", "gnome-terminal", "mousepad", "killall") if shutil.which(name) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt: thunderbird gnome-terminal mousepad psmisc)")
    python = desktop_env_python()
    names = ["thunderbird", "terminal", "editor"]
    args = {"cache": str(tmp_path / "downloads"), "files": str(tmp_path / "files"), "apps": names}
    result = run_scenarios(python, "app_scenarios.py", json.dumps(args), timeout=900)
    assert set(result) == set(names)
    for app, runs in result.items():
        assert (runs["right"]["score"], runs["wrong"]["score"]) == (1.0, 0.0), (app, runs)
        assert runs["right"]["ready"] and runs["wrong"]["ready"], (app, runs)
