"""The same benchmarks on two revisions of legato, run alternately in one session, as ratios.

A refactor that should change nothing is checked this way: each revision runs its own copy of the benchmark
scripts against its own code (a ``git worktree`` per revision, first on ``PYTHONPATH`` so that it wins over
the editable install), the runs alternate (A B A B ...) so that the machine's drift falls on both, and every
number in the tables the scripts print is compared by its median over the rounds. Run::

    python benchmarks/compare_revisions.py 8e79d19                       # that commit against this checkout
    python benchmarks/compare_revisions.py 8e79d19 --head HEAD --bench overhead --rounds 5
    python benchmarks/compare_revisions.py 8e79d19 --out /tmp/compare.md

The benchmarks (``--bench``): ``vector`` (``vector_overhead.py --sizes 8 64 256``), ``overhead``
(``collect_bench.py overhead``), ``disk`` (``collect_bench.py disk``) and ``sessions`` (``local_sessions.py``
on openbox and the lookalike: memory, idle CPU, start and reset times; not run by default). ``--head .`` (the
default) is the working tree as it is, uncommitted edits included.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Each benchmark: the script and its arguments, relative to a checkout.
BENCHMARKS = {
    "vector": ["benchmarks/vector_overhead.py", "--sizes", "8", "64", "256"],
    "overhead": ["benchmarks/collect_bench.py", "overhead"],
    "disk": ["benchmarks/collect_bench.py", "disk"],
    "sessions": ["benchmarks/local_sessions.py", "--idle", "5", "--resets", "10", "--sessions", "openbox,lookalike"],
}
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")

#: (benchmark, table column, row's first cell) -> one value per round.
Figures = dict[tuple[str, str, str], list[float]]


def table_figures(text: str) -> dict[tuple[str, str], float]:
    """Every number in the markdown tables of ``text``, keyed by (column header, row's first cell).

    A cell counts by its first number (``"1.68 ms"`` is 1.68, ``"0.1 ms / 11.4 ms"`` is 0.1); cells without
    one, the first column (which names the row) and a ``target`` column are left out.

    Example:
        >>> table_figures("| n | ms |\\n|---|---|\\n| 8 | 2.97 |")
        {('ms', '8'): 2.97}
    """
    figures: dict[tuple[str, str], float] = {}
    header: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if i + 1 < len(lines) and lines[i + 1].startswith("|") and set(lines[i + 1]) <= set("|-: "):
            header = cells
            continue
        if not header or set(line) <= set("|-: "):
            continue
        for column, cell in zip(header[1:], cells[1:], strict=False):
            if column == "target":  # the goal a figure is held to, not a measurement
                continue
            match = _NUMBER.search(cell)
            if match is not None:
                figures[(column, cells[0])] = float(match.group().replace(",", ""))
    return figures


def checkout(rev: str, into: Path) -> Path:
    """A checkout of ``rev``: this working tree for ``"."``, else a detached worktree under ``into``."""
    if rev == ".":
        return ROOT
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if sha.returncode != 0:
        raise SystemExit(f"revision {rev!r} is not a commit of {ROOT}: {sha.stderr.strip()}")
    path = into / sha.stdout.strip()[:12]
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), sha.stdout.strip()],
                   check=True)  # fmt: skip
    return path


def run(where: Path, argv: list[str], timeout: float) -> str:
    """The stdout of one benchmark run in the checkout ``where`` (its own code first on ``sys.path``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, *argv], cwd=where, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed in {where} (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def report(base: str, head: str, before: Figures, after: Figures, rounds: int) -> str:
    """A markdown table: each figure's median before and after, and their ratio."""
    lines = [
        f"Medians over {rounds} alternating rounds (their range in brackets); before = `{base}`, after = `{head}`.",
        "",
        "| benchmark | row | figure | before | after | after / before |",
        "|---|---|---|---:|---:|---:|",
    ]
    for key in before:
        if key not in after:
            continue
        bench, column, row = key
        old, new = statistics.median(before[key]), statistics.median(after[key])
        ratio = f"{new / old:.2f}" if old else "–"
        lines.append(f"| {bench} | {row} | {column} | {_shown(before[key])} | {_shown(after[key])} | {ratio} |")
    return "\n".join(lines) + "\n"


def _shown(values: list[float]) -> str:
    """The median, and the range when the rounds differ: ``3.2 (2.8–3.6)``."""
    median = f"{statistics.median(values):g}"
    return median if min(values) == max(values) else f"{median} ({min(values):g}–{max(values):g})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the revision to compare against (a commit, tag or branch)")
    parser.add_argument("--head", default=".", help="the revision measured against it ('.': this working tree)")
    parser.add_argument("--bench", nargs="+", choices=sorted(BENCHMARKS), default=["vector", "overhead", "disk"])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each benchmark per revision")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one benchmark run may take")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1")
    scratch = Path(tempfile.mkdtemp(prefix="legato-compare-"))
    checkouts: list[Path] = []
    try:
        checkouts = [checkout(args.base, scratch), checkout(args.head, scratch)]
        results: tuple[Figures, Figures] = (defaultdict(list), defaultdict(list))
        for round_ in range(args.rounds):
            for bench in args.bench:
                order = (0, 1) if round_ % 2 == 0 else (1, 0)  # alternate which revision goes first
                for side in order:
                    text = run(checkouts[side], BENCHMARKS[bench], args.timeout)
                    for (column, row), value in table_figures(text).items():
                        results[side][(bench, column, row)].append(value)
                    print(f"round {round_ + 1}/{args.rounds}: {bench} on {'head' if side else 'base'} done", flush=True)
        text = report(args.base, args.head, *results, rounds=args.rounds)
    finally:
        for path in checkouts:
            if path != ROOT:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
