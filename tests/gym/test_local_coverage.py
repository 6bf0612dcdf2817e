"""What the local desktop accepts: the decision on real OSWorld task configs, the load-time refusal, and the
``legato osworld coverage`` / ``legato osworld cache`` commands."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from osworld_kit import refused_tasks_file
from typer.testing import CliRunner

from legato_gym.backends import resolve_backend
from legato_gym.backends.local import LocalDesktop, LocalOptions, default_tasks
from legato_gym.backends.local.coverage import Capabilities, assess, check_tasks, task_needs
from legato_gym.backends.local.file_cache import FILE_CACHE_ENV_VAR, FileCache
from legato_gym.config import OSWORLD_ENV_VAR, DesktopConfig
from legato_gym.desktopenv.venv import recorded_python
from legato_gym.errors import ConfigError, UnsupportedTaskError
from legato_gym.tasks import load_tasks
from legato_rl.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
OSWORLD = Path(os.environ.get(OSWORLD_ENV_VAR) or ROOT.parent / "shared" / "osworld")
EXAMPLES = OSWORLD / "evaluation_examples" / "examples"
needs_osworld = pytest.mark.skipif(
    not EXAMPLES.is_dir(), reason=f"no OSWorld task data at {OSWORLD}; set ${OSWORLD_ENV_VAR} to an OSWorld checkout"
)
HF = "https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main"


def real(domain: str, task_id: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((EXAMPLES / domain / f"{task_id}.json").read_text())
    return config


def everything(_: str) -> str:
    return "/usr/bin/found"


def nothing(_: str) -> None:
    return None


def closed_port_url(name: str) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/{name}"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


# ----------------------------------------------------------------------------- the decision on real tasks


@needs_osworld
def test_needs_of_real_tasks() -> None:
    rename = task_needs(real("os", "e0df059f-28a6-4169-924f-b9623e7184cc"))
    assert rename.urls == () and rename.offline_impossible == () and rename.getters == {"vm_command_line", "rule"}
    download = task_needs(real("os", "5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57"))
    assert download.urls == (f"{HF}/os/5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57/poster_party_night.webp",)
    chrome = next(
        task_needs(json.loads(p.read_text()))
        for p in sorted((EXAMPLES / "chrome").glob("*.json"))
        if '"chrome_open_tabs"' in p.read_text()
    )
    assert "chrome" in chrome.apps and any("live web" in why for why in chrome.offline_impossible)
    calc = next(
        task_needs(json.loads(p.read_text()))
        for p in sorted((EXAMPLES / "libreoffice_calc").glob("*.json"))
        if "cloud_file" in json.dumps(json.loads(p.read_text())["evaluator"].get("expected"))
    )
    assert "libreoffice" in calc.apps and calc.urls and all(u.startswith(HF) for u in calc.urls)


@needs_osworld
def test_assess_real_tasks_against_machines() -> None:
    bare = Capabilities.detect(which=nothing)
    full = Capabilities.detect(which=everything, services=["chrome-devtools", "at-spi", "vlc-http", "pulseaudio"])
    rename = real("os", "e0df059f-28a6-4169-924f-b9623e7184cc")
    assert assess(rename, bare).status == "runnable"
    volume_task = real("os", "28cc3b7e-b194-4bc9-8353-d04c0f4d56d2")
    assert assess(volume_task, Capabilities.detect(which=everything)).status == "runnable"
    no_sound = Capabilities.detect(which=lambda name: None if name in ("pulseaudio", "pactl") else everything(name))
    volume = assess(volume_task, no_sound)  # without PulseAudio, the grader's `pactl` prints nothing
    assert volume.status == "refused" and "service pulseaudio is not run by the local desktop" in volume.reasons
    download = assess(real("os", "5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57"), full)
    assert download.status == "needs_files" and download.missing_urls[0].endswith("poster_party_night.webp")
    writer = real("libreoffice_writer", "0810415c-bde4-4443-9047-d5f70165a697")
    no_office = assess(writer, bare)
    assert no_office.status == "refused"
    assert "app 'libreoffice' is not installed (none of libreoffice, soffice on PATH)" in no_office.reasons
    # with every app, the built-in grader still lacks OSWorld's document metrics; desktop-env's grader has them
    assert any(r.startswith("metric ") for r in assess(writer, full).reasons)
    osworld_full = Capabilities.detect(grader="osworld", which=everything, services=full.services)
    assert assess(writer, osworld_full).status in ("needs_files", "runnable")
    drive = next(
        json.loads(p.read_text())
        for p in sorted((EXAMPLES / "multi_apps").glob("*.json"))
        if '"googledrive"' in p.read_text()
    )
    assert any("Google account" in r for r in assess(drive, osworld_full).reasons)


def test_needs_files_becomes_runnable_once_cached(tmp_path: Path) -> None:
    source = tmp_path / "input.txt"
    source.write_text("made by the test")
    url = source.as_uri()
    config = {
        "id": "cached-task",
        "instruction": "x",
        "config": [{"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/in.txt"}]}}],
        "evaluator": {"func": "infeasible"},
    }
    cache = FileCache(tmp_path / "cache")
    assert assess(config, Capabilities.detect(cache=cache)).missing_urls == (url,)
    cache.fetch(url)
    assert assess(config, Capabilities.detect(cache=cache)).status == "runnable"


# ----------------------------------------------------------------------------- refusal at load


def test_check_tasks_refuses_all_at_once_one_line_each(tmp_path: Path) -> None:
    tasks = load_tasks(refused_tasks_file(tmp_path))
    with pytest.raises(UnsupportedTaskError) as info:
        LocalDesktop.check_tasks(tasks, DesktopConfig(options={"file_cache": str(tmp_path / "c")}))
    lines = str(info.value).splitlines()
    assert lines[0].startswith("2 of 3 tasks cannot run on this machine's local desktop")
    assert lines[1].startswith("  needs-web: needs the live web (setup step chrome_open_tabs")
    assert lines[2] == "  odd-metric: metric compare_table is not in the local grader"
    assert [v.status for v in check_tasks(tasks[:1], Capabilities.detect())] == ["runnable"]


@pytest.mark.skipif(
    not (shutil.which("xterm") and shutil.which("mousepad")), reason="the local suite needs xterm and mousepad"
)
def test_the_local_suite_passes_the_load_check() -> None:
    suite = default_tasks(DesktopConfig(osworld_path=OSWORLD if EXAMPLES.is_dir() else None))
    verdicts = LocalDesktop.check_tasks(suite)
    assert [v.status for v in verdicts] == ["runnable"] * len(suite)


def test_collect_refuses_at_load_before_any_desktop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FILE_CACHE_ENV_VAR, raising=False)
    result = cli(
        "rl", "collect", "--out", str(tmp_path / "run"), "--policy-url", "http://127.0.0.1:9/v1", "--backend", "local",
        "--tasks", str(refused_tasks_file(tmp_path)), "--file-cache", str(tmp_path / "files"), "--quiet",
        "--grader", "local",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "needs-web: needs the live web" in result.output and "odd-metric: metric compare_table" in result.output
    assert not (tmp_path / "run" / "rollouts.jsonl").exists()
    assert FILE_CACHE_ENV_VAR not in os.environ  # --file-cache is the option, not a side channel


def test_file_cache_flag_sets_the_local_option_not_the_environment(tmp_path: Path) -> None:
    from legato_rl.cli.collect import BACKEND_FLAG_DEFAULTS

    given = {"--file-cache": tmp_path / "files"}
    local = resolve_backend("local").with_cli(DesktopConfig(), given, BACKEND_FLAG_DEFAULTS)
    assert isinstance(local.options, LocalOptions) and local.options.file_cache == str(tmp_path / "files")
    stand_in = resolve_backend("osworld").with_cli(DesktopConfig(), given, BACKEND_FLAG_DEFAULTS)
    assert stand_in.options.local.file_cache == str(tmp_path / "files")  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"--file-cache applies to --backend local or osworld only, not 'fake'"):
        resolve_backend("fake").with_cli(DesktopConfig(), given, BACKEND_FLAG_DEFAULTS)


# ----------------------------------------------------------------------------- the commands


def test_coverage_command_counts_and_reasons(tmp_path: Path) -> None:
    source = tmp_path / "input.txt"
    source.write_text("made by the test")
    tasks = json.loads(refused_tasks_file(tmp_path).read_text())
    tasks.append(
        {
            "task_id": "wants-file",
            "domain": "os",
            "config": {
                "instruction": "Use the file.",
                "config": [{"type": "download", "parameters": {"files": [{"url": source.as_uri(), "path": "/a"}]}}],
                "evaluator": {"func": "infeasible"},
            },
        }
    )
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    result = cli(
        "osworld", "coverage", "--tasks", str(path), "--file-cache", str(tmp_path / "c"), "--list", "--grader", "local"
    )
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines() if line[:1].isalpha()}
    assert rows["total"] == ["4", "1", "1", "2"] and rows["os"] == ["1", "0", "1", "0"]
    assert f"os/wants-file: {source.as_uri()}" in result.output
    assert "1  metric compare_table is not in the local grader" in result.output
    assert "refused needs-web: needs the live web" in result.output
    assert cli("osworld", "cache", "--tasks", str(path), "--dir", str(tmp_path / "c")).exit_code == 0
    after = cli("osworld", "coverage", "--tasks", str(path), "--file-cache", str(tmp_path / "c"), "--grader", "local")
    rows = {line.split()[0]: line.split()[1:] for line in after.output.splitlines() if line[:1].isalpha()}
    assert rows["os"] == ["1", "1", "0", "0"]


def test_coverage_grades_as_collect_does_by_default(tmp_path: Path) -> None:
    """desktop-env's grader where its interpreter is set up (as `legato rl collect` grades), else the built-in."""
    path = refused_tasks_file(tmp_path)
    result = cli("osworld", "coverage", "--tasks", str(path), "--file-cache", str(tmp_path / "c"))
    assert result.exit_code == 0, result.output
    expected = "osworld" if recorded_python() is not None else "local"
    assert f"tasks, {expected} grader, file cache" in result.output
    typo = cli("osworld", "coverage", "--tasks", str(path), "--grader", "desktop-env")
    assert typo.exit_code != 0 and "--grader 'desktop-env': choose one of auto, osworld, local" in typo.output


@needs_osworld
def test_coverage_over_all_real_tasks(tmp_path: Path) -> None:
    result = cli("osworld", "coverage", "--osworld", str(OSWORLD), "--file-cache", str(tmp_path / "empty"))
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines() if line[:1].isalpha()}
    assert rows["total"][0] == "369"
    assert sum(int(rows["total"][i]) for i in (1, 2, 3)) == 369
    assert int(rows["os"][1]) >= 6  # at least the OSWorld os tasks of the local suite


def test_cache_command_reports_each_missing_url_and_exits_1(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("made by the test")
    dead_a, dead_b = closed_port_url("a.txt"), closed_port_url("b.txt")
    files = [{"url": u, "path": "/x"} for u in (good.as_uri(), dead_a, dead_b)]
    tasks = [
        {
            "task_id": "t",
            "config": {
                "instruction": "x",
                "config": [{"type": "download", "parameters": {"files": files}}],
                "evaluator": {"func": "infeasible"},
            },
        }
    ]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    result = cli("osworld", "cache", "--tasks", str(path), "--dir", str(tmp_path / "c"), "--connect-timeout", "5")
    assert result.exit_code == 1
    assert f"missing {dead_a}: host 127.0.0.1" in result.output and f"missing {dead_b}:" in result.output
    assert "3 files for 1 tasks" in result.output and "1 downloaded, 2 missing" in result.output
    assert good.as_uri() in FileCache(tmp_path / "c")
