"""Desktops on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), fake backend.

One cluster per module (Ray start-up is slow): a head that hosts no desktops and two nodes with distinct
custom resources. Tests that kill or add nodes bring their own, under resource names nobody else asks for.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

ray = pytest.importorskip("ray", reason="needs ray: pip install 'legatolabs[ray]'")
cluster_utils = pytest.importorskip("ray.cluster_utils", reason="needs ray's test utilities")
ray_constants = pytest.importorskip("ray._private.ray_constants", reason="needs ray's constants")

from legato_gym.backends.fake import default_tasks, fake_solution  # noqa: E402
from legato_gym.config import DesktopConfig, Timeouts  # noqa: E402
from legato_gym.errors import ConfigError, DesktopCrashed, DesktopError  # noqa: E402
from legato_gym.vector import Deadlines, DesktopVectorEnv, RayDesktopVectorEnv, RayPlacement  # noqa: E402
from legato_gym.vector.ray_host import LazyScreenshot  # noqa: E402
from legato_rl.cli.app import app  # noqa: E402
from legato_rl.collect import collect  # noqa: E402
from legato_rl.policy import PolicyConfig  # noqa: E402
from legato_rl.profile import node_rows, profile_run  # noqa: E402
from legato_rl.store import read_record_dicts  # noqa: E402
from legato_rl.testing import ReferencePolicyServer, ScriptedSolver  # noqa: E402

pytestmark = pytest.mark.ray

SCREEN = (320, 240)
CONFIG = DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))
DEADLINES = Deadlines(start=90, reset=30, step=30, truncate=30, call=30, close=10)
SHORT = Deadlines(start=20, reset=30, step=30, truncate=30, call=30, close=10)  # where old code waited it out
FINAL = {"ok", "truncated", "cancelled", "skipped", "surplus", "error"}
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024**2}


def keep_on_loopback() -> None:
    """Every node, raylet and driver of the test cluster on 127.0.0.1: its traffic never leaves loopback.

    Ray binds to the machine's interface address unless it believes it runs a single-machine cluster; its
    switch for that is named for Windows and macOS but applies everywhere.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # inherited by the nodes Cluster starts
    ray_constants.ENABLE_RAY_CLUSTER = False  # already read when ray was imported


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    keep_on_loopback()
    head = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={
            **NODE,
            # notice a dead node in about a second, not the default half a minute
            "_system_config": {
                "health_check_initial_delay_ms": 0,
                "health_check_period_ms": 300,
                "health_check_failure_threshold": 3,
            },
        },
    )
    head.nodes_by_name = {
        "a": head.add_node(**NODE, resources={"legato_fake": 4, "zone_a": 4, "legato_kill": 2}),
        "b": head.add_node(**NODE, resources={"legato_fake": 4, "zone_b": 4, "legato_kill": 2}),
    }
    ray.init(address=head.address, log_to_driver=False)
    try:
        yield head
    finally:
        ray.shutdown()
        head.shutdown()


@pytest.fixture(scope="module")
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer(brain=ScriptedSolver()) as srv:
        yield srv


def _actions(task: Any, steps: int) -> list[str]:
    actions = [s.action for s in fake_solution(task, SCREEN)]
    return (actions + ["WAIT"] * steps)[:steps]


def _dead(node_id: str) -> bool:
    return any(n["NodeID"] == node_id and not n["Alive"] for n in ray.nodes())


def _poll(condition: Callable[[], bool], limit: float) -> bool:
    end = time.monotonic() + limit
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_same_trajectories_as_local_workers(cluster: Any) -> None:
    tasks = default_tasks(CONFIG)[:3]
    placement = RayPlacement(group=2, resources={"legato_fake": 1})
    local = DesktopVectorEnv(3, "fake", CONFIG, seed=5, tasks=tasks)
    remote = RayDesktopVectorEnv(3, "fake", CONFIG, seed=5, tasks=tasks, deadlines=DEADLINES, placement=placement)
    try:
        ids = {cluster.nodes_by_name[n].node_id for n in "ab"}
        assert set(remote.worker_nodes) <= ids  # fake desktops asked for legato_fake: never on the head
        assert all(pid > 0 for pid in remote.worker_pids)
        options = {"tasks": dict(enumerate(tasks))}
        (lobs, _), (robs, rinfo) = local.reset(seed=5, options=options), remote.reset(seed=5, options=options)
        assert np.array_equal(lobs["screenshot"], robs["screenshot"]) and lobs["instruction"] == robs["instruction"]
        assert list(rinfo["task_id"]) == [t.task_id for t in tasks]
        plans = [_actions(t, 6) for t in tasks]
        for k in range(6):
            actions = [plan[k] for plan in plans]
            lo, lr, lt, ltr, _ = local.step(actions)
            ro, rr, rt, rtr, rinfo = remote.step(actions)
            assert np.array_equal(lo["screenshot"], ro["screenshot"])
            assert lr.tolist() == rr.tolist() and lt.tolist() == rt.tolist() and ltr.tolist() == rtr.tolist()
            if lt.all() or ltr.all():
                break
        assert rr.tolist() == [1.0, 1.0, 1.0]  # the scripted solutions solved every task, remotely too
    finally:
        local.close()
        remote.close()


def test_desktops_go_where_their_resources_are(cluster: Any) -> None:
    placement = RayPlacement(group=1, resources={"zone_b": 1})
    with RayDesktopVectorEnv(3, "fake", CONFIG, seed=0, deadlines=DEADLINES, placement=placement) as env:
        assert env.worker_nodes == [cluster.nodes_by_name["b"].node_id] * 3

        async def one_episode() -> float:
            task = env.tasks[0]
            await env.areset(1, task)
            reward = 0.0
            for action in _actions(task, 6):
                _, reward, terminated, _, _ = await env.astep(1, action)
                if terminated:
                    break
            return reward

        assert asyncio.run(one_episode()) == 1.0


def test_lost_node_fails_its_desktops_with_env_id_and_a_joining_node_takes_them(cluster: Any) -> None:
    first = cluster.add_node(**NODE, resources={"legato_join": 2})
    placement = RayPlacement(group=2, resources={"legato_join": 1})
    env = RayDesktopVectorEnv(2, "fake", CONFIG, seed=0, deadlines=DEADLINES, placement=placement)
    try:
        env.reset()
        assert env.worker_nodes == [first.node_id] * 2
        old_pids = env.worker_pids
        cluster.remove_node(first, allow_graceful=False)
        assert _poll(lambda: _dead(first.node_id), 60), "Ray never noticed the node was gone"
        _, rewards, _, truncated, info = env.step(["WAIT", "WAIT"])
        assert truncated.tolist() == [True, True] and info["_error"].tolist() == [True, True]
        assert rewards.tolist() == [0.0, 0.0]
        for env_id, error in enumerate(info["error"]):
            assert isinstance(error, DesktopCrashed) and error.env_id == env_id
            assert f"{socket.gethostname()} (127.0.0.1)" in str(error)  # the record names the host it lost
            assert "lost" in (error.remote_traceback or "") and "ActorDiedError" in (error.remote_traceback or "")
        # nowhere to go until a host with legato_join joins; then the replacements start there
        second = cluster.add_node(**NODE, resources={"legato_join": 2})
        env.reset()
        assert env.worker_nodes == [second.node_id] * 2
        assert env.worker_pids != old_pids
        _, _, _, truncated, info = env.step(["WAIT", "WAIT"])
        assert "error" not in info and not truncated.any()
    finally:
        env.close()
    cluster.remove_node(second)


def test_agents_fit_the_hosts_and_demand_beyond_them_fails_at_once(cluster: Any) -> None:
    small = [cluster.add_node(**NODE, resources={"legato_slot": 2}) for _ in range(2)]
    try:
        # the default group (8) would ask one host for 4 legato_slot; each offers 2: agents of 2, one per host
        placement = RayPlacement(resources={"legato_slot": 1})
        with RayDesktopVectorEnv(4, "fake", CONFIG, seed=0, deadlines=SHORT, placement=placement) as env:
            env.reset()
            assert Counter(env.worker_nodes) == {node.node_id: 2 for node in small}
        with pytest.raises(ConfigError, match=r"room for 4 of the 5 'fake' desktops") as caught:
            RayDesktopVectorEnv(5, "fake", CONFIG, deadlines=SHORT, placement=placement)
        assert "1 legato_slot" in str(caught.value) and "require_fit=False" in str(caught.value)
    finally:
        for node in small:
            cluster.remove_node(node)


def test_demand_no_host_can_meet_fails_at_once_naming_what_is_missing(cluster: Any) -> None:
    placement = RayPlacement(cpus=0.5, resources={"legato_nowhere": 1})
    with pytest.raises(ConfigError, match=r"missing: 1 legato_nowhere \(the most any node offers: 0\)") as caught:
        RayDesktopVectorEnv(2, "fake", CONFIG, deadlines=SHORT, placement=placement)
    assert "0.5 CPU" in str(caught.value) and "--resources" in str(caught.value)
    assert ray.is_initialized()  # the caller's Ray is left as it was


def test_lazy_pixels_decode_only_when_read(cluster: Any) -> None:
    placement = RayPlacement(group=2, resources={"legato_fake": 1})
    local = DesktopVectorEnv(2, "fake", CONFIG, seed=3)
    kwargs: dict[str, Any] = {"seed": 3, "deadlines": DEADLINES, "placement": placement, "png": True, "copy": False}
    lazy = RayDesktopVectorEnv(2, "fake", CONFIG, pixels="lazy", **kwargs)
    eager = RayDesktopVectorEnv(2, "fake", CONFIG, **kwargs)
    task = local.tasks[0]

    async def first(env: DesktopVectorEnv) -> tuple[Any, dict[str, Any]]:
        return await env.areset(0, task)

    try:
        expected, _ = asyncio.run(first(local))
        shot, info = asyncio.run(first(lazy))
        assert isinstance(shot["screenshot"], LazyScreenshot) and not shot["screenshot"].decoded
        assert shot["screenshot"].png == info["screenshot_png"]  # one PNG: the caller's and the pixels' source
        assert np.array_equal(np.asarray(shot["screenshot"]), expected["screenshot"])
        plain, _ = asyncio.run(first(eager))  # the default: an array, as a Gymnasium user expects
        assert isinstance(plain["screenshot"], np.ndarray)
        assert np.array_equal(plain["screenshot"], expected["screenshot"])
        batch, _ = lazy.reset(seed=3, options={"tasks": {0: task, 1: task}})  # batches are arrays either way
        assert isinstance(batch["screenshot"], np.ndarray) and np.array_equal(
            batch["screenshot"][0], expected["screenshot"]
        )
    finally:
        for env in (local, lazy, eager):
            env.close()


def test_cli_ray_option(cluster: Any, server: ReferencePolicyServer, tmp_path: Path) -> None:
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(json.dumps([{"task_id": t.task_id, "config": t.config} for t in default_tasks(CONFIG)[:2]]))
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["rl", "collect", "--out", str(out), "--policy-url", server.url, "--model", server.model,
         "--tasks", str(tasks_file), "--backend", "fake", "--desktops", "2", "--group", "1",
         "--ray", cluster.address, "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    statuses = Counter(r["status"] for r in read_record_dicts(out))
    assert statuses == {"ok": 2}


def test_desktop_error_is_the_local_one(cluster: Any) -> None:
    # a worker that dies on its host is the same failure as a local worker's death, with env_id
    config = DesktopConfig(screen=SCREEN, options={"faults": {"crash": 1.0, "crash_mode": "exit", "phases": ["act"]}})
    placement = RayPlacement(group=2, resources={"legato_fake": 1})
    with RayDesktopVectorEnv(2, "fake", config, seed=0, deadlines=DEADLINES, placement=placement) as env:
        before = env.worker_pids

        async def crash() -> DesktopError:
            await env.areset(1, env.tasks[0])
            with pytest.raises(DesktopError) as caught:
                await env.astep(1, "WAIT")
            return caught.value

        error = asyncio.run(crash())
        assert isinstance(error, DesktopCrashed) and error.env_id == 1
        assert "status 70" in str(error) and "status 70" in (error.remote_traceback or "")
        env.reset()  # the replacement started on a host; the other desktop was never touched
        assert env.worker_pids[0] == before[0] and env.worker_pids[1] not in (-1, before[1])


def _held(resource: str) -> float:
    """How much of ``resource`` the live nodes have given out (Ray's own accounting; no dashboard needed)."""
    return float(ray.cluster_resources().get(resource, 0.0) - ray.available_resources().get(resource, 0.0))


def _counts_of(nodes: dict[str, dict[str, int]], node: Any) -> dict[str, int]:
    """The per-node counts (``env.nodes``, ``summary["nodes"]``) of one test node."""
    (counts,) = [c for name, c in nodes.items() if name.endswith(f"node {node.node_id[:12]}")]
    return counts


async def _apoll(condition: Callable[[], bool], limit: float) -> bool:
    end = time.monotonic() + limit
    while not condition():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.05)
    return True


def test_a_lost_node_takes_its_desktops_out_at_once_and_a_joining_node_brings_them_back(cluster: Any) -> None:
    doomed, keeper = (cluster.add_node(**NODE, resources={"legato_gone": 2}) for _ in range(2))
    placement = RayPlacement(group=2, resources={"legato_gone": 1})
    env = RayDesktopVectorEnv(4, "fake", CONFIG, seed=0, deadlines=DEADLINES, placement=placement)
    joined: Any = None
    try:
        env.reset()
        assert Counter(env.worker_nodes) == {doomed.node_id: 2, keeper.node_id: 2}
        lost = [i for i, node in enumerate(env.worker_nodes) if node == doomed.node_id]
        kept = [i for i in range(4) if i not in lost]
        task = env.tasks[0]

        async def while_the_node_is_gone() -> None:
            await env.idle(0)  # the env now watches its desktops from this loop
            # no request in flight on them: Ray's word that the node died takes them out of the pool
            assert await _apoll(lambda: not any(env.available(i) for i in lost), 60), "still in the pool"
            assert all(env.available(i) for i in kept)
            for i in lost:  # no host has room: the request fails at once instead of waiting to start
                with pytest.raises(DesktopCrashed, match="no live node of the Ray cluster has room") as caught:
                    await env.areset(i, task)
                assert caught.value.env_id == i
                assert env.worker_pids[i] == -1
            for i in kept:
                await env.areset(i, task)
                await env.astep(i, "WAIT")

        cluster.remove_node(doomed, allow_graceful=False)
        asyncio.run(while_the_node_is_gone())
        # nothing left behind on the survivor: it holds just its own agent, which hosts just its own two
        assert _poll(lambda: _held("legato_gone") == 2, 30), _held("legato_gone")
        (survivor,) = [h for h in env._hosts.hosts if not h.lost]  # type: ignore[union-attr]
        assert survivor.node_id == keeper.node_id
        assert len(ray.get(survivor.actor.info.remote())["hosted"]) == 2
        joined = cluster.add_node(**NODE, resources={"legato_gone": 2})

        async def after_a_node_joined() -> None:
            await asyncio.wait_for(asyncio.gather(*(env.wait_available(i) for i in lost)), 60)
            for i in lost:
                await env.areset(i, task)
                _, _, _, truncated, _ = await env.astep(i, "WAIT")
                assert not truncated

        asyncio.run(after_a_node_joined())
        assert Counter(env.worker_nodes) == {keeper.node_id: 2, joined.node_id: 2}
        assert _held("legato_gone") == 4
        nodes = env.nodes
        assert _counts_of(nodes, doomed) == {"desktops": 2, "lost": 2}
        assert _counts_of(nodes, keeper) == {"desktops": 2, "lost": 0}
        assert _counts_of(nodes, joined) == {"desktops": 2, "lost": 0}
    finally:
        env.close()
    assert _poll(lambda: _held("legato_gone") == 0, 30)  # closing the env left nothing on any node
    cluster.remove_node(keeper)
    if joined is not None:
        cluster.remove_node(joined)


def _collect_through_a_node_loss(
    cluster: Any,
    server: ReferencePolicyServer,
    run: Path,
    tasks: list[Any],
    *,
    backend: str,
    config: DesktopConfig,
    placement: RayPlacement,
    resource: str,
    group: int,
) -> tuple[dict[str, Any], list[dict[str, Any]], Any, Any, Any]:
    """Collect on 4 desktops over two nodes of two; kill one mid-batch; once every attempt it held ran again
    elsewhere, a node joins. Returns the summary, the records, and the doomed, kept and joined nodes."""
    doomed, keeper = (cluster.add_node(**NODE, resources={resource: 2}) for _ in range(2))
    outcome: dict[str, Any] = {}

    def batch() -> None:
        try:
            outcome["summary"] = collect(
                tasks,
                PolicyConfig(server.url, server.model, version="v1"),
                out=run,
                desktops=4,
                group=group,
                env_retries=1,
                backend=backend,
                desktop=config,
                ray=placement,
            )
        except BaseException as exc:
            outcome["error"] = exc

    def records() -> list[dict[str, Any]]:
        return list(read_record_dicts(run)) if (run / "rollouts.jsonl").exists() else []

    def retried_ran_again() -> bool:
        rows = records()
        retried = {(r["group_id"], r["attempt"]) for r in rows if r["status"] == "retried"}
        done = {(r["group_id"], r["attempt"]) for r in rows if r["status"] in FINAL}
        return bool(retried) and retried <= done

    thread = threading.Thread(target=batch, daemon=True)  # Ray starts nodes from the main thread only
    thread.start()
    joined: Any = None
    try:
        started = _poll(lambda: any(r["status"] in FINAL for r in records()) or not thread.is_alive(), 240)
        assert started, ("no attempt ended", Counter(r["status"] for r in records()), outcome)
        assert thread.is_alive(), outcome
        cluster.remove_node(doomed, allow_graceful=False)
        # the attempts the node held ran again on the node that is left, without waiting for a node to join
        assert _poll(lambda: retried_ran_again() or not thread.is_alive(), 240), Counter(r["status"] for r in records())
        assert thread.is_alive(), "the batch ended before the node joined: give it more attempts"
        joined = cluster.add_node(**NODE, resources={resource: 2})
        thread.join(timeout=600)
        assert not thread.is_alive(), "the batch did not finish"
        assert "error" not in outcome, outcome
        assert _poll(lambda: _held(resource) == 0, 30)  # nothing left on the surviving nodes
        return outcome["summary"], records(), doomed, keeper, joined
    finally:
        for node in (keeper, joined):
            if node is not None:
                cluster.remove_node(node)


def _check_node_loss(summary: dict[str, Any], rows: list[dict[str, Any]], n_attempts: int, *nodes: Any) -> None:
    doomed, keeper, joined = nodes
    finals = Counter((r["group_id"], r["attempt"]) for r in rows if r["status"] in FINAL)
    assert len(finals) == n_attempts and set(finals.values()) == {1}  # every attempt ended exactly once
    assert Counter(r["status"] for r in rows if r["status"] in FINAL) == {"ok": n_attempts}
    assert summary["errors"] == {"policy": 0, "env": 0}
    retried = [r for r in rows if r["status"] == "retried"]
    # the attempts in flight on the killed node, each retried once, as the desktop's death it was: no start
    # deadline waited out on a desktop that had no host
    assert 1 <= len(retried) <= 2, retried
    assert {(r["error"]["kind"], r["error"]["type"]) for r in retried} == {("env", "DesktopCrashed")}, retried
    assert all(r["try"] == 0 for r in retried)
    tries = {(r["group_id"], r["attempt"]): r["try"] for r in rows if r["status"] == "ok"}
    assert all(tries[(r["group_id"], r["attempt"])] == 1 for r in retried)
    assert sum(tries.values()) == len(retried)
    nodes_seen = summary["nodes"]
    assert _counts_of(nodes_seen, doomed) == {"desktops": 2, "lost": 2}
    assert _counts_of(nodes_seen, keeper) == {"desktops": 2, "lost": 0}
    assert _counts_of(nodes_seen, joined) == {"desktops": 2, "lost": 0}  # the pool grew back to 4


def test_collect_survives_a_killed_node_and_uses_a_node_that_joins(
    cluster: Any, server: ReferencePolicyServer, tmp_path: Path
) -> None:
    # Runs last: it kills node "a". Two agents of two desktops (legato_kill 1 each) fill nodes a and b.
    doomed = cluster.nodes_by_name["a"]
    config = DesktopConfig(
        screen=SCREEN,
        options={"latency": {"reset": 0.2, "act": 0.25}},
        timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10),
    )
    tasks = default_tasks(config)[:6]
    run = tmp_path / "run"
    outcome: dict[str, Any] = {}

    def batch() -> None:
        try:
            outcome["summary"] = collect(
                tasks,
                PolicyConfig(server.url, server.model, version="v1"),
                out=run,
                desktops=4,
                group=2,
                env_retries=3,
                backend="fake",
                desktop=config,
                ray=RayPlacement(group=2, resources={"legato_kill": 1}),
            )
        except BaseException as exc:
            outcome["error"] = exc

    # the batch runs in a thread: Ray starts nodes from the main thread only
    thread = threading.Thread(target=batch, daemon=True)
    thread.start()

    def finals() -> int:
        return sum(r["status"] in FINAL for r in read_record_dicts(run)) if (run / "rollouts.jsonl").exists() else 0

    assert _poll(lambda: finals() >= 1 or not thread.is_alive(), 120), "the batch never got going"
    killed_after = finals()
    cluster.remove_node(doomed, allow_graceful=False)
    joined = cluster.add_node(**NODE, resources={"legato_kill": 2})
    thread.join(timeout=300)
    assert not thread.is_alive(), "the batch did not finish"
    assert "error" not in outcome, outcome
    summary = outcome["summary"]
    records = list(read_record_dicts(run))
    finals = Counter((r["group_id"], r["attempt"]) for r in records if r["status"] in FINAL)
    assert len(finals) == 12 and set(finals.values()) == {1}  # every attempt ended exactly once
    statuses = Counter(r["status"] for r in records)
    assert statuses["ok"] == 12, statuses  # nothing lost: the batch completed on the other hosts
    retried = [r for r in records if r["status"] == "retried"]
    assert retried, f"killing a host after {killed_after} attempts ended must fail the ones it held"
    errors = [(r["error"]["type"], r["error"]["message"]) for r in retried]
    assert all(r["error"]["kind"] == "env" for r in retried)
    # the tries on the killed host: DesktopCrashed; a replacement that waited too long for a host to join:
    # DeadlineExceeded (its start deadline), both desktop failures
    assert {t for t, _ in errors} <= {"DesktopCrashed", "DeadlineExceeded"}, errors
    assert any(t == "DesktopCrashed" for t, _ in errors), errors
    lost = f"{socket.gethostname()} (127.0.0.1)"
    assert all(lost in m for t, m in errors if t == "DesktopCrashed"), errors  # each record names the lost host
    by_attempt = {(r["group_id"], r["attempt"]): r["try"] for r in records if r["status"] == "ok"}
    assert sum(by_attempt.values()) == len(retried)  # every retried try was followed by exactly one more
    assert summary["status_counts"]["ok"] == 12
    assert _counts_of(summary["nodes"], joined)["desktops"] > 0, "the node that joined mid-batch got no desktops"


@pytest.mark.desktop
@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool", "xterm")),
    reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool xterm)",
)
def test_collect_on_real_local_desktops_through_a_killed_node(cluster: Any, tmp_path: Path) -> None:
    """The attempts the killed node held are retried on the live desktops at once, a joining node takes its
    share, and the profile shows the same per-node counts (one run on real desktops checks it all)."""
    from legato_gym.backends.local import default_tasks as local_tasks

    config = DesktopConfig(screen=(800, 600))
    tasks = local_tasks(config)
    # a model that ends each attempt at once: every attempt is a real reset and a real grading on its desktop
    brain = ScriptedSolver(tasks=tasks, solution=lambda task, screen: [])
    # the test nodes advertise 1 CPU each: ask for none, and for a resource only these nodes have
    placement = RayPlacement(group=2, cpus=0, memory=0, resources={"legato_lxkill": 1})
    with ReferencePolicyServer(brain=brain) as server:
        summary, rows, *nodes = _collect_through_a_node_loss(
            cluster,
            server,
            tmp_path / "run",
            tasks,
            backend="local",
            config=config,
            placement=placement,
            resource="legato_lxkill",
            group=8,
        )
    _check_node_loss(summary, rows, 8 * len(tasks), *nodes)
    profile = profile_run(tmp_path / "run", plots=False)  # the profile shows the same per-node counts
    assert profile.summary.nodes == summary["nodes"]
    assert len(node_rows(profile)) == 3
