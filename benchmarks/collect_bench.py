"""Benchmarks of `legato rl collect`, each side by side with its baseline in one run.

    python benchmarks/collect_bench.py stragglers    # batch wall time, --oversample 0.25 against 0
    python benchmarks/collect_bench.py overhead      # legato's own CPU per step and desktop utilisation
    python benchmarks/collect_bench.py disk          # bytes per step: content addressing against whole requests
    python benchmarks/collect_bench.py all

Fake desktops (no VM) and the reference policy server (loopback HTTP, vLLM's contract) stand in for the
real things, so what is measured is legato itself. Results print as markdown tables (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from legato_gym import DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_rl.collect import collect
from legato_rl.policy import PolicyConfig
from legato_rl.store import load_request, read_record_dicts
from legato_rl.testing import RandomBrain, ReferencePolicyServer, ScriptedSolver

TIMEOUTS = Timeouts(reset=300, ready=60, act=60, evaluate=60)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def stragglers(repeats: int, desktops: int, group: int) -> str:
    """Heavy-tailed step latency: how long a batch takes with --oversample 0.25 against 0."""
    latency = {"act": {"median": 0.5, "sigma": 1.0, "max": 30.0}, "reset": 0.2}
    spans: dict[float, list[float]] = defaultdict(list)  # first dispatch to last record: the batch's data
    calls: dict[float, list[float]] = defaultdict(list)  # the whole collect() call: start-up and teardown too
    last_counts: dict[float, dict[str, int]] = {}
    with ReferencePolicyServer(brain=ScriptedSolver()) as server, tempfile.TemporaryDirectory() as tmp:
        policy = PolicyConfig(server.url, server.model, version="bench")
        for rep in range(repeats):
            for oversample in (0.0, 0.25):
                config = DesktopConfig(screen=(640, 360), timeouts=TIMEOUTS, options={"latency": latency})
                out = Path(tmp) / f"s{rep}-{oversample}"
                t0 = time.perf_counter()
                summary = collect(default_tasks(config), policy, out=out, desktops=desktops, group=group,
                                  oversample=oversample, backend="fake", desktop=config, seed=rep)  # fmt: skip
                calls[oversample].append(time.perf_counter() - t0)
                records = list(read_record_dicts(out))
                first = min(r["started_at"] for r in records if r["started_at"] is not None)
                spans[oversample].append(max(r["ended_at"] for r in records) - first)
                last_counts[oversample] = summary["status_counts"]
    ratio = statistics.median(spans[0.25]) / statistics.median(spans[0.0])
    lines = [
        f"Stragglers: {len(default_tasks(DesktopConfig()))} fake tasks × group {group} on {desktops} desktops, "
        "action latency lognormal (median 0.5 s, sigma 1.0, capped 30 s), reset 0.2 s; "
        f"{repeats} repeats (seeds 0..{repeats - 1}), medians. *Batch time* runs from the first dispatch to the "
        "last record written (when the batch's data is complete); *collect() call* adds starting and stopping "
        "the desktop workers.",
        "",
        "| oversample | batch time | collect() call | statuses (last repeat) |",
        "|---|---|---|---|",
    ]
    for oversample in (0.0, 0.25):
        statuses = ", ".join(f"{k} {v}" for k, v in last_counts[oversample].items() if v)
        lines.append(
            f"| {oversample} | {statistics.median(spans[oversample]):.2f} s | "
            f"{statistics.median(calls[oversample]):.2f} s | {statuses} |"
        )
    lines += ["", f"**Ratio:** with oversample 0.25 a batch takes {ratio:.2f}× the time it takes with 0."]
    return "\n".join(lines)


def overhead(
    desktops: int, tasks_n: int, group: int, screen: tuple[int, int], brain: str = "scripted", max_steps: int = 15
) -> str:
    """legato's own CPU per policy step and desktop utilisation at many desktops and an instant policy."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "legato_rl.testing.server", "--port", "0", "--brain", brain],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        config = DesktopConfig(screen=screen, timeouts=TIMEOUTS)
        suite = default_tasks(config)
        tasks = [suite[i % len(suite)] for i in range(tasks_n)]
        tasks = [type(t)(f"{t.task_id}-{i}", t.instruction, t.config, t.domain) for i, t in enumerate(tasks)]
        policy = PolicyConfig(url, "legato/reference-policy", version="bench")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            summary = collect(tasks, policy, out=out, desktops=desktops, group=group, backend="fake",
                              desktop=config, max_steps=max_steps)  # fmt: skip
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            records = list(read_record_dicts(out))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    steps = sum(r["n_steps"] for r in records)
    longest = max(r["n_steps"] for r in records)
    actions = sum(len(s["actions"]) for r in records for s in r["steps"])
    # utilisation: a desktop is busy from the start of an attempt to its end
    by_desktop: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        if r["desktop"] is not None:
            by_desktop[r["desktop"]].append((r["started_at"], r["ended_at"]))
    first = min(s for spans in by_desktop.values() for s, _ in spans)
    last = max(e for spans in by_desktop.values() for _, e in spans)
    busy = sum(e - s for spans in by_desktop.values() for s, e in spans)
    utilisation = busy / (len(by_desktop) * (last - first))
    # while work waited: up to the moment the last attempt was handed to a desktop, every desktop should
    # be busy; after it, the batch drains and idle desktops are inherent to any batch
    drained = max(s for spans in by_desktop.values() for s, _ in spans)
    busy_queued = sum(max(0.0, min(e, drained) - s) for spans in by_desktop.values() for s, e in spans)
    utilisation_queued = busy_queued / (len(by_desktop) * (drained - first))
    # idle while work waited: gaps between consecutive attempts on a desktop, before the queue ran dry
    gaps = []
    for spans in by_desktop.values():
        spans.sort()
        gaps += [b[0] - a[1] for a, b in itertools.pairwise(spans)]
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return "\n".join(
        [
            f"legato's own cost: {desktops} fake desktops at {screen[0]}×{screen[1]}, zero desktop latency, the "
            f"reference policy server in its own process ({brain}, instant), --max-steps {max_steps}; "
            f"{len(records)} attempts, {steps} policy steps ({steps / len(records):.1f} per attempt; prompts of up to "
            f"{min(longest, 20)} screenshots), {actions} actions in {wall:.1f} s.",
            "",
            "| figure | value | target |",
            "|---|---|---|",
            f"| driver CPU per policy step (scheduler, harness, HTTP client, store; workers PNG-encode) | "
            f"{1000 * cpu / steps:.2f} ms | < 2 ms |",
            f"| desktop utilisation while attempts were queued (first start to last dispatch) | "
            f"{100 * utilisation_queued:.1f}% | ≥ 95% |",
            f"| desktop utilisation over the whole batch, drain included | {100 * utilisation:.1f}% | |",
            f"| gap between a desktop's attempts (median / max) | "
            f"{1000 * statistics.median(gaps):.1f} ms / {1000 * max(gaps):.1f} ms | |"
            if gaps
            else "| gaps | - | |",
            f"| driver peak RSS | {rss_mb:.0f} MB | |",
            f"| errors | {summary['errors']} | none |",
        ]
    )


def disk(steps_list: list[int], rollouts: int, screen: tuple[int, int]) -> str:
    """Bytes per step for `steps`-step rollouts: content-addressed store against whole requests."""
    lines = [
        f"Disk per step: {rollouts} rollouts at {screen[0]}×{screen[1]}, random policy that never stops early, "
        "--image-max 20. 'whole' is every request body stored as sent (JSON with base64 images).",
        "",
        "| steps per rollout | legato.rollout/v0 (bytes/step) | whole requests (bytes/step) | ratio |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for steps in steps_list:
            config = DesktopConfig(screen=screen, timeouts=TIMEOUTS)
            tasks = default_tasks(config)[:rollouts]
            out = Path(tmp) / f"d{steps}"
            with ReferencePolicyServer(brain=RandomBrain(seed=steps, terminate_prob=0.0)) as server:
                policy = PolicyConfig(server.url, server.model, version="bench")
                collect(tasks, policy, out=out, desktops=min(4, rollouts), group=1, max_steps=steps,
                        backend="fake", desktop=config)  # fmt: skip
            records = list(read_record_dicts(out))
            n = sum(r["n_steps"] for r in records)
            ours = _dir_bytes(out)
            whole = sum(len(json.dumps(load_request(out, s["request"])).encode()) for r in records for s in r["steps"])
            whole += (out / "rollouts.jsonl").stat().st_size  # the records themselves, minus nothing
            lines.append(f"| {steps} | {ours / n:,.0f} | {whole / n:,.0f} | {whole / ours:.1f}× |")
            shutil.rmtree(out)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=["stragglers", "overhead", "disk", "all"])
    parser.add_argument("--desktops", type=int, default=256, help="overhead: desktops")
    parser.add_argument("--tasks", type=int, default=256, help="overhead: tasks (one group each)")
    parser.add_argument("--brain", choices=["scripted", "random"], default="scripted",
                        help="overhead: scripted (~3 steps per attempt) or random (long attempts)")  # fmt: skip
    parser.add_argument("--max-steps", type=int, default=15, help="overhead: policy calls per attempt")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sections = []
    if args.which in ("stragglers", "all"):
        sections.append(stragglers(repeats=1 if args.quick else 3, desktops=55, group=4))
    if args.which in ("overhead", "all"):
        desktops = 8 if args.quick else args.desktops
        tasks_n = 16 if args.quick else args.tasks
        sections.append(overhead(desktops, tasks_n, 4, (1920, 1080), args.brain, args.max_steps))
    if args.which in ("disk", "all"):
        sections.append(disk([5, 15] if args.quick else [5, 10, 15], 4, (1920, 1080)))
    print("\n\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
