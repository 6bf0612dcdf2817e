"""Desktops that die in every phase of an attempt: each death is a ``retried`` try and a re-run, never a final
error while retries remain, and never the agent's failure.

The fake backend kills its own worker process (``crash_mode="exit"``) in the desktop phases; the model-call
phase is covered by a brain that kills the desktop's worker while its attempt waits for the reply.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.fake import FAULT_PHASES, default_tasks
from legato_gym.backends.local import LocalOptions
from legato_rl.collect import collect
from legato_rl.export import export_steps
from legato_rl.policy import PolicyConfig
from legato_rl.store import read_record_dicts
from legato_rl.testing import ReferencePolicyServer, ReplayBrain, ScriptedSolver
from legato_rl.testing.brains import qwen_reply
from legato_rl.testing.faults import KillDesktopOnCalls

SCREEN = (320, 240)
FINAL = {"ok", "truncated", "cancelled", "skipped", "surplus", "error"}


def _config(**options: Any) -> DesktopConfig:
    return DesktopConfig(screen=SCREEN, options=options, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))


def _check_every_death_retried(run: Path, n_attempts: int) -> Counter[str]:
    records = list(read_record_dicts(run))
    statuses = Counter(r["status"] for r in records)
    finals = Counter((r["group_id"], r["attempt"]) for r in records if r["status"] in FINAL)
    assert len(finals) == n_attempts and set(finals.values()) == {1}, "every attempt ends exactly once"
    for r in records:
        if r["status"] == "retried":
            assert r["error"]["kind"] == "env" and r["error"]["type"] == "DesktopCrashed", r["error"]
            assert r["reward"] is None
        else:
            assert r["status"] == "ok" and r["reward"] == 1.0, (r["status"], r["error"])
    return statuses


@pytest.mark.parametrize("phase", FAULT_PHASES)
def test_a_desktop_dying_in_any_desktop_phase_is_retried(tmp_path: Path, phase: str) -> None:
    rate = 0.1 if phase in ("act", "observe") else 0.35  # called once per action, not once per try
    config = _config(faults={"crash": rate, "crash_mode": "exit", "phases": [phase]})
    tasks = default_tasks(config)[:3]
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        summary = collect(tasks, PolicyConfig(server.url, server.model), out=tmp_path / "run", desktops=2, group=2,
                          env_retries=20, backend="fake", desktop=config, seed=11)  # fmt: skip
    statuses = _check_every_death_retried(tmp_path / "run", n_attempts=6)
    assert statuses["retried"] > 0, f"a {rate:.0%} death rate in {phase!r} must kill some tries"
    assert summary["errors"] == {"policy": 0, "env": 0}
    assert summary["status_counts"]["ok"] == 6


def test_a_desktop_dying_while_its_attempt_waits_on_the_model_is_retried(tmp_path: Path) -> None:
    config = _config()
    tasks = default_tasks(config)[:2]
    brain = KillDesktopOnCalls(
        ScriptedSolver(), calls={1, 4, 7}
    )  # first calls of several tries: the desktop dies each time
    with ReferencePolicyServer(brain=brain) as server:
        summary = collect(tasks, PolicyConfig(server.url, server.model), out=tmp_path / "run", desktops=1, group=2,
                          env_retries=5, backend="fake", desktop=config)  # fmt: skip
    statuses = _check_every_death_retried(tmp_path / "run", n_attempts=4)
    assert len(brain.killed) == 3
    assert statuses["retried"] == 3, "each death is one retried try"
    assert summary["errors"] == {"policy": 0, "env": 0}
    export_steps(tmp_path / "run", tmp_path / "train.jsonl")
    rows = (tmp_path / "train.jsonl").read_text().splitlines()
    ok_steps = sum(r["n_steps"] for r in read_record_dicts(tmp_path / "run") if r["status"] == "ok")
    assert len(rows) == ok_steps > 0, "export holds the completed tries' steps only, never a retried try's"


def test_a_desktop_dying_with_no_retries_left_is_an_env_error(tmp_path: Path) -> None:
    config = _config()
    tasks = default_tasks(config)[:1]
    brain = KillDesktopOnCalls(ScriptedSolver(), calls={1})
    with ReferencePolicyServer(brain=brain) as server:
        summary = collect(tasks, PolicyConfig(server.url, server.model), out=tmp_path / "run", desktops=1, group=1,
                          env_retries=0, backend="fake", desktop=config)  # fmt: skip
    (record,) = read_record_dicts(tmp_path / "run")
    assert record["status"] == "error" and record["error"]["kind"] == "env"
    assert record["error"]["type"] == "DesktopCrashed"
    assert summary["errors"] == {"policy": 0, "env": 1}


@pytest.mark.timeout(120)
def test_a_retry_that_failed_on_every_desktop_still_runs(tmp_path: Path) -> None:
    # one attempt, two desktops, every reset dies: after failing on both desktops the retry must run on one of
    # them (each desktop used to leave it for the other one, and the batch waited forever)
    config = _config(faults={"crash": 1.0, "crash_mode": "exit", "phases": ["reset"]})
    tasks = default_tasks(config)[:1]
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        summary = collect(tasks, PolicyConfig(server.url, server.model), out=tmp_path / "run", desktops=2, group=1,
                          env_retries=3, backend="fake", desktop=config)  # fmt: skip
    records = list(read_record_dicts(tmp_path / "run"))
    assert [r["status"] for r in records] == ["retried"] * 3 + ["error"]
    assert {r["desktop"] for r in records} == {0, 1}
    assert summary["errors"] == {"policy": 0, "env": 1}


def test_a_desktop_the_agent_destroys_is_its_failure_and_one_killed_from_outside_is_retried(tmp_path: Path) -> None:
    # the agent's actions destroy the desktop in one run (the fake desktop reports it as a local desktop reports a
    # fork bomb at its bound); in the other the worker is killed from outside. Only the second is retried.
    agent = _config(faults={"crash": 1.0, "crash_mode": "agent", "phases": ["act"]})
    tasks = default_tasks(agent)[:2]
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        summary = collect(tasks, PolicyConfig(server.url, server.model), out=tmp_path / "agent", desktops=2, group=2,
                          env_retries=3, backend="fake", desktop=agent)  # fmt: skip
    records = list(read_record_dicts(tmp_path / "agent"))
    assert len(records) == 4, "one try per attempt: never retried"
    for r in records:
        assert (r["status"], r["reward"], r["n_steps"]) == ("ok", 0.0, 1), r
        assert r["error"]["kind"] == "agent" and r["error"]["type"] == "AgentFault", r["error"]
        assert "pids" in r["error"]["message"] and "bounds" in r["error"]["message"]
    assert summary["errors"] == {"policy": 0, "env": 0} and summary["status_counts"]["ok"] == 4
    stats = export_steps(tmp_path / "agent", tmp_path / "agent.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "agent.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {row["reward"] for row in rows} == {0.0}, "the export keeps them, graded 0"
    assert stats.rollouts == 4 and not any(stats.excluded.values())
    outside = _config()
    brain = KillDesktopOnCalls(ScriptedSolver(), calls={1})  # the worker killed while its attempt waits
    with ReferencePolicyServer(brain=brain) as server:
        collect(tasks[:1], PolicyConfig(server.url, server.model), out=tmp_path / "outside", desktops=1, group=1,
                env_retries=3, backend="fake", desktop=outside)  # fmt: skip
    statuses = [(r["status"], (r["error"] or {}).get("kind")) for r in read_record_dicts(tmp_path / "outside")]
    assert statuses == [("retried", "env"), ("ok", None)]


@pytest.mark.desktop
@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "xterm")),
    reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool xterm)",
)
def test_a_policy_that_types_a_fork_bomb_into_a_real_terminal_fails_its_attempt(tmp_path: Path) -> None:
    # end to end on a real local desktop: the policy opens the terminal (ctrl+alt+t) and types a fork bomb;
    # the desktop's process bound stops it, and the attempt is the agent's failure, graded 0, never retried
    options = LocalOptions(memory_mb=512, max_processes=96, tmpfs_mb=64, prestart=False)
    config = DesktopConfig(
        screen=(640, 480), ready_signal=False, fixed_wait=1.0, options=options,  # the terminal maps meanwhile
        timeouts=Timeouts(reset=120, ready=30, act=60, evaluate=60),
    )  # fmt: skip
    task = Task("t-bomb", "Do nothing.", {"config": [], "evaluator": {"func": "infeasible"}})
    replies = [
        qwen_reply("open a terminal", [{"action": "key", "keys": ["ctrl", "alt", "t"]}]),
        qwen_reply("wait for it", [{"action": "wait", "time": 1}]),
        qwen_reply("fork", [{"action": "type", "text": ":(){ :|:& };:\n"}]),
        qwen_reply("wait", [{"action": "wait", "time": 1}]),
    ]
    with ReferencePolicyServer(brain=ReplayBrain(replies)) as server:
        collect([task], PolicyConfig(server.url, server.model), out=tmp_path / "run", desktops=1, group=1,
                env_retries=2, backend="local", desktop=config, max_steps=4)  # fmt: skip
    (record,) = read_record_dicts(tmp_path / "run")
    assert (record["status"], record["reward"], record["n_steps"]) == ("ok", 0.0, 3), record["error"]
    assert record["error"]["kind"] == "agent" and record["error"]["message"].startswith("pids:"), record["error"]
    assert "forks refused at the process bound" in record["error"]["message"]
