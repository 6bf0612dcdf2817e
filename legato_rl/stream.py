"""A task stream that does not end, for continuous collection (:mod:`legato_rl.follow`).

Position ``n`` of a stream always holds the same task, so a resumed run finds each group's task again from
its group id (``g<n>-<task_id>``):

* ``cycle``: the tasks in order, again and again;
* ``draw``: each pass over the tasks in an order shuffled by ``seed`` and the pass's number (every task once
  per pass, so no task starves);
* a Python iterable that is not a sequence (a generator) is taken as it comes; it may be endless, and when it
  ends the run finishes the groups it started.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any, Literal

from legato_gym import ConfigError, Task
from legato_gym.tasks import load_tasks

__all__ = ["ORDERS", "Order", "TaskStream"]

Order = Literal["cycle", "draw"]
ORDERS: tuple[Order, ...] = ("cycle", "draw")


@dataclass(frozen=True)
class TaskStream:
    """Tasks by position, without end.

    Args:
        pool: the tasks cycled or drawn (``None`` for an iterable taken as it comes).
        order: ``cycle`` or ``draw`` (the pool only).
        seed: seeds ``draw``.
        source: the iterable taken as it comes (``pool`` is ``None``).
    """

    pool: tuple[Task, ...] | None
    order: Order = "cycle"
    seed: int = 0
    source: Iterable[Task | Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ConfigError(f"order={self.order!r} must be one of {', '.join(ORDERS)} (e.g. --order draw)")
        if self.pool is not None and not self.pool:
            raise ConfigError("no tasks to collect: give a tasks file with at least one entry")
        if (self.pool is None) == (self.source is None):
            raise ConfigError("a task stream takes a pool of tasks or an iterable, one of them")

    @classmethod
    def of(
        cls,
        tasks: Sequence[Task | Mapping[str, Any]] | Iterable[Task | Mapping[str, Any]] | str | Path,
        *,
        order: Order = "cycle",
        seed: int = 0,
        osworld_path: str | Path | None = None,
    ) -> TaskStream:
        """A stream of a tasks file's path, a list of what it holds, or any other iterable (taken as it comes)."""
        if isinstance(tasks, (str, Path, Sequence)):
            return cls(tuple(load_tasks(tasks, osworld_path=osworld_path)), order, seed)
        return cls(None, order, seed, source=tasks)

    def __iter__(self) -> Iterator[tuple[int, Task]]:
        """``(position, task)`` from position 0."""
        if self.pool is None:
            assert self.source is not None
            for position, item in enumerate(self.source):
                task = item if isinstance(item, Task) else load_tasks([item])[0]
                yield position, task
            return
        pool = self.pool
        permutation, drawn = list(range(len(pool))), 0
        for position in count():
            epoch, offset = divmod(position, len(pool))
            if self.order == "draw" and offset == 0:
                permutation, drawn = self._permutation(epoch), epoch
            assert self.order == "cycle" or drawn == epoch
            yield position, pool[permutation[offset]]

    def _permutation(self, epoch: int) -> list[int]:
        assert self.pool is not None
        order = list(range(len(self.pool)))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order
