"""Fault injection: every fault legato meets, injected N times, and what the records say about it.

Each row is one kind of fault, injected into a real ``collect`` on fake desktops against the reference policy
server on loopback: hostile or broken replies, a server that fails, hangs or goes away, and desktop workers
that die in every phase of an attempt. For each it counts the faults injected, the tries recorded as what
they were (docs/reliability.md), the batches that crashed, and the export rows that came from attempts that
did not complete (which must be 0).

    python benchmarks/fault_injection.py            # the table, in Markdown (docs/reliability.md)
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.fake import FAULT_PHASES, default_tasks
from legato_rl.collect import collect
from legato_rl.errors import PolicyUnavailable
from legato_rl.export import export_steps
from legato_rl.policy import Limits, PolicyConfig
from legato_rl.store import read_record_dicts
from legato_rl.testing import Faults, HitTasks, ReferencePolicyServer, ScriptedSolver, tally
from legato_rl.testing.faults import KillDesktopOnCalls

SCREEN = (320, 240)
COMPLETED = {"ok", "truncated"}


@dataclass
class Row:
    fault: str
    injected: int = 0  # faulted requests, or deaths
    hit: int = 0  # tries the faults struck
    recorded_right: int = 0  # of those, recorded as what happened
    batches: int = 0
    crashed: int = 0
    bad_rows: int = 0
    lost_or_duplicated: int = 0


def _config(**options: Any) -> DesktopConfig:
    return DesktopConfig(screen=SCREEN, options=options, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))


def _export_check(run: Path, row: Row, n_attempts: int) -> None:
    records = list(read_record_dicts(run))
    status_of = {r["rollout_id"]: r["status"] for r in records}
    out = run.parent / f"{run.name}.jsonl"
    export_steps(run, out)
    for line in out.read_text().splitlines():
        row.bad_rows += status_of.get(json.loads(line)["rollout_id"]) not in COMPLETED
    finals = Counter((r["group_id"], r["attempt"]) for r in records if r["status"] != "retried")
    row.lost_or_duplicated += abs(n_attempts - len(finals)) + sum(c - 1 for c in finals.values())


def _batch(row: Row, tasks: list[Task], policy: PolicyConfig, run: Path, **kw: Any) -> PolicyUnavailable | None:
    """Collect one batch; a crash is counted, the documented stop for an unusable server is returned."""
    row.batches += 1
    try:
        _collect(tasks, policy, run, **kw)
    except PolicyUnavailable as exc:
        return exc
    except Exception:  # a crash of the batch is what this counts
        logging.getLogger(__name__).exception("batch crashed")
        row.crashed += 1
    return None


def reply_faults(tmp: Path) -> Iterator[Row]:
    """Hostile and broken replies on the calls of 2 of 6 tasks (group 2: 4 attempts hit per kind)."""
    cases: list[tuple[str, frozenset[int] | None, dict[str, Any], dict[str, Any]]] = [
        ("surrogate", frozenset({0}), {}, {"retries": 2}),
        ("deep", frozenset({0}), {}, {"retries": 2}),
        ("huge", frozenset({0}), {}, {"retries": 2}),
        ("deep-tool-call", frozenset({0}), {}, {}),
        ("malformed", None, {}, {"retries": 1}),
        ("500", None, {}, {"retries": 1}),
        ("429", None, {}, {"retries": 1}),
        ("half", None, {}, {"retries": 1}),
        ("drop", None, {}, {"retries": 1}),
        ("hang", None, {"hang_seconds": 60.0}, {"retries": 1, "step_timeout": 1.0}),
    ]
    config = _config()
    tasks = default_tasks(config)[:6]
    hit = tasks[:2]
    for kind, steps, faults, policy in cases:
        row = Row(f"reply: {kind}")
        plan = HitTasks(kind, frozenset(t.instruction for t in hit), steps=steps)
        run = tmp / f"reply-{kind}"
        with ReferencePolicyServer(brain=ScriptedSolver(), faults=Faults(plan=plan, **faults)) as server:
            _batch(row, tasks, PolicyConfig(server.url, server.model, limits=Limits(**policy)), run)
            row.injected = server.stats.faults[kind]
        figures = tally(read_record_dicts(run), plan, task_ids={t.task_id for t in hit})
        row.hit = figures.hit
        row.recorded_right = figures.as_documented if figures.others_ok == figures.others else 0
        _export_check(run, row, n_attempts=12)
        yield row


def _collect(tasks: list[Task], policy: PolicyConfig, run: Path, **kw: Any) -> None:
    options: dict[str, Any] = {"desktops": 2, "group": 2, "backend": "fake", "desktop": _config(), **kw}
    collect(tasks, policy, out=run, **options)


class _Deaths(logging.Handler):
    """Counts the worker deaths the vector env saw (an independent count of the faults injected)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "died (exit status" in record.getMessage()


def desktop_deaths(tmp: Path) -> Iterator[Row]:
    """Desktop workers that die (their process exits) in each phase, and while the attempt waits on the model."""
    env_log = logging.getLogger("legato_gym.vector.pool")
    env_log.setLevel(logging.WARNING)  # the deaths are logged as warnings
    for phase in FAULT_PHASES:
        row = Row(f"desktop dies in {phase}")
        rate = 0.1 if phase in ("act", "observe") else 0.3
        config = _config(faults={"crash": rate, "crash_mode": "exit", "phases": [phase]})
        tasks = default_tasks(config)[:6]
        deaths = _Deaths()
        env_log.addHandler(deaths)
        run = tmp / f"death-{phase}"
        try:
            with ReferencePolicyServer(brain=ScriptedSolver()) as server:
                policy = PolicyConfig(server.url, server.model)
                _batch(row, tasks, policy, run, env_retries=50, desktop=config, seed=5)
        finally:
            env_log.removeHandler(deaths)
        row.injected = row.hit = deaths.count
        records = list(read_record_dicts(run))
        row.recorded_right = sum(
            r["status"] == "retried" and r["error"]["type"] == "DesktopCrashed" and r["error"]["kind"] == "env"
            for r in records
        )
        _export_check(run, row, n_attempts=12)
        yield row
    row = Row("desktop dies while its attempt waits on the model")
    brain = KillDesktopOnCalls(ScriptedSolver(), calls=range(1, 40, 3))
    tasks = default_tasks(_config())[:4]
    run = tmp / "death-model"
    with ReferencePolicyServer(brain=brain) as server:
        _batch(row, tasks, PolicyConfig(server.url, server.model), run, desktops=1, env_retries=50)
    row.injected = row.hit = len(brain.killed)
    row.recorded_right = sum(r["status"] == "retried" for r in read_record_dicts(run))
    _export_check(run, row, n_attempts=8)
    yield row


def policy_outages(tmp: Path) -> Iterator[Row]:
    """A server that cannot be used: the batch stops with PolicyUnavailable, and a rerun finishes it."""
    config = _config()
    tasks = default_tasks(config)[:8]
    for name, kind in (("server fails every call (HTTP 500)", "500"), ("server stops answering (hang)", "hang")):
        row = Row(f"outage mid-batch: {name}")
        run = tmp / f"outage-{kind}"
        row.injected = row.hit = 1
        with ReferencePolicyServer(brain=ScriptedSolver(), faults=Faults(plan=_from_call(3, kind))) as server:
            policy = PolicyConfig(server.url, server.model, limits=Limits(retries=0, step_timeout=1.0))
            stopped = _batch(row, tasks, policy, run) is not None
        no_final_error = not [r for r in read_record_dicts(run) if r["status"] == "error"]
        with ReferencePolicyServer(brain=ScriptedSolver(), model=server.model) as healthy:
            _batch(row, tasks, PolicyConfig(healthy.url, healthy.model), run)
        finished = Counter(r["status"] for r in read_record_dicts(run))["ok"] == 16
        row.recorded_right = int(stopped and no_final_error and finished)
        _export_check(run, row, n_attempts=16)
        yield row


def _from_call(first: int, kind: str) -> Callable[[int, Any], str | None]:
    """A fault plan: ``kind`` on every chat request from number ``first`` on (a server that goes bad mid-batch)."""
    return lambda number, body: kind if number >= first else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for section in (reply_faults, desktop_deaths, policy_outages):
            for row in section(Path(tmp)):
                rows.append(row)
                print(f"  {row.fault}: {row.hit} hit, {row.recorded_right} recorded right", flush=True)
    print()
    fields = ("injected", "hit", "recorded_right", "batches", "crashed", "bad_rows", "lost_or_duplicated")
    print(
        "| fault | injected | tries hit | recorded as what it was | batches | crashed "
        "| export rows from incomplete attempts | attempts lost or duplicated |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in [*rows, Row("**total**", *(sum(getattr(r, f) for r in rows) for f in fields))]:
        print(f"| {r.fault} | " + " | ".join(str(getattr(r, f)) for f in fields) + " |")


if __name__ == "__main__":
    main()
