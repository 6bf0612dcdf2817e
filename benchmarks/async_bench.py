"""Continuous collection against batch-by-batch ``collect``, side by side in one run, with a simulated trainer.

    python benchmarks/async_bench.py                    # 8 desktops, groups of 4, 4 groups a batch, 4 updates
    python benchmarks/async_bench.py --updates 6 --desktops 8
    python benchmarks/async_bench.py --update-scale 1     # an update as long as a batch: the trainer the bottleneck

Fake desktops with real-ish latencies (reset 0.5 s, ``--reset-s``, actions lognormal around 0.4 s, model calls
0.3 s on the reference policy server) stand in for OSWorld VMs. The trainer takes one batch of groups per update,
then loads a new version. Its update is, by default, *balanced*: as long as the desktops' busy time per batch (the
batch-by-batch run's busy desktop-seconds per batch, over the desktops), so that desktops kept busy make exactly
one batch per update; ``--update-scale s`` makes it ``s`` times one batch-by-batch batch's span instead (its first
dispatch to its last record, measured on the first batch: 1 is the issue's literal "an update as long as a batch").

* **batch by batch**: ``collect`` one batch on version ``step-u``, update, ``collect`` the next on
  ``step-u+1``, ...: the desktops wait during every update (and each ``collect`` starts its desktops); the
  updates are added to the collects' wall time (nothing runs while the desktops wait).
* **continuous**: one :class:`~legato_rl.follow.Follower`; the trainer takes a batch of groups as they
  complete, updates while the desktops go on, loads the version, takes the next batch. Run twice by default: with
  reset ahead (the default: a desktop with nothing that may start resets an attempt ahead and holds it before
  its first policy call until its turn) and without (``--no-reset-ahead``: it waits unreset).

Reported: rollouts per hour that the trainer trained on (completed attempts of the groups it took, over the
wall time until its last update ended), desktop utilisation (busy desktop-seconds over desktops x that wall
time; a try's time held reset ahead is not busy), and the staleness of the groups it took (versions between a
group's oldest step and the version loaded when the trainer took it), and of the steps it trained on.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_rl.collect import collect
from legato_rl.follow import Follower
from legato_rl.policy import PolicyConfig
from legato_rl.store import read_records
from legato_rl.summary import busy_spans
from legato_rl.testing import Latency, ReferencePolicyServer, ScriptedSolver

TIMEOUTS = Timeouts(reset=300, ready=60, act=60, evaluate=60)


def _latency(args: argparse.Namespace) -> dict[str, Any]:
    """The fake desktops' latencies: a reset of ``--reset-s`` (0.5 s by default), actions around 0.4 s."""
    return {"reset": args.reset_s, "act": {"median": 0.4, "sigma": 0.5, "max": 5.0}}


def _busy(run: Path, since: float, until: float, desktop: int | None = None) -> float:
    """Desktop-seconds spent in attempts between ``since`` and ``until`` (on ``desktop``, or on all), less the
    time a try held its desktop reset ahead."""
    return sum(
        max(0.0, min(b, until) - max(a, since))
        for r in read_records(run)
        if desktop is None or r.desktop == desktop
        for a, b in busy_spans(r)
    )


def _held(run: Path) -> float:
    """Desktop-seconds the tries held their desktops reset ahead, before their turn."""
    return sum(r.timing.held_s for r in read_records(run))


def batch_by_batch(policy: PolicyConfig, tasks: list[Any], root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``collect`` one batch per update; the update is added to the wall time (the desktops wait through it).

    The update's length is derived from this run: by default the *balanced* trainer, whose update is as long as
    the desktops' busy time per batch (the batches' busy desktop-seconds / desktops / updates: the desktops, kept
    busy, make one batch per update); with ``--update-scale s``, ``s`` x the first batch's span (its first dispatch
    to its last record; 1: an update as long as a batch-by-batch batch).
    """
    config = DesktopConfig(screen=(640, 360), timeouts=TIMEOUTS, options={"latency": _latency(args)})
    per_batch = args.batch_groups
    collecting = completed = busy = 0.0
    span: float | None = None
    batch_busy: list[float] = []  # each batch's busy desktop-seconds
    for u in range(args.updates):
        batch = [tasks[(u * per_batch + i) % len(tasks)] for i in range(per_batch)]
        out = root / f"batch-{u}"
        started = time.time()
        summary = collect(batch, replace(policy, version=f"step-{u}"), out=out,
                          desktops=args.desktops, group=args.group, backend="fake", desktop=config, seed=u)  # fmt: skip
        collecting += time.time() - started
        if span is None:  # the first batch's span: its first dispatch to its last record
            records = list(read_records(out))
            span = max(float(r.ended_at or started) for r in records) - min(
                float(r.started_at or started) for r in records
            )
        completed += sum(summary["status_counts"][s] for s in ("ok", "truncated"))
        batch_busy.append(_busy(out, started, float("inf")))
        busy += batch_busy[-1]
    assert span is not None
    balanced = busy / args.desktops / args.updates
    update_s = balanced if args.update_scale is None else span * args.update_scale
    wall = collecting + args.updates * update_s  # each update after its batch, the desktops waiting
    return {"wall_s": wall, "completed": completed, "rollouts_per_hour": completed / wall * 3600,
            "utilisation": busy / (args.desktops * wall), "update_s": update_s, "staleness": (0.0, 0),
            "busy_per_rollout": busy / completed, "span_s": span, "balanced_s": balanced,
            "batch_busy": batch_busy}  # fmt: skip


def continuous(
    policy: PolicyConfig,
    tasks: list[Any],
    root: Path,
    args: argparse.Namespace,
    update_s: float,
    desktops: int,
    reset_ahead: bool = True,
) -> dict[str, Any]:
    config = DesktopConfig(screen=(640, 360), timeouts=TIMEOUTS, options={"latency": _latency(args)})
    out = root / ("continuous" if reset_ahead else "continuous-no-reset-ahead")
    max_ready = args.max_ready or args.batch_groups

    async def trainer() -> dict[str, Any]:
        follower = Follower(
            tasks, replace(policy, version="step-0"), out=out,
            desktops=desktops, group=args.group, backend="fake", desktop=config,
            max_ready=max_ready, max_staleness=args.max_staleness, partial=args.partial, reset_ahead=reset_ahead,
        )  # fmt: skip
        t0 = time.time()
        staleness: list[int] = []
        step_staleness: list[int] = []  # per step: versions between the step's and the trainer's
        completed = 0
        updating = False  # what the trainer does now: updating, or waiting for groups
        samples: list[tuple[float, int, int, int, bool, bool, int]] = []

        async def sample() -> None:  # where the desktops sit idle: the scheduler's state every 20 ms
            collector = follower._collector
            book = collector.book
            while True:
                paused = bool(getattr(book, "paused", False))
                slots = getattr(book, "open_slots", None)  # groups that may be open now (the opening rule)
                samples.append((time.time(), len(collector._running), len(book._unfinished),
                                book.pending, updating, paused, max_ready if slots is None else slots))  # fmt: skip
                await asyncio.sleep(0.02)

        async with follower:
            sampler = asyncio.ensure_future(sample())
            for u in range(args.updates):
                for _ in range(args.batch_groups):
                    group = await follower.next_group()
                    staleness.append(group.staleness)
                    completed += len(group.completed)
                    step_staleness += [
                        u - int(str(step.model.policy_version).removeprefix("step-"))
                        for record in group.completed
                        for step in record.steps
                    ]
                updating = True
                await asyncio.sleep(update_s)  # the simulated update: the desktops go on
                follower.set_version(f"step-{u + 1}")
                updating = False
            wall = time.time() - t0
            sampler.cancel()
            summary = await follower.stop()
        return {"wall_s": wall, "completed": completed, "rollouts_per_hour": completed / wall * 3600,
                "utilisation": _busy(out, t0, t0 + wall) / (desktops * wall), "desktops": desktops,
                "staleness": (sum(staleness) / len(staleness), max(staleness)), "summary": summary,
                "step_staleness": sum(step_staleness) / len(step_staleness),
                "idle": _idle(samples, desktops, t0 + wall), "held_s": _held(out),
                "busy_per_rollout": _busy(out, t0, t0 + wall) / completed,
                "per_desktop": [_busy(out, t0, t0 + wall, d) / wall for d in range(desktops)]}  # fmt: skip

    return asyncio.run(trainer())


def _sized(cont: dict[str, Any], args: argparse.Namespace) -> int:
    """The desktops that keep up with the trainer, as the continuous run's summary says (``desktops_to_keep_up``:
    the desktops busy on average, rounded up), or all of them when the trainer never held them back."""
    return int(cont["summary"]["follow"]["desktops_to_keep_up"] or args.desktops)


def _idle(samples: list[tuple[float, int, int, int, bool, bool, int]], desktops: int, end: float) -> dict[str, float]:
    """Idle desktop-seconds by what held them (from the sampled scheduler state), and the trainer's waits."""
    idle: dict[str, float] = {}
    started = False  # an attempt has run: before that the desktops are starting
    for (t, running, unfinished, pending, updating, paused, slots), (t_next, *_) in zip(
        samples, [*samples[1:], (end,)], strict=True
    ):
        dt = min(t_next, end) - t
        if dt <= 0:
            continue
        trainer = "trainer updating" if updating else "trainer waiting for groups"
        idle[trainer + ": wall s"] = idle.get(trainer + ": wall s", 0.0) + dt
        free = max(0, desktops - running) * dt
        started = started or running > 0
        if not started:
            why = "the desktops starting (before the first attempt)"
        elif paused:
            why = "queue full (max_ready waiting)"
        elif pending == 0 and unfinished >= slots:
            why = "no attempt queued, no group may open (open = max_ready - waiting, + 1 while the trainer asks)"
        elif pending == 0:
            why = "no attempt queued"
        else:
            why = "attempts queued (dispatch, desktop start)"
        key = f"{trainer}: {why}"
        idle[key] = idle.get(key, 0.0) + free
    return idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--desktops", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--batch-groups", type=int, default=4, help="groups per batch (per update)")
    parser.add_argument("--max-ready", type=int, default=None, help="default: --batch-groups")
    parser.add_argument("--max-staleness", type=int, default=None)
    parser.add_argument("--partial", choices=("continue", "restart"), default="continue")
    parser.add_argument(
        "--update-scale", type=float, default=None,
        help="the update's length in batch-by-batch batches (1: an update as long as one batch's span, the trainer "
        "the bottleneck). Default: the balanced trainer, whose update is as long as the desktops' busy time per "
        "batch (the batch-by-batch run's busy desktop-seconds per batch / desktops)",
    )  # fmt: skip
    parser.add_argument(
        "--reset-s", type=float, default=0.5,
        help="the fake desktops' reset, seconds (OSWorld's VMs: tens of seconds of an attempt of a few minutes)",
    )  # fmt: skip
    parser.add_argument(
        "--reset-ahead", choices=("both", "on", "off"), default="both",
        help="continuous collection with reset ahead (on, --follow's default), without (off), or both side by side",
    )  # fmt: skip
    parser.add_argument(
        "--sized", action="store_true",
        help="also run continuous collection on a pool sized to the trainer, as the first continuous run's summary "
        "says (desktops_to_keep_up)",
    )  # fmt: skip
    args = parser.parse_args()
    with (
        ReferencePolicyServer(brain=ScriptedSolver(), latency=Latency(fixed=0.3)) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        policy = PolicyConfig(server.url, server.model)
        tasks = list(default_tasks(DesktopConfig(screen=(640, 360))))
        base = batch_by_batch(policy, tasks, Path(tmp), args)
        runs = []
        for ahead in {"both": (True, False), "on": (True,), "off": (False,)}[args.reset_ahead]:
            name = "continuous (--follow)" if ahead else "continuous, --no-reset-ahead"
            runs.append((name, continuous(policy, tasks, Path(tmp), args, base["update_s"], args.desktops, ahead)))
        cont = runs[0][1]
        sized = None
        if args.sized:
            sized = continuous(policy, tasks, Path(tmp) / "sized", args, base["update_s"], _sized(cont, args))
    length = (
        f"balanced: the busy desktop-s per batch / desktops; a batch's span is {base['span_s']:.1f} s"
        if args.update_scale is None
        else f"{args.update_scale:g} x a batch's span of {base['span_s']:.1f} s; balanced would be "
        f"{base['balanced_s']:.1f} s"
    )
    print(f"desktops {args.desktops}, group {args.group}, {args.batch_groups} groups a batch, {args.updates} "
          f"updates of {base['update_s']:.2f} s ({length}), reset {args.reset_s:g} s, partial {args.partial}, "
          f"max_ready {args.max_ready or args.batch_groups}, max_staleness {args.max_staleness}")  # fmt: skip
    print("| | rollouts/hour | desktop utilisation | wall s | staleness mean / max |")
    print("|---|---|---|---|---|")
    rows = [("batch-by-batch collect", base), *runs]
    if sized is not None:
        rows.append((f"continuous, {sized['desktops']} desktops (sized to the trainer)", sized))
    for name, r in rows:
        print(f"| {name} | {r['rollouts_per_hour']:.0f} | {100 * r['utilisation']:.1f}% | {r['wall_s']:.1f} | "
              f"{r['staleness'][0]:.2f} / {r['staleness'][1]} |")  # fmt: skip
    for name, r in rows[1:]:
        print(f"{name}: {r['rollouts_per_hour'] / base['rollouts_per_hour']:.2f}x rollouts per hour; mean "
              f"staleness per step (trained on): {r['step_staleness']:.2f}")  # fmt: skip
    # The trainer takes one batch per update at most: in a steady state the desktops can be busy no more than that
    # batch's desktop time over the update's desktop time, whatever the collector does. More desktop time goes to
    # groups the trainer takes later (staleness above 1) or never.
    per_update = args.batch_groups * args.group * base["busy_per_rollout"]  # as batches spend it: nothing untrained
    update_s = base["update_s"]
    bound = min(1.0, per_update / (update_s * args.desktops))
    print(f"busy desktop-s per rollout trained on: batch {base['busy_per_rollout']:.2f}, continuous "
          f"{cont['busy_per_rollout']:.2f}; utilisation bound while the trainer is the bottleneck (one batch of "
          f"{args.batch_groups * args.group} rollouts per {update_s:.1f} s update): {100 * bound:.1f}%")  # fmt: skip
    spread = base["batch_busy"]
    print(f"busy desktop-s per batch-by-batch batch (its tasks): min {min(spread):.1f}, mean "
          f"{sum(spread) / len(spread):.1f}, max {max(spread):.1f}")  # fmt: skip
    for name, r in rows[1:]:
        print(f"{name}, each desktop busy: " + ", ".join(f"{100 * u:.0f}%" for u in r["per_desktop"]))
        print(f"{name}, idle desktop-seconds by what held the desktops:")
        for key, value in sorted(r["idle"].items()):
            print(f"  {key}: {value:.1f}")
        print(f"  tries holding their desktops reset ahead (in a try, not busy): {r['held_s']:.1f}")
        print(f"{name}, summary.follow: {r['summary']['follow']}")


if __name__ == "__main__":
    main()
