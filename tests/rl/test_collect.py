"""End to end: `collect` on fake desktops against the reference policy server, faults on both sides."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from legato_gym import ConfigError, DesktopConfig, Task, Timeouts
from legato_gym.backends import Finished
from legato_gym.backends.fake import default_tasks
from legato_gym.png import encode_png
from legato_rl.cli.app import app
from legato_rl.collect import CollectOptions, collect
from legato_rl.policy import Limits, PolicyConfig, Sampling
from legato_rl.rollout import InlineWhileCheap
from legato_rl.store import BackgroundWriter, RolloutStore, load_request, read_record_dicts
from legato_rl.testing import Faults, ReferencePolicyServer, ScriptedSolver

SCREEN = (320, 240)
RECORD_KEYS = {
    "schema", "rollout_id", "task_id", "domain", "group_id", "attempt", "try", "desktop", "policy", "status",
    "reward", "grader", "error", "n_steps", "reset_kind", "timing", "started_at", "ended_at", "steps",
}  # fmt: skip
TIMING_KEYS = {
    "reset_s", "wait_after_reset_s", "model_s", "act_s", "wait_s", "obs_s", "wait_before_eval_s", "eval_s",
    "total_s", "held_s",
}  # fmt: skip
STEP_KEYS = {
    "index", "started_at", "request", "prompt_ids", "response", "model", "description", "parse_error", "actions",
}  # fmt: skip
RESPONSE_KEYS = {"content", "reasoning", "token_ids", "logprobs", "tokens", "finish_reason"}
MODEL_KEYS = {
    "seconds", "attempts", "prompt_tokens", "completion_tokens", "cached_tokens", "weight_version", "policy_version",
}  # fmt: skip
ACTION_KEYS = {"action", "act_s", "wait_s", "ready_s", "obs_s"}
FINAL = {"ok", "truncated", "cancelled", "skipped", "surplus", "error"}


def _config(**options: Any) -> DesktopConfig:
    return DesktopConfig(screen=SCREEN, options=options, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))


@pytest.fixture(scope="module")
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer(brain=ScriptedSolver()) as srv:
        yield srv


def _policy(server: ReferencePolicyServer, **kw: Any) -> PolicyConfig:
    return PolicyConfig(server.url, server.model, version="step-7", **kw)


def _records(run: Path) -> list[dict[str, Any]]:
    return list(read_record_dicts(run))


def _final_per_attempt(records: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    return Counter((r["group_id"], r["attempt"]) for r in records if r["status"] in FINAL)


def test_happy_path_every_field(tmp_path: Path, server: ReferencePolicyServer) -> None:
    config = _config()
    tasks = default_tasks(config)[:3]
    summary = collect(tasks, _policy(server), out=tmp_path / "run", desktops=2, group=2, backend="fake", desktop=config)
    records = _records(tmp_path / "run")
    assert len(records) == 6
    assert summary["status_counts"]["ok"] == 6 and summary["success_rate"] == 1.0
    assert summary["share_steps_with_token_ids"] == 1.0 and summary["share_steps_with_logprobs"] == 1.0
    assert summary["groups_short"] == 0
    for record in records:
        assert set(record) == RECORD_KEYS
        assert set(record["timing"]) == TIMING_KEYS
        assert record["schema"] == "legato.rollout/v0"
        assert record["policy"] == {"model": server.model, "version": "step-7"}
        assert record["status"] == "ok" and record["reward"] == 1.0 and record["error"] is None
        assert record["reset_kind"] == "fast"  # the fake desktop's word for its reset
        assert record["n_steps"] == len(record["steps"]) >= 1
        for step in record["steps"]:
            assert set(step) == STEP_KEYS
            assert set(step["response"]) == RESPONSE_KEYS
            assert set(step["model"]) == MODEL_KEYS and step["model"]["policy_version"] == "step-7"
            response = step["response"]
            assert len(response["token_ids"]) == len(response["logprobs"]) > 0
            assert response["tokens"] is None  # only without token ids
            for action in step["actions"]:
                assert set(action) == ACTION_KEYS
            body = load_request(tmp_path / "run", step["request"])
            assert body["model"] == server.model and body["return_token_ids"] is True
            images = [
                part["image_url"]["url"]
                for message in body["messages"]
                if isinstance(message["content"], list)
                for part in message["content"]
                if part.get("type") == "image_url"
            ]
            assert images and all(url.startswith("data:image/png;base64,") for url in images)
    # the server saw exactly the bodies that were stored
    assert server.stats.chat_requests >= sum(r["n_steps"] for r in records)
    summary_file = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary_file["status_counts"] == summary["status_counts"]


def test_group_closes_and_later_attempts_are_skipped(tmp_path: Path, server: ReferencePolicyServer) -> None:
    config = _config()
    tasks = default_tasks(config)[:2]
    # one desktop: the first attempt completes and closes its group before the second can start
    collect(tasks, _policy(server), out=tmp_path / "run", desktops=1, group=1, oversample=1.0, backend="fake",
            desktop=config)  # fmt: skip
    records = _records(tmp_path / "run")
    by_group: dict[str, list[str]] = defaultdict(list)
    for r in records:
        by_group[r["group_id"]].append(r["status"])
    assert all(sorted(s) == ["ok", "skipped"] for s in by_group.values()), by_group
    skipped = [r for r in records if r["status"] == "skipped"]
    assert all(r["steps"] == [] and r["reward"] is None and r["desktop"] is None for r in skipped)
    assert {r["grader"] for r in skipped} == {None}  # not graded
    assert {r["reset_kind"] for r in skipped} == {None}  # no desktop was reset for them
    assert {r["grader"] for r in records if r["status"] == "ok"} == {"fake"}


def test_stragglers_are_cancelled_or_surplus(tmp_path: Path, server: ReferencePolicyServer) -> None:
    # heavy-tailed action latency: attempts of one group finish at very different times
    config = _config(latency={"act": {"median": 0.01, "sigma": 1.5, "max": 0.5}})
    tasks = default_tasks(config)[:3]
    collect(tasks, _policy(server), out=tmp_path / "run", desktops=6, group=1, oversample=1.0, backend="fake",
            desktop=config)  # fmt: skip
    records = _records(tmp_path / "run")
    assert _final_per_attempt(records) == Counter({(r["group_id"], r["attempt"]): 1 for r in records})
    by_group: dict[str, list[str]] = defaultdict(list)
    for r in records:
        by_group[r["group_id"]].append(r["status"])
    for statuses in by_group.values():
        assert statuses.count("ok") == 1, statuses  # exactly `group` completed attempts count
        (other,) = [s for s in statuses if s != "ok"]
        assert other in {"cancelled", "surplus"}
    for r in records:
        if r["status"] == "cancelled":
            assert r["reward"] is None and r["grader"] is None
        if r["status"] == "surplus":
            assert r["reward"] is not None and r["grader"] == "fake"


def test_desktop_crashes_are_retried_then_error_env(tmp_path: Path, server: ReferencePolicyServer) -> None:
    # every reset crashes the worker process: each attempt is retried once, then recorded as an env error
    config = _config(faults={"crash": 1.0, "crash_mode": "exit", "phases": ["reset"]})
    tasks = default_tasks(config)[:2]
    summary = collect(tasks, _policy(server), out=tmp_path / "run", desktops=2, group=1, env_retries=1,
                      backend="fake", desktop=config)  # fmt: skip
    records = _records(tmp_path / "run")
    statuses = Counter(r["status"] for r in records)
    assert statuses == {"retried": 2, "error": 2}
    for r in records:
        assert r["error"]["kind"] == "env" and r["reward"] is None
    assert summary["errors"] == {"policy": 0, "env": 2}
    assert summary["groups_short"] == 2  # every attempt ended, none completed
    tries = sorted((r["group_id"], r["try"]) for r in records)
    assert [t for _, t in tries] == [0, 1, 0, 1]


def test_setup_failures_recover_on_retry(tmp_path: Path, server: ReferencePolicyServer) -> None:
    config = _config(faults={"setup": 0.5})
    tasks = default_tasks(config)[:4]
    collect(tasks, _policy(server), out=tmp_path / "run", desktops=2, group=2, env_retries=5, backend="fake",
            desktop=config, seed=3)  # fmt: skip
    records = _records(tmp_path / "run")
    finals = [r for r in records if r["status"] != "retried"]
    assert len(finals) == 8 and all(r["status"] == "ok" and r["reward"] == 1.0 for r in finals)
    retried = [r for r in records if r["status"] == "retried"]
    assert retried, "with a 50% setup failure rate some tries must fail"
    assert all(r["error"]["type"] == "SetupError" and r["error"]["kind"] == "env" for r in retried)


def test_hung_desktop_is_killed_and_reported(tmp_path: Path, server: ReferencePolicyServer) -> None:
    config = DesktopConfig(
        screen=SCREEN,
        options={"faults": {"hang": 1.0, "hang_seconds": 600, "phases": ["act"]}},
        timeouts=Timeouts(reset=60, ready=1.0, act=1.0, evaluate=1.0),
    )
    tasks = default_tasks(config)[:1]
    collect(tasks, _policy(server), out=tmp_path / "run", desktops=1, group=1, env_retries=0, backend="fake",
            desktop=config)  # fmt: skip
    (record,) = _records(tmp_path / "run")
    assert record["status"] == "error" and record["error"]["kind"] == "env"
    assert record["error"]["type"] == "DeadlineExceeded"


def test_policy_failures_are_policy_errors(tmp_path: Path) -> None:
    config = _config()
    tasks = default_tasks(config)[:1]
    with ReferencePolicyServer(brain=ScriptedSolver(), faults=Faults(rates={"500": 1.0})) as srv:
        policy = _policy(srv, limits=Limits(retries=1, backoff=0.0))
        summary = collect(tasks, policy, out=tmp_path / "run", desktops=1, group=2, backend="fake", desktop=config)
    records = _records(tmp_path / "run")
    assert [r["status"] for r in records] == ["error", "error"]
    assert all(r["error"]["kind"] == "policy" for r in records)
    assert summary["errors"] == {"policy": 2, "env": 0}


def test_a_retried_model_call_is_counted(tmp_path: Path) -> None:
    config = _config()
    tasks = default_tasks(config)[:1]
    with ReferencePolicyServer(brain=ScriptedSolver(), faults=Faults(script=["500", "429"])) as srv:
        policy = _policy(srv, limits=Limits(retries=2, backoff=0.0))
        summary = collect(tasks, policy, out=tmp_path / "run", desktops=1, group=1, backend="fake", desktop=config)
    (record,) = _records(tmp_path / "run")
    assert record["status"] == "ok" and record["steps"][0]["model"]["attempts"] == 3
    assert summary["retried_calls"] == 1


def test_rollout_timeout_grades_and_truncates(tmp_path: Path, server: ReferencePolicyServer) -> None:
    config = _config(latency={"act": 0.3})
    tasks = default_tasks(config)[:1]
    collect(tasks, _policy(server), out=tmp_path / "run", desktops=1, group=1, rollout_timeout=0.4,
            backend="fake", desktop=config)  # fmt: skip
    (record,) = _records(tmp_path / "run")
    assert record["status"] == "truncated"
    assert record["reward"] == 0.0  # graded where it stopped: the task was not finished
    assert record["timing"]["eval_s"] is not None


def test_unknown_backend_is_refused_before_anything_is_written(tmp_path: Path, server: ReferencePolicyServer) -> None:
    with pytest.raises(ConfigError, match="nope"):
        collect(default_tasks(_config())[:1], _policy(server), out=tmp_path / "run", backend="nope")
    assert not (tmp_path / "run").exists()


def test_resume_refuses_other_arguments(tmp_path: Path, server: ReferencePolicyServer) -> None:
    config = _config()
    tasks = default_tasks(config)[:1]
    collect(tasks, _policy(server), out=tmp_path / "run", desktops=1, group=1, backend="fake", desktop=config)
    with pytest.raises(ConfigError, match="group"):
        collect(tasks, _policy(server), out=tmp_path / "run", desktops=1, group=2, backend="fake", desktop=config)


def _changed(task: Task, **config: Any) -> Task:
    return Task(task.task_id, task.instruction, {**task.config, **config}, domain=task.domain)


def test_a_resume_is_the_same_batch_or_a_refusal_that_changes_nothing(
    tmp_path: Path, server: ReferencePolicyServer
) -> None:
    """Resuming a finished run with its tasks reordered ran them again: 10 of 11 tasks got two groups."""
    config, run = _config(), tmp_path / "run"
    tasks = default_tasks(config)[:3]
    a, b, c = (f"fake/{t.task_id}" for t in tasks)

    def resume(given: list[Task]) -> None:
        collect(given, _policy(server), out=run, desktops=2, group=1, backend="fake", desktop=config)

    resume(tasks)
    records, written = _records(run), (run / "run.json").read_bytes()
    assert len(records) == 3 and {r["grader"] for r in records} == {"fake"}  # who scored each reward
    assert json.loads(written)["grader"] == "fake"
    for given, said in [
        (tasks[::-1], f"the same 3 tasks in another order (2 moved: task 0 was {a}, now {c}, task 2 was {c}, now {a})"),
        ([tasks[0], _changed(tasks[1], evaluator={"func": "infeasible"}), tasks[2]],
         f"--tasks: task 1 ({b}): config.evaluator changed"),
        (tasks[:2], f"--tasks: task 2 ({c}) is missing"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as info:
            resume(given)
        assert said in str(info.value), str(info.value)
        assert _records(run) == records and (run / "run.json").read_bytes() == written  # nothing ran, nothing rewritten
    resume(tasks)  # the same batch: nothing to run again
    assert _records(run) == records and (run / "run.json").read_bytes() == written


def test_a_run_without_task_digests_refuses_records_of_groups_its_tasks_lack(
    tmp_path: Path, server: ReferencePolicyServer
) -> None:
    """A run.json from before the tasks were kept in order: the records' group ids catch a reorder, which today
    skipped those records without a word and ran every moved task again."""
    config, run = _config(), tmp_path / "run"
    tasks = default_tasks(config)[:3]
    collect(tasks, _policy(server), out=run, desktops=2, group=1, backend="fake", desktop=config)
    manifest = json.loads((run / "run.json").read_text())
    manifest.pop("tasks", None)  # as a run.json written before the tasks were kept
    (run / "run.json").write_text(json.dumps(manifest))
    records = _records(run)
    with pytest.raises(ConfigError) as info:
        collect(tasks[::-1], _policy(server), out=run, desktops=2, group=1, backend="fake", desktop=config)
    message = str(info.value)
    assert f"the run's records name 2 group(s) that these tasks do not have (g0000-{tasks[0].task_id}" in message
    assert "the tasks were reordered, removed or renamed" in message and "another --out" in message
    assert _records(run) == records


_KILLED_COLLECT = textwrap.dedent(
    """
    import sys
    from legato_gym import DesktopConfig
    from legato_gym.backends.fake import default_tasks
    from legato_rl.collect import collect
    from legato_rl.policy import PolicyConfig

    config = DesktopConfig(screen=(320, 240), options={"latency": {"act": 0.05}})
    collect(default_tasks(config)[:4], PolicyConfig(sys.argv[1], sys.argv[2], version="v1"), out=sys.argv[3],
            desktops=2, group=2, backend="fake", desktop=config)
    """
)


def test_resume_after_sigkill(tmp_path: Path, server: ReferencePolicyServer) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_COLLECT, server.url, server.model, str(run)])
    try:
        # wait until at least one attempt has been recorded, then kill without warning
        rollouts = run / "rollouts.jsonl"
        for _ in range(600):  # poll: up to 30 s
            if (rollouts.exists() and rollouts.read_text().count("\n") >= 2) or proc.poll() is not None:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _records(run)
    with rollouts.open("a") as f:  # a torn last line, as a kill mid-write leaves it
        f.write('{"schema": "legato.rollout/v0", "rollout_id": "torn')
    config = DesktopConfig(screen=(320, 240), options={"latency": {"act": 0.05}})
    collect(default_tasks(config)[:4], PolicyConfig(server.url, server.model, version="v1"), out=run, desktops=2,
            group=2, backend="fake", desktop=config)  # fmt: skip
    after = _records(run)
    assert [r["rollout_id"] for r in after[: len(before)]] == [r["rollout_id"] for r in before]
    finals = _final_per_attempt(after)
    assert len(finals) == 8 and set(finals.values()) == {1}, finals  # none lost, none duplicated
    assert sum(r["status"] == "ok" for r in after) == 8


def test_cli_collect_embedded_and_bad_backend(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--out", str(tmp_path / "run"),
         "--group", "1", "--desktops", "2", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["success_rate"] == 1.0
    result = runner.invoke(
        app, ["rl", "collect", "--backend", "nope", "--policy-url", "embedded", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 2
    assert "unknown backend 'nope'" in result.output and "Traceback" not in result.output


def test_store_writer_keeps_order_bounds_its_backlog_and_reports_failures(tmp_path: Path) -> None:
    gate = threading.Event()
    written: list[str] = []

    class SlowStore(RolloutStore):
        def write_files(self, files: Any) -> None:
            gate.wait(10)
            written.append("files")
            super().write_files(files)

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def story() -> None:
        with SlowStore(tmp_path / "run") as store:
            writer = BackgroundWriter(store, max_backlog=4)
            for i in range(6):  # distinct messages: each request has a file to write
                writer.put_request({**body, "messages": [{"role": "user", "content": f"hi {i}"}]})
            waiting = asyncio.ensure_future(writer.wait_backlog())
            await asyncio.sleep(0.2)
            assert not waiting.done()  # six writes queued behind a stuck disk: the step waits
            gate.set()
            await asyncio.wait_for(waiting, 10)
            await writer.aclose()
        assert written == ["files"] * 6

        class FullDisk(RolloutStore):
            def write_files(self, files: Any) -> None:
                raise OSError(28, "No space left on device")

        with FullDisk(tmp_path / "full") as store:
            writer = BackgroundWriter(store)
            writer.put_request(body)
            with pytest.raises(OSError, match="No space"):
                await writer.aclose()
            with pytest.raises(OSError, match="No space"):
                writer.put_request(body)

    asyncio.run(story())


def test_cheap_harness_work_stays_on_the_loop_and_slow_work_moves_to_a_thread() -> None:
    def where(spin: float = 0.0) -> str:
        end = time.thread_time() + spin
        while time.thread_time() < end:  # CPU, as a resizing harness spends it
            pass
        return threading.current_thread().name

    async def story() -> None:
        inline = InlineWhileCheap("building a prompt", budget=0.005)
        assert [await inline(where) for _ in range(20)] == ["MainThread"] * 20
        assert await inline(where, 0.003) == "MainThread"  # one slowish call: the average stays low
        assert inline.inline
        assert await inline(where, 0.03) == "MainThread"  # six budgets: it moves after this call
        assert not inline.inline and await inline(where) != "MainThread"

    asyncio.run(story())


def test_a_desktop_finishing_a_cancelled_attempt_does_not_hold_the_batch(
    tmp_path: Path, server: ReferencePolicyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Desktop 1's action never ends. Its attempt's group closes, then the other group completes: collect()
    returns, and desktop 1 is shut down mid-action, however long that action would have taken."""
    collect_module = importlib.import_module("legato_rl.collect")  # the package's `collect` is the function

    screen = np.zeros((SCREEN[1], SCREEN[0], 3), np.uint8)
    png = encode_png(screen)
    obs = {"screenshot": screen, "instruction": "stub"}

    class StubEnv:
        """The vector env surface collect uses; desktop 1 is stuck in its first action."""

        def __init__(self) -> None:
            self.closed = False
            self.stuck: asyncio.Future[None] | None = None
            self.entered = asyncio.Event()
            self.nodes: dict[str, dict[str, int]] = {}

        def available(self, env_id: int) -> bool:
            return True

        async def areset(self, env_id: int, task: Any, next_task: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
            return obs, {"screenshot_png": png, "timings": {"reset_s": 0.0}}

        async def astep(self, env_id: int, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
            if env_id == 1:
                self.stuck = asyncio.get_running_loop().create_future()
                self.entered.set()
                await asyncio.shield(self.stuck)  # the desktop keeps acting when its caller gives up
            if env_id == 0:
                await self.entered.wait()  # A0 completes only once desktop 1 is stuck in A1's action
            return obs, 1.0, True, False, {"screenshot_png": png, "timings": {"act_s": 0.0}}

        async def atruncate(self, env_id: int) -> tuple[float, dict[str, Any]]:
            return 0.0, {}

        def idle(self, env_id: int) -> asyncio.Future[None]:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if env_id == 1 and self.stuck is not None:  # done when the stuck action ends: never, here
                self.stuck.add_done_callback(lambda _: future.done() or future.set_result(None))
            else:
                future.set_result(None)
            return future

        def close(self) -> None:
            self.closed = True

    stub = StubEnv()
    monkeypatch.setattr(collect_module, "make_vector_env", lambda *a, **k: stub)
    tasks = default_tasks(_config())[:2]
    # queue: A0, A1, B0, B1. Desktop 0 plays A0, desktop 1 gets stuck in A1, desktop 2 plays B0; A0 closes
    # group A (A1 cancelled), desktop 0 then plays B1.
    summary = collect(tasks, _policy(server), out=tmp_path / "run", desktops=3, group=1, oversample=1.0,
                      backend="fake", desktop=_config())  # fmt: skip
    assert stub.closed and stub.stuck is not None and not stub.stuck.done()
    counts = summary["status_counts"]
    # B1 is skipped or cancelled, as B0 (on a desktop that never waits) ends before or after B1 starts
    assert counts["ok"] == 2 and counts["cancelled"] + counts["skipped"] == 2 and counts["cancelled"] >= 1
    (cancelled,) = [r for r in _records(tmp_path / "run") if r["status"] == "cancelled" and r["desktop"] == 1]
    assert cancelled["group_id"].startswith("g0000-")
    # written right behind the record that closed its group, not when its desktop call ends: a kill between the
    # two cannot make a resume take the running attempt for one that never started (and record it skipped)
    records = _records(tmp_path / "run")
    closing = next(i for i, r in enumerate(records) if r["group_id"] == cancelled["group_id"] and r["status"] == "ok")
    assert records[closing + 1]["rollout_id"] == cancelled["rollout_id"]


def _collected_with(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> dict[str, Any]:
    """What ``collect(**kw)`` hands its :class:`Collector`: the policy, the options and the desktop config
    (``config``: the final one of the settings collect() finished once, ``finished``)."""
    from legato_gym import resolve_backend

    collect_module = importlib.import_module("legato_rl.collect")  # the package's `collect` is the function
    seen: dict[str, Any] = {}

    class Stub:
        def __init__(self, tasks: object, policy: PolicyConfig, out: object, options: CollectOptions,
                     config: Finished, *args: object, **kwargs: object) -> None:  # fmt: skip
            seen.update(policy=policy, options=options, config=config.config, finished=config)

        async def run(self) -> Any:
            return type("Summary", (), {"to_json": lambda self: {}})()

    monkeypatch.setattr(collect_module, "Collector", Stub)
    tasks = resolve_backend("fake").default_tasks(DesktopConfig())[:1]
    kw.setdefault("policy", PolicyConfig("http://127.0.0.1:9/v1", "m"))
    collect_module.collect(tasks, out="unused", **{"backend": "fake", **kw})
    return seen


def test_collect_keeps_the_desktop_configs_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """``collect(desktop=...)`` used to overwrite its ready_signal, fixed_wait and fast_reset with defaults."""
    stock = DesktopConfig(fast_reset=False, ready_signal=False, fixed_wait=2.0)
    config = _collected_with(monkeypatch, desktop=stock)["config"]
    assert (config.fast_reset, config.ready_signal, config.fixed_wait) == (False, False, 2.0)


def test_collect_has_one_path_for_each_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's limits and the desktops' waits are theirs alone; collect() neither overrides nor repeats them."""
    policy = PolicyConfig("http://127.0.0.1:9/v1", "m", sampling=Sampling(temperature=0.2),
                          limits=Limits(max_inflight=3, step_timeout=7.0, retries=0))  # fmt: skip
    seen = _collected_with(monkeypatch, policy=policy)
    assert seen["policy"] == policy and seen["policy"].limits == Limits(max_inflight=3, step_timeout=7.0, retries=0)
    assert seen["options"] == CollectOptions(backend="fake")  # every knob it was not given: CollectOptions' default
    assert seen["config"] == DesktopConfig()
    assert seen["finished"].tasks is not None  # the tasks checked once, by collect(), and carried down
    for moved in ("ready_signal", "fixed_wait", "fast_reset"):
        with pytest.raises(TypeError, match=moved):
            _collected_with(monkeypatch, **{moved: 1})
    # product.md's knobs by their names (issue 30): one more way into the policy's limits, never an override
    bare = PolicyConfig("http://127.0.0.1:9/v1", "m")
    seen = _collected_with(monkeypatch, policy=bare, max_inflight=3, step_timeout=7.0, retries=0)
    assert seen["policy"].limits == Limits(max_inflight=3, step_timeout=7.0, retries=0)
    assert _collected_with(monkeypatch, policy=policy, max_inflight=3)["policy"] == policy  # the same value twice
    for name, value in (("max_inflight", 4), ("step_timeout", 8.0), ("retries", 2)):
        with pytest.raises(ConfigError, match=rf"collect\({name}="):
            _collected_with(monkeypatch, policy=policy, **{name: value})
