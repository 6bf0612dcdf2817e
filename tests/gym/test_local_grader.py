"""Which grader grades the local backend's tasks, and the refusal at load from every entry point.

No desktop boots here but in one test (the grader a run records): the CLI and the Python API must refuse (or
pick the grader) before one would.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from osworld_kit import needs_local_tools, refused_tasks_file
from typer.testing import CliRunner

import legato_gym
from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, LocalOptions, coverage, default_tasks
from legato_gym.backends.local.coverage import Capabilities, assess, needs_no_download, task_needs
from legato_gym.backends.local.evaluators import check_gnome_favorite_apps
from legato_gym.backends.local.options import resolve_grader
from legato_gym.desktopenv.venv import MARKER, VENV_ENV_VAR
from legato_gym.env import DesktopEnv
from legato_gym.errors import ConfigError, UnsupportedTaskError
from legato_gym.tasks import load_tasks
from legato_gym.transport import process as vector_process
from legato_rl.cli.app import app
from legato_rl.cli.collect import _stamp_grader, local_solution
from legato_rl.store import read_record_dicts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = Path(os.environ.get("LEGATO_OSWORLD") or ROOT.parent / "shared" / "osworld") / "evaluation_examples"
needs_osworld = pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"no OSWorld task data at {EXAMPLES}")
SCHEMA_TASK = {
    "id": "lock-screen",
    "instruction": "Lock the screen automatically.",
    "config": [{"type": "execute", "parameters": {"command": ["gsettings", "set", "org.gnome.shell", "x", "1"]}}],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "gsettings get org.gnome.desktop.screensaver lock-enabled"},
        "expected": {"type": "rule", "rules": {"expected": "true\n"}},
    },
}


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def said(result: Any) -> str:
    """The command's output as one line (typer draws usage errors in a box, wrapped)."""
    return " ".join(result.output.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


@pytest.fixture
def desktop_env_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A desktop-env venv as `legato osworld setup` records it, whose python is this interpreter."""
    venv = tmp_path / "osworld-venv"
    venv.mkdir()
    (venv / MARKER).write_text(json.dumps({"python": sys.executable}))
    monkeypatch.setenv(VENV_ENV_VAR, str(venv))
    return sys.executable


@pytest.fixture
def no_desktop_env_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VENV_ENV_VAR, str(tmp_path / "no-venv"))


@pytest.fixture
def no_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Booting a local desktop or starting a worker fails the test: the refusal must come first."""

    def boot(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a desktop was booted before the tasks were checked")

    monkeypatch.setattr(LocalDesktop, "__init__", boot)
    monkeypatch.setattr(vector_process, "WorkerProcess", boot)


def collect(tmp_path: Path, *extra: str) -> Any:
    return cli(
        "rl", "collect", "--out", str(tmp_path / "run"), "--policy-url", "http://127.0.0.1:9/v1", "--backend", "local",
        "--tasks", str(refused_tasks_file(tmp_path)), "--file-cache", str(tmp_path / "files"), "--quiet", *extra,
    )  # fmt: skip


# ----------------------------------------------------------------------------- which grader


def test_grader_option_defaults_to_auto_and_names_its_choices() -> None:
    assert LocalOptions.from_mapping({}).grader == "auto"
    with pytest.raises(ConfigError, match=r"grader='vm': choose 'auto', 'osworld', 'local'"):
        LocalOptions.from_mapping({"grader": "vm"})


@pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("desktop_env") is not None, reason="desktop-env imports here"
)
def test_auto_is_desktop_envs_grader_in_its_interpreter_only(desktop_env_venv: str) -> None:
    assert resolve_grader("auto") == "local"  # legato's interpreter: no desktop_env to grade with
    assert resolve_grader("auto", python=desktop_env_venv) == "osworld"  # a worker there would
    assert resolve_grader("auto", python="/usr/bin/python3-elsewhere") == "local"
    assert resolve_grader("local", python=desktop_env_venv) == "local"


def test_collect_grades_with_desktop_envs_grader_by_default(
    tmp_path: Path, desktop_env_venv: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEGATO_FILE_CACHE", raising=False)
    result = collect(tmp_path)
    assert result.exit_code == 2, result.output
    # desktop-env has compare_table: only the live-web task is refused, by the osworld grader's check
    assert "1 of 3 tasks cannot run on this machine's local desktop (osworld grader)" in said(result)
    assert "needs-web: needs the live web" in result.output and "odd-metric" not in result.output


def test_collect_falls_back_to_the_builtin_grader_without_desktop_env(
    tmp_path: Path, no_desktop_env_venv: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEGATO_FILE_CACHE", raising=False)
    result = collect(tmp_path)
    assert result.exit_code == 2, result.output
    assert "2 of 3 tasks cannot run on this machine's local desktop (local grader)" in said(result)
    assert "odd-metric: metric compare_table is not in the local grader" in result.output


def test_collect_grader_flag_is_validated(tmp_path: Path, no_desktop_env_venv: None) -> None:
    bad = collect(tmp_path, "--grader", "vm")
    assert bad.exit_code == 2 and "--grader 'vm': choose one of auto, osworld, local" in said(bad)
    missing = collect(tmp_path, "--grader", "osworld")
    assert missing.exit_code == 2 and "run `legato osworld setup`, or use --grader local" in said(missing)
    fake = cli("rl", "collect", "--out", str(tmp_path / "f"), "--policy-url", "embedded", "--backend", "fake",
               "--grader", "local")  # fmt: skip
    assert fake.exit_code == 2 and "--grader local applies to --backend local only" in said(fake)
    assert not (tmp_path / "run").exists() and not (tmp_path / "f").exists()


def test_the_summary_records_the_grader(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"schema": "legato.summary/v0", "n_records": 3}))
    _stamp_grader(summary, "osworld")
    assert json.loads(summary.read_text()) == {"schema": "legato.summary/v0", "n_records": 3, "grader": "osworld"}


def test_a_run_names_the_grader_its_desktops_will_use(desktop_env_venv: str) -> None:
    from legato_gym import resolve_backend
    from legato_rl.collect import grader_of

    local = resolve_backend("local")
    assert (
        grader_of(local, DesktopConfig(options=LocalOptions(grader="local"), worker_python=desktop_env_venv)) == "local"
    )
    assert grader_of(local, DesktopConfig(options={"grader": "auto"}, worker_python=desktop_env_venv)) == "osworld"
    assert grader_of(local, DesktopConfig(options={"grader": "local"}, worker_python=desktop_env_venv)) == "local"
    assert (
        grader_of(local, DesktopConfig(worker_python="/usr/bin/python3-elsewhere")) == "local"
    )  # auto, no desktop-env
    assert grader_of(resolve_backend("fake"), DesktopConfig()) == "fake"


@pytest.mark.desktop
def test_a_run_records_its_grader_and_refuses_a_resume_with_another(tmp_path: Path, desktop_env_venv: str) -> None:
    """A resume with another --grader was accepted, and one batch mixed the rewards of two graders."""
    needs_local_tools()
    task = next(t for t in default_tasks(DesktopConfig()) if t.task_id == "local-terminal-create-file")
    tasks, run = tmp_path / "tasks.json", tmp_path / "run"
    tasks.write_text(json.dumps([{"task_id": task.task_id, "domain": task.domain, "config": dict(task.config)}]))
    argv = ["rl", "collect", "--backend", "local", "--policy-url", "embedded", "--tasks", str(tasks), "--out", str(run),
            "--group", "1", "--desktops", "1", "--no-prestart", "--quiet"]  # fmt: skip
    first = cli(*argv, "--grader", "local")
    assert first.exit_code == 0, first.output
    (record,) = read_record_dicts(run)
    assert (record["status"], record["reward"], record["grader"]) == ("ok", 1.0, "local")
    written = (run / "run.json").read_bytes()
    assert json.loads(written)["grader"] == "local"
    again = cli(*argv, "--grader", "osworld")  # desktop-env's interpreter is "set up": osworld would grade
    assert again.exit_code == 2, again.output
    assert "--grader: the run has 'local', this command gives 'osworld' (resume with --grader local)" in said(again)
    assert list(read_record_dicts(run)) == [record] and (run / "run.json").read_bytes() == written


# ----------------------------------------------------------------------------- refused at load, everywhere


def test_desktop_env_refuses_all_at_once_before_booting(tmp_path: Path, no_boot: None) -> None:
    tasks = load_tasks(refused_tasks_file(tmp_path))
    config = DesktopConfig(options={"grader": "local", "file_cache": str(tmp_path / "c")})
    with pytest.raises(UnsupportedTaskError) as info:
        DesktopEnv("local", config, tasks=tasks)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("2 of 3 tasks cannot run") and lines[1].startswith("  needs-web: needs the live web")
    assert lines[2] == "  odd-metric: metric compare_table is not in the local grader"
    with pytest.raises(UnsupportedTaskError, match="2 of 3 tasks"):
        gymnasium.make("legato/LocalDesktop-v0", config=config, tasks=tasks)


def test_vector_env_refuses_all_at_once_before_starting_workers(tmp_path: Path, no_boot: None) -> None:
    tasks = load_tasks(refused_tasks_file(tmp_path))
    config = DesktopConfig(options={"grader": "local", "file_cache": str(tmp_path / "c")})
    with pytest.raises(UnsupportedTaskError, match="2 of 3 tasks") as info:
        legato_gym.vector.DesktopVectorEnv(2, backend="local", config=config, tasks=tasks)
    assert "odd-metric: metric compare_table" in str(info.value)
    # the workers' interpreter decides the grader: desktop-env's accepts compare_table
    osworld = DesktopConfig(options={"grader": "osworld", "file_cache": str(tmp_path / "c")})
    with pytest.raises(UnsupportedTaskError, match="1 of 3 tasks"):
        legato_gym.vector.DesktopVectorEnv(2, backend="local", config=osworld, tasks=tasks)


# ----------------------------------------------------------------------------- what cannot be graded faithfully


def test_a_task_needs_the_gsettings_schemas_it_reads_and_writes() -> None:
    assert task_needs(SCHEMA_TASK).schemas == {"org.gnome.shell", "org.gnome.desktop.screensaver"}
    assert "dconf" in task_needs(SCHEMA_TASK).services

    def which(name: str) -> str:
        return f"/usr/bin/{name}"

    without = assess(SCHEMA_TASK, Capabilities.detect(schemas=["org.gnome.desktop.screensaver"], which=which))
    assert without.status == "refused"
    assert without.reasons == ("GSettings schema org.gnome.shell is not installed (not in `gsettings list-schemas`; "
                               "OSWorld's VM has it)",)  # fmt: skip
    both = Capabilities.detect(schemas=["org.gnome.desktop.screensaver", "org.gnome.shell"], which=which)
    assert assess(SCHEMA_TASK, both).status == "runnable"
    no_bus = Capabilities.detect(
        schemas=["org.gnome.desktop.screensaver", "org.gnome.shell"],
        which=lambda name: None if name == "dbus-daemon" else f"/usr/bin/{name}",
    )
    assert "service dconf is not run by the local desktop" in assess(SCHEMA_TASK, no_bus).reasons


def test_an_instruction_that_sends_the_agent_to_the_web_is_refused() -> None:
    config = {"id": "w", "instruction": "Download https://example.org/a.jpeg. Then resize it.", "config": [],
              "evaluator": {"func": "infeasible"}}  # fmt: skip
    needs = task_needs(config)
    assert needs.offline_impossible == (
        "needs the live web (the instruction sends the agent to https://example.org/a.jpeg)",
    )
    assert not needs_no_download(config)
    local = dict(config, instruction="Open http://localhost:8080/ in the browser.")
    assert task_needs(local).offline_impossible == () and needs_no_download(local)
    theme = dict(config, instruction="Help me install the Orchis theme from gnome-look.org and use it.")
    assert task_needs(theme).offline_impossible == (
        "needs the live web (the instruction sends the agent to gnome-look.org)",
    )
    cloned = dict(config, instruction="I use the template from academicpages.github.io, cloned to ~/Code.")
    assert task_needs(cloned).offline_impossible == ()  # a site named, not a download from it
    mail = dict(config, instruction="Forward my mail to anonym@outlook.com, please.")
    assert task_needs(mail).offline_impossible == ()
    store = dict(config, instruction="Go to the Chrome plug-in store and install the listed plug-ins.")
    assert task_needs(store).offline_impossible == (
        "needs the live web (the instruction sends the agent to plug-in store)",
    )


def test_a_grader_that_checks_for_software_the_agent_must_download_is_refused() -> None:
    spotify = {"id": "s", "instruction": "Install Spotify.", "config": [], "evaluator": {
        "func": "check_include_exclude", "result": {"type": "vm_command_line", "command": "which spotify"},
        "expected": {"type": "rule", "rules": {"include": ["spotify"]}}}}  # fmt: skip
    assert task_needs(spotify).probed == {"spotify"}
    found = assess(spotify, Capabilities.detect(which=lambda name: f"/usr/bin/{name}", schemas=()))
    assert found.status == "runnable"  # installed here: the agent can find it
    lacking = assess(spotify, Capabilities.detect(which=lambda name: None if name == "spotify" else "/usr/bin/x"))
    assert lacking.reasons == ("needs the live web (the grader looks for program 'spotify', which this machine lacks: "
                               "the agent would install it from the internet)",)  # fmt: skip
    apt = {"id": "a", "instruction": "Install Java.", "config": [], "evaluator": {
        "postconfig": [{"type": "command", "parameters": {"command": ["apt", "list", "--installed"], "stdout": "o"}}],
        "func": "check_list", "result": {"type": "cache_file", "path": "o"}}}  # fmt: skip
    assert task_needs(apt).offline_impossible == (
        "needs the live web (the grader lists the installed Debian packages: the agent installs one)",
    )


@needs_osworld
def test_real_gsettings_and_web_tasks() -> None:
    def real(domain: str, task_id: str) -> dict[str, Any]:
        return dict(json.loads(next((EXAMPLES / "examples" / domain).glob(f"{task_id}*.json")).read_text()))

    lock = real("os", "a4d98375")
    assert task_needs(lock).schemas == {"org.gnome.desktop.screensaver"} and needs_no_download(lock)
    assert task_needs(real("os", "ec4e3f68")).schemas == {"org.gnome.shell"}
    assert not needs_no_download(real("multi_apps", "3c8f201a"))  # "Download the image from https://..."


def test_the_favourites_metric_grades_as_desktop_envs_so_the_builtin_grader_runs_ec4e3f68() -> None:
    """``check_gnome_favorite_apps``: the same desktop ids, as many, in any order (``gsettings get``'s answer);
    with it the built-in grader runs OSWorld's ec4e3f68, whose favourites the lookalike dock shows and edits."""
    rule = {"expected": ["google-chrome.desktop", "thunderbird.desktop"]}
    assert check_gnome_favorite_apps("['thunderbird.desktop', 'google-chrome.desktop']\n", rule) == 1.0
    assert check_gnome_favorite_apps("['thunderbird.desktop', 'vim.desktop', 'google-chrome.desktop']", rule) == 0.0
    assert check_gnome_favorite_apps("['thunderbird.desktop', 'thunderbird.desktop']", rule) == 0.0
    assert (
        check_gnome_favorite_apps("['google-chrome.desktop', 'thunderbird.desktop', 'thunderbird.desktop']", rule) == 0
    )
    assert check_gnome_favorite_apps("@as []", {"expected": []}) == 1.0
    assert check_gnome_favorite_apps("", rule) == 0.0 and check_gnome_favorite_apps(None, rule) == 0.0
    if not EXAMPLES.is_dir():
        pytest.skip(f"no OSWorld task data at {EXAMPLES}")
    task = json.loads(next((EXAMPLES / "examples" / "os").glob("ec4e3f68*.json")).read_text())
    caps = Capabilities.detect(grader="local", schemas=["org.gnome.shell"], which=lambda name: f"/usr/bin/{name}")
    assert assess(task, caps).status == "runnable", assess(task, caps).reasons


# ----------------------------------------------------------------------------- the embedded policy


def test_the_embedded_policy_answers_scripted_gui_steps_else_done() -> None:
    screen = (1280, 720)
    suite = Task("local-terminal-create-file", "x", {"evaluator": {"func": "exact_match"}})
    assert local_solution(suite, screen)[-1] == "DONE" and "typewrite" in local_solution(suite, screen)[0]
    # a solution of python code (os.rename) is no step a model could answer in the prompt format: DONE
    rename = Task("e0df059f-28a6-4169-924f-b9623e7184cc", "x", {"evaluator": {"func": "exact_match"}})
    assert local_solution(rename, screen) == ["DONE"]
    assert local_solution(Task("unknown-task", "x", {"evaluator": {"func": "infeasible"}}), screen) == ["DONE"]
    infeasible = Task("a462a795-fdc7-4b23-b689-e8b6df786b78", "x", {"evaluator": {"func": "infeasible"}})
    assert local_solution(infeasible, screen) == ["FAIL"]
    # file writes look like `.write(...)` calls, which the prompt format would read as typing: not GUI steps
    conda = Task("48d05431-6cd5-4e76-82eb-12b60d823f7d", "x", {"evaluator": {"func": "exact_match"}})
    assert local_solution(conda, screen) == ["DONE"]


@needs_osworld
def test_tasks_whose_getter_says_solved_on_the_untouched_desktop_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    caps = Capabilities.detect(grader="osworld", which=lambda name: f"/usr/bin/{name}", services=["chrome-devtools"])
    config = json.loads(next((EXAMPLES / "examples" / "chrome").glob("99146c54*.json")).read_text())
    # Chromium wrote a migration marker into the key data_delete_automacally checks until its flags turned the
    # migration off: the task runs now (tests/gym/test_download_free.py grades it on a real desktop)
    assert assess(config, caps).status == "runnable"
    monkeypatch.setitem(coverage.GETTER_SOLVED_AT_START, "data_delete_automacally", "a marker in its key")
    verdict = assess(config, caps)
    assert verdict.status == "refused"
    assert verdict.reasons == (
        "getter data_delete_automacally answers 'solved' on the untouched desktop: a marker in its key",
    )


@needs_osworld
def test_the_dark_mode_task_runs_where_chromes_devtools_are_relayed() -> None:
    """Its getter, chrome_appearance_mode_ui, is legato's supplement to desktop-env: it reads the settings page."""
    config = json.loads(next((EXAMPLES / "examples" / "chrome").glob("93eabf48*.json")).read_text())
    everything = Capabilities.detect(grader="osworld", which=lambda name: f"/usr/bin/{name}", services=["at-spi"])
    assert assess(config, everything).status == "runnable"
    no_devtools = dataclasses.replace(everything, services=everything.services - {"chrome-devtools"})
    assert assess(config, no_devtools).reasons == ("service chrome-devtools is not run by the local desktop",)
    local = assess(config, dataclasses.replace(everything, grader="local", getters=frozenset(), metrics=None))
    assert "getter chrome_appearance_mode_ui is not in the local grader" in local.reasons


@needs_osworld
def test_the_default_video_player_task_needs_gnome_videos() -> None:
    """Without GNOME Videos, VLC would be the default video player before the agent acts: refused."""
    config = json.loads(next((EXAMPLES / "examples" / "multi_apps").glob("937087b6*.json")).read_text())
    everything = Capabilities.detect(grader="osworld", which=lambda name: f"/usr/bin/{name}")
    assert assess(config, everything).status == "runnable"
    no_totem = Capabilities.detect(grader="osworld", which=lambda name: None if name == "totem" else f"/usr/bin/{name}")
    verdict = assess(config, no_totem)
    assert verdict.status == "refused"
    assert verdict.reasons == ("app 'video player' is not installed (none of totem on PATH)",)
