"""The kill storm: ``legato rl collect`` on real local desktops killed by pid 15 times, resumed each time.

Kills mix SIGKILL, SIGTERM and SIGINT at varied moments; after each kill (once the killed collect exited) and
at the end, it counts what the run's desktops left on the host: processes in the run's cgroups, cgroups,
desktop records, leases of dead owners, state folders, mounts (:mod:`tests.gym.leftovers`, which counts only
what this run made). Needs root and cgroups (the run's processes are counted through its cgroup).

Run (from the project root, with the project's venv)::

    python benchmarks/kill_storm.py                        # this checkout's code
    git worktree add /tmp/legato-main 2f52d08
    python benchmarks/kill_storm.py --legato /tmp/legato-main --settle 5   # another revision's collect

Prints one line per kill and a JSON summary (docs/reliability.md has the numbers).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("leftovers", ROOT / "tests" / "gym" / "leftovers.py")
assert _spec is not None and _spec.loader is not None
leftovers = importlib.util.module_from_spec(_spec)
sys.modules["leftovers"] = leftovers
_spec.loader.exec_module(leftovers)

SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
DELAYS = (4.0, 9.0, 14.0, 20.0, 7.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=15)
    parser.add_argument("--group", type=int, default=4, help="attempts per task (3 tasks)")
    parser.add_argument("--desktops", type=int, default=2)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds a kill's leftovers may take to go")
    parser.add_argument("--legato", type=Path, default=ROOT, help="project folder whose collect runs")
    args = parser.parse_args()
    storm = leftovers.Storm(group=args.group, desktops=args.desktops, legato=args.legato.resolve())
    rows = []
    try:
        for i in range(args.kills):
            sig, after = SIGNALS[i % 3], DELAYS[i % len(DELAYS)]
            storm.start()
            code = storm.kill(sig, after)
            now, start = storm.leftovers(), time.monotonic()
            settled = storm.settled_leftovers(start + args.settle)
            took = round(time.monotonic() - start, 1) if not settled.total else None
            rows.append({"kill": i + 1, "signal": sig.name, "after_s": after, "exit": code,
                         "at_exit": now.counts(), "settled": settled.counts(), "gone_in_s": took})  # fmt: skip
            print(f"kill {i + 1:2d} {sig.name:7s} at {after:4.1f}s exit {code}: at exit {now.counts()}, "
                  f"after {args.settle:g}s {settled.counts()} (all gone in {took} s)", flush=True)  # fmt: skip
        code, err = storm.finish()
        end = storm.settled_leftovers(time.monotonic() + args.settle)
        records = storm.records()
        keys = {(r["task_id"], r["group_id"], r["attempt"]) for r in records}
        summary = {
            "legato": str(args.legato.resolve()),
            "kills": args.kills,
            "final_exit": code,
            "records": len(records),
            "distinct_attempts": len(keys),
            "leftovers_at_end": end.counts(),
            "kills_with_leftovers_settled": sum(1 for r in rows if sum(r["settled"].values())),
            "max_processes_left_by_a_kill": max((r["settled"]["processes"] for r in rows), default=0),
            "processes_left_at_end": len(end.processes),
            "slowest_cleanup_s": max((r["gone_in_s"] or 0 for r in rows), default=0),
            "rows": rows,
        }
        if code != 0:
            print(err, file=sys.stderr)
        print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    finally:
        storm.close()


if __name__ == "__main__":
    main()
