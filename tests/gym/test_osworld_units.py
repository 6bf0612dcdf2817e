"""The osworld backend's parts that need neither desktop-env nor a desktop: shim, venv records, options, tasks, CLI."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from legato_gym import DesktopConfig
from legato_gym.backends import BACKENDS, get_backend, resolve_backend
from legato_gym.backends.osworld import OSWorldOptions, default_tasks, tasks_from_index
from legato_gym.backends.osworld.audit import SESSION_WRITES
from legato_gym.backends.osworld.remote import resolve_python
from legato_gym.backends.osworld.session_helpers import PROCS_SCRIPT, is_session_helper
from legato_gym.desktopenv import shim, supplements
from legato_gym.desktopenv.venv import MARKER, REQUIREMENTS, VENV_ENV_VAR, check_venv, recorded_python
from legato_gym.errors import ConfigError, MissingDependencyError
from legato_gym.registration import ENV_IDS


@pytest.fixture(autouse=True)
def _shim_stays_in_its_test() -> Iterator[None]:
    """The shim is meant for desktop-env's own interpreter: once a test installs it here, later tests (TRL's,
    whose transformers asks whether torchvision exists) would see stubs. Take it out again."""
    finders = list(sys.meta_path)
    modules = set(sys.modules)
    yield
    sys.meta_path[:] = finders
    for key in set(sys.modules) - modules:
        if isinstance(sys.modules[key], shim.StubModule):
            del sys.modules[key]


@pytest.fixture
def fake_optional(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = "legato_absent_ocr"
    monkeypatch.setitem(shim.OPTIONAL, name, "legato-absent-ocr")
    shim.install()
    yield name
    for key in [k for k in sys.modules if k.split(".")[0] == name]:
        del sys.modules[key]


def test_shim_lets_absent_optional_library_import_and_fails_on_use(fake_optional: str) -> None:
    module = importlib.import_module(fake_optional)
    reader_cls = module.Reader  # `from easyocr import Reader` at a metric module's top level
    sub = importlib.import_module(f"{fake_optional}.color")  # `from skimage.color import rgb2lab`
    assert fake_optional in shim.stubbed()
    with pytest.raises(MissingDependencyError, match=r"legato-absent-ocr.*pip install"):
        reader_cls(["en"])
    with pytest.raises(MissingDependencyError, match="legato-absent-ocr"):
        sub.rgb2lab([1, 2, 3])
    with pytest.raises(MissingDependencyError):

        class Derived(module.Base):  # type: ignore[misc,name-defined]
            pass


def test_shim_never_shadows_installed_modules_or_their_missing_submodules() -> None:
    shim.install()
    assert not isinstance(importlib.import_module("json"), shim.StubModule)
    with pytest.raises(ImportError):
        importlib.import_module("numpy.legato_no_such_module")  # numpy is real: no stub for its submodules
    with pytest.raises(ImportError):
        importlib.import_module("legato_not_optional_at_all")


def test_uses_stub_names_the_absent_library_a_metric_needs(fake_optional: str) -> None:
    module = importlib.import_module(fake_optional)
    namespace = {"__name__": "legato_fake_metrics", "ocr": module}
    exec("def compare_image_text(a, b):\n    return ocr.Reader(['en'])\ndef exact(a, b):\n    return a == b", namespace)
    fake_metrics = type(sys)("legato_fake_metrics")
    fake_metrics.__dict__.update(namespace)
    sys.modules["legato_fake_metrics"] = fake_metrics
    try:
        assert shim.uses_stub(namespace["compare_image_text"]) == [fake_optional]
        assert shim.uses_stub(namespace["exact"]) == []
    finally:
        del sys.modules["legato_fake_metrics"]


def test_play_and_exit_is_read_as_osworld_reads_it(tmp_path: Path) -> None:
    vlcrc = tmp_path / "vlcrc"
    check = supplements.check_play_and_exit
    vlcrc.write_text("[core]\n#play-and-exit=0\nrepeat=1\n")  # VLC writes an option at its default commented out
    assert check(str(vlcrc), {"expected_play_and_exit": 0}) == 1.0
    vlcrc.write_text("[core]\n#play-and-exit=0\nplay-and-exit=1\n")  # the last line naming it wins
    assert check(str(vlcrc), {"expected_play_and_exit": 0}) == 0.0
    assert check(str(vlcrc), {"expected_play_and_exit": "1"}) == 1.0
    vlcrc.write_text("[core]\nrepeat=1\n")  # not named: VLC's default, off
    assert check(str(vlcrc), {"expected_play_and_exit": 0}) == 1.0
    assert check(str(tmp_path / "absent"), {"expected_play_and_exit": 0}) == 0.0
    assert check(None, {"expected_play_and_exit": 0}) == 0.0  # the getter found no file


def test_supplements_never_replace_desktop_envs_own_metric_or_getter() -> None:
    class Metrics:
        def check_play_and_exit(self) -> float:
            return 0.5

    class Getters:
        def get_chrome_appearance_mode_ui(self) -> str:
            return "theirs"

    own_metrics, own_getters = Metrics(), Getters()
    assert supplements.install(own_metrics, own_getters) == []
    assert own_metrics.check_play_and_exit() == 0.5 and own_getters.get_chrome_appearance_mode_ui() == "theirs"
    metrics, getters = type("Bare", (), {})(), type("Bare", (), {})()
    assert supplements.install(metrics, getters) == ["check_play_and_exit", "get_chrome_appearance_mode_ui"]
    assert metrics.check_play_and_exit is supplements.check_play_and_exit
    # desktop-env resolves {"type": X} as getattr(getters, "get_" + X), called as getter(env, config)
    assert getters.get_chrome_appearance_mode_ui is supplements.get_chrome_appearance_mode_ui
    assert not hasattr(metrics, "get_chrome_appearance_mode_ui") and not hasattr(getters, "check_play_and_exit")


def test_the_settings_page_is_read_as_osworld_reads_it() -> None:
    mode = supplements.appearance_mode
    gtk = {"extensions.theme.system_theme": 1}  # the VM's theme in its GNOME session, which OSWorld reads as dark
    assert mode(gtk, ["Appearance", "Dark", "100%", "Monospace"]) == "dark"  # the setup's dark mode, untouched
    assert mode(gtk, ["Light", "100%"]) == "light"  # any vote for light wins
    assert mode(gtk, ["Device"]) == "dark"  # the GTK theme's vote outranks the device's
    assert mode({"extensions.theme.system_theme": 0}, ["Dark"]) == "light"  # the classic theme reads as light
    assert mode({}, ["Device"]) == "system" and mode({}, ["System default"]) == "system"
    assert mode({}, ["Appearance", "New Tab page"]) is None  # nothing said: the Preferences file is read
    scheme = "browser.theme.color_scheme2"
    assert [mode({scheme: v}, []) for v in (1, "1", "LIGHT", 2, "dark", 0, "Device", 1.0)] == [
        "light", "light", "light", "dark", "dark", "system", "system", "light"
    ]  # fmt: skip
    assert mode({scheme: True}, []) is None and mode({scheme: " 1"}, []) is None  # as JavaScript's === compares
    theme = "extensions.theme.system_theme"
    assert [mode({theme: v}, []) for v in (0, "0", False, 1, "1", True, 2, "false")] == [
        "light", "light", "light", "dark", "dark", "dark", None, None
    ]  # fmt: skip
    assert mode({"browser.theme.other": 1}, []) is None  # only the three prefs OSWorld names vote


def test_the_preferences_file_is_read_as_osworld_reads_it() -> None:
    mode = supplements.preferences_mode
    assert mode({"browser": {"theme": {"color_scheme": 2, "color_scheme2": 1}}}) == "light"  # color_scheme2 first
    assert mode({"browser": {"theme": {"color_scheme": 2}}}) == "dark"
    assert mode({"browser": {"theme": {"color_scheme2": " Dark "}}}) == "dark"
    assert mode({"browser": {"theme": {"color_scheme2": 2}}, "extensions": {"theme": {"system_theme": 0}}}) == "light"
    assert mode({"browser": {"theme": {"color_scheme2": 2}}, "extensions": {"theme": {"system_theme": 1}}}) == "dark"
    assert mode({}) == "system" and mode({"browser": {"theme": {"color_scheme2": 7}}}) == "system"
    assert mode({"browser": "not a mapping"}) == "system"


class _FakeController:
    """desktop-env's controller as the getter's Preferences fallback uses it: the file changes between reads."""

    def __init__(self, contents: list[bytes | None]) -> None:
        self.contents = contents
        self.reads = 0

    def execute_python_command(self, command: str) -> dict[str, str]:
        assert "google-chrome/Default/Preferences" in command
        return {"output": "/home/user/.config/google-chrome/Default/Preferences\n"}

    def get_file(self, path: str) -> bytes | None:
        assert path == "/home/user/.config/google-chrome/Default/Preferences"
        self.reads += 1
        return self.contents[min(self.reads, len(self.contents)) - 1]


def test_without_devtools_the_mode_comes_from_the_preferences_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supplements, "PREFERENCES_TIMEOUT_S", 1.0)
    dark = json.dumps({"browser": {"theme": {"color_scheme2": 2}}}).encode()
    light = json.dumps({"browser": {"theme": {"color_scheme2": 1}}}).encode()
    env = type("Env", (), {"controller": _FakeController([None, dark, light])})()
    assert supplements._preferences_file_mode(env) == "light"  # Chrome wrote it late: read until it says light
    assert env.controller.reads == 3
    env.controller = _FakeController([b"{not json", dark])
    assert supplements._preferences_file_mode(env) == "dark"  # never light by the deadline: its last mode
    assert env.controller.reads > 2
    env.controller = _FakeController([None])
    assert supplements._preferences_file_mode(env) == "system"


def test_the_appearance_getter_outside_desktop_envs_python_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # as where Playwright is not installed
    env = type("Env", (), {"vm_ip": "127.0.0.1", "chromium_port": 9})()
    with pytest.raises(MissingDependencyError, match=r"Playwright.*legato osworld setup"):
        supplements.get_chrome_appearance_mode_ui(env, {"type": "chrome_appearance_mode_ui"})


def test_requirements_leave_out_torch_and_keep_desktop_env_pins() -> None:
    names = {r.split("<")[0].split(">")[0].split("~")[0].split("=")[0].lower() for r in REQUIREMENTS}
    assert not names & {"torch", "transformers", "easyocr", "librosa"}
    assert "numpy>=1.26,<2" in REQUIREMENTS and "gymnasium~=0.28.1" in REQUIREMENTS


def test_recorded_python_reads_the_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VENV_ENV_VAR, str(tmp_path))
    assert recorded_python() is None
    python = tmp_path / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    (tmp_path / MARKER).write_text(json.dumps({"python": str(python)}))
    assert recorded_python() == str(python)
    assert resolve_python(DesktopConfig()) == str(python)
    assert resolve_python(DesktopConfig(worker_python="/opt/py")) == "/opt/py"


def test_missing_interpreter_says_to_run_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VENV_ENV_VAR, str(tmp_path / "none"))
    with pytest.raises(MissingDependencyError, match="legato osworld setup"):
        resolve_python(DesktopConfig())
    with pytest.raises(MissingDependencyError, match="legato osworld setup"):
        check_venv(tmp_path / "none")


def test_cli_check_fails_with_the_fix_when_there_is_no_venv(tmp_path: Path) -> None:
    from legato_rl.cli.app import app

    result = CliRunner().invoke(app, ["osworld", "check", "--venv", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "legato osworld setup" in result.output


def test_options_unknown_key_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'settle_s'"):
        OSWorldOptions.from_mapping({"settle": 0.1})
    with pytest.raises(ConfigError, match="kill_timeout"):
        OSWorldOptions.from_mapping({"kill_timeout": 0})


def test_default_tasks_need_a_checkout_and_read_test_all(osworld_path: Path) -> None:
    with pytest.raises(ConfigError, match="--osworld"):
        default_tasks(DesktopConfig(osworld_path=None))
    tasks = default_tasks(DesktopConfig(osworld_path=osworld_path))
    assert len(tasks) == 369
    assert {t.domain for t in tasks} >= {"os", "chrome", "multi_apps"}
    assert len(tasks_from_index(osworld_path, "test_small.json")) == 39


def test_backend_and_gym_id_are_registered() -> None:
    unit = resolve_backend("osworld")
    assert unit.desktop_class.__name__ == "OSWorldDesktop" and unit.default_tasks is default_tasks
    assert ENV_IDS["legato/OSWorld-v0"] == "osworld" == BACKENDS["osworld"].name and unit.gym_id == "legato/OSWorld-v0"
    with pytest.warns(DeprecationWarning, match="get_backend"):  # the old tuple form, kept for one release
        cls, tasks_fn = get_backend("osworld")
    assert cls is unit.desktop_class and tasks_fn is default_tasks


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare (apt: util-linux)")
def test_what_a_session_helper_starts_is_the_sessions_not_the_agents() -> None:
    """The process probe, in a PID namespace whose init plays the VM's: tracker's extractor (activated: a child
    of PID 1) runs GStreamer's plugin scanner, which the audit must not count as the episode's, while a process an
    action started (a child of anything else) stays the episode's."""
    spawned = "import json, sys; print(*json.loads(sys.stdin.read())['spawned'])"
    tree = (
        "bash -c 'exec -a /usr/libexec/tracker-extract-3 bash -c \"(exec -a gst-plugin-scanner sleep 30) & wait\"' & "
        "bash -c '(exec -a agent-started sleep 30) & wait' & "
        'sleep 0.5; out=$(python3 -c "$PROBE" "[]" list 0); echo "$out"; '
        f'for p in $(echo "$out" | python3 -c "{spawned}"); do tr "\\0" " " < /proc/$p/cmdline; echo; done'
    )
    run = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "bash", "-c", tree],
        env={**os.environ, "PROBE": PROCS_SCRIPT},
        capture_output=True,
        text=True,
        timeout=30,
    )
    if run.returncode and "Operation not permitted" in run.stderr:
        pytest.skip(f"unshare cannot make a PID namespace here: {run.stderr.strip()}")
    listing, *spawned_commands = run.stdout.strip().splitlines()
    activated = json.loads(listing)["helpers"].values()
    assert any(is_session_helper(command) for command in activated), activated
    assert [command.strip() for command in spawned_commands] == ["gst-plugin-scanner 30"], run.stdout
    assert ".cache/gstreamer-1.0" in SESSION_WRITES
