"""The osworld backend over desktop-env's providers, and a GNOME stand-in VM's helpers under fast reset.

No cloud or KVM is reachable here: the delegation runs through a provider class implementing desktop-env's
``Provider`` interface over local sandboxed desktops (:mod:`legato_gym.backends.osworld.standin_provider`),
loaded by import path as a user's own provider would be, in desktop-env's interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from osworld_kit import desktop_env_python, needs_local_tools, run_scenarios

from legato_gym.backends.osworld.options import DESKTOP_ENV_PROVIDERS, OSWorldOptions, VMSettings
from legato_gym.backends.osworld.providers import parse_address, uses_desktop_env_provider
from legato_gym.errors import ConfigError, DesktopCrashed
from legato_gym.options import typed_options

STANDIN = "legato_gym.backends.osworld.standin_provider:StandInProvider"


def test_every_desktop_env_provider_is_an_option_and_docker_stays_legatos() -> None:
    assert set(DESKTOP_ENV_PROVIDERS) == {
        "aws",
        "azure",
        "gcp",
        "vmware",
        "virtualbox",
        "aliyun",
        "volcengine",
        "docker",
    }
    for name in DESKTOP_ENV_PROVIDERS:
        assert uses_desktop_env_provider(OSWorldOptions(provider=name)) is (name != "docker")
    assert not uses_desktop_env_provider(OSWorldOptions(provider="local"))
    desktop_envs_docker = VMSettings(provider_class="desktop_env.providers.docker.provider:DockerProvider")
    assert uses_desktop_env_provider(OSWorldOptions(provider="docker", vm=desktop_envs_docker))
    assert uses_desktop_env_provider(OSWorldOptions(provider=STANDIN))
    with pytest.raises(ConfigError, match="is not a provider"):
        OSWorldOptions(provider="kvm")
    with pytest.raises(ConfigError, match=r"package\.module:Class"):
        VMSettings(provider_class="not a path")
    read = typed_options(
        {"provider": "aws", "vm": {"region": "ap-east-1", "snapshot_name": "ami-1"}}, OSWorldOptions, "osworld"
    )
    assert isinstance(read, OSWorldOptions) and read.vm == VMSettings(region="ap-east-1", snapshot_name="ami-1")


def test_provider_addresses_are_read_as_desktop_env_reads_them() -> None:
    docker = parse_address("localhost:5001:9223:8007:8081")
    assert (docker.host, docker.server_port, docker.chromium_port, docker.vnc_port, docker.vlc_port) == (
        "localhost",
        5001,
        9223,
        8007,
        8081,
    )
    cloud = parse_address("10.0.0.7")
    assert (cloud.url, cloud.chromium_port, cloud.vlc_port) == ("http://10.0.0.7:5000", 9222, 8080)
    for bad in ("", "10.0.0.7:http"):
        with pytest.raises(DesktopCrashed):
            parse_address(bad)


@pytest.mark.osworld_venv
def test_desktop_envs_own_providers_refuse_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """desktop-env's factory is what runs: gcp is not implemented in 1.0.2, the clouds' SDKs are not installed."""
    monkeypatch.delenv("AWS_REGION", raising=False)
    providers = ["aws", "gcp", "aliyun", "volcengine", "vmware"]
    out = run_scenarios(
        desktop_env_python(), "provider_scenarios.py", "refusals", f'{{"providers": {providers}}}'.replace("'", '"')
    )
    assert out["gcp"][0] == "ConfigError" and "no gcp provider" in out["gcp"][1]
    for cloud, package in (("aws", "boto3"), ("aliyun", "alibabacloud"), ("volcengine", "volcengine")):
        assert out[cloud][0] == "MissingDependencyError" and package in out[cloud][1], out[cloud]
    assert out["vmware"] == ["loaded", ""]  # its classes load; vmrun is needed only to start a VM


@pytest.mark.osworld_venv
@pytest.mark.desktop
def test_start_ip_revert_and_stop_go_through_the_provider_class(tmp_path: Path) -> None:
    """Fast reset and grading stay legato's; a revert domain, and a dead machine, go through the provider."""
    needs_local_tools()
    out = run_scenarios(
        desktop_env_python(), "provider_scenarios.py", "delegation", f'{{"cache": "{tmp_path}"}}', timeout=400
    )
    assert out["vm"] == ["ProviderVM", "StandInProvider", "StandInVMManager"]
    assert out["runs"] == [[1.0, "fast"], [0.0, "fast"], [1.0, "revert"], [1.0, "fallback"]]
    assert out["calls"] == [
        ["start_emulator", "vm1", True, "Ubuntu"],
        ["get_ip_address", "vm1"],
        ["revert_to_snapshot", "vm1", "init_state"],  # the os task
        ["start_emulator", "vm2", True, "Ubuntu"],
        ["get_ip_address", "vm2"],
        ["revert_to_snapshot", "vm2", "init_state"],  # the machine died
        ["start_emulator", "vm3", True, "Ubuntu"],
        ["get_ip_address", "vm3"],
        ["stop_emulator", "vm3"],
    ]
    assert out["registry"] == [["vm3", True]]  # the new machines registered, the old ones deleted, as DesktopEnv
    assert out["path"] == "vm3" and out["left"] == []


@pytest.mark.osworld_venv
@pytest.mark.desktop
def test_gnome_helpers_cause_no_fallback_and_every_fast_reset_is_clean(tmp_path: Path) -> None:
    """A GNOME stand-in VM (GNOME Shell, its D-Bus-activated helpers, the osworld server): helpers that exit when
    idle or restart are the session's, not the agent's; files left in /tmp are removed; an audit after each
    fast reset finds nothing of the episode left."""
    needs_local_tools()
    tasks = ["local-terminal-create-file", "local-files-rename", "local-editor-write-save"]
    args = f'{{"cache": "{tmp_path}", "tasks": {tasks}, "rounds": 1}}'.replace("'", '"')
    out = run_scenarios(desktop_env_python(), "provider_scenarios.py", "gnome_episodes", args, timeout=600)
    assert out["session"] == "gnome"
    assert out["fallbacks"] == []
    assert out["kinds"] == ["fast"] * 4
    assert out["scores"] == [1.0] * 3
    assert out["audited"] == 4 and out["audits"] == []


def test_collect_takes_a_provider_for_the_osworld_backend_only(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from legato_gym import DesktopConfig
    from legato_gym.backends import resolve_backend
    from legato_rl.cli.app import app

    provider_flag = resolve_backend("osworld").cli_options["--provider"]

    def _provider_config(provider: str | None, backend: str, config: DesktopConfig) -> DesktopConfig:
        assert backend == "osworld"
        return provider_flag(config, provider)

    plain = DesktopConfig(options=OSWorldOptions(client_password="pw"))
    chosen = _provider_config(STANDIN, "osworld", plain)
    assert chosen.options == OSWorldOptions(provider=STANDIN, client_password="pw")  # the other options kept
    assert _provider_config("aws", "osworld", DesktopConfig()).options == OSWorldOptions(provider="aws")
    assert _provider_config(None, "osworld", plain) is plain
    argv = ["rl", "collect", "--out", str(tmp_path / "x"), "--policy-url", "embedded"]
    fake = CliRunner().invoke(app, [*argv, "--backend", "fake", "--provider", "aws"])
    said = " ".join(fake.output.replace("│", " ").split())
    assert fake.exit_code == 2 and "--provider aws applies to --backend osworld only, not 'fake'" in said, said
    wrong = CliRunner().invoke(app, [*argv, "--backend", "osworld", "--provider", "kvm", "--tasks", str(tmp_path)])
    said = " ".join(wrong.output.replace("│", " ").split())
    assert wrong.exit_code != 0 and "is not a provider" in said, said
    assert not (tmp_path / "x").exists()
