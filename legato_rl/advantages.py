"""GRPO group advantages: what the export writes beside each step, the summary and a continuous run use.

The advantage of a completed attempt (status ``ok`` or ``truncated``) is ``(reward - mean) / std`` over its
group's completed attempts, with the **population** standard deviation (ddof 0), and 0 for every member when
all their rewards are equal. ``surplus`` attempts finished after their group closed and are not part of it;
no other status carries a usable reward. The group rules that decide which attempts complete a group are
:mod:`legato_rl.groups`; the statuses are :data:`legato_rl.store.COMPLETED_STATUSES`.

Used by the export (:func:`legato_rl.export.export_steps`: the ``advantage`` column), a continuous run's
groups (:meth:`legato_rl.follow.CompletedGroup.advantages`) and the summary module, which re-exports both
functions, as :mod:`legato_rl.groups` does for code written before this module.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from legato_rl.store import COMPLETED_STATUSES, RecordError, RolloutRecord

__all__ = ["advantages", "group_advantages"]


def advantages(rewards: Sequence[float]) -> list[float]:
    """GRPO advantages of one group's rewards: ``(r - mean) / std`` (population std), all 0 when equal."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std <= 1e-12 * max(1.0, abs(mean)):
        return [0.0] * len(rewards)
    return [(r - mean) / std for r in rewards]


def group_advantages(records: Iterable[RolloutRecord | Mapping[str, Any]]) -> dict[str, float]:
    """The advantage of every completed record, by ``rollout_id`` (see the module docstring).

    Accepts typed records or the JSON objects of ``rollouts.jsonl`` (only ``rollout_id``, ``group_id``,
    ``status`` and ``reward`` are read, so a streaming export can pass light dicts).

    Raises:
        RecordError: a completed record has no reward.
    """
    groups: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for record in records:
        if isinstance(record, RolloutRecord):
            rid, gid, status, reward = record.rollout_id, record.group_id, record.status, record.reward
        else:
            rid, gid, status, reward = record["rollout_id"], record["group_id"], record["status"], record["reward"]
        if status not in COMPLETED_STATUSES:
            continue
        if reward is None:
            raise RecordError(f"record {rid} is {status} but has no reward; the run is damaged")
        groups[gid].append((rid, float(reward)))
    result: dict[str, float] = {}
    for members in groups.values():
        for (rid, _), value in zip(members, advantages([r for _, r in members]), strict=True):
            result[rid] = value
    return result
