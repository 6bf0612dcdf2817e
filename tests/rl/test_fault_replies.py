"""Fault injection end to end: hostile or broken policy replies cost their attempt, never the batch.

Each test runs a real ``collect`` on fake desktops against the reference policy server, whose fault plan
hits every attempt of chosen tasks with one fault kind. It checks that the batch finishes, that every attempt
has exactly one final record, that the hit attempts end with the status docs/reliability.md documents and
the others end ``ok``, that the export holds no row of an attempt that did not complete, and that a
resume into the same run does not crash.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from legato_gym import ConfigError, DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_gym.tasks import Task
from legato_rl import collect, export_steps
from legato_rl.policy import Limits, PolicyConfig
from legato_rl.store import read_record_dicts
from legato_rl.summary import COMPLETED
from legato_rl.testing import Faults, ReferencePolicyServer, ScriptedSolver
from legato_rl.testing.faults import FaultTally, HitTasks, documented_outcome, tally

SCREEN = (320, 240)
GROUP = 2
N_TASKS = 4
HIT = (1, 3)  # the tasks whose attempts meet the fault


def _config() -> DesktopConfig:
    return DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))


def _tasks() -> list[Task]:
    return list(default_tasks(_config())[:N_TASKS])


def _hit_ids() -> set[str]:
    return {_tasks()[i].task_id for i in HIT}


def _collect(tasks: Sequence[Task], server: ReferencePolicyServer, out: Path, **limits: Any) -> None:
    config = PolicyConfig(server.url, server.model, version="v1", limits=Limits(backoff=0.0, **limits))
    collect(tasks, config, out=out, desktops=2, group=GROUP, max_steps=6, backend="fake", desktop=_config())


def run_with_fault(
    kind: str, out: Path, *, steps: frozenset[int] | None, faults: dict[str, Any] | None = None, **policy: Any
) -> tuple[FaultTally, int]:
    """Collect with ``kind`` injected into the calls of the tasks ``HIT``; the tally and the faults injected."""
    tasks = _tasks()
    hit_ids = {tasks[i].task_id for i in HIT}
    plan = HitTasks(kind, frozenset(tasks[i].instruction for i in HIT), steps=steps)
    with ReferencePolicyServer(brain=ScriptedSolver(), faults=Faults(plan=plan, **(faults or {}))) as server:
        _collect(tasks, server, out, **policy)
        injected = server.stats.faults[kind]
        records = list(read_record_dicts(out))
        figures = tally(records, plan, task_ids=hit_ids)

        # the export: only completed attempts, and none of the hit ones when they errored
        stats = export_steps(out, out.parent / f"{out.name}.jsonl")
        rows = [json.loads(line) for line in (out.parent / f"{out.name}.jsonl").read_text().splitlines()]
        status_of = {r["rollout_id"]: r["status"] for r in records}
        assert rows and {status_of[row["rollout_id"]] for row in rows} <= COMPLETED
        assert stats.rows == len(rows)
        if documented_outcome(kind)[0] == "error":
            assert not any(row["task_id"] in hit_ids for row in rows)
            assert stats.excluded.get("error") == GROUP * len(HIT)

        # a resume into the same run does not crash, and neither loses nor duplicates an attempt
        _collect(tasks, server, out, **policy)
        again = tally(read_record_dicts(out), plan, task_ids=hit_ids)
        assert again.attempts_recorded == figures.attempts_recorded and again.duplicates == 0
    return figures, injected


def _check(figures: FaultTally) -> None:
    assert figures.attempts_recorded == N_TASKS * GROUP and figures.duplicates == 0  # every attempt, once
    assert figures.hit == GROUP * len(HIT) and figures.as_documented == figures.hit  # N hit -> N as documented
    assert figures.others == (N_TASKS - len(HIT)) * GROUP and figures.others_ok == figures.others


@pytest.mark.parametrize("kind", ["surrogate", "deep", "huge"])
def test_a_reply_the_client_cannot_read_is_a_policy_error_of_its_attempt(kind: str, tmp_path: Path) -> None:
    figures, injected = run_with_fault(kind, tmp_path / "run", steps=frozenset({0}), retries=2)
    _check(figures)
    assert injected == GROUP * len(HIT)  # refused at once: a hostile reply is not asked for again


def test_a_tool_call_nested_100000_deep_is_a_parse_error_and_the_attempt_goes_on(tmp_path: Path) -> None:
    figures, injected = run_with_fault("deep-tool-call", tmp_path / "run", steps=frozenset({0}))
    _check(figures)
    assert injected == GROUP * len(HIT)
    hit = [r for r in read_record_dicts(tmp_path / "run") if r["task_id"] in _hit_ids()]
    for record in hit:
        first = record["steps"][0]
        assert "nests deeper" in first["parse_error"] and first["actions"][0]["action"] == "WAIT"
        assert len(record["steps"]) > 1  # the attempt went on after the unreadable step


@pytest.mark.parametrize(
    ("kind", "faults", "policy"),
    [
        ("500", {}, {}),
        ("half", {}, {}),
        ("hang", {"hang_seconds": 60.0}, {"step_timeout": 1.0}),
    ],
)
def test_a_call_that_exhausts_its_retries_is_error_kind_policy_not_truncated(
    kind: str, faults: dict[str, Any], policy: dict[str, Any], tmp_path: Path
) -> None:
    figures, injected = run_with_fault(kind, tmp_path / "run", steps=None, faults=faults, retries=1, **policy)
    _check(figures)
    assert injected == GROUP * len(HIT) * 2  # each hit attempt: its call and the one retry
    hit = [r for r in read_record_dicts(tmp_path / "run") if r["task_id"] in _hit_ids()]
    assert {r["status"] for r in hit} == {"error"}  # not "truncated": no rollout deadline was set


def test_every_hostile_kind_in_one_batch(tmp_path: Path) -> None:
    tasks = list(default_tasks(_config())[:5])
    kinds = ("surrogate", "deep", "huge", "deep-tool-call")
    plans = [
        HitTasks(kind, frozenset({task.instruction}), steps=frozenset({0}))
        for kind, task in zip(kinds, tasks[:4], strict=True)
    ]

    def plan(number: int, body: Mapping[str, Any]) -> str | None:
        return next((kind for p in plans if (kind := p(number, body)) is not None), None)

    with ReferencePolicyServer(brain=ScriptedSolver(), faults=Faults(plan=plan)) as server:
        _collect(tasks, server, tmp_path / "run", retries=2)
        assert server.stats.faults == dict.fromkeys(kinds, GROUP)
    records = list(read_record_dicts(tmp_path / "run"))
    for p, task in zip(plans, tasks[:4], strict=True):
        figures = tally(records, p, task_ids={task.task_id})
        assert figures.hit == GROUP and figures.as_documented == GROUP, figures
        assert figures.attempts_recorded == len(tasks) * GROUP and figures.duplicates == 0
    assert [r["status"] for r in records if r["task_id"] == tasks[4].task_id] == ["ok"] * GROUP


def test_tally_counts_only_the_documented_outcome() -> None:
    plan = HitTasks("surrogate", frozenset({"x"}))

    def record(task: str, attempt: int, status: str, kind: str | None) -> dict[str, Any]:
        error = None if kind is None else {"kind": kind, "type": "E", "message": "m"}
        return {"group_id": task, "attempt": attempt, "task_id": task, "status": status, "error": error, "steps": []}

    records = [
        record("hit", 0, "error", "policy"),
        record("hit", 1, "truncated", None),  # wrong: the status the issue is about
        record("hit", 2, "error", "env"),  # wrong kind
        record("hit", 3, "retried", "env"),  # not final: ignored
        record("hit", 3, "error", "policy"),
        record("other", 0, "ok", None),
        record("other", 1, "error", "env"),
        record("other", 1, "error", "env"),  # a duplicate final record
    ]
    figures = tally(records, plan, task_ids={"hit"})
    assert (figures.hit, figures.as_documented, figures.others, figures.others_ok) == (4, 2, 3, 1)
    assert (figures.attempts_recorded, figures.duplicates) == (6, 1)
    assert documented_outcome("deep-tool-call") == ("ok", None) and documented_outcome("hang") == ("error", "policy")
    with pytest.raises(ConfigError, match="unknown fault"):
        HitTasks("nope", frozenset())
