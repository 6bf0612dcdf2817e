"""What a new user meets first works as product.md shows it (issue 30): its Python example as written,
tasks as tasks.json holds them, the names it uses, a backend of exactly the seven calls it lists, and the
CLI's answers to a fixed wait without ``--no-ready-signal`` and to a batch in which nothing completed.

The policy server is legato's reference server, a real HTTP server on loopback; the desktops are the fake
backend's (worker processes, real pixels, graded) or a seven-call backend of the test's own.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from legato_gym import ConfigError, DesktopConfig, TaskFileError
from legato_gym.backends.fake import default_tasks
from legato_rl.cli.app import app
from legato_rl.collect import collect
from legato_rl.policy import Limits, PolicyConfig
from legato_rl.store import read_record_dicts
from legato_rl.testing import Faults, Latency, ReferencePolicyServer, ScriptedSolver
from legato_rl.testing.faults import HitTasks

#: product.md's Python example, copied as it is written there ("From Python:").
PRODUCT_EXAMPLE = """\
from legato.rl import collect, export_steps, PolicyConfig, DesktopConfig
summary = collect(tasks, PolicyConfig("https://your-server/v1", "Qwen/Qwen3.5-9B", version="step-41", api_key=key),
                  out="runs/step-41", desktops=16, group=8, oversample=0.25, max_inflight=32,
                  desktop=DesktopConfig(osworld_path="/home/me/osworld"))
export_steps("runs/step-41", "runs/step-41/train.jsonl")
"""

#: The seven calls product.md lists for a backend of your own ("Your own: a class with ...").
SEVEN_CALLS = {"reset", "wait_after_reset", "observe", "act", "wait_before_eval", "evaluate", "close"}

#: A backend with those seven calls and nothing else: no screen_size, check_task, expect_next, options_class,
#: default_tasks. Its task is done when the agent says DONE.
SEVEN_CALL_MODULE = """
import numpy as np

from legato_gym import ActResult, Observation, Waited


class SevenCallDesktop:
    def __init__(self, config, *, seed=None):
        self.config, self.task, self.actions = config, None, []

    def reset(self, task):
        self.task, self.actions = task, []

    def wait_after_reset(self):
        return Waited(seconds=0.0, ready=True)

    def observe(self):
        width, height = self.config.screen
        return Observation(np.full((height, width, 3), 200, np.uint8), self.task.instruction)

    def act(self, action):
        self.actions.append(action)
        return ActResult(act_s=0.0)

    def wait_before_eval(self):
        return Waited(seconds=0.0, ready=True)

    def evaluate(self):
        return 1.0 if self.actions[-1:] == ["DONE"] else 0.0

    def close(self):
        self.task = None
"""

WIDE = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}


def _entries(n: int) -> list[dict[str, Any]]:
    """The first ``n`` fake tasks as a tasks.json holds them: ``{"task_id", "config"}``."""
    return [{"task_id": t.task_id, "config": dict(t.config)} for t in default_tasks(DesktopConfig())[:n]]


def _statuses(run: Path) -> dict[str, int]:
    return json.loads((run / "summary.json").read_text())["status_counts"]


# --- 1 and 2: product.md's Python example, as written ---------------------------------------------------


def test_product_md_python_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Substituted, because product.md's values need a real model server and a VM: its URL becomes the reference
    # server's on loopback (serving product.md's model name, with a key), and `backend="fake"` is added (the
    # default backend boots OSWorld VMs). Everything else runs as written: 16 desktops, group 8, oversample 0.25,
    # max_inflight=32, the DesktopConfig (the fake tasks given inline never read the OSWorld checkout), the
    # relative run directory, and `tasks` as a tasks.json holds them.
    code = PRODUCT_EXAMPLE
    for old in ('"https://your-server/v1"', 'desktop=DesktopConfig(osworld_path="/home/me/osworld"))'):
        assert old in code
    monkeypatch.chdir(tmp_path)
    key = "sk-front-door"
    tasks = _entries(1)
    with ReferencePolicyServer(model="Qwen/Qwen3.5-9B", api_key=key) as server:
        code = code.replace('"https://your-server/v1"', repr(server.url)).replace(
            'desktop=DesktopConfig(osworld_path="/home/me/osworld"))',
            'desktop=DesktopConfig(osworld_path="/home/me/osworld"), backend="fake")',
        )
        namespace: dict[str, Any] = {"tasks": tasks, "key": key}
        exec(code, namespace)
        requests = server.requests
    summary = namespace["summary"]
    assert summary["status_counts"]["ok"] == 8 and summary["success_rate"] == 1.0  # group 8, all solved
    assert all(r.authorized for r in requests) and requests
    records = list(read_record_dicts(tmp_path / "runs" / "step-41"))
    assert {r["policy"]["version"] for r in records} == {"step-41"}
    assert len(records) == 10  # group 8 + oversample 0.25 of it
    rows = (tmp_path / "runs" / "step-41" / "train.jsonl").read_text().splitlines()
    assert rows and all(json.loads(row)["policy_version"] == "step-41" for row in rows)


def test_max_inflight_given_to_collect_caps_the_model_calls(tmp_path: Path) -> None:
    # 4 attempts on 4 desktops, each call held 0.1 s by the server: without the cap, calls overlap
    latency = Latency(fixed=0.1)
    with ReferencePolicyServer(latency=latency) as server:
        collect(_entries(1), PolicyConfig(server.url, server.model), out=tmp_path / "capped", backend="fake",
                desktops=4, group=4, max_inflight=1)  # fmt: skip
        capped = server.stats.max_inflight
    with ReferencePolicyServer(latency=latency) as server:
        collect(_entries(1), PolicyConfig(server.url, server.model), out=tmp_path / "free", backend="fake",
                desktops=4, group=4)  # fmt: skip
        free = server.stats.max_inflight
    assert capped == 1 < free


def test_step_timeout_and_retries_land_in_the_policys_limits(tmp_path: Path) -> None:
    # one hang, then answers: step_timeout=0.5 ends the hung call and retries=1 asks again, so the attempt is ok
    faults = Faults(script=["hang"], hang_seconds=30.0)
    with ReferencePolicyServer(faults=faults) as server:
        summary = collect(_entries(1), PolicyConfig(server.url, server.model), out=tmp_path / "run",
                          backend="fake", desktops=1, group=1, step_timeout=0.5, retries=1)  # fmt: skip
    assert summary["status_counts"]["ok"] == 1 and summary["retried_calls"] == 1
    with ReferencePolicyServer(faults=faults) as server:  # retries=0: the hung call is the attempt's end
        summary = collect(_entries(1), PolicyConfig(server.url, server.model), out=tmp_path / "no-retry",
                          backend="fake", desktops=1, group=1, step_timeout=0.5, retries=0)  # fmt: skip
    assert summary["status_counts"]["ok"] == 0


@pytest.mark.parametrize(
    ("keyword", "limits"),
    [("max_inflight", Limits(max_inflight=16)), ("step_timeout", Limits(step_timeout=30.0)),
     ("retries", Limits(retries=3))],
)  # fmt: skip
def test_a_limit_given_both_ways_with_different_values_is_refused_naming_both(
    tmp_path: Path, keyword: str, limits: Limits
) -> None:
    policy = PolicyConfig("http://127.0.0.1:9/v1", "m", limits=limits)  # never reached
    given = {"max_inflight": 32, "step_timeout": 60.5, "retries": 2}[keyword]
    with pytest.raises(ConfigError) as caught:
        collect(_entries(1), policy, out=tmp_path / "run", backend="fake", **{keyword: given})
    message = str(caught.value)
    assert f"collect({keyword}={given!r})" in message and f"Limits({keyword}={getattr(limits, keyword)!r})" in message
    assert not (tmp_path / "run").exists()


def test_tasks_may_mix_task_values_and_tasks_json_entries(tmp_path: Path) -> None:
    fake = default_tasks(DesktopConfig())
    tasks: list[Any] = [fake[0], {"task_id": fake[1].task_id, "config": dict(fake[1].config)}]
    with ReferencePolicyServer() as server:
        summary = collect(tasks, PolicyConfig(server.url, server.model), out=tmp_path / "run", backend="fake",
                          desktops=2, group=1)  # fmt: skip
    assert summary["status_counts"]["ok"] == 2
    assert {r["task_id"] for r in read_record_dicts(tmp_path / "run")} == {fake[0].task_id, fake[1].task_id}


def test_a_bad_entry_gets_the_clis_message_naming_its_index(tmp_path: Path) -> None:
    entries = [*_entries(1), {"task_id": "x", "domian": "os"}]
    with pytest.raises(TaskFileError) as caught:
        collect(entries, PolicyConfig("http://127.0.0.1:9/v1", "m"), out=tmp_path / "run", backend="fake")
    python = str(caught.value)
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(entries))
    result = CliRunner().invoke(app, ["rl", "collect", "--backend", "fake", "--policy-url", "embedded",
                                      "--tasks", str(path), "--out", str(tmp_path / "cli")], env=WIDE)  # fmt: skip
    assert result.exit_code == 2
    assert python.startswith("tasks: entry 1: unknown field 'domian'; did you mean 'domain'?")
    assert f"error: {path}: {python.removeprefix('tasks: ')}" in " ".join(result.output.split())


# --- 3: the names product.md uses -------------------------------------------------------------------------


def test_the_names_product_md_uses_resolve() -> None:
    import legato.rl.policy
    import legato_rl.policy
    from legato.rl import OSWorldDesktop
    from legato.rl import collect as public_collect
    from legato_gym.backends.osworld.desktop import OSWorldDesktop as reference

    assert legato.rl.policy.PolicyClient is legato_rl.policy.PolicyClient  # the harness's model calls
    assert set(legato.rl.policy.__all__) == set(legato_rl.policy.__all__)
    assert OSWorldDesktop is reference
    assert inspect.isfunction(public_collect) and public_collect is collect
    backends_md = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text()
    assert (
        "from legato.rl import\nOSWorldDesktop" in backends_md or "from legato.rl import OSWorldDesktop" in backends_md
    )
    assert "collect.OSWorldDesktop" in backends_md


def test_importing_legato_rl_leaves_the_osworld_backend_unimported() -> None:
    probe = "import sys, legato.rl; print('legato_gym.backends.osworld' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


# --- 4: a backend of exactly the seven calls --------------------------------------------------------------


@pytest.fixture
def seven_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``sevendesk:SevenCallDesktop``, importable here and in the desktops' worker processes."""
    folder = tmp_path / "backend"
    folder.mkdir()
    (folder / "sevendesk.py").write_text(textwrap.dedent(SEVEN_CALL_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    import sevendesk

    methods = {name for name in vars(sevendesk.SevenCallDesktop) if not name.startswith("_")}
    assert methods == SEVEN_CALLS  # exactly product.md's list, nothing optional
    yield "sevendesk:SevenCallDesktop"
    sys.modules.pop("sevendesk", None)


def _done_server() -> ReferencePolicyServer:
    """A reference server whose brain says the task is done at once (the seven-call desktop's goal)."""
    tasks = default_tasks(DesktopConfig())
    return ReferencePolicyServer(ScriptedSolver(tasks, solution=lambda task, screen: []))


def test_a_seven_call_backend_runs_through_collect(tmp_path: Path, seven_calls: str) -> None:
    config = DesktopConfig(screen=(320, 240))
    with _done_server() as server:
        summary = collect(_entries(2), PolicyConfig(server.url, server.model), out=tmp_path / "run",
                          backend=seven_calls, desktop=config, desktops=2, group=2)  # fmt: skip
    assert summary["status_counts"]["ok"] == 4 and summary["success_rate"] == 1.0
    assert {r["desktop"] for r in read_record_dicts(tmp_path / "run")} == {0, 1}


def test_a_seven_call_backend_runs_through_the_cli(tmp_path: Path, seven_calls: str) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(_entries(1)))
    with _done_server() as server:
        args = ["rl", "collect", "--backend", seven_calls, "--tasks", str(tasks), "--policy-url", server.url,
                "--model", server.model, "--desktops", "1", "--group", "2", "--quiet",
                "--out", str(tmp_path / "run")]  # fmt: skip
        result = CliRunner().invoke(app, args, env=WIDE)
    assert result.exit_code == 0, result.output
    assert _statuses(tmp_path / "run")["ok"] == 2


def test_without_screen_size_an_observation_of_another_size_is_a_desktop_failure(
    tmp_path: Path, seven_calls: str
) -> None:
    import sevendesk

    # the config says 320x240, the desktop draws 200x100: its first observation gives the size, and it is wrong
    config = DesktopConfig(screen=(320, 240))
    module = Path(sevendesk.__file__)
    module.write_text(module.read_text().replace("width, height = self.config.screen", "width, height = 200, 100"))
    with _done_server() as server:
        summary = collect(_entries(1), PolicyConfig(server.url, server.model), out=tmp_path / "run",
                          backend=seven_calls, desktop=config, desktops=1, group=1, env_retries=0)  # fmt: skip
    assert summary["status_counts"]["error"] == 1 and summary["errors"]["env"] == 1
    (record,) = [r for r in read_record_dicts(tmp_path / "run") if r["status"] == "error"]
    assert "config.screen=(320, 240)" in record["error"]["message"]


# --- 5: --fixed-wait without --no-ready-signal ------------------------------------------------------------


def test_a_fixed_wait_without_no_ready_signal_is_refused_with_the_fix(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["rl", "collect", "--backend", "fake", "--policy-url", "embedded",
                                      "--fixed-wait", "2", "--out", str(tmp_path / "run")], env=WIDE)  # fmt: skip
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: fixed_wait=2.0")
    assert "--no-ready-signal" in lines[0] and not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="ready_signal=False"):
        DesktopConfig(fixed_wait=2.0)
    assert DesktopConfig(ready_signal=False, fixed_wait=2.0).fixed_wait == 2.0  # product.md's baseline row


# --- 7: a batch in which no attempt completed -------------------------------------------------------------


def _collect_cli(tmp_path: Path, server: ReferencePolicyServer, name: str) -> Any:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(_entries(2)))
    return CliRunner().invoke(app, ["rl", "collect", "--backend", "fake", "--tasks", str(tasks), "--policy-url",
                                    server.url, "--model", server.model, "--desktops", "2", "--group", "2",
                                    "--quiet", "--out", str(tmp_path / name)], env=WIDE)  # fmt: skip


def test_a_batch_where_every_attempt_ended_in_error_exits_1_saying_where(tmp_path: Path) -> None:
    # every reply ends in a lone surrogate: each attempt is `error` (kind policy), and the batch goes on
    with ReferencePolicyServer(faults=Faults(rates={"surrogate": 1.0})) as server:
        result = _collect_cli(tmp_path, server, "run")
    assert result.exit_code == 1, result.output
    run = tmp_path / "run"
    assert _statuses(run)["error"] == 4
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: no attempt completed: all 4 ended in error (policy 4); the errors are in {run / 'rollouts.jsonl'}, "
        f"summed up by: legato rl profile {run}"
    ]
    assert "done" not in result.output


def test_a_batch_with_some_errors_still_exits_0(tmp_path: Path) -> None:
    first = default_tasks(DesktopConfig())[0]
    faults = Faults(plan=HitTasks("surrogate", frozenset({first.instruction})))
    with ReferencePolicyServer(faults=faults) as server:
        result = _collect_cli(tmp_path, server, "run")
    assert result.exit_code == 0, result.output
    statuses = _statuses(tmp_path / "run")
    assert statuses["error"] == 2 and statuses["ok"] == 2


# --- 9: what the docs say of advantages and success_rate is what the code does ---------------------------


def test_advantage_and_success_rate_are_as_the_docs_say(tmp_path: Path) -> None:
    from _run_kit import Try, write_run

    from legato_rl import export_steps
    from legato_rl.summary import summarize_run

    # one group of three completed attempts with partial credit (0.5), plus an error that counts for neither
    run = tmp_path / "run"
    write_run(run, [Try("g", "ok", 1.0), Try("g", "truncated", 0.5), Try("g", "ok", 0.0), Try("g", "error", None)],
              group=3)  # fmt: skip
    rewards = [1.0, 0.5, 0.0]
    mean = sum(rewards) / 3
    population_std = (sum((r - mean) ** 2 for r in rewards) / 3) ** 0.5  # divided by n, not n - 1
    assert summarize_run(run).success_rate == pytest.approx(mean)  # the mean reward of completed attempts
    export_steps(run, tmp_path / "train.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    shown = {row["reward"]: row["advantage"] for row in rows}
    assert shown == pytest.approx({r: (r - mean) / population_std for r in rewards})
    root = Path(__file__).resolve().parents[2]
    for page in (root / "README.md", root / "docs" / "concepts.md"):
        text = " ".join(page.read_text().split())
        assert "population standard deviation" in text, page
        assert "mean reward of the completed" in text and "0 or 1" in text, page
