"""A batch's figures (``DIR/summary.json``), computed from its records.

Definitions (each key of ``summary.json`` is always present; a figure with nothing to measure is ``null``):

* ``status_counts``: records per status, every status listed (0 when none). A desktop failure that was
  re-queued leaves one ``retried`` record per failed try.
* ``success_rate``: mean reward of the ``ok`` and ``truncated`` records.
* ``rollouts_per_hour``: ``ok`` and ``truncated`` records per hour of ``wall_s``: the batch's wall time
  when the caller knows it, else from the first dispatch to the last record.
* ``phase_share``: each phase's share of desktop-seconds (the sum over records of ``timing``), ``other``
  being a try's time not in any phase (``total_s`` minus the phases: the scheduler's own time), except in
  tries that ended in a policy error: there that time is ``failed_call``, the policy call that failed
  (its retries and backoff included), which no phase of the record holds.
* ``model_latency_s``: p50, p95 and p99 of the policy calls' wall seconds (linear interpolation, as
  ``numpy.percentile``).
* ``retried_calls``: policy calls that needed more than one HTTP attempt.
* ``errors``: records that ended in ``error``, by kind (``policy``, ``env``).
* ``prefix_cache_hit_rate``: cached prompt tokens / prompt tokens, over calls that report both.
* ``share_steps_with_logprobs`` / ``share_steps_with_token_ids``: share of policy calls whose response has them.
* ``share_steps_with_prompt_ids``: share of policy calls whose step kept the prompt's token ids.
* ``weight_versions``: policy calls per weight version the server reported (SGLang
  ``metadata.weight_version``, vLLM >= 0.33 ``weight_versions``); empty when it reports none.
* ``weight_version_mismatches``: policy calls whose server-reported weight version differs from the
  version loaded when they were asked (the step's ``model.policy_version``, else the ``--version`` stamped on
  their record; both known). Not 0 means the server was serving other weights
  than the records claim, or its label was never set to ``--version`` (vLLM and SGLang say ``default``):
  label the weights on the server with the same string as ``--version``.
* ``groups``, ``groups_short``, ``groups_short_ids``: groups seen, and those that ended with fewer than
  ``group`` completed attempts.
* ``nodes``: desktops on a Ray cluster (``--ray``), per node (``hostname (ip), node ID``):
  ``{"desktops": started there, "lost": lost with their node or host agent}``, added up over the sessions
  of a resumed run. Not in the records: ``collect`` takes them from the vector env; ``{}`` for desktops on
  this host.
* ``follow`` (continuous runs only, :mod:`legato_rl.follow`): ``staleness`` (``mean``, ``max`` over the groups
  handed to the trainer), ``versions`` (the versions loaded, in order), ``groups_delivered``, ``groups_stale``
  (delivered marked stale), ``groups_rerun`` (re-run for staleness), ``utilisation`` (busy desktop-seconds over
  ``desktops`` x wall seconds; a try holding its desktop reset ahead is not busy then: :func:`busy_spans`),
  ``utilisation_by_version`` (the same within each version's time), ``queue_full_s`` (seconds that
  ``max_ready`` groups waited for the trainer, so no attempt could start) and ``desktops_to_keep_up`` (when the
  queue was full at times: the desktops busy on average, rounded up; that many keep up with this trainer, the
  others only idle; ``None`` when the trainer never held the desktops back).

GRPO group advantages are :mod:`legato_rl.advantages` (:func:`~legato_rl.advantages.group_advantages`, also
importable from here).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from legato_rl.advantages import advantages, group_advantages
from legato_rl.store import (
    COMPLETED_STATUSES,
    STATUSES,
    SUMMARY_FILE,
    RecordError,
    RolloutRecord,
    Timing,
    read_manifest,
    read_records,
    write_json_atomic,
)

__all__ = [
    "COMPLETED",
    "NODE_KEYS",
    "SUMMARY_SCHEMA",
    "Summary",
    "add_nodes",
    "advantages",
    "busy_spans",
    "failed_call",
    "group_advantages",
    "held_span",
    "percentile",
    "read_nodes",
    "summarize",
    "summarize_run",
    "write_summary",
]

#: The schema of ``summary.json``.
SUMMARY_SCHEMA = "legato.summary/v0"
#: Statuses of completed attempts: :data:`legato_rl.store.COMPLETED_STATUSES`, under the name this module had.
COMPLETED = COMPLETED_STATUSES
#: ``phase_share`` keys, in order.
PHASE_KEYS = (*(name[: -len("_s")] for name in Timing.PHASES), "failed_call", "other")
#: Per-node counts in ``nodes``.
NODE_KEYS = ("desktops", "lost")


@dataclass(frozen=True)
class Summary:
    """The figures of one batch (see the module docstring for each definition)."""

    n_records: int
    n_steps: int
    wall_s: float | None
    status_counts: Mapping[str, int]
    success_rate: float | None
    rollouts_per_hour: float | None
    phase_share: Mapping[str, float | None]
    model_latency_s: Mapping[str, float | None]
    retried_calls: int
    errors: Mapping[str, int]
    prefix_cache_hit_rate: float | None
    share_steps_with_logprobs: float | None
    share_steps_with_token_ids: float | None
    groups: int
    groups_short: int
    groups_short_ids: tuple[str, ...] = field(default=())
    share_steps_with_prompt_ids: float | None = None
    weight_versions: Mapping[str, int] = field(default_factory=dict)
    weight_version_mismatches: int = 0
    nodes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: a continuous run's figures (:func:`legato_rl.follow.follow_figures`): staleness, versions, utilisation
    follow: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """``summary.json``'s content, keys in a fixed order."""
        return {
            "schema": SUMMARY_SCHEMA,
            "n_records": self.n_records,
            "n_steps": self.n_steps,
            "wall_s": self.wall_s,
            "status_counts": dict(self.status_counts),
            "success_rate": self.success_rate,
            "rollouts_per_hour": self.rollouts_per_hour,
            "phase_share": dict(self.phase_share),
            "model_latency_s": dict(self.model_latency_s),
            "retried_calls": self.retried_calls,
            "errors": dict(self.errors),
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
            "share_steps_with_logprobs": self.share_steps_with_logprobs,
            "share_steps_with_token_ids": self.share_steps_with_token_ids,
            "share_steps_with_prompt_ids": self.share_steps_with_prompt_ids,
            "weight_versions": dict(self.weight_versions),
            "weight_version_mismatches": self.weight_version_mismatches,
            "groups": self.groups,
            "groups_short": self.groups_short,
            "groups_short_ids": list(self.groups_short_ids),
            "nodes": {name: dict(counts) for name, counts in self.nodes.items()},
            **({} if self.follow is None else {"follow": dict(self.follow)}),
        }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation between order statistics; ``None`` if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(records: Iterable[RolloutRecord], *, group: int, wall_s: float | None = None) -> Summary:
    """Compute a batch's figures from its records (one pass; only the per-step numbers are kept).

    Args:
        records: the run's records (:func:`legato_rl.store.read_records`).
        group: the group size (``--group``): a group with fewer completed attempts is short.
        wall_s: the batch's wall time; ``None``: first dispatch to last record end, from the records.
    """
    counts = dict.fromkeys(STATUSES, 0)
    errors = {"policy": 0, "env": 0}
    phases = dict.fromkeys(Timing.PHASES, 0.0)
    total_s = failed_call_s = other_s = 0.0
    rewards: list[float] = []
    latencies: list[float] = []
    retried_calls = n_steps = with_logprobs = with_token_ids = with_prompt_ids = mismatches = 0
    weight_versions: dict[str, int] = defaultdict(int)
    prompt_tokens = cached_tokens = 0
    completed_per_group: dict[str, int] = defaultdict(int)
    first: float | None = None
    last: float | None = None
    n_records = 0
    for record in records:
        n_records += 1
        counts[record.status] += 1
        completed_per_group[record.group_id] += record.status in COMPLETED_STATUSES
        if record.status in COMPLETED_STATUSES and record.reward is not None:
            rewards.append(record.reward)
        if record.status == "error" and record.error is not None:
            errors[record.error.kind] += 1
        in_phases = 0.0
        for name in Timing.PHASES:
            seconds = getattr(record.timing, name)
            phases[name] += seconds
            in_phases += seconds
        rest = max(record.timing.total_s - in_phases, 0.0)
        total_s += in_phases + rest
        if failed_call(record):
            failed_call_s += rest
        else:
            other_s += rest
        if record.started_at is not None:
            first = record.started_at if first is None else min(first, record.started_at)
        if record.ended_at is not None:
            last = record.ended_at if last is None else max(last, record.ended_at)
        for step in record.steps:
            n_steps += 1
            latencies.append(step.model.seconds)
            retried_calls += step.model.attempts > 1
            with_logprobs += step.response.logprobs is not None
            with_token_ids += step.response.token_ids is not None
            with_prompt_ids += step.prompt_ids is not None
            served = step.model.weight_version
            if served is not None:
                weight_versions[served] += 1
                claimed = step.model.policy_version or record.policy.version
                mismatches += claimed is not None and served != claimed
            if step.model.prompt_tokens is not None and step.model.cached_tokens is not None:
                prompt_tokens += step.model.prompt_tokens
                cached_tokens += step.model.cached_tokens
    if wall_s is None and first is not None and last is not None:
        wall_s = max(last - first, 0.0)
    n_completed = sum(counts[status] for status in COMPLETED_STATUSES)
    if total_s > 0:
        share: dict[str, float | None] = {name[: -len("_s")]: phases[name] / total_s for name in Timing.PHASES}
        share["failed_call"] = failed_call_s / total_s
        share["other"] = other_s / total_s
    else:
        share = dict.fromkeys(PHASE_KEYS)
    short = sorted(gid for gid, done in completed_per_group.items() if done < group)
    return Summary(
        n_records=n_records,
        n_steps=n_steps,
        wall_s=wall_s,
        status_counts=counts,
        success_rate=sum(rewards) / len(rewards) if rewards else None,
        rollouts_per_hour=n_completed * 3600.0 / wall_s if wall_s else None,
        phase_share=share,
        model_latency_s={f"p{q}": percentile(latencies, q) for q in (50, 95, 99)},
        retried_calls=retried_calls,
        errors=errors,
        prefix_cache_hit_rate=cached_tokens / prompt_tokens if prompt_tokens else None,
        share_steps_with_logprobs=with_logprobs / n_steps if n_steps else None,
        share_steps_with_token_ids=with_token_ids / n_steps if n_steps else None,
        groups=len(completed_per_group),
        groups_short=len(short),
        groups_short_ids=tuple(short),
        share_steps_with_prompt_ids=with_prompt_ids / n_steps if n_steps else None,
        weight_versions=dict(sorted(weight_versions.items())),
        weight_version_mismatches=mismatches,
    )


def busy_spans(record: RolloutRecord) -> list[tuple[float, float]]:
    """When the record's try kept its desktop busy (Unix times): dispatch to record, less the time it held its
    desktop reset ahead of its group's turn (``timing.held_s``: after the reset and the first screenshot, before
    the first policy call). Empty for a record with no desktop or times."""
    if record.desktop is None or record.desktop < 0 or record.started_at is None or record.ended_at is None:
        return []
    t0, t1 = float(record.started_at), float(max(record.ended_at, record.started_at))
    held = held_span(record)
    if held is None:
        return [(t0, t1)]
    hold, resumed = min(held[0], t1), min(held[1], t1)
    return [(a, b) for a, b in ((t0, hold), (resumed, t1)) if b > a]


def held_span(record: RolloutRecord) -> tuple[float, float] | None:
    """When the try held its desktop reset ahead (Unix times, ``timing.held_s`` long): right after its reset and
    its first screenshot (the try's ``obs_s`` less its actions'); ``None`` when it did not hold."""
    timing = record.timing
    if timing.held_s <= 0 or record.started_at is None:
        return None
    action_obs = sum(a.obs_s or 0.0 for s in record.steps for a in s.actions)
    start = float(record.started_at) + timing.reset_s + timing.wait_after_reset_s + max(timing.obs_s - action_obs, 0.0)
    return start, start + timing.held_s


def failed_call(record: RolloutRecord) -> bool:
    """True when the try ended because a policy call failed: the end of the try, which no phase of the record
    holds, is that call's time."""
    return record.status == "error" and record.error is not None and record.error.kind == "policy"


def summarize_run(
    run_dir: str | os.PathLike[str],
    *,
    wall_s: float | None = None,
    nodes: Mapping[str, Mapping[str, int]] | None = None,
) -> Summary:
    """:func:`summarize` of a run directory, with the group size from its manifest.

    Args:
        run_dir: the run directory.
        wall_s: as :func:`summarize`.
        nodes: this session's per-node desktop counts, added to the ones the run's ``summary.json`` holds
            (a resumed run); ``None``: those alone (:func:`read_nodes`).

    Raises:
        RecordError: the directory is not a run, or has no manifest.
    """
    manifest = read_manifest(run_dir)
    if manifest is None:
        raise RecordError(f"{run_dir} has no run.json: it is not a legato rl collect run")
    summary = summarize(read_records(run_dir), group=manifest.group, wall_s=wall_s)
    return replace(summary, nodes=add_nodes(read_nodes(run_dir), nodes or {}))


def read_nodes(run_dir: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """The per-node desktop counts of the run's ``summary.json`` (``{}`` when it has none, or no summary)."""
    try:
        data = json.loads((Path(run_dir) / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {
        str(name): {key: int(counts.get(key, 0) or 0) for key in NODE_KEYS}
        for name, counts in nodes.items()
        if isinstance(counts, dict)
    }


def add_nodes(*tallies: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per-node desktop counts added up, nodes in the order first seen."""
    total: dict[str, dict[str, int]] = {}
    for tally in tallies:
        for name, counts in tally.items():
            into = total.setdefault(name, dict.fromkeys(NODE_KEYS, 0))
            for key in NODE_KEYS:
                into[key] += int(counts.get(key, 0))
    return total


def write_summary(run_dir: str | os.PathLike[str], summary: Summary) -> Path:
    """Write ``DIR/summary.json`` atomically and return its path."""
    path = Path(run_dir) / SUMMARY_FILE
    write_json_atomic(path, {**summary.to_json(), "written_at": time.time()})
    return path
