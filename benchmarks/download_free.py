"""OSWorld's download-free tasks on local desktops, each run to a graded record with ``legato rl collect``.

Run: ``python benchmarks/download_free.py [--osworld DIR] [--out runs/download-free] [--desktops 2]
[--grader auto] [--session lookalike|openbox|gnome] [--readme]``. Picks the tasks of ``test_all.json`` that download
no file and need neither the live web nor a Google account
(:func:`legato_gym.backends.local.coverage.needs_no_download`), asks this machine which of them its local
desktop accepts (the load check), runs those with ``legato rl collect
--backend local --policy-url embedded`` (scripted solutions where the reference policy has one, else
``DONE``), and prints markdown: the counts, per task its verdict, status, reward and time, and the
refused ones with the reason. ``--readme`` puts the same figures into README.md. Rerunning starts a fresh
run (the set of accepted tasks changes as apps are installed).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from legato_gym.backends.local.coverage import Capabilities, Verdict, assess, needs_no_download
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.backends.local.sandbox.shell import SESSIONS
from legato_gym.config import OSWORLD_ENV_VAR, DesktopConfig
from legato_gym.contract import Task
from legato_rl.cli.collect import local_solution

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SCREEN = DesktopConfig().screen
START, END = "<!-- download-free:start -->", "<!-- download-free:end -->"


def download_free(osworld: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """``(domain, task_id, config)`` of every download-free task of ``test_all.json``, in its order."""
    examples = osworld / "evaluation_examples"
    index: dict[str, list[str]] = json.loads((examples / "test_all.json").read_text())
    found = []
    for domain, ids in index.items():
        for task_id in ids:
            config = json.loads((examples / "examples" / domain / f"{task_id}.json").read_text())
            if needs_no_download(config):
                found.append((domain, task_id, config))
    return found


def grader_for(choice: str) -> str:
    """The grader ``legato rl collect --grader choice`` grades with here."""
    from legato_gym.desktopenv.venv import recorded_python

    if choice == "auto":
        return "osworld" if recorded_python() else "local"
    return choice


def collect(tasks_file: Path, out: Path, args: argparse.Namespace) -> float:
    """Run ``legato rl collect`` on the accepted tasks; its wall time in seconds."""
    legato = shutil.which("legato") or str(Path(sys.executable).with_name("legato"))
    argv = [
        legato, "rl", "collect", "--backend", "local", "--policy-url", "embedded", "--tasks", str(tasks_file),
        "--osworld", str(args.osworld), "--out", str(out), "--group", "1", "--desktops", str(args.desktops),
        "--max-steps", str(args.max_steps), "--rollout-timeout", str(args.rollout_timeout), "--grader",
        args.grader, "--session", args.session, "--quiet",
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-6000:])
        raise SystemExit(f"legato rl collect exited with {proc.returncode}")
    return seconds


def records(out: Path) -> dict[str, dict[str, Any]]:
    """The last record of each task in the run (its final try)."""
    by_task: dict[str, dict[str, Any]] = {}
    for line in (out / "rollouts.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            by_task[record["task_id"]] = record
    return by_task


def solved_by(domain: str, task_id: str, config: dict[str, Any]) -> str:
    """What the embedded reference policy answers: ``scripted`` (a solution) or ``DONE``."""
    task = Task(task_id, str(config["instruction"]), config, domain=domain)
    return "DONE" if local_solution(task, SCREEN) == ["DONE"] else "scripted"


def report(
    tasks: list[tuple[str, str, dict[str, Any]]],
    verdicts: dict[str, Verdict],
    graded: dict[str, dict[str, Any]],
    grader: str,
    wall_s: float,
) -> tuple[str, str]:
    """The markdown report: the figures with the refused tasks (for the README), and the per-task table."""
    statuses = collections.Counter(r["status"] for r in graded.values())
    rewards = collections.Counter(str(r["reward"]) for r in graded.values() if r["reward"] is not None)
    domains = collections.Counter(domain for domain, _, _ in tasks)
    accepted = sum(1 for v in verdicts.values() if v.status != "refused")
    lines = [
        f"{len(tasks)} download-free tasks ({', '.join(f'{d} {n}' for d, n in domains.most_common())}); "
        f"{accepted} accepted by this machine's local desktop ({grader} grader), {len(tasks) - accepted} refused "
        f"at load; {sum(1 for r in graded.values() if r['reward'] is not None)} graded records "
        f"(statuses: {', '.join(f'{s} {n}' for s, n in sorted(statuses.items())) or 'none'}; rewards: "
        f"{', '.join(f'{r} x{n}' for r, n in sorted(rewards.items())) or 'none'}) in {wall_s:.0f} s of "
        "`legato rl collect` (one attempt per task; scripted solution where the reference policy has one, "
        "else `DONE`). Refused at load:",
        "",
    ]
    lines += [f"- {d} `{t[:8]}`: {verdicts[t].reason}" for d, t, _ in tasks if verdicts[t].status == "refused"]
    summary = "\n".join(lines) + "\n"
    lines = [
        "| domain | task | policy | status | reward | seconds | refused because |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for domain, task_id, config in tasks:
        verdict = verdicts[task_id]
        record = graded.get(task_id)
        if record is None:
            status, reward, seconds = ("refused" if verdict.status == "refused" else "not run"), "", ""
        else:
            status, reward = record["status"], "" if record["reward"] is None else f"{record['reward']:g}"
            spent = (record.get("ended_at") or 0) - (record.get("started_at") or 0)
            seconds = f"{spent:.0f}" if spent > 0 else ""
        why = verdict.reason.replace("|", "\\|") if verdict.status == "refused" else ""
        policy = solved_by(domain, task_id, config)
        lines.append(f"| {domain} | `{task_id[:8]}` | {policy} | {status} | {reward} | {seconds} | {why} |")
    return summary, "\n".join(lines) + "\n"


def write_readme(text: str, session: str) -> None:
    page = README.read_text()
    if START not in page or END not in page:
        raise SystemExit(f"README.md has no {START} ... {END} section to fill")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    stamp = f"Measured {when} by `python benchmarks/download_free.py --session {session}`:"
    README.write_text(f"{head}{START}\n{stamp}\n\n{text}{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_osworld = os.environ.get(OSWORLD_ENV_VAR) or str(ROOT.parent / "shared" / "osworld")
    parser.add_argument("--osworld", type=Path, default=Path(default_osworld))
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "download-free")
    parser.add_argument("--desktops", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--rollout-timeout", type=float, default=900.0)
    parser.add_argument("--grader", choices=("auto", "osworld", "local"), default="auto")
    parser.add_argument("--domain", action="append", help="only these domains (repeat); default: all")
    parser.add_argument(
        "--session", choices=SESSIONS, default="lookalike", help="the desktops' session (the backend's default)"
    )
    parser.add_argument("--readme", action="store_true", help="write the figures into README.md")
    args = parser.parse_args()

    tasks = [t for t in download_free(args.osworld) if not args.domain or t[0] in args.domain]
    grader = grader_for(args.grader)
    caps = Capabilities.detect(grader=grader, cache=FileCache.default())
    verdicts = {task_id: assess(config, caps, domain=domain) for domain, task_id, config in tasks}
    accepted = [(d, t) for d, t, _ in tasks if verdicts[t].status != "refused"]
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    tasks_file = args.out / "tasks.json"
    tasks_file.write_text(json.dumps([{"task_id": t, "domain": d} for d, t in accepted], indent=1))
    wall_s = collect(tasks_file, args.out / "run", args) if accepted else 0.0
    graded = records(args.out / "run") if accepted else {}
    summary, table = report(tasks, verdicts, graded, grader, wall_s)
    text = f"{summary}\n{table}"
    sys.stdout.write(text)
    (args.out / "report.md").write_text(text)
    if args.readme:
        write_readme(summary, args.session)


if __name__ == "__main__":
    main()
