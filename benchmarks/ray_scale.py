"""Desktops on a Ray cluster at scale: the driver's CPU per step, steps per second, bytes on the wire.

Starts a simulated multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head that hosts
no desktops and ``--nodes`` nodes advertising ``legato_fake``), opens a
:class:`~legato_gym.vector.ray_env.RayDesktopVectorEnv` of zero-latency fake desktops on it, and drives every
desktop the way ``legato rl collect`` does: one asyncio task per desktop awaiting ``astep`` in a loop. It
reports, per run:

* ``steps/s`` over the measuring window, and the driver's CPU seconds per step (``time.process_time`` of
  the driver process: the env, asyncio, and Ray's own driver threads);
* the whole machine's CPU use in the window (``/proc/stat``), to tell a saturated driver from a saturated
  machine (on one machine the simulated hosts share the driver's cores);
* bytes per step: the encoded screenshot and reply payload the driver received, and all loopback traffic
  (``/proc/net/dev`` ``lo``: requests, replies, Ray's own control traffic) divided by steps;
* memory: the host agents' and workers' proportional set size (``/proc/PID/smaps_rollup``).

Run::

    python benchmarks/ray_scale.py --desktops 1000 --nodes 4 --hosting inproc
    python benchmarks/ray_scale.py --desktops 128 --nodes 4 --hosting process
    python benchmarks/ray_scale.py --desktops 64 --nodes 2 --hosting process --screen 1920x1080 --png
    python benchmarks/ray_scale.py --desktops 8 --nodes 2 --hosting process --screen 1920x1080 --png --pixels eager

``--png`` drives the desktops as collect does (``png=True, copy=False``, reading ``info["screenshot_png"]``);
``--pixels eager`` decodes every PNG on the driver as well (the behaviour before ``pixels="lazy"``), the
default ``lazy`` only when read, which collect never does.

Results and the cost model are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from pathlib import Path

import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster

from legato_gym import DesktopConfig
from legato_gym.vector import Deadlines, RayDesktopVectorEnv, RayPlacement


def _loopback_bytes() -> int:
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            fields = rest.split()
            return int(fields[0]) + int(fields[8])  # received + sent (each byte counted twice on lo)
    return 0


def _cpu_busy() -> tuple[float, float]:
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _pss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


async def _drive(env: RayDesktopVectorEnv, seconds: float, warmup: float) -> dict[str, float]:
    stop = False
    steps = 0

    async def desktop(env_id: int) -> None:
        nonlocal steps
        while not stop:
            await env.astep(env_id, "WAIT")
            steps += 1

    tasks = [asyncio.create_task(desktop(i)) for i in range(env.num_envs)]
    await asyncio.sleep(warmup)  # a benchmark's measuring window, not a wait on a condition
    s0, c0, b0, w0, (busy0, total0) = steps, time.process_time(), env.bytes_received, _loopback_bytes(), _cpu_busy()
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    s1, c1, b1, w1, (busy1, total1) = steps, time.process_time(), env.bytes_received, _loopback_bytes(), _cpu_busy()
    t1 = time.perf_counter()
    stop = True
    await asyncio.gather(*tasks)
    n = max(1, s1 - s0)
    return {
        "steps": n,
        "steps_per_s": n / (t1 - t0),
        "driver_cpu_ms_per_step": 1e3 * (c1 - c0) / n,
        "driver_cpu_cores": (c1 - c0) / (t1 - t0),
        "machine_cpu_busy": (busy1 - busy0) / max(1.0, total1 - total0),
        "payload_bytes_per_step": (b1 - b0) / n,
        "loopback_bytes_per_step": (w1 - w0) / 2 / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--desktops", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=4, help="simulated Ray nodes hosting desktops")
    parser.add_argument("--group", type=int, default=0, help="desktops per host agent (default: one per node)")
    parser.add_argument("--hosting", choices=["inproc", "process"], default="inproc")
    parser.add_argument("--codec", choices=["auto", "zlib", "png", "raw"], default="auto")
    parser.add_argument("--png", action="store_true", help="ask for PNG screenshots too (as collect does)")
    parser.add_argument("--pixels", choices=["lazy", "eager"], default="lazy", help="when --png: decode PNGs when")
    parser.add_argument("--screen", default="200x150", help="WxH; the smallest that fits every fake task")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--json", type=Path, help="append the result as one JSON line")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    width, height = (int(v) for v in args.screen.lower().split("x"))
    group = args.group or -(-args.desktops // args.nodes)

    # the simulated cluster stays on 127.0.0.1 (Ray's single-machine switch, named for Windows/macOS)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    t_start = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 100 * 2**20})
    for _ in range(args.nodes):
        cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20, resources={"legato_fake": group})
    ray.init(address=cluster.address, log_to_driver=False)
    t_cluster = time.perf_counter() - t_start
    try:
        placement = RayPlacement(group=group, resources={"legato_fake": 1}, hosting=args.hosting, codec=args.codec)
        deadlines = Deadlines(start=1800, reset=600, step=600, truncate=600, call=600, close=60)
        t0 = time.perf_counter()
        env = RayDesktopVectorEnv(
            args.desktops,
            "fake",
            DesktopConfig(screen=(width, height)),
            seed=0,
            max_steps=10**9,
            deadlines=deadlines,
            placement=placement,
            png=args.png,
            copy=not args.png,
            pixels=args.pixels,
        )
        t_open = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            env.reset()
            t_reset = time.perf_counter() - t0
            result = asyncio.run(_drive(env, args.seconds, args.warmup))
            assert env._hosts is not None
            agent_pids = ray.get([h.actor.info.remote() for h in env._hosts.hosts])
            agents_mb = sum(_pss_mb(a["pid"]) for a in agent_pids)
            pids = set(env.worker_pids) if args.hosting == "process" else set()
            workers_mb = sum(_pss_mb(pid) for pid in pids if pid > 0)
            driver_mb = _pss_mb(os.getpid())
        finally:
            env.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
    result.update(
        desktops=args.desktops,
        nodes=args.nodes,
        agents=len(agent_pids),
        hosting=args.hosting,
        codec=args.codec,
        png=args.png,
        pixels=args.pixels,
        screen=f"{width}x{height}",
        cluster_start_s=t_cluster,
        open_s=t_open,
        reset_all_s=t_reset,
        agents_pss_mb=agents_mb,
        workers_pss_mb=workers_mb,
        pss_mb_per_desktop=(agents_mb + workers_mb) / args.desktops,
        driver_pss_mb=driver_mb,
    )
    print(json.dumps(result, indent=2))
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
