"""A continuous run's log (``DIR/follow.jsonl``, :mod:`legato_rl.follow`): one JSON object a line.

* ``{"event": "version", "version", "at"}``: a policy version was loaded (the one loaded at start is logged
  with the run's start time when the first change comes);
* ``{"event": "group", "group_id", "staleness", "outcome", "at"}``: a completed group was handed to the
  trainer (``outcome`` ``delivered``, or ``stale``: delivered marked stale) or found too stale and re-run
  (``rerun``, with ``rerun_as``: the new group's id);
* ``{"event": "queue", "full", "at"}``: ``max_ready`` groups came to wait for the trainer (``full`` true: no
  attempt may start) or the trainer took one of them (``full`` false).

A group is logged only once its records are durable in ``rollouts.jsonl``, so every group the log names as
handed over can be read whole from the records, even while the run goes on (``legato rl export`` of a
continuous run exports those groups).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["FOLLOW_FILE", "append_follow_log", "delivered_groups", "read_follow_log"]

FOLLOW_FILE = "follow.jsonl"


def read_follow_log(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The lines of ``follow.jsonl`` (a last line cut short by a kill is left out); ``[]`` without one."""
    path = Path(run_dir) / FOLLOW_FILE
    if not path.is_file():
        return []
    pieces = path.read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in pieces[:-1] if line.strip()]  # the last piece has no newline


def append_follow_log(run_dir: str | os.PathLike[str], entry: Mapping[str, Any]) -> None:
    """Append one line, durably."""
    with (Path(run_dir) / FOLLOW_FILE).open("a", encoding="utf-8") as file:
        file.write(json.dumps(dict(entry)) + "\n")
        file.flush()
        os.fsync(file.fileno())


def delivered_groups(run_dir: str | os.PathLike[str]) -> set[str] | None:
    """The groups a continuous run handed over unmarked (``delivered``); ``None`` for a run without a log."""
    if not (Path(run_dir) / FOLLOW_FILE).is_file():
        return None
    lines = read_follow_log(run_dir)
    return {line["group_id"] for line in lines if line.get("event") == "group" and line["outcome"] == "delivered"}
