"""A node lost mid-batch: ``legato rl collect`` on a Ray cluster, undisturbed and with one node killed, side by side.

Starts a simulated multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``, all on 127.0.0.1: a
head that hosts no desktops, then per run ``--nodes`` nodes of ``--per-node`` desktops each), a reference policy
server on loopback, and runs the same batch (every task of the backend's suite, ``--group`` attempts each) three
times, each on fresh nodes:

* ``undisturbed``: nothing happens;
* ``killed``: once ``--kill-after`` of the attempts have ended, one node is killed (its raylet and everything
  on it, as ``ray stop`` on that host would) and nothing replaces it;
* ``killed+joined``: the same kill, and a node joins as soon as the attempts it held have ended elsewhere;
* ``killed+spare``: a node joins before the kill (a host's worth of spare room, as a cluster with room to
  spare has); the replacements start there at once.

Per run it reports the batch's wall time, its ratio to the undisturbed run, the final statuses, the ``retried``
tries and their error types, the env errors, and the per-node counts of ``summary.json``.

Run::

    python benchmarks/ray_node_loss.py                      # fake desktops (latency 0.2 s reset, 0.3 s act)
    python benchmarks/ray_node_loss.py --backend local --group 4   # real local desktops (Xvfb, bubblewrap)

Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster

from legato_gym import DesktopConfig, Timeouts
from legato_gym.vector import RayPlacement
from legato_rl.collect import collect
from legato_rl.policy import PolicyConfig
from legato_rl.store import read_record_dicts
from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

FINAL = {"ok", "truncated", "cancelled", "skipped", "surplus", "error"}
NODE: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 * 2**20}


def _records(run: Path) -> list[dict[str, Any]]:
    return list(read_record_dicts(run)) if (run / "rollouts.jsonl").exists() else []


def _until(condition: Any, limit: float) -> bool:
    end = time.monotonic() + limit
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _run(
    cluster: Cluster, mode: str, index: int, args: argparse.Namespace, server: ReferencePolicyServer, tasks: list[Any]
) -> dict[str, Any]:
    resource = f"legato_loss_{index}"
    nodes = [cluster.add_node(**NODE, resources={resource: args.per_node}) for _ in range(args.nodes)]
    config = DesktopConfig(
        screen=(800, 600) if args.backend == "local" else (320, 240),
        options={"latency": {"reset": 0.2, "act": 0.3}} if args.backend == "fake" else {},
        timeouts=Timeouts(reset=300, ready=30, act=30, evaluate=30),
    )
    placement = RayPlacement(group=args.per_node, cpus=0, memory=0, resources={resource: 1})
    run = Path(tempfile.mkdtemp(prefix=f"legato-node-loss-{mode}-"))
    n_attempts = len(tasks) * args.group
    outcome: dict[str, Any] = {}

    def batch() -> None:
        try:
            outcome["summary"] = collect(
                tasks,
                PolicyConfig(server.url, server.model, version="v1"),
                out=run,
                desktops=args.nodes * args.per_node,
                group=args.group,
                env_retries=args.env_retries,
                backend=args.backend,
                desktop=config,
                ray=placement,
            )
        except BaseException as exc:
            outcome["error"] = repr(exc)

    started = time.perf_counter()
    thread = threading.Thread(target=batch, daemon=True)  # Ray starts nodes from the main thread only
    thread.start()
    killed_at = joined_at = None
    if mode != "undisturbed":
        need = max(1, int(args.kill_after * n_attempts))
        _until(lambda: sum(r["status"] in FINAL for r in _records(run)) >= need or not thread.is_alive(), 1800)
        if mode == "killed+spare":  # every desktop is placed by now (the nodes are full): this one stays spare
            nodes.append(cluster.add_node(**NODE, resources={resource: args.per_node}))
        cluster.remove_node(nodes.pop(0), allow_graceful=False)
        killed_at = time.perf_counter() - started
        if mode == "killed+joined":

            def ran_again() -> bool:
                rows = _records(run)
                retried = {(r["group_id"], r["attempt"]) for r in rows if r["status"] == "retried"}
                done = {(r["group_id"], r["attempt"]) for r in rows if r["status"] in FINAL}
                return bool(retried) and retried <= done

            _until(lambda: ran_again() or not thread.is_alive(), 1800)
            nodes.append(cluster.add_node(**NODE, resources={resource: args.per_node}))
            joined_at = time.perf_counter() - started
    thread.join()
    wall = time.perf_counter() - started
    for node in nodes:
        cluster.remove_node(node)
    rows = _records(run)
    retried = [r for r in rows if r["status"] == "retried"]
    summary = outcome.get("summary") or {}
    return {
        "mode": mode,
        "wall_s": round(wall, 2),
        "killed_at_s": None if killed_at is None else round(killed_at, 2),
        "joined_at_s": None if joined_at is None else round(joined_at, 2),
        "attempts": n_attempts,
        "final": dict(Counter(r["status"] for r in rows if r["status"] in FINAL)),
        "retried": len(retried),
        "retried_errors": dict(Counter(r["error"]["type"] for r in retried)),
        "env_errors": (summary.get("errors") or {}).get("env"),
        "nodes": summary.get("nodes"),
        "error": outcome.get("error"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["fake", "local"], default="fake")
    parser.add_argument("--nodes", type=int, default=2, help="nodes hosting desktops in each run")
    parser.add_argument("--per-node", type=int, default=2, help="desktops per node")
    parser.add_argument("--group", type=int, default=4, help="attempts per task")
    parser.add_argument("--env-retries", type=int, default=1)
    parser.add_argument("--kill-after", type=float, default=0.25, help="share of the attempts ended before the kill")
    parser.add_argument("--modes", default="undisturbed,killed,killed+joined,killed+spare")
    parser.add_argument("--json", type=Path, help="append the results as JSON lines")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.backend == "local":
        from legato_gym.backends.local import default_tasks

        tasks = default_tasks(DesktopConfig(screen=(800, 600)))
        brain = ScriptedSolver(tasks=tasks, solution=lambda task, screen: [])  # ends each attempt at once
    else:
        from legato_gym.backends.fake import default_tasks as fake_tasks

        tasks = fake_tasks(DesktopConfig(screen=(320, 240)))
        brain = ScriptedSolver()
    # the simulated cluster stays on 127.0.0.1 (Ray's single-machine switch, named for Windows/macOS)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    health = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "num_cpus": 0, "_system_config": health})
    ray.init(address=cluster.address, log_to_driver=False)
    results = []
    try:
        with ReferencePolicyServer(brain=brain) as server:
            for index, mode in enumerate(args.modes.split(",")):
                result = _run(cluster, mode, index, args, server, tasks)
                results.append(result)
                print(json.dumps(result), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    base = next((r["wall_s"] for r in results if r["mode"] == "undisturbed"), None)
    print(f"\n{args.backend} desktops, {args.nodes} nodes x {args.per_node}, {results[0]['attempts']} attempts")
    print(f"{'mode':<16}{'wall s':>8}{'x undisturbed':>15}{'retried':>9}{'env errors':>12}  final")
    for r in results:
        ratio = f"{r['wall_s'] / base:.2f}" if base else "-"
        print(f"{r['mode']:<16}{r['wall_s']:>8.1f}{ratio:>15}{r['retried']:>9}{r['env_errors']!s:>12}  {r['final']}")
    if args.json:
        with args.json.open("a") as f:
            for r in results:
                f.write(json.dumps({**r, "backend": args.backend, "ratio": r["wall_s"] / base if base else None}))
                f.write("\n")


if __name__ == "__main__":
    main()
