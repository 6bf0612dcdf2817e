"""Continuous collection (legato_rl.follow) on fake desktops against the embedded reference policy server."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from legato_gym import ConfigError, DesktopConfig, Task, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_rl.cli.app import app
from legato_rl.export import export_steps
from legato_rl.follow import CompletedGroup, Follower
from legato_rl.policy import PolicyConfig
from legato_rl.profile import profile_run
from legato_rl.store import read_follow_log, read_record_dicts
from legato_rl.stream import TaskStream
from legato_rl.testing import Latency, ReferencePolicyServer, ScriptedSolver

SCREEN = (320, 240)
FINAL = {"ok", "truncated", "cancelled", "skipped", "surplus", "error"}


def _config(act: float = 0.05) -> DesktopConfig:
    return DesktopConfig(
        screen=SCREEN, options={"latency": {"act": act}}, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10)
    )


@pytest.fixture(scope="module")
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer(brain=ScriptedSolver()) as srv:
        yield srv


def _follower(server: ReferencePolicyServer, out: Path, version: str = "v0", **kw: Any) -> Follower:
    config = kw.pop("desktop", _config())
    tasks = kw.pop("tasks", default_tasks(config)[:3])
    options: dict[str, Any] = {"desktops": 2, "group": 2, "backend": "fake", "desktop": config, **kw}
    return Follower(tasks, PolicyConfig(server.url, server.model, version=version), out=out, **options)


async def _until(condition: Any, what: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _in_flight(follower: Follower) -> bool:
    """An attempt is in flight, calling the policy: its task runs (one that has ended stays listed until its desktop
    looks again) and it is past its reset and any hold (a desktop reset ahead holds one before its first call)."""
    return any(playing.calling and not task.done() for playing, task in follower._collector._running.values())


def _step_versions(group: CompletedGroup) -> list[list[str | None]]:
    return [[step.model.policy_version for step in record.steps] for record in group.records]


def test_groups_come_as_they_complete_and_every_step_names_its_version(
    tmp_path: Path, server: ReferencePolicyServer
) -> None:
    run = tmp_path / "run"

    async def story() -> tuple[list[CompletedGroup], dict[str, Any], Any, Any]:
        groups: list[CompletedGroup] = []
        exported = profiled = None
        async with _follower(server, run, max_ready=2) as follower:
            async for group in follower:
                groups.append(group)
                # handed over only once its records are in rollouts.jsonl: a trainer may tail the file
                on_disk = {r["rollout_id"] for r in read_record_dicts(run)}
                assert {r.rollout_id for r in group.records} <= on_disk
                if len(groups) in (2, 4):
                    await _until(lambda: _in_flight(follower), "an attempt calling the policy")
                    server.weight_version = f"v{len(groups)}"
                    follower.set_version(f"v{len(groups)}")
                if len(groups) == 4:  # export and profile read the live run
                    exported = export_steps(run, tmp_path / "train.jsonl")
                    profiled = profile_run(run, out=tmp_path / "profile", plots=False)
                if len(groups) == 7:
                    break
            summary = await follower.stop()
        return groups, summary, exported, profiled

    groups, summary, exported, profiled = asyncio.run(story())
    server.weight_version = "default"
    # an endless stream: the three tasks cycled, group ids by stream position
    tasks = default_tasks(_config())[:3]
    assert [g.group_id for g in groups] == [f"g{i:04d}-{tasks[i % 3].task_id}" for i in range(7)]
    assert all(len(g.completed) == 2 and g.rewards == [1.0, 1.0] for g in groups)
    order = {"v0": 0, "v2": 1, "v4": 2}
    for group in groups:
        for versions in _step_versions(group):
            assert versions and all(v in order for v in versions)
            assert [order[v] for v in versions] == sorted(order[v] for v in versions)  # calls carry the latest
        assert list(group.versions) == sorted({v for vs in _step_versions(group) for v in vs}, key=order.get)
    assert groups[0].versions == ("v0",) and groups[-1].versions[-1] == "v4"
    assert any(len(g.versions) == 2 for g in groups)  # an attempt in flight continued under the new version
    # the export of the live run holds the groups handed over by then, whole; the profile read it as it stood
    assert exported is not None and exported.groups == 4 and exported.rollouts == 8
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert {row["group_id"] for row in rows} == {g.group_id for g in groups[:4]}
    assert {row["policy_version"] for row in rows} <= {"v0", "v2"}
    assert profiled is not None and profiled.in_progress
    # the summary: staleness as handed over, the versions loaded, utilisation
    figures = summary["follow"]
    stalenesses = [g.staleness for g in groups]
    assert figures["staleness"]["max"] == max(stalenesses)
    assert figures["staleness"]["mean"] == pytest.approx(sum(stalenesses) / len(stalenesses), abs=1e-3)
    assert figures["versions"] == ["v0", "v2", "v4"] and figures["groups_delivered"] == 7
    assert 0 < figures["utilisation"] <= 1
    assert [part["version"] for part in figures["utilisation_by_version"]] == ["v0", "v2", "v4"]
    log = read_follow_log(run)
    assert [line["version"] for line in log if line["event"] == "version"] == ["v0", "v2", "v4"]


@pytest.mark.parametrize("reset_ahead", [False, True], ids=["waiting unreset", "reset ahead"])
def test_backpressure_stops_new_attempts_until_the_trainer_takes_a_group(
    tmp_path: Path, server: ReferencePolicyServer, reset_ahead: bool
) -> None:
    # nobody takes: two groups wait, and the desktops finish what they run and start nothing more: no policy call,
    # no record. With reset ahead each desktop resets one attempt and holds it before its first call.
    run = tmp_path / "run"

    async def story() -> tuple[int, int, float, list[tuple[str, bool]]]:
        follower = _follower(server, run, group=1, max_ready=2, reset_ahead=reset_ahead)
        await follower.start()
        collector = follower._collector

        def running() -> list[tuple[str, bool]]:  # (rollout id, its policy calls began) of the tries in flight
            return [(p.attempt.rollout_id, p.calling) for p, task in collector._running.values() if not task.done()]

        def settled() -> bool:
            held = running()
            return (
                follower.waiting >= 2 and (len(held) == 2 if reset_ahead else not held) and not any(c for _, c in held)
            )

        await _until(settled, "the desktops to stop")
        await collector.flush()
        settled_records = len(list(read_record_dicts(run)))
        calls = server.stats.chat_requests
        held = running()
        await asyncio.sleep(0.5)  # a window in which a desktop that ignored backpressure would call the policy
        await collector.flush()
        assert running() == held and len(list(read_record_dicts(run))) == settled_records
        assert collector.progress.held == len(held)  # the live display tells held desktops from busy ones
        assert server.stats.chat_requests == calls
        # the groups open and the groups waiting stay within max_ready: the queue never exceeds it
        assert follower.waiting == 2
        taken = 0
        taken_at = time.time()
        while follower.waiting >= 2:
            await follower.next_group()
            taken += 1
        await _until(lambda: len(list(read_record_dicts(run))) > settled_records, "the desktops to start again")
        await follower.stop()
        assert collector.progress.held == 0
        return settled_records, taken, taken_at, held

    settled, taken, taken_at, held = asyncio.run(story())
    assert settled == 2 and taken == 1
    records = {r["rollout_id"]: r for r in read_record_dicts(run)}
    if reset_ahead:  # the attempts held ahead called the policy only once the trainer took a group; held_s says so
        went = [records[rollout_id] for rollout_id, _ in held if rollout_id in records]  # the others: still held
        assert went  # at the stop, cut short unrecorded (a resume plays them)
        for record in went:
            assert record["timing"]["held_s"] >= 0.5
            assert not record["steps"] or record["steps"][0]["started_at"] >= taken_at
    assert all(r["timing"]["held_s"] == 0 for r in records.values() if r["rollout_id"] not in dict(held))
    # the log says when the queue filled and when the trainer freed it; the figures count that time, and say
    # how many desktops the trainer kept busy on average (what keeps up with it): holding is not busy
    queue = [line["full"] for line in read_follow_log(run) if line["event"] == "queue"]
    assert queue[:2] == [True, False]
    figures = json.loads((run / "summary.json").read_text())["follow"]
    assert figures["queue_full_s"] >= 0.5 and figures["desktops"] == 2
    spans = [
        (r["started_at"], r["ended_at"], r["timing"]["held_s"]) for r in records.values() if r["desktop"] is not None
    ]
    window = max(b for _, b, _ in spans) - min(a for a, _, _ in spans)
    busy = sum(b - a - held_s for a, b, held_s in spans) / window
    assert figures["desktops_to_keep_up"] == math.ceil(round(busy, 3)) and busy < 2
    assert figures["utilisation"] == pytest.approx(busy / 2, abs=2e-3)


def test_a_trainer_waiting_for_a_group_lets_one_more_open_so_no_desktop_sits_idle(
    tmp_path: Path, server: ReferencePolicyServer
) -> None:
    # one group of one attempt may wait (max_ready=1) and two desktops ask for work: while the trainer waits in
    # next_group, both run an attempt (the group that completes first is taken at once); while nobody waits, one
    # group at most is open or waiting, as before, and never more than one waits
    run = tmp_path / "run"

    async def story() -> tuple[int, int, int, int]:
        follower = _follower(server, run, group=1, max_ready=1, desktop=_config(act=0.2))
        await follower.start()
        collector = follower._collector

        def in_flight() -> int:  # tries calling the policy (a desktop may hold one reset ahead: not counted)
            return sum(p.calling and not task.done() for p, task in collector._running.values())

        most_waiting = 0

        async def watch() -> None:
            nonlocal most_waiting
            while True:
                most_waiting = max(most_waiting, follower.waiting)
                await asyncio.sleep(0.01)

        watcher = asyncio.ensure_future(watch())
        await _until(lambda: follower.waiting == 1 and not in_flight(), "the first group to wait")
        await asyncio.sleep(0.3)  # nobody waits: no second attempt starts
        alone = in_flight()
        asking = True

        async def trainer() -> None:
            while asking:
                await follower.next_group()

        taking = asyncio.ensure_future(trainer())
        await _until(lambda: in_flight() == 2, "both desktops to run while the trainer waits", deadline_s=15)
        both = in_flight()
        asking = False  # the trainer takes the group it waits for, then stops asking
        await taking
        await _until(lambda: not in_flight() and follower.waiting == 1, "the desktops to stop again")
        await asyncio.sleep(0.3)
        ready = follower.waiting + in_flight()
        watcher.cancel()
        await follower.stop()
        return alone, both, ready, most_waiting

    alone, both, ready, most_waiting = asyncio.run(story())
    assert (alone, both, ready, most_waiting) == (0, 2, 1, 1)


def test_restart_reruns_in_flight_attempts_and_stale_groups_are_rerun_or_marked(
    tmp_path: Path, server: ReferencePolicyServer
) -> None:
    async def story(run: Path, stale: str) -> list[CompletedGroup]:
        got: list[CompletedGroup] = []
        follower = _follower(
            server, run, desktop=_config(act=0.1), partial="restart", max_staleness=0, stale=stale, max_ready=4
        )
        await follower.start()
        await _until(lambda: follower.waiting >= 1 and _in_flight(follower), "a group and attempts in flight")
        follower.set_version("v1")  # a group waits (made under v0), attempts are in flight
        for _ in range(3):
            got.append(await follower.next_group())
        await follower.stop(drain=True)  # the groups open finish: every restarted attempt has its final record
        return got

    run = tmp_path / "rerun"
    groups = asyncio.run(story(run, "rerun"))
    records = list(read_record_dicts(run))
    restarted = [r for r in records if r["status"] == "retried"]
    assert restarted and all(r["error"]["kind"] == "version" for r in restarted)
    # restarted tries ran again from their reset: a final record of the same attempt, steps under v1 only
    for record in restarted:
        again = [r for r in records if (r["group_id"], r["attempt"]) == (record["group_id"], record["attempt"])]
        assert again[-1]["try"] == record["try"] + 1 and again[-1]["status"] in FINAL
    for group in groups:  # every group handed over is within the bound: its steps are all v1
        assert group.staleness == 0 and not group.stale and group.versions == ("v1",)
    log = read_follow_log(run)
    reruns = [line for line in log if line["event"] == "group" and line["outcome"] == "rerun"]
    assert reruns and all(line["staleness"] == 1 for line in reruns)
    assert all("r1-" in line["rerun_as"] for line in reruns)
    delivered = {line["group_id"] for line in log if line["event"] == "group" and line["outcome"] == "delivered"}
    assert delivered == {g.group_id for g in groups} and not delivered & {line["group_id"] for line in reruns}

    marked = asyncio.run(story(tmp_path / "marked", "deliver"))
    assert marked[0].stale and marked[0].staleness == 1 and marked[0].versions == ("v0",)
    assert all(not g.stale for g in marked[1:])


def test_task_streams_cycle_draw_and_take_an_iterable_as_it_comes(
    tmp_path: Path, server: ReferencePolicyServer
) -> None:
    tasks = default_tasks(_config())[:3]
    ids = [t.task_id for t in tasks]
    cycled = [task.task_id for _, task in islice(TaskStream.of(tasks), 7)]
    assert cycled == [ids[i % 3] for i in range(7)]
    drawn = [task.task_id for _, task in islice(TaskStream.of(tasks, order="draw", seed=3), 9)]
    again = [task.task_id for _, task in islice(TaskStream.of(tasks, order="draw", seed=3), 9)]
    other = [task.task_id for _, task in islice(TaskStream.of(tasks, order="draw", seed=4), 9)]
    assert drawn == again and drawn != other
    assert all(sorted(drawn[i : i + 3]) == sorted(ids) for i in (0, 3, 6))  # each task once a pass
    with pytest.raises(ConfigError, match="order='shuffle' must be one of cycle, draw"):
        TaskStream.of(tasks, order="shuffle")  # type: ignore[arg-type]

    def two() -> Iterator[Task]:  # an iterable that ends: the run finishes its groups, then the stream ends
        yield tasks[1]
        yield tasks[0]

    async def story() -> list[str]:
        follower = _follower(server, tmp_path / "run", tasks=two())
        return [group.group_id async for group in follower]

    assert sorted(asyncio.run(story())) == [f"g0000-{ids[1]}", f"g0001-{ids[0]}"]


_KILLED_FOLLOW = textwrap.dedent(
    """
    import sys, time
    from legato_gym import DesktopConfig
    from legato_gym.backends.fake import default_tasks
    from legato_rl.follow import follow
    from legato_rl.policy import PolicyConfig

    config = DesktopConfig(screen=(320, 240), options={"latency": {"act": 0.05}})
    run = follow(default_tasks(config)[:3], PolicyConfig(sys.argv[1], sys.argv[2], version="v0"), out=sys.argv[3],
                 desktops=2, group=2, backend="fake", desktop=config, max_ready=2, order="draw", seed=5)
    for n, group in enumerate(run, 1):  # the blocking form; killed while it runs
        print(group.group_id, flush=True)
        time.sleep(float(sys.argv[4]))  # the trainer's update
        if n % 2 == 0:
            run.set_version(f"v{n}")
    """
)


@pytest.mark.parametrize("update_s", [0.0, 1.0], ids=["a trainer always asking", "a slow trainer: resets held"])
def test_a_killed_continuous_run_resumes_losing_and_duplicating_nothing(
    tmp_path: Path, server: ReferencePolicyServer, update_s: float
) -> None:
    run = tmp_path / "run"
    rollouts = run / "rollouts.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_FOLLOW, server.url, server.model, str(run), str(update_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(1200):  # poll: up to 60 s for a few groups handed over and a version change
            handed = [line for line in read_follow_log(run) if line["event"] == "group"]
            if (len(handed) >= 3 and rollouts.read_text().count("\n") >= 8) or proc.poll() is not None:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stdout is not None
    printed = proc.stdout.read().split()
    before = list(read_record_dicts(run))
    if update_s:  # the queue filled while the trainer updated: desktops held attempts reset ahead of their turn
        assert any(r["timing"]["held_s"] > 0 for r in before)
    handed_before = [line["group_id"] for line in read_follow_log(run) if line["event"] == "group"]
    assert len(handed_before) >= 3 and set(handed_before) <= set(printed) | set(handed_before)
    finished_not_handed = {
        gid
        for gid, n in Counter(r["group_id"] for r in before if r["status"] in FINAL).items()
        if n == 2 and gid not in handed_before
    }

    async def resume() -> list[CompletedGroup]:
        got: list[CompletedGroup] = []
        follower = Follower(
            default_tasks(_config())[:3], PolicyConfig(server.url, server.model, version="v9"), out=run, desktops=2,
            group=2, backend="fake", desktop=DesktopConfig(screen=SCREEN, options={"latency": {"act": 0.05}}),
            max_ready=2, order="draw", seed=5,
        )  # fmt: skip
        async with follower:
            async for group in follower:
                got.append(group)
                if len(got) == len(finished_not_handed) + 3:
                    break
        return got

    resumed = asyncio.run(resume())
    # groups that completed but were not handed over before the kill come first
    assert {g.group_id for g in resumed[: len(finished_not_handed)]} == finished_not_handed
    after = list(read_record_dicts(run))
    assert [r["rollout_id"] for r in after[: len(before)]] == [r["rollout_id"] for r in before]
    finals = Counter((r["group_id"], r["attempt"]) for r in after if r["status"] in FINAL)
    assert set(finals.values()) == {1}, finals  # none duplicated
    handed = [line["group_id"] for line in read_follow_log(run) if line["event"] == "group"]
    assert len(handed) == len(set(handed)) == len(handed_before) + len(resumed)  # each group handed over once
    positions = sorted({int(gid[1:5]) for gid in handed})
    assert positions == list(range(len(positions)))  # no stream position skipped: none lost
    for group in resumed:
        assert len(group.completed) == 2
    # the stream resumed at the same draw: position n is the same task as before the kill
    stream = [task.task_id for _, task in islice(TaskStream.of(default_tasks(_config())[:3], order="draw", seed=5), 99)]
    assert all(gid.split("-", 1)[1] == stream[int(gid[1:5])] for gid in handed)


def test_cli_follow_reads_the_control_file_and_hands_groups_over(tmp_path: Path) -> None:
    runner = CliRunner()
    run, control = tmp_path / "run", tmp_path / "control.json"
    control.write_text(json.dumps({"version": "v2", "taken": 0}))  # loaded before the first call; none consumed
    args = ["rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--out", str(run), "--group", "2",
            "--desktops", "2", "--version", "v1", "--quiet"]  # fmt: skip
    result = runner.invoke(app, [*args, "--follow", "--control", str(control), "--max-ready", "2", "--max-groups", "2"])
    assert result.exit_code == 0, result.output
    assert "2 groups handed over" in result.output and result.output.strip().endswith("summary.json")
    handed = [line for line in read_follow_log(run) if line["event"] == "group"]
    assert [line["outcome"] for line in handed] == ["delivered", "delivered"]
    versions = {step["model"]["policy_version"] for r in read_record_dicts(run) for step in r["steps"]}
    assert versions <= {"v1", "v2"} and "v2" in versions
    summary = json.loads((run / "summary.json").read_text())
    assert summary["follow"]["groups_delivered"] == 2 and summary["follow"]["versions"][-1] == "v2"
    refused = runner.invoke(app, [*args[:7], str(tmp_path / "other"), "--max-ready", "3"])
    assert refused.exit_code != 0 and "--max-ready apply to continuous collection only: add --follow" in refused.output

    # the same command resumes; "taken" counts the groups handed over before it too: none more until the trainer
    # takes one (two handed over, none taken, --max-ready 2), then one
    def handed_over() -> int:
        return sum(line["event"] == "group" for line in read_follow_log(run))

    def finished(position: int) -> bool:  # the group at this stream position has both its final records
        prefix = f"g{position:04d}-"
        return sum(r["group_id"].startswith(prefix) and r["status"] in FINAL for r in read_record_dicts(run)) == 2

    resume = [*args, "--follow", "--control", str(control), "--max-ready", "2"]
    proc = subprocess.Popen([sys.executable, "-c", "from legato_rl.cli.app import main; main()", *resume])
    try:
        deadline = time.monotonic() + 60
        while not (finished(2) and finished(3)):
            assert proc.poll() is None and time.monotonic() < deadline, "the resumed run collected no groups"
            time.sleep(0.05)
        time.sleep(0.5)  # a window in which a run that forgot the groups handed over before would hand one over
        assert handed_over() == 2
        # the commands read the live run: the export takes the groups handed over, the profile the run as it stands
        exported = runner.invoke(app, ["rl", "export", str(run), "--out", str(tmp_path / "train.jsonl")])
        assert exported.exit_code == 0 and "(2 groups)" in exported.output, exported.output
        profiled = runner.invoke(app, ["rl", "profile", str(run), "--out", str(tmp_path / "profile"), "--no-plots"])
        assert profiled.exit_code == 0 and "is still being written" in profiled.output, profiled.output
        (tmp_path / "control.tmp").write_text(json.dumps({"version": "v2", "taken": 1}))
        (tmp_path / "control.tmp").rename(control)
        while handed_over() < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "no group handed over after one was taken"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert handed_over() == 3


def test_a_group_rerun_twice_for_staleness_goes_before_every_other_attempt() -> None:
    from legato_rl.follow import _FollowBook

    tasks = default_tasks(_config())[:3]
    book = _FollowBook(TaskStream.of(tasks), group=2, oversample=0.0)
    first = book.next_attempt(0)  # opens g0000 from the stream
    assert first is not None and first.group_id == f"g0000-{tasks[0].task_id}"
    once = book.rerun(first.group_id)  # stale once: queued behind the groups already open
    assert once == f"g0000r1-{tasks[0].task_id}"
    assert book.next_attempt(0).group_id == first.group_id  # type: ignore[union-attr]
    opened = book.next_attempt(0)  # g0000's queue is empty: the re-run opens before the stream's next group
    assert opened is not None and opened.group_id == once
    twice = book.rerun(once)
    assert twice == f"g0000r2-{tasks[0].task_id}"
    book.add(f"g0001-{tasks[1].task_id}", tasks[1])  # another open group with attempts waiting
    book.origin[f"g0001-{tasks[1].task_id}"] = (1, 0)
    assert book.next_attempt(0).group_id == once  # type: ignore[union-attr]
    book._open_next()  # the twice re-run group opens: its attempts go first, ahead of g0001's
    assert [book.next_attempt(0).group_id for _ in range(2)] == [twice, twice]  # type: ignore[union-attr]
    assert book.next_attempt(0).group_id == f"g0001-{tasks[1].task_id}"  # type: ignore[union-attr]


def test_restart_leaves_a_try_still_in_its_reset_or_held_ahead_to_go_on(
    tmp_path: Path, server: ReferencePolicyServer
) -> None:
    # a try that has not called the policy yet would make every call under the new version anyway: --partial
    # restart lets it go on rather than reset its desktop again
    config = DesktopConfig(
        screen=SCREEN, options={"latency": {"reset": 1.0}}, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10)
    )
    run = tmp_path / "run"

    async def story() -> CompletedGroup:
        follower = _follower(server, run, desktop=config, desktops=1, group=1, max_ready=1, partial="restart")
        await follower.start()
        await _until(lambda: bool(follower._collector._running), "the first try to start its reset")
        follower.set_version("v1")
        group = await follower.next_group()
        await follower.stop()
        return group

    group = asyncio.run(story())
    assert group.versions == ("v1",) and group.staleness == 0
    assert [(r["try"], r["status"]) for r in read_record_dicts(run) if r["group_id"] == group.group_id] == [(0, "ok")]


@pytest.mark.parametrize("resumed", [False, True], ids=["live", "resumed"])
def test_a_try_restarted_for_a_version_change_leaves_the_env_retries_whole(tmp_path: Path, resumed: bool) -> None:
    # every action crashes the desktop, and the policy takes 1 s a call: the first try is restarted by the change
    # while its first call is in flight, then the desktop failures alone spend env_retries=1 (one retry, then
    # error); resumed: the run stops right after the restart and a new one counts it from the records
    config = DesktopConfig(
        screen=SCREEN, options={"faults": {"crash": 1.0, "phases": ["act"]}},
        timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10),
    )  # fmt: skip
    run = tmp_path / "run"
    options: dict[str, Any] = {"desktop": config, "desktops": 1, "group": 1, "max_ready": 1, "partial": "restart"}

    async def story(slow: ReferencePolicyServer) -> CompletedGroup:
        follower = _follower(slow, run, env_retries=1, **options)
        await follower.start()
        await _until(lambda: slow.stats.inflight > 0, "the first try's first call")
        follower.set_version("v1")
        if resumed:
            await follower.stop()  # the next try has not run: the resume plays it
            follower = _follower(slow, run, version="v1", env_retries=1, **options)
        group = await follower.next_group()
        await follower.stop()
        return group

    with ReferencePolicyServer(brain=ScriptedSolver(), latency=Latency(fixed=1.0)) as slow:
        group = asyncio.run(story(slow))
    tries = [r for r in read_record_dicts(run) if r["group_id"] == group.group_id]
    assert [r["try"] for r in tries] == [0, 1, 2]
    assert Counter((r["status"], r["error"]["kind"]) for r in tries) == {
        ("retried", "version"): 1,
        ("retried", "env"): 1,
        ("error", "env"): 1,
    }
