"""VS Code on local desktops: code-server in a Chromium app window, where desktop-env's getters look.

The launcher, ready titles and coverage verdicts are checked without a desktop (with a code-server install
made of the two files that mark one); the rest runs the real code-server in the sandbox. The graded tasks,
with scripted right and wrong solutions, live in vscode_scenarios.py and run in desktop-env's interpreter.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from osworld_kit import ROOT, desktop_env_python, needs_local_tools, run_scenarios

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop, apps, vscode
from legato_gym.backends.local.coverage import Capabilities, assess, needs_no_download
from legato_gym.backends.local.sandbox.lookalike import layout

SCREEN = (1280, 720)
OSWORLD = Path(os.environ.get("LEGATO_OSWORLD", ROOT.parent / "shared" / "osworld"))
VS_CODE_TASKS = OSWORLD / "evaluation_examples" / "examples" / "vs_code"
#: OSWorld's download-free vs_code tasks that need the extension marketplace (the desktop has no network).
MARKETPLACE = {"4e60007a-f5be-4bfc-9723-c39affa0a6d3", "e2b5e914-ffe1-44d2-8e92-58f8c5d92bb2",
               "eabc805a-bfcf-4460-b250-ac92135819f6"}  # fmt: skip

needs_code_server = pytest.mark.skipif(
    not vscode.installed() or apps.chromium_binary() is None,
    reason=f"needs code-server {vscode.CODE_SERVER_VERSION} under {vscode.install_dir()} (scripts/test installs "
    "it with npm) and Chromium (apt: chromium)",
)


def _fake_install(prefix: Path) -> Path:
    """The files that mark a finished code-server install under the npm prefix ``prefix``."""
    package = prefix / "node_modules" / "code-server"
    (package / "out" / "node").mkdir(parents=True)
    (package / "out" / "node" / "entry.js").write_text("")
    (package / "lib" / "vscode" / "node_modules").mkdir(parents=True)
    (package / "lib" / "vscode" / "node_modules.asar").symlink_to("node_modules")
    return prefix


def _which(*names: str, node: str = "/usr/bin/node") -> Any:
    found = {name: f"/usr/bin/{name}" for name in names}
    return lambda name: node if name == "node" and "node" in names else found.get(name)


# ------------------------------------------------------------------------------------ without a desktop


def test_ready_title_is_what_vs_code_titles_the_window_with() -> None:
    assert vscode.ready_title(["code", "/home/user/Desktop/test.py"]) == "test.py - Visual Studio Code"
    assert vscode.ready_title("code /home/user/Downloads/HW-8-main/") == "HW-8-main - Visual Studio Code"
    assert vscode.ready_title(["code", "/home/user/project.code-workspace"]) == (
        "project (Workspace) - Visual Studio Code"
    )
    assert vscode.ready_title(["code"]) == "Visual Studio Code"
    assert vscode.ready_title(["code", "--install-extension", "a.vsix"]) is None
    assert apps.ready_title(["code", "/home/user/main.py"]) == "main.py - Visual Studio Code"
    assert not apps.opens_window("code --list-extensions")
    assert apps.opens_window(["code", "/home/user/main.py"])


def test_code_is_on_the_desktop_only_with_code_server_node_and_chromium(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = _fake_install(tmp_path / "cs")
    entries = vscode.bin_entries(prefix, which=_which("node"))
    assert entries["code"].startswith("#!/bin/sh") and "legato-code.py" in entries["code"]
    assert vscode.bin_entries(prefix, which=_which()) == {}  # no node
    assert vscode.bin_entries(tmp_path / "empty", which=_which("node")) == {}  # no install
    assert vscode.sandbox_paths(prefix, which=_which("node")) == (str((prefix / "node_modules").resolve()), "/usr/bin")
    monkeypatch.setenv("LEGATO_CODE_SERVER", str(prefix))
    assert "code" in apps.bin_entries(which=_which("chromium", "node"))
    assert "code" not in apps.bin_entries(which=_which("node"))  # no Chromium for its window
    assert apps.sandbox_which(_which("chromium", "node"))("code") == "/run/legato-bin/code"


def test_extension_flags_run_code_servers_cli_on_vs_codes_folders(tmp_path: Path) -> None:
    """``code --list-extensions`` (what the getters run) reads the extensions where VS Code keeps them."""
    node = tmp_path / "node"
    node.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')  # prints the command line it was given
    node.chmod(0o755)
    entries = vscode.bin_entries(_fake_install(tmp_path / "cs"), which=_which("node", node=str(node)))
    launcher = tmp_path / "legato-code.py"
    launcher.write_text(entries["legato-code.py"])
    home = tmp_path / "home"
    out = subprocess.run(
        [sys.executable, str(launcher), "--list-extensions"],
        env={"HOME": str(home), "PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)},
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.splitlines()  # fmt: skip
    assert out[out.index("--user-data-dir") + 1] == f"{home}/.config/Code"
    assert out[out.index("--extensions-dir") + 1] == f"{home}/.vscode/extensions"
    assert out[-1] == "--list-extensions" and "--bind-addr" not in out  # the CLI alone, no server, no window
    config = (tmp_path / "legato-code-server" / "config.yaml").read_text()  # written first: code-server
    assert "auth: none" in config  # would write its own, and say so on the listing's stdout


def test_baseline_home_has_vs_codes_user_folder_without_a_settings_file_of_its_own() -> None:
    files = apps.baseline_files()
    machine = json.loads(files[".config/Code/Machine/settings.json"])
    assert machine["workbench.startupEditor"] == "none"
    assert machine["window.title"].endswith("${separator}Visual Studio Code")
    assert ".config/Code/User/settings.json" not in files  # tasks compare it byte for byte
    assert any(path.startswith(".config/Code/User/") for path in files)  # the folder setups write into


def test_marketplace_extension_installs_are_refused_offline() -> None:
    install = {
        "config": [{"type": "command", "parameters": {"command": ["code", "--install-extension", "ms-python.python"]}}]
    }
    assert "ms-python.python from the marketplace" in " ".join(vscode.offline_reasons(install))
    check = {
        "evaluator": {
            "func": "is_extension_installed",
            "result": {
                "type": "vm_command_line",
                "command": ["code", "--list-extensions", "|", "grep", "njpwerner.autodocstring"],
            },
            "expected": {"type": "rule", "rules": {"type": "contain", "expected": "njpwerner.autodocstring"}},
        }
    }
    assert "njpwerner.autodocstring from the marketplace" in " ".join(vscode.offline_reasons(check))
    several = {"evaluator": {**check["evaluator"], "func": ["is_extension_installed"], "expected": [{"type": "rule"}]}}
    assert "(unnamed) from the marketplace" in " ".join(vscode.offline_reasons(several))  # lists of getters
    vsix = {"config": [{"type": "download", "parameters": {"files": [{"url": "u", "path": "/home/user/test.vsix"}]}}],
            **check}  # fmt: skip
    assert vscode.offline_reasons(vsix) == []  # installed from the file the setup brings
    local = {"config": [{"type": "execute", "parameters": {"command": ["code", "--install-extension", "a/b.vsix"]}}]}
    assert vscode.offline_reasons(local) == []


def _osworld_tasks() -> list[dict[str, Any]]:
    if not VS_CODE_TASKS.is_dir():
        pytest.skip(f"needs OSWorld's task data at {VS_CODE_TASKS} (set LEGATO_OSWORLD)")
    return [json.loads(path.read_text()) for path in sorted(VS_CODE_TASKS.glob("*.json"))]


def test_coverage_runs_the_download_free_vs_code_tasks_with_code_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    free = [task for task in _osworld_tasks() if needs_no_download(task) or task["id"] in MARKETPLACE]
    which = _which("chromium", "node", "socat", "ls", "grep")
    monkeypatch.setenv("LEGATO_CODE_SERVER", str(_fake_install(tmp_path / "cs")))
    caps = Capabilities.detect(grader="osworld", which=which, schemas=())
    verdicts = {task["id"]: assess(task, caps, domain="vs_code") for task in free}
    runnable = sorted(task_id for task_id, v in verdicts.items() if v.status == "runnable")
    assert len(runnable) == 10, {k: v.reasons for k, v in verdicts.items()}
    for task_id in MARKETPLACE:
        assert verdicts[task_id].status == "refused" and "marketplace" in verdicts[task_id].reason
    monkeypatch.setenv("LEGATO_CODE_SERVER", str(tmp_path / "none"))
    missing = Capabilities.detect(grader="osworld", which=which, schemas=())
    assert all("app 'vs_code' is not installed" in assess(task, missing).reason for task in free)


# ------------------------------------------------------------------------------------ real desktops


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    needs_local_tools()
    options = {"grader": "local", "window_timeout": 120.0}  # code-server, Chromium and the workbench, on a busy host
    config = DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=180, ready=120), options=options)
    with LocalDesktop(config) as d:
        yield d


def _vsix(publisher: str, name: str) -> bytes:
    """A VS Code extension package (a zip: its manifest and package.json) that contributes nothing."""
    package = {"name": name, "publisher": publisher, "version": "0.0.1", "engines": {"vscode": "^1.60.0"}}
    manifest = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011">'
        f'<Metadata><Identity Language="en-US" Id="{name}" Version="0.0.1" Publisher="{publisher}"/>'
        f"<DisplayName>{name}</DisplayName></Metadata>"
        '<Installation><InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation><Dependencies/>'
        '<Assets><Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" '
        'Addressable="true"/></Assets></PackageManifest>'
    )
    types = (
        '<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
        'content-types"><Default Extension=".json" ContentType="application/json"/><Default '
        'Extension=".vsixmanifest" ContentType="text/xml"/></Types>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("extension.vsixmanifest", manifest)
        archive.writestr("extension/package.json", json.dumps(package))
        archive.writestr("[Content_Types].xml", types)
    return out.getvalue()


def _task(steps: list[dict[str, Any]]) -> Task:
    return Task("legato-vscode-probe", "Do nothing.", {"config": steps, "evaluator": {"func": "infeasible"}})


@pytest.mark.desktop
@needs_code_server
def test_code_opens_a_file_in_a_window_titled_as_vs_code_and_reset_restores_the_baseline(
    desktop: LocalDesktop,
) -> None:
    path = "/home/user/Desktop/hello.py"
    desktop.reset(
        _task(
            [
                {"type": "command", "parameters": {"command": f"echo 'print(1)' > {path}", "shell": True}},
                {"type": "launch", "parameters": {"command": ["code", path]}},
            ]
        )
    )
    assert desktop.wait_after_reset().ready
    windows = desktop.display.windows()
    assert [w.title for w in windows] == ["hello.py - Visual Studio Code"]
    assert windows[0].wm_class.endswith("Code")
    geometry = desktop.client.execute(["wmctrl", "-lG"])["output"].split()
    assert int(geometry[4]) == layout(SCREEN).work_area[2]  # maximized
    # as OSWorld's setups install an extension from a .vsix, and its getters list them
    desktop.client.upload("/home/user/probe.vsix", _vsix("legato", "probe"))
    installed = desktop.client.execute(["code", "--install-extension", "/home/user/probe.vsix"], timeout=120)
    assert installed["returncode"] == 0, installed
    listing = desktop.client.execute("code --list-extensions | grep legato.probe", shell=True, timeout=120)
    assert listing["output"] == "legato.probe\n", listing
    assert desktop.client.file("/home/user/.vscode/extensions/extensions.json") is not None
    spoil = desktop.client.execute("echo '{\"a\": 1}' > ~/.config/Code/User/settings.json", shell=True)
    assert spoil["returncode"] == 0
    desktop.reset(_task([]))
    assert desktop.display.windows() == []
    left = desktop.client.execute("ls ~/.config/Code/User ~/.config/Code/Machine ~/Desktop", shell=True)["output"]
    assert "settings.json" in left  # the machine settings
    assert "hello.py" not in left
    assert desktop.client.file("/home/user/.config/Code/User/settings.json") is None
    assert desktop.client.execute("code --list-extensions", timeout=120)["output"] == ""  # the extension is gone


def _scenario(python: str, args: dict[str, Any], timeout: float = 1100) -> Any:
    return run_scenarios(python, "vscode_scenarios.py", json.dumps(args), timeout=timeout)


@pytest.mark.desktop
@pytest.mark.osworld_venv
@pytest.mark.timeout(1200)  # six resets of a browser-based editor: minutes on a loaded 2-core machine
@needs_code_server
def test_vs_code_tasks_score_one_for_the_right_solution_and_zero_for_the_wrong(tmp_path: Path) -> None:
    needs_local_tools()
    python = desktop_env_python()
    tasks = ["settings", "edit", *(["theme"] if VS_CODE_TASKS.is_dir() else [])]  # theme: a real OSWorld task
    args = {"cache": str(tmp_path / "d"), "files": str(tmp_path / "f"), "osworld": str(OSWORLD), "tasks": tasks}
    result = _scenario(python, args)
    assert set(result) == set(tasks)
    for name, runs in result.items():
        assert (runs["right"]["score"], runs["wrong"]["score"]) == (1.0, 0.0), (name, runs)
        assert runs["right"]["ready"], (name, runs)
    # each wrong solution did what it says (saved its own value), and scored 0 for that
    assert result["settings"]["wrong"]["saved"] == '{"editor.wordWrapColumn": 60}', result
    assert result["edit"]["wrong"]["saved"] == "first line\n2nd line\n", result
    assert result["settings"]["right"]["titles"] == ["Visual Studio Code"]
    if "theme" in result:  # the setup's theme replaced in place, as VS Code edits settings.json
        assert result["theme"]["right"]["saved"] == '{"workbench.colorTheme": "Visual Studio Dark"}\n', result
        assert result["theme"]["wrong"]["saved"] == '{"workbench.colorTheme": "Visual Studio Light"}\n', result
    assert result["edit"]["right"]["titles"] == ["notes.txt - Visual Studio Code"]


def test_only_vs_codes_workbench_gets_longer_than_busy_s_to_finish_loading_after_its_title() -> None:
    from legato_gym.backends.local.apps import loads_after_title

    assert loads_after_title(["hello.py - Visual Studio Code"])
    assert not loads_after_title(["t.xlsx - LibreOffice Calc", "VLC media player", "Chromium"])  # a video: busy_s
