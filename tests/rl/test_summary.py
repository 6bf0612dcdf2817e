"""summary.json figures and GRPO group advantages, checked against hand-computed values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from legato_rl.store import (
    STATUSES,
    ErrorInfo,
    ModelStats,
    PolicyStamp,
    PromptIds,
    RecordError,
    RequestRef,
    Response,
    RolloutRecord,
    RolloutStore,
    RunManifest,
    StepRecord,
    Timing,
    open_run,
)
from legato_rl.summary import advantages, group_advantages, percentile, summarize, summarize_run, write_summary

SHA = "0" * 64


def step(
    seconds: float,
    *,
    attempts: int = 1,
    prompt: int | None = 100,
    cached: int | None = 50,
    logprobs: bool = True,
    token_ids: bool = True,
    weight_version: str | None = None,
    prompt_ids: bool = False,
) -> StepRecord:
    return StepRecord(
        index=0,
        request=RequestRef(model="m", messages=(SHA,)),
        response=Response(
            content="x",
            token_ids=(1, 2) if token_ids else None,
            logprobs=(-0.5, -0.5) if logprobs else None,
            tokens=None if token_ids else ("a", "b"),
        ),
        model=ModelStats(
            seconds=seconds,
            attempts=attempts,
            prompt_tokens=prompt,
            cached_tokens=cached,
            weight_version=weight_version,
        ),
        prompt_ids=PromptIds(prefix=False, start=0, ids=(5, 6)) if prompt_ids else None,
    )


def rec(
    rid: str, group: str, status: str, reward: float | None, *, steps: tuple[StepRecord, ...] = (), **kw: Any
) -> RolloutRecord:
    error = kw.pop("error", None)
    if status in ("error", "retried") and error is None:
        error = ErrorInfo("env", "DesktopCrashed", "gone")
    return RolloutRecord(
        rollout_id=rid,
        task_id=group,
        domain=None,
        group_id=group,
        attempt=0,
        policy=kw.pop("policy", PolicyStamp("m", "v1")),
        status=status,
        reward=reward,
        error=error,
        steps=steps,
        **kw,
    )


def test_percentile_is_linear_interpolation_like_numpy() -> None:
    values = [0.3, 5.0, 1.2, 0.9, 2.2, 7.7, 0.1]
    for q in (0, 50, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None


def test_summary_figures() -> None:
    records = [
        rec("g1/0", "g1", "ok", 1.0, steps=(step(1.0), step(3.0, attempts=2)),
            timing=Timing(reset_s=2.0, model_s=4.0, act_s=1.0, eval_s=1.0, total_s=10.0),
            started_at=1000.0, ended_at=1010.0),
        rec("g1/1", "g1", "truncated", 0.0, steps=(step(2.0, logprobs=False, token_ids=False, prompt=None),),
            timing=Timing(reset_s=2.0, model_s=2.0, total_s=4.0), started_at=1001.0, ended_at=1005.0),
        rec("g1/2", "g1", "surplus", 1.0, timing=Timing(total_s=2.0), started_at=1002.0, ended_at=1004.0),
        rec("g2/0", "g2", "error", None, error=ErrorInfo("policy", "PolicyTimeout", "slow"),
            steps=(step(4.0, prompt=300, cached=0),), timing=Timing(model_s=4.0, total_s=4.0),
            started_at=1003.0, ended_at=1007.0),
        rec("g2/1", "g2", "retried", None, timing=Timing(reset_s=4.0, total_s=4.0), started_at=1000.0,
            ended_at=1004.0),
        rec("g2/2", "g2", "ok", 0.5, timing=Timing(total_s=0.0), started_at=1004.0, ended_at=1036.0),
        rec("g3/0", "g3", "cancelled", None),
        rec("g3/1", "g3", "skipped", None),
    ]  # fmt: skip
    summary = summarize(records, group=2)
    data = summary.to_json()
    assert data["status_counts"] == {"ok": 2, "truncated": 1, "cancelled": 1, "skipped": 1, "surplus": 1,
                                     "retried": 1, "error": 1}  # fmt: skip
    assert list(data["status_counts"]) == list(STATUSES)
    assert data["success_rate"] == pytest.approx((1.0 + 0.0 + 0.5) / 3)  # surplus excluded
    assert data["wall_s"] == pytest.approx(36.0)
    assert data["rollouts_per_hour"] == pytest.approx(3 * 3600 / 36.0)
    # desktop-seconds: 10 + 4 + 2 + 4 + 4 + 0 = 24; phases: reset 8, model 10, act 1, eval 1 -> other 4
    share = data["phase_share"]
    assert share["reset"] == pytest.approx(8 / 24)
    assert share["model"] == pytest.approx(10 / 24)
    assert share["act"] == pytest.approx(1 / 24) and share["eval"] == pytest.approx(1 / 24)
    assert share["other"] == pytest.approx(4 / 24)
    assert sum(v for v in share.values() if v is not None) == pytest.approx(1.0)
    assert data["model_latency_s"] == {
        "p50": pytest.approx(2.5),
        "p95": pytest.approx(float(np.percentile([1, 3, 2, 4], 95))),
        "p99": pytest.approx(float(np.percentile([1, 3, 2, 4], 99))),
    }
    assert data["retried_calls"] == 1
    assert data["errors"] == {"policy": 1, "env": 0}  # the retried try shows in status_counts, not here
    assert data["prefix_cache_hit_rate"] == pytest.approx((50 + 50 + 0) / (100 + 100 + 300))
    assert data["share_steps_with_logprobs"] == pytest.approx(3 / 4)
    assert data["share_steps_with_token_ids"] == pytest.approx(3 / 4)
    # g1: 2 completed (ok + truncated); g2: 1; g3: 0
    assert data["groups"] == 3
    assert data["groups_short"] == 2 and data["groups_short_ids"] == ["g2", "g3"]
    assert data["n_records"] == 8 and data["n_steps"] == 4


def test_summary_keys_are_stable_and_empty_figures_are_null() -> None:
    data = summarize([], group=4).to_json()
    full = summarize([rec("a", "g", "ok", 1.0, steps=(step(1.0),), timing=Timing(total_s=1.0))], group=1)
    assert list(data) == list(full.to_json())
    assert data["success_rate"] is None and data["rollouts_per_hour"] is None
    assert data["model_latency_s"] == {"p50": None, "p95": None, "p99": None}
    assert set(data["phase_share"]) == set(full.to_json()["phase_share"])
    assert data["prefix_cache_hit_rate"] is None and data["share_steps_with_logprobs"] is None
    assert data["groups_short"] == 0
    assert data["share_steps_with_prompt_ids"] is None
    assert data["weight_versions"] == {} and data["weight_version_mismatches"] == 0


def test_wall_time_given_by_the_caller_wins() -> None:
    records = [rec("a", "g", "ok", 1.0, started_at=0.0, ended_at=10.0)]
    assert summarize(records, group=1, wall_s=3600.0).rollouts_per_hour == pytest.approx(1.0)


def test_summarize_run_reads_the_group_size_from_the_manifest(tmp_path: Path) -> None:
    open_run(tmp_path, RunManifest(SHA, 1, 2, 0.0, "m", "v1", 15, "fake"))
    with RolloutStore(tmp_path) as store:
        store.append(rec("a", "g", "ok", 1.0, started_at=0.0, ended_at=1.0))
    summary = summarize_run(tmp_path)
    assert summary.groups_short == 1
    path = write_summary(tmp_path, summary)
    assert json.loads(path.read_text())["schema"] == "legato.summary/v0"
    with pytest.raises(RecordError, match=r"no run\.json"):
        summarize_run(tmp_path / "elsewhere")


# --- advantages ----------------------------------------------------------------------------------------------


def test_advantages_use_the_population_std() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    mean = 0.6
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 5)
    assert advantages(rewards) == pytest.approx([(r - mean) / std for r in rewards])
    assert advantages(rewards) == pytest.approx(list((np.array(rewards) - mean) / np.std(rewards)))


def test_equal_rewards_give_zero_advantages() -> None:
    assert advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert advantages([0.3]) == [0.0]
    assert advantages([]) == []


def test_group_advantages_use_only_completed_attempts_of_each_group() -> None:
    records = [
        rec("g1/0", "g1", "ok", 1.0),
        rec("g1/1", "g1", "truncated", 0.0),
        rec("g1/2", "g1", "surplus", 0.0),  # after the close: not part of the group
        rec("g1/3", "g1", "cancelled", None),
        rec("g2/0", "g2", "ok", 0.5),
        rec("g2/1", "g2", "ok", 0.5),
        rec("g3/0", "g3", "error", None),
    ]
    result = group_advantages(records)
    assert result == {"g1/0": pytest.approx(1.0), "g1/1": pytest.approx(-1.0), "g2/0": 0.0, "g2/1": 0.0}
    as_dicts = group_advantages(r.to_json() for r in records)
    assert as_dicts == result


def test_completed_record_without_reward_is_an_error() -> None:
    with pytest.raises(RecordError, match="no reward"):
        group_advantages([rec("g/0", "g", "ok", None)])


def test_the_time_of_a_failed_policy_call_is_its_own_phase() -> None:
    """A try that ended in a policy error spent its unrecorded end in the call that failed, not in the scheduler."""
    records = [
        rec("g1/0", "g1", "ok", 1.0, timing=Timing(model_s=3.0, total_s=4.0)),  # 1 s of scheduler time
        rec("g1/1", "g1", "error", None, error=ErrorInfo("policy", "PolicyTimeout", "slow"),
            timing=Timing(reset_s=1.0, total_s=11.0)),  # 10 s in the call that failed
        rec("g1/2", "g1", "error", None, timing=Timing(reset_s=1.0, total_s=5.0)),  # a desktop error: other
    ]  # fmt: skip
    share = summarize(records, group=1).phase_share
    assert share["failed_call"] == pytest.approx(10 / 20)
    assert share["other"] == pytest.approx((1 + 4) / 20)
    assert sum(v for v in share.values() if v is not None) == pytest.approx(1.0)


def test_server_weight_versions_and_mismatches_with_the_stamped_version() -> None:
    records = [
        rec(
            "a", "g", "ok", 1.0, steps=(step(1.0, weight_version="v1", prompt_ids=True), step(1.0, weight_version="v1"))
        ),
        rec("b", "g", "ok", 0.0, steps=(step(1.0, weight_version="v2", prompt_ids=True), step(1.0))),  # v1 stamped
        rec("c", "g", "ok", 0.0, steps=(step(1.0, weight_version="v2"),), policy=PolicyStamp("m", None)),
    ]
    summary = summarize(records, group=3)
    assert summary.weight_versions == {"v1": 2, "v2": 2}
    assert summary.weight_version_mismatches == 1  # b's first step; c has no --version to differ from
    assert summary.share_steps_with_prompt_ids == 2 / 5
    data = summary.to_json()
    assert data["weight_versions"] == {"v1": 2, "v2": 2} and data["weight_version_mismatches"] == 1


@pytest.mark.parametrize(("label", "mismatches"), [("step-3", False), ("default", True)])
def test_collect_flags_a_server_serving_another_version(tmp_path: Path, label: str, mismatches: bool) -> None:
    from legato_gym import DesktopConfig, Timeouts
    from legato_gym.backends.fake import default_tasks
    from legato_rl.collect import collect
    from legato_rl.policy import PolicyConfig
    from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

    config = DesktopConfig(screen=(320, 240), timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))
    with ReferencePolicyServer(ScriptedSolver(), "sglang", weight_version=label) as server:
        collect(
            default_tasks(config)[:1],
            PolicyConfig(server.url, server.model, version="step-3"),
            out=tmp_path / "run",
            desktops=1,
            group=1,
            max_steps=4,
            backend="fake",
            desktop=config,
        )
    data = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert data["n_steps"] > 0 and data["weight_versions"] == {label: data["n_steps"]}
    assert data["weight_version_mismatches"] == (data["n_steps"] if mismatches else 0)
