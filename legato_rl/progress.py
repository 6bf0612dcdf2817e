"""One batch's live figures (:class:`Progress`), for a display in another thread."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

from legato_rl.store import COMPLETED_STATUSES

__all__ = ["Progress"]


@dataclass
class Progress:
    """Live figures of a running batch, for the progress display."""

    groups: int = 0
    groups_closed: int = 0
    attempts: int = 0
    desktops: int = 0
    busy: int = 0  # desktops playing an attempt, those holding one reset ahead of its turn included
    held: int = 0  # desktops holding an attempt reset ahead, before its first policy call (legato_rl.follow)
    status_counts: Counter[str] = field(default_factory=Counter)
    model_latency_s: deque[float] = field(default_factory=lambda: deque(maxlen=2000))  # the latest calls
    started: float = field(default_factory=time.monotonic)
    nodes: dict[str, dict[str, int]] = field(default_factory=dict)  # Ray: desktops started/lost per node

    @property
    def completed(self) -> int:
        return sum(self.status_counts[status.value] for status in COMPLETED_STATUSES)

    @property
    def rollouts_per_hour(self) -> float:
        hours = (time.monotonic() - self.started) / 3600
        return self.completed / hours if hours > 0 else 0.0

    def latency_p50(self) -> float | None:
        values = sorted(self.model_latency_s)
        return values[len(values) // 2] if values else None
