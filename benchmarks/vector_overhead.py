"""Per-step overhead of the desktop vector env against in-process DesktopEnv, and memory per worker.

Zero-latency fake desktops, so what is measured is legato's own cost: worker round trip, screenshot transport
(shared memory or framed bytes) and batching. Run::

    python benchmarks/vector_overhead.py                      # 1, 8, 64, 256 desktops at 1920x1080
    python benchmarks/vector_overhead.py --sizes 1 8 --out /tmp/vector.md

It prints a table and writes it as a markdown section (``--out``) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from legato_gym.backends.fake import default_tasks
from legato_gym.config import DesktopConfig
from legato_gym.env import DesktopEnv
from legato_gym.vector import DesktopVectorEnv

BIG = 10**6  # max_steps: never truncate during the benchmark
INPROC_MAX = 32


def per_step(run: Callable[[], int], repeats: int) -> float:
    """Median seconds per desktop-step of ``run`` (which returns how many desktop-steps it made)."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        count = run()
        samples.append((time.perf_counter() - start) / count)
    return statistics.median(samples)


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in KiB, from /proc/<pid>/smaps_rollup."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in ("Rss:", "Pss:"):
            values[parts[0]] = int(parts[1])
    return values["Rss:"], values["Pss:"]


def bench_in_process(n: int, config: DesktopConfig, steps: int) -> float:
    """Per-step cost of stepping ``n`` in-process envs one by one (it does not depend on ``n``, so at most
    :data:`INPROC_MAX` envs are built: 256 of them would hold 8 GB of screenshots in one process)."""
    tasks = default_tasks(config)
    steps = steps * n // min(n, INPROC_MAX)
    n = min(n, INPROC_MAX)
    envs = [DesktopEnv("fake", config, max_steps=BIG) for _ in range(n)]
    try:
        for i, env in enumerate(envs):
            env.reset(options={"task": tasks[i % len(tasks)]})

        def run() -> int:
            for _ in range(steps):
                for env in envs:
                    env.step("WAIT")
            return steps * n

        run()  # warm up
        return per_step(run, 3)
    finally:
        for env in envs:
            env.close()
        envs.clear()
        gc.collect()


def bench_vector(n: int, config: DesktopConfig, steps: int, screenshots: str) -> dict[str, float]:
    tasks = default_tasks(config)
    started = time.perf_counter()
    env = DesktopVectorEnv(n, "fake", config, max_steps=BIG, screenshots=screenshots)  # type: ignore[arg-type]
    start_s = time.perf_counter() - started
    try:
        env.reset(options={"tasks": {i: tasks[i % len(tasks)] for i in range(n)}})

        def lockstep() -> int:
            for _ in range(steps):
                _, _, _, _, info = env.step(["WAIT"] * n)
                if "error" in info:
                    raise RuntimeError(f"desktop errors: {info['error'][info['_error']]}")
            return steps * n

        def pool() -> int:  # EnvPool style: keep every desktop busy, take batches of n/4
            done, in_flight = 0, n
            env.send(["WAIT"] * n)
            while in_flight:
                _, _, _, _, info = env.recv(min_results=max(1, min(in_flight, n // 4)))
                if "error" in info:
                    raise RuntimeError(f"desktop errors: {info['error'][info['_error']]}")
                done += len(info["env_id"])
                in_flight -= len(info["env_id"])
                if done + in_flight < steps * n:
                    env.send(["WAIT"] * len(info["env_id"]), env_ids=info["env_id"])
                    in_flight += len(info["env_id"])
            return done

        lockstep()
        result = {"start_s": start_s, "step": per_step(lockstep, 3), "pool": per_step(pool, 3)}
        mem = [memory_kib(pid) for pid in env.worker_pids]
        result["rss_mib"] = statistics.mean(r for r, _ in mem) / 1024
        result["pss_mib"] = statistics.mean(p for _, p in mem) / 1024
        result["parent_rss_mib"] = memory_kib(os.getpid())[0] / 1024
        return result
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--screen", type=int, nargs=2, default=[1920, 1080], metavar=("W", "H"))
    parser.add_argument("--out", type=Path, help="write the markdown section here")
    args = parser.parse_args()
    config = DesktopConfig(screen=(args.screen[0], args.screen[1]))
    rows = []
    for n in args.sizes:
        steps = max(2, 240 // n)
        inproc = bench_in_process(n, config, steps)
        shm = bench_vector(n, config, steps, "shm")
        blob = bench_vector(n, config, steps, "blob") if n <= 8 else None
        rows.append((n, inproc, shm, blob))
        print(f"n={n} done", flush=True)

    ms = 1000.0
    lines = [
        "## Vector env overhead (`benchmarks/vector_overhead.py`)",
        "",
        f"Zero-latency fake desktops, {args.screen[0]}x{args.screen[1]} screenshots, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}. Times are milliseconds per desktop-step (median of 3 runs); "
        "*overhead* is the vector env's lock-step `step()` minus the in-process `DesktopEnv.step()`. "
        "`recv` is the EnvPool loop (`send` everything, `recv(min_results=n/4)`, resend). "
        "Memory is the mean per worker process (PSS shares the interpreter's pages fairly); the parent holds "
        "one shared 1920x1080 buffer per worker and the batches. The in-process baseline steps at most "
        f"{INPROC_MAX} envs (its per-step cost does not depend on their number).",
        "",
        "| desktops | in-process | vector step (shm) | overhead | vector recv (shm) | vector step (blob) "
        "| start all workers (s) | worker RSS (MiB) | worker PSS (MiB) | parent RSS (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, inproc, shm, blob in rows:
        blob_cell = f"{blob['step'] * ms:.2f}" if blob else "–"
        lines.append(
            f"| {n} | {inproc * ms:.2f} | {shm['step'] * ms:.2f} | {(shm['step'] - inproc) * ms:+.2f} "
            f"| {shm['pool'] * ms:.2f} | {blob_cell} | {shm['start_s']:.1f} | {shm['rss_mib']:.0f} "
            f"| {shm['pss_mib']:.0f} | {shm['parent_rss_mib']:.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
