"""One place owns each setting's default: the CLI's options and ``collect()``'s arguments read theirs from it.

The owners are the library's values (``CollectOptions``, ``Limits``, ``Sampling``, ``DesktopConfig``,
``LocalOptions``, ``Capabilities``) and, for settings that are a function's argument alone, that function's
signature. A CLI option whose default differs from its owner's, an option with a default but no owner, and a
default written as a literal in a command module all fail here.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from legato_gym import DesktopConfig
from legato_gym.backends import Finished
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.backends.local.options import LocalOptions
from legato_rl.cli.app import app
from legato_rl.collect import CollectOptions, collect
from legato_rl.follow import FollowOptions
from legato_rl.policy import Limits, Sampling
from legato_rl.probe import run_probe

CLI_DIR = Path(__file__).resolve().parents[2] / "legato_rl" / "cli"


def _field(cls: type[Any], name: str) -> Callable[[], object]:
    def default() -> object:
        (found,) = [f for f in dataclasses.fields(cls) if f.name == name]
        assert found.default is not dataclasses.MISSING, f"{cls.__name__}.{name} has no plain default"
        return found.default

    default.__qualname__ = f"{cls.__name__}.{name}"
    return default


def _argument(function: Callable[..., Any], name: str) -> Callable[[], object]:
    def default() -> object:
        value = inspect.signature(function).parameters[name].default
        assert value is not inspect.Parameter.empty, f"{function.__qualname__}({name}) has no default"
        return value

    default.__qualname__ = f"{function.__qualname__}({name}=)"
    return default


#: (command, option's parameter name) -> where its default is owned.
OWNERS: dict[tuple[str, str], Callable[[], object]] = {
    **{("rl collect", name): _field(CollectOptions, name) for name in (
        "desktops", "group", "oversample", "max_steps", "rollout_timeout", "env_retries", "image_max", "backend",
        "seed",
    )},
    **{("rl collect", name): _field(Limits, name) for name in ("max_inflight", "step_timeout", "retries")},
    **{("rl collect", name): _field(Sampling, name) for name in ("temperature", "top_p", "max_tokens")},
    **{("rl collect", name): _field(DesktopConfig, name) for name in ("ready_signal", "fixed_wait", "fast_reset")},
    ("rl collect", "grader"): _field(LocalOptions, "grader"),
    ("rl collect", "prestart"): _field(LocalOptions, "prestart"),
    ("rl collect", "session"): _field(LocalOptions, "session"),
    **{("rl collect", name): _field(FollowOptions, name) for name in (
        "order", "max_ready", "max_staleness", "stale", "partial", "reset_ahead",
    )},
    ("rl probe", "timeout"): _argument(run_probe, "timeout"),
    ("osworld cache", "timeout"): _argument(FileCache.fetch, "timeout"),
    ("osworld cache", "connect_timeout"): _argument(FileCache.fetch, "connect_timeout"),
    ("osworld coverage", "grader"): _field(LocalOptions, "grader"),
}  # fmt: skip


def _options() -> Iterator[tuple[str, Any]]:
    """Every (command path, click parameter) of the ``legato`` app, the way ``docs/gen_cli.py`` walks it."""
    root = typer.main.get_command(app)

    def walk(command: Any, path: list[str], ctx: Any) -> Iterator[tuple[str, Any]]:
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                yield from walk(sub, [*path, name], sub.context_class(sub, info_name=name, parent=ctx))
            return
        for param in command.params:
            yield " ".join(path), param

    yield from walk(root, [], root.context_class(root, info_name="legato"))


def test_every_cli_default_is_its_owners_default() -> None:
    options = {(command, param.name): param for command, param in _options()}
    missing = sorted(set(OWNERS) - set(options))
    assert not missing, f"options this test maps are gone from the CLI (update OWNERS): {missing}"
    differ = {
        f"{command} --{name.replace('_', '-')}": (options[command, name].default, owner.__qualname__, owner())
        for (command, name), owner in OWNERS.items()
        if options[command, name].default != owner() or type(options[command, name].default) is not type(owner())
    }
    assert not differ, f"CLI defaults that are not their owner's (CLI, owner, owner's default): {differ}"


def test_every_cli_option_with_a_default_has_an_owner() -> None:
    """An option defaulting to a value (not ``None``, not an off flag) is a setting: some value must own it."""
    orphans = [
        f"{command} --{param.name.replace('_', '-')}={param.default!r}"
        for command, param in _options()
        if param.default is not None and param.default is not False and (command, param.name) not in OWNERS
    ]
    assert not orphans, f"CLI options whose default no library value owns (add one, and map it here): {orphans}"


def _literal_defaults(path: Path) -> list[str]:
    """The command functions' parameters in ``path`` whose default is written as a literal (other than an off
    flag or ``None``): a second place for a default that the library owns."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "command" for d in node.decorator_list):
            continue
        args = node.args.args + node.args.kwonlyargs
        defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults
        for arg, default in zip(args, [*defaults, *node.args.kw_defaults], strict=True):
            value = default.operand if isinstance(default, ast.UnaryOp) else default
            if isinstance(value, ast.Constant) and value.value is not None and value.value is not False:
                assert default is not None  # a constant was found in it
                found.append(f"{path.name}:{value.lineno} {node.name}({arg.arg}={ast.unparse(default)})")
    return found


@pytest.mark.parametrize("module", sorted(p.name for p in CLI_DIR.glob("*.py")))
def test_no_command_writes_a_default_as_a_literal(module: str) -> None:
    literals = _literal_defaults(CLI_DIR / module)
    assert not literals, f"read these defaults from the value that owns them: {literals}"


def test_collect_takes_its_own_knobs_only_with_collect_options_defaults() -> None:
    params = inspect.signature(collect).parameters
    knobs = {f.name: f.default for f in dataclasses.fields(CollectOptions)}
    wiring = {"tasks", "policy", "out", "desktop", "harness", "ray", "progress"}
    # product.md's knobs by their names (issue 30): forwarded into policy.limits, which owns them and their
    # defaults; None is "not given"
    limits = {"max_inflight", "step_timeout", "retries"}
    assert set(params) == set(knobs) | wiring | limits, "collect() takes a setting that a config value owns"
    assert {name: params[name].default for name in knobs} == knobs
    assert {name: params[name].default for name in limits} == dict.fromkeys(limits)


def _run_collect(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *flags: str) -> dict[str, Any]:
    """``legato rl collect FLAGS`` on the fake backend, with ``collect()`` stubbed: what it was handed."""
    import importlib

    from typer.testing import CliRunner

    seen: dict[str, Any] = {}

    def fake_collect(tasks: object, policy: object, **kw: Any) -> dict[str, Any]:
        seen.update(kw, policy=policy)
        return {"status_counts": {}, "success_rate": None, "rollouts_per_hour": None, "groups_short": 0}

    monkeypatch.setattr(importlib.import_module("legato_rl.cli.collect"), "collect", fake_collect)
    args = ["rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--quiet", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, *flags])
    assert result.exit_code == 0, result.output
    return seen


def test_collect_flags_reach_the_value_that_owns_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = _run_collect(
        monkeypatch, tmp_path, "--max-inflight", "3", "--step-timeout", "7", "--retries", "0", "--temperature",
        "0.5", "--top-p", "0.9", "--max-tokens", "99", "--no-ready-signal", "--fixed-wait", "0.25",
        "--no-fast-reset", "--desktops", "2", "--seed", "5",
    )  # fmt: skip
    assert seen["policy"].limits == Limits(max_inflight=3, step_timeout=7.0, retries=0)
    assert seen["policy"].sampling == Sampling(temperature=0.5, top_p=0.9, max_tokens=99)
    finished = seen["desktop"]  # the settings finished once by the CLI, the tasks checked with them
    assert isinstance(finished, Finished) and finished.tasks is not None and finished.backend.name == "fake"
    desktop = finished.config
    assert (desktop.ready_signal, desktop.fixed_wait, desktop.fast_reset) == (False, 0.25, False)
    assert (seen["desktops"], seen["seed"]) == (2, 5)


def test_collect_without_flags_hands_on_the_library_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = _run_collect(monkeypatch, tmp_path)
    assert seen["policy"].limits == Limits() and seen["policy"].sampling == Sampling()
    desktop = seen["desktop"].config
    assert (desktop.ready_signal, desktop.fixed_wait, desktop.fast_reset) == (
        DesktopConfig.ready_signal, DesktopConfig.fixed_wait, DesktopConfig.fast_reset,
    )  # fmt: skip
    knobs = {f.name: f.default for f in dataclasses.fields(CollectOptions) if f.name != "backend"}
    assert {name: seen[name] for name in knobs} == knobs


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [
        ("--step-timeout", "0", "Limits.step_timeout=0.0"),
        ("--max-inflight", "0", "Limits.max_inflight=0"),
        ("--retries", "-1", "Limits.retries=-1"),
        ("--temperature", "-1", "Sampling.temperature=-1.0"),
        ("--max-tokens", "0", "Sampling.max_tokens=0"),
        ("--fixed-wait", "-1", "fixed_wait=-1.0"),
    ],
)
def test_a_bad_setting_is_one_error_line_naming_its_owner(flag: str, value: str, named: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    args = ["rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--quiet", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, flag, value])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert named in line
    assert not (tmp_path / "rollouts.jsonl").exists()  # refused before anything was written


@pytest.mark.parametrize(("flag", "value"), [("--step-timeout", "0"), ("--temperature", "-1")])
def test_a_bad_policy_setting_is_refused_before_the_embedded_server_starts(
    flag: str, value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from legato_rl.testing import ReferencePolicyServer

    started: list[object] = []

    def enter(self: ReferencePolicyServer) -> ReferencePolicyServer:
        started.append(self)
        return self

    monkeypatch.setattr(ReferencePolicyServer, "__enter__", enter)
    args = ["rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--quiet", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, flag, value])
    assert result.exit_code == 2, result.output
    assert started == []
