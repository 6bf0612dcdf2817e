"""Typed per-backend options and the backend resolved once (issue 18, item 4)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

import legato_gym  # noqa: F401  (registers legato/FakeDesktop-v0)
from legato_gym import BackendUnavailableError, ConfigError, DesktopConfig, DesktopEnv, Timeouts
from legato_gym import backends as backends_module
from legato_gym.backends import Backend, resolve_backend
from legato_gym.backends.fake import FakeDesktop, FakeOptions, Faults, Latency, fake_solution
from legato_gym.backends.local import LocalOptions
from legato_gym.backends.osworld import DockerSettings, OSWorldOptions
from legato_gym.options import BackendOptions, invalid
from legato_gym.transport.protocol import config_from_json, config_to_json
from legato_gym.vector import DesktopVectorEnv

SCREEN = (320, 240)

#: Options of every built-in backend, away from their defaults, nested fields included.
EXAMPLES: list[BackendOptions] = [
    FakeOptions(
        latency={"act": Latency(0.2, sigma=0.5, max=5.0), "reset": Latency(0.1)},
        faults=Faults(crash=0.25, crash_mode="exit", phases=frozenset({"act", "observe"})),
    ),
    LocalOptions(memory_mb=512, max_processes=64, tmpfs_mb=32, extra_paths=("/opt/x",), grader="local"),
    OSWorldOptions(
        provider="local",
        local=LocalOptions(memory_mb=1024, pyautogui_pause=0.0, sync_input=False),
        docker=DockerSettings(ports=(5000,), volumes={"/usr": "/usr"}, command=("python3", "-m", "x")),
        revert_domains=("os",),
    ),
]


def test_a_mapping_is_read_into_the_backends_class_once_where_it_is_resolved() -> None:
    mapping = {"latency": {"act": 0.05, "reset": {"median": 0.1, "sigma": 0.5}}, "faults": {"crash": 0.1}}
    config = resolve_backend("fake").configure(DesktopConfig(screen=SCREEN, options=mapping))
    assert config.options == FakeOptions(
        latency={"act": Latency(0.05), "reset": Latency(0.1, sigma=0.5)}, faults=Faults(crash=0.1)
    )
    with DesktopEnv("fake", DesktopConfig(screen=SCREEN, options=mapping)) as env:
        assert isinstance(env.config.options, FakeOptions)  # everything after the entry point sees the class
        assert env.unwrapped.desktop.options is env.config.options  # type: ignore[attr-defined]
    typed = DesktopConfig(screen=SCREEN, options=FakeOptions())
    assert resolve_backend("fake").configure(typed) is typed  # typed options are kept as they are


@pytest.mark.parametrize(
    ("backend", "options", "theirs", "ours"),
    [
        ("fake", LocalOptions(), "'local'", "FakeOptions"),
        ("local", FakeOptions(), "'fake'", "LocalOptions"),
        ("osworld", LocalOptions(), "'local'", "OSWorldOptions"),
    ],
)
def test_another_backends_options_are_refused_naming_both_and_the_fix(
    backend: str, options: BackendOptions, theirs: str, ours: str
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_backend(backend).configure(DesktopConfig(options=options))
    message = str(info.value)
    assert f"{type(options).__name__} (the {theirs} backend's options)" in message
    assert f"backend {backend!r} takes {ours}" in message and f"give {ours}(...) from legato_gym.backends." in message


def test_a_desktop_built_directly_refuses_another_backends_options() -> None:
    with pytest.raises(ConfigError, match=r"LocalOptions .*backend 'fake' takes FakeOptions"):
        FakeDesktop(DesktopConfig(screen=SCREEN, options=LocalOptions()))


def test_from_mapping_is_one_implementation_with_did_you_mean() -> None:
    shared = BackendOptions.from_mapping.__func__  # type: ignore[attr-defined]
    for cls in (FakeOptions, LocalOptions, OSWorldOptions):
        assert cls.from_mapping.__func__ is shared  # type: ignore[attr-defined,union-attr]
    with pytest.raises(ConfigError, match=r"options: unknown key 'memory_md'; did you mean 'memory_mb'\?"):
        LocalOptions.from_mapping({"memory_md": 2048})
    with pytest.raises(ConfigError, match=r"unknown key 'provder'; did you mean 'provider'\?"):
        OSWorldOptions.from_mapping({"provder": "local"})
    with pytest.raises(ConfigError, match=r"options\.local: unknown key 'tmpfs'; did you mean 'tmpfs_mb'\?"):
        OSWorldOptions.from_mapping({"local": {"tmpfs": 1}})
    with pytest.raises(ConfigError, match=r"options\.docker\.ports=\[\]: must name at least the server's port"):
        OSWorldOptions.from_mapping({"docker": {"ports": []}})
    with pytest.raises(ConfigError, match=r"did you mean 'latency'"):
        gym.make("legato/FakeDesktop-v0", config=DesktopConfig(screen=SCREEN, options={"latncy": {}}))


def test_options_built_in_code_are_checked_as_mapped_ones_are() -> None:
    with pytest.raises(ConfigError, match=r"Faults\.crash=2: must be a probability between 0 and 1"):
        Faults(crash=2)
    with pytest.raises(ConfigError, match=r"Latency\.median=-1: must be a finite number of seconds"):
        Latency(-1)
    with pytest.raises(ConfigError, match=r"LocalOptions\.grader='vm': choose 'auto', 'osworld', 'local'"):
        LocalOptions(grader="vm")
    with pytest.raises(ConfigError, match=r"OSWorldOptions\.provider='kvm': is not a provider; use one of"):
        OSWorldOptions(provider="kvm")
    with pytest.raises(ConfigError, match=r"options\.provider='kvm': is not a provider"):
        OSWorldOptions.from_mapping({"provider": "kvm"})
    with pytest.raises(ConfigError, match=r"provider='lcoal': is not a provider; did you mean 'local'\?"):
        OSWorldOptions(provider="lcoal")


def test_the_backend_specific_fields_left_desktop_config() -> None:
    assert LocalOptions().memory_mb == 4096 and LocalOptions().max_processes == 1024 and LocalOptions().tmpfs_mb == 2048
    assert OSWorldOptions().provider == "docker"
    for gone in ("memory_mb", "max_processes", "tmpfs_mb", "provider"):
        with pytest.raises(TypeError, match=gone):
            DesktopConfig(**{gone: 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("options", EXAMPLES, ids=lambda o: type(o).__name__)
def test_typed_options_cross_to_a_worker_as_their_own_class(options: BackendOptions) -> None:
    config = DesktopConfig(screen=(800, 600), timeouts=Timeouts(act=3.0), osworld_path=Path("/tmp/o"), options=options)
    data = config_to_json(config)
    assert data["options"]["kind"] == f"{type(options).__module__}:{type(options).__name__}"
    back = config_from_json(json.loads(json.dumps(data)))
    assert back == config and type(back.options) is type(options)
    assert type(options).from_mapping(options.to_json()) == options


def test_a_typed_fault_injected_in_the_worker_process() -> None:
    config = DesktopConfig(screen=SCREEN, options=FakeOptions(faults=Faults(setup=1.0)))
    with DesktopVectorEnv(1, "fake", config, seed=0) as env:
        _, info = env.reset()
        assert info["_error"][0] and type(info["error"][0]).__name__ == "SetupError", info


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    loads: list[str] = []
    real = backends_module._resolve

    def counted(name: str) -> Any:
        loads.append(name)
        return real(name)

    monkeypatch.setattr(backends_module, "_resolve", counted)
    return loads


def test_each_entry_point_resolves_the_backend_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = _count_loads(monkeypatch)
    config = DesktopConfig(screen=SCREEN, options={"latency": {"act": 0.0}})
    with DesktopEnv("fake", config) as env:
        task = env.tasks[0]
        env.reset(options={"task": task})
        reward = 0.0
        for step in fake_solution(task, env.desktop.screen_size):
            _, reward, *_ = env.step(step.action)
        assert reward == 1.0
    assert loads == ["fake"]
    loads.clear()
    with DesktopVectorEnv(2, "fake", config, seed=0) as venv:
        venv.reset()
        assert isinstance(venv.config.options, FakeOptions) and venv.backend == "fake"
    assert loads == ["fake"]  # the parent's one look-up; each worker resolves it again in its own process
    resolved = resolve_backend("fake")
    loads.clear()
    with DesktopVectorEnv(1, resolved, DesktopConfig(screen=SCREEN)) as venv:
        obs, _ = venv.reset()
        assert obs["screenshot"].shape == (1, SCREEN[1], SCREEN[0], 3) and obs["screenshot"].dtype == np.uint8
    assert loads == []  # a resolved backend is passed down as it is


def test_an_unknown_backend_is_named_with_the_closest_one() -> None:
    with pytest.raises(BackendUnavailableError, match=r"unknown backend 'fak'; did you mean 'fake'\? choose one of"):
        resolve_backend("fak")
    assert isinstance(resolve_backend("fake"), Backend) and resolve_backend("fake").options_class is FakeOptions


def test_a_backend_of_your_own_without_an_options_class_keeps_its_mapping() -> None:
    toy = resolve_backend("vector_toy:ToyDesktop")
    assert toy.options_class is None
    assert toy.configure(DesktopConfig(screen=SCREEN, options={"x": 1})).options == {"x": 1}
    with pytest.raises(ConfigError, match=r"FakeOptions \(the 'fake' backend's options\).*takes no typed options"):
        toy.configure(DesktopConfig(screen=SCREEN, options=FakeOptions()))
    assert toy.default_tasks(DesktopConfig())[0].task_id == "toy-0"


@dataclass(frozen=True)
class OwnOptions(BackendOptions):
    backend: ClassVar[str] = "own"

    speed: float = 1.0

    def __post_init__(self) -> None:
        if not self.speed > 0:
            invalid(self, "speed", "must be > 0")


class OwnDesktop(FakeDesktop):
    options_class = OwnOptions

    def __init__(self, config: DesktopConfig | None = None, *, seed: int | None = None) -> None:
        own = (config or DesktopConfig()).options
        assert isinstance(own, OwnOptions)  # the entry point has read the mapping into the named class
        self.own = own
        super().__init__(replace(config or DesktopConfig(), options=None), seed=seed)


def test_a_backend_of_your_own_names_its_options_class() -> None:
    name = f"{__name__}:OwnDesktop"
    own = resolve_backend(name)
    assert own.options_class is OwnOptions
    with DesktopEnv(name, DesktopConfig(screen=SCREEN, options={"speed": 2})) as env:
        assert env.unwrapped.desktop.own == OwnOptions(speed=2.0)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"options\.speed=0\.0: must be > 0"):
        own.configure(DesktopConfig(options={"speed": 0}))
    with pytest.raises(ConfigError, match=r"unknown key 'sped'; did you mean 'speed'"):
        own.configure(DesktopConfig(options={"sped": 0}))


def test_a_folder_option_read_from_a_mapping_may_be_a_path(tmp_path: Path) -> None:
    options = LocalOptions.from_mapping({"file_cache": tmp_path / "files", "state_dir": tmp_path})

    assert options.file_cache == str(tmp_path / "files")
    assert options.state_dir == str(tmp_path)
