"""Episodes in a row on one GNOME stand-in VM driven through the osworld backend and a desktop-env provider.

The VM is legato's stand-in provider (:mod:`legato_gym.backends.osworld.standin_provider`, loaded by import path
as any provider class): a sandboxed GNOME Shell session (its settings daemon, D-Bus, at-spi, gvfs, ...) whose
in-desktop server answers as OSWorld's (``server_mode="osworld"``). ``--episodes`` episodes cycle through
varied download-free tasks: OSWorld's download-free tasks of the domains a fast reset serves (chrome, vlc, gimp,
vs_code, libreoffice_impress: not ``os``/``multi_apps``, which always revert) and the local suite's three tasks;
each episode is reset (task setup by desktop-env's SetupController), its ready signal, the scripted solution
where legato has one (else no action), and one file left in ``/tmp``. Grading is not run (it does not touch
the reset; ``legato rl collect`` runs it in the batch of docs/benchmarks.md). After each fast reset, before the
task's setup, an audit (:mod:`legato_gym.backends.osworld.audit`) lists the VM again: processes, windows,
``/home/user`` against the baseline, ``/tmp``, ``sudo``.

Prints JSON: resets by kind, reset and ready seconds (median, p95) by kind, the fallbacks' reasons, the
session's helpers that exited or were restarted, and the audits that were not clean.

Run under desktop-env's interpreter, from the project root: ``LEGATO_OSWORLD=~/osworld PYTHONPATH=.
~/.cache/legato/osworld-venv/bin/python benchmarks/osworld_gnome.py --episodes 200``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import default_tasks, solution
from legato_gym.backends.local.coverage import needs_no_download
from legato_gym.backends.osworld import OSWorldDesktop
from legato_gym.backends.osworld.audit import audit_fast_resets
from legato_gym.backends.osworld.options import REVERT_DOMAINS, OSWorldOptions

STANDIN = "legato_gym.backends.osworld.standin_provider:StandInProvider"
SCREEN = (1920, 1080)


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("legato_gym.backends.osworld"):
            self.messages.append(record.getMessage()[:300])


def osworld_tasks(root: Path) -> list[Task]:
    examples = root / "evaluation_examples"
    index = json.loads((examples / "test_all.json").read_text())
    found = []
    for domain, ids in index.items():
        if domain in REVERT_DOMAINS:
            continue
        for task_id in ids:
            config = json.loads((examples / "examples" / domain / f"{task_id}.json").read_text())
            if needs_no_download(config):
                found.append(Task(task_id, config["instruction"], config, domain=domain))
    return found


def actions(task: Task) -> list[str]:
    try:
        return list(solution(task.task_id, SCREEN))
    except KeyError:
        from legato_gym.backends.local.solutions import OSWORLD_SOLUTIONS, osworld_solution

        return list(osworld_solution(task.task_id)) if task.task_id in OSWORLD_SOLUTIONS else []


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument(
        "--max-minutes", type=float, default=None, help="start no episode after this long (a shared machine)"
    )
    args = parser.parse_args()
    stop_at = time.monotonic() + args.max_minutes * 60 if args.max_minutes else float("inf")
    root = Path(os.environ.get("LEGATO_OSWORLD", "~/osworld")).expanduser()
    config = DesktopConfig(
        screen=SCREEN,
        worker_python=sys.executable,
        osworld_path=root,
        options=OSWorldOptions(provider=STANDIN, download_cache=tempfile.mkdtemp(prefix="legato-gnome-bench-")),
    )
    tasks = osworld_tasks(root) + [t for t in default_tasks(config) if t.domain not in REVERT_DOMAINS]
    warnings = Warnings()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("legato_gym").addHandler(warnings)
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    started = time.monotonic()
    with OSWorldDesktop(config) as desktop:
        impl = desktop._impl
        auditor = audit_fast_resets(impl)
        for n in range(args.episodes):
            if time.monotonic() >= stop_at:
                break
            task = tasks[n % len(tasks)]
            audited = len(auditor.audits)
            before = len(warnings.messages)
            try:
                start = time.monotonic()
                desktop.reset(task)
                reset_s = time.monotonic() - start
                waited = desktop.wait_after_reset()
                for action in actions(task):
                    desktop.act(action)
                desktop.act(f"open('/tmp/agent-{n}', 'w').close()")
            except Exception as exc:  # counted, and the run goes on: a benchmark reports, it does not stop
                errors.append(f"{task.domain}/{task.task_id[:8]}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            rows.append(
                {
                    "task": f"{task.domain}/{task.task_id[:8]}",
                    "kind": desktop.last_reset_kind,
                    "reset_s": reset_s,
                    "ready_s": waited.seconds,
                    "ready": waited.ready,
                    "why": warnings.messages[before:],
                    "clean": [a.clean for a in auditor.audits[audited:]],
                }
            )
            print(json.dumps({"n": n, **{k: v for k, v in rows[-1].items() if k != "why"}}), file=sys.stderr)
        helpers = [impl.helpers_adopted, impl.helpers_exited]
    kinds = collections.Counter(row["kind"] for row in rows)
    result = {
        "episodes": len(rows) + len(errors),
        "tasks": len(tasks),
        "domains": dict(collections.Counter(t.domain for t in tasks)),
        "resets": dict(kinds),
        "fast_share": round(kinds["fast"] / max(1, len(rows)), 3),
        "reset_s": {kind: quantiles([r["reset_s"] for r in rows if r["kind"] == kind]) for kind in kinds},
        "ready_s": {kind: quantiles([r["ready_s"] for r in rows if r["kind"] == kind]) for kind in kinds},
        "not_ready": sum(1 for r in rows if not r["ready"]),
        "fallback_reasons": [[r["task"], r["why"]] for r in rows if r["kind"] != "fast"],
        "helpers_adopted_exited": helpers,
        "audited": len(auditor.audits),
        "unclean": [dataclasses.asdict(a) for a in auditor.audits if not a.clean],
        "errors": errors,
        "wall_s": round(time.monotonic() - started),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
