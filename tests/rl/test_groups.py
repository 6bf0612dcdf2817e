from __future__ import annotations

import pytest

from legato_gym import ConfigError, Task
from legato_rl.groups import GroupBook, Status, attempts_per_group


def _tasks(n: int) -> list[Task]:
    return [Task(task_id=f"t{i}", instruction=f"do {i}", config={}) for i in range(n)]


@pytest.mark.parametrize(
    ("group", "oversample", "expected"), [(4, 0.0, 4), (4, 0.25, 5), (8, 0.25, 10), (3, 0.5, 5), (1, 0.01, 2)]
)
def test_attempts_per_group(group: int, oversample: float, expected: int) -> None:
    assert attempts_per_group(group, oversample) == expected


def test_bad_group_arguments_name_the_value() -> None:
    with pytest.raises(ConfigError, match="group=0"):
        attempts_per_group(0, 0.0)
    with pytest.raises(ConfigError, match="oversample=-1"):
        attempts_per_group(2, -1)


def test_group_closes_after_group_completions_then_cancels_and_skips() -> None:
    book = GroupBook(_tasks(1), group=2, oversample=1.0)  # 4 attempts
    a0, a1, a2 = book.next_attempt(), book.next_attempt(), book.next_attempt()
    assert a0 and a1 and a2 and book.pending == 1
    assert book.finish(a0, Status.OK) == (Status.OK, [])
    status, dropped = book.finish(a1, Status.TRUNCATED)
    assert status is Status.TRUNCATED
    assert [a.index for a in dropped] == [3]  # never started: skipped
    assert book.is_closed(a2.group_id)
    # the running one completes after the close: surplus
    assert book.finish(a2, Status.OK) == (Status.SURPLUS, [])
    assert book.all_ended and book.next_attempt() is None


def test_short_group_when_every_attempt_ends_without_enough_completions() -> None:
    book = GroupBook(_tasks(1), group=2, oversample=0.0)
    a0, a1 = book.next_attempt(), book.next_attempt()
    assert a0 and a1
    book.finish(a0, Status.OK)
    book.finish(a1, Status.ERROR)
    group = book.groups[a0.group_id]
    assert group.closed and group.short and book.all_ended


def test_requeue_puts_the_next_try_first() -> None:
    book = GroupBook(_tasks(2), group=1, oversample=0.0)
    first = book.next_attempt()
    assert first is not None
    again = book.requeue(first)
    assert again is not None and again.try_index == 1 and again.rollout_id.endswith("/t1")
    assert book.next_attempt() == again


def test_restore_after_interruption() -> None:
    book = GroupBook(_tasks(2), group=2, oversample=0.5)  # 3 attempts each
    g0, g1 = list(book.groups)
    book.restore(
        ended=[(g0, 0, Status.OK), (g0, 1, Status.OK), (g1, 0, Status.ERROR)],
        tries=[(g1, 1), (g1, 1)],
    )
    skipped = book.close_remaining()
    assert [(a.group_id, a.index) for a in skipped] == [(g0, 2)]
    nxt = book.next_attempt()
    assert nxt is not None and (nxt.group_id, nxt.index, nxt.try_index) == (g1, 1, 2)


def test_a_retry_avoids_the_desktop_it_failed_on_when_another_is_free() -> None:
    book = GroupBook(_tasks(2), group=1, oversample=0.0)
    first = book.next_attempt(0)
    assert first is not None
    book.requeue(first, failed_on=0)
    other = book.next_attempt(0, free={1})  # desktop 0 takes the other task's attempt instead
    assert other is not None and other.group_id != first.group_id
    retry = book.next_attempt(1, free={0})
    assert retry is not None and retry.group_id == first.group_id and retry.failed_on == {0}
    # the only free desktops are ones it failed on too: it runs here rather than wait for a desktop that cannot come
    book.requeue(retry, failed_on=1)
    again = book.next_attempt(1, free={0})
    assert again is not None and again.failed_on == {0, 1} and again.try_index == 2


def _finish(book: GroupBook, attempt: object) -> None:
    from legato_rl.groups import Attempt

    assert isinstance(attempt, Attempt)
    book.finish(attempt, Status.OK)


def test_a_desktop_gets_its_last_task_again_while_one_waits_and_is_told_so() -> None:
    book = GroupBook(_tasks(3), group=4, oversample=0.0)  # t0 t0 t0 t0 t1 t1 t1 t1 t2 ...
    first = [book.next_attempt(d) for d in (0, 1)]  # two desktops on t0, two of its attempts wait
    assert [a.task.task_id for a in first if a] == ["t0", "t0"]
    assert [book.likely_next(a) for a in first if a] == [first[0].task, first[1].task]  # type: ignore[union-attr]
    third = book.next_attempt(2)  # t0's last waiting attempt: desktops 0 and 1 will not both get t0 again
    assert third is not None and third.task.task_id == "t0" and book.likely_next(third) is None
    _finish(book, first[1])
    again = book.next_attempt(1)
    assert again is not None and again.task.task_id == "t0"  # its last task, ahead of nothing else
    _finish(book, first[0])
    moved = book.next_attempt(0)  # no t0 waits: the queue's first
    assert moved is not None and moved.task.task_id == "t1" and book.likely_next(moved) is not None
    _finish(book, third)
    other = book.next_attempt(2)
    assert other is not None and other.task.task_id == "t1"
    _finish(book, moved)
    assert (nxt := book.next_attempt(0)) is not None and nxt.task.task_id == "t1"  # t1 again, not t2


def test_a_retry_goes_before_a_desktops_last_task() -> None:
    book = GroupBook(_tasks(2), group=3, oversample=0.0)  # t0 t0 t0 t1 t1 t1
    t0 = [book.next_attempt(d) for d in (0, 1, 2)]
    t1 = book.next_attempt(3)
    assert t1 is not None and t1.task.task_id == "t1" and t0[0] is not None
    book.requeue(t0[0], failed_on=0)  # queue: t0 (retry), t1, t1
    _finish(book, t1)
    retry = book.next_attempt(3)
    assert retry is not None and retry.task.task_id == "t0" and retry.try_index == 1  # it waited already: first


def test_group_advantages_live_with_the_group_rules_and_count_only_completed_attempts() -> None:
    from legato_rl import groups, summary

    def rec(rid: str, status: str, reward: float | None) -> dict[str, object]:
        return {"rollout_id": rid, "group_id": rid.split("/")[0], "status": status, "reward": reward}

    records = [rec("g0/a0", "ok", 1.0), rec("g0/a1", "truncated", 0.0), rec("g0/a2", "surplus", 1.0),
               rec("g0/a3", "cancelled", None), rec("g1/a0", "ok", 0.5)]  # fmt: skip
    assert groups.group_advantages(records) == {"g0/a0": 1.0, "g0/a1": -1.0, "g1/a0": 0.0}
    assert summary.group_advantages is groups.group_advantages and summary.advantages is groups.advantages
