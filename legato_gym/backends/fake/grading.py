"""Grading fake tasks: which OSWorld evaluators the fake can honour, and their scores over the window's state.

Results come from the ``fake_state`` getter (:data:`STATE_KEYS`), expectations from ``rule``; the metrics are
OSWorld's ``exact_match`` and ``check_include_exclude``, combined with ``conj`` as OSWorld does, and
``infeasible`` scores 1 only when the last action is ``FAIL``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from legato_gym.backends.fake.layout import window_spec
from legato_gym.backends.fake.widgets import WindowState
from legato_gym.contract import Task
from legato_gym.errors import UnsupportedTaskError

__all__ = ["STATE_KEYS", "SUPPORTED_FUNCS", "check_task", "grade", "state_values"]

#: Evaluator functions (OSWorld metric names) the fake desktop can grade.
SUPPORTED_FUNCS = frozenset({"infeasible", "exact_match", "check_include_exclude"})

#: Keys of the ``fake_state`` result getter.
STATE_KEYS = frozenset({"submitted", "last_submitted", "pressed", "last_pressed", "field_text"})


def check_task(task: Task) -> None:
    """Check that the fake desktop can grade ``task``.

    Raises:
        UnsupportedTaskError: its evaluator uses a function or getter the fake cannot honour (named).
    """
    evaluator = task.evaluator
    for func in _funcs(evaluator):
        if func not in SUPPORTED_FUNCS:
            raise UnsupportedTaskError(
                f"task {task.task_id!r}: the fake backend cannot grade evaluator func {func!r}; it supports "
                f"{', '.join(sorted(SUPPORTED_FUNCS))} (over fake_state results). Run it on the osworld backend"
            )
    if evaluator.get("func") == "infeasible":
        return
    for func, result, exp in _criteria(evaluator):
        rtype = result.get("type") if isinstance(result, Mapping) else None
        if rtype != "fake_state":
            raise UnsupportedTaskError(
                f"task {task.task_id!r}: the fake backend cannot get result {rtype!r} for {func!r}; "
                'use {"type": "fake_state", "key": ...}'
            )
        key = result.get("key") if isinstance(result, Mapping) else None
        if key not in STATE_KEYS:
            raise UnsupportedTaskError(
                f"task {task.task_id!r}: fake_state key {key!r} is unknown; use one of {', '.join(sorted(STATE_KEYS))}"
            )
        etype = exp.get("type") if isinstance(exp, Mapping) else None
        if etype != "rule" or not isinstance(exp.get("rules"), Mapping):
            raise UnsupportedTaskError(
                f"task {task.task_id!r}: the fake backend cannot get expected {etype!r} for {func!r}; "
                'use {"type": "rule", "rules": {...}}'
            )
    window_spec(task)


def state_values(state: WindowState) -> dict[str, Any]:
    """The window's state as the ``fake_state`` getter returns it, by key."""
    return {
        "submitted": list(state.submitted),
        "last_submitted": state.submitted[-1] if state.submitted else None,
        "pressed": list(state.pressed),
        "last_pressed": state.pressed[-1] if state.pressed else None,
        "field_text": state.field_text,
    }


def grade(task: Task, state: WindowState, *, last_special: str | None) -> float:
    """Score a task that passed :func:`check_task`, given the special form (``FAIL``, ...) of the last action."""
    evaluator = task.evaluator
    if evaluator.get("func") == "infeasible":
        return 1.0 if last_special == "FAIL" else 0.0
    if last_special == "FAIL":
        return 0.0
    values = state_values(state)
    conj = evaluator.get("conj", "and")
    scores = []
    for func, result, exp in _criteria(evaluator):
        score = _METRICS[func](values[result["key"]], exp["rules"])
        if conj == "and" and score == 0:
            return 0.0
        if conj == "or" and score == 1:
            return 1.0
        scores.append(score)
    if not scores:
        return 0.0
    return float(sum(scores) / len(scores)) if conj == "and" else float(max(scores))


def _funcs(evaluator: Mapping[str, Any]) -> list[Any]:
    funcs = evaluator.get("func")
    return funcs if isinstance(funcs, list) else [funcs]


def _criteria(evaluator: Mapping[str, Any]) -> Iterator[tuple[Any, Any, Any]]:
    """``(func, result, expected)`` for each metric of the evaluator but ``infeasible``, in order."""
    funcs = _funcs(evaluator)
    results = _as_list(evaluator.get("result"), len(funcs))
    expected = _as_list(evaluator.get("expected"), len(funcs))
    for criterion in zip(funcs, results, expected, strict=True):
        if criterion[0] != "infeasible":
            yield criterion


def _as_list(value: Any, n: int) -> list[Any]:
    if isinstance(value, list):
        return value + [None] * (n - len(value))
    return [value] * n


def _exact_match(result: Any, rules: Mapping[str, Any]) -> float:
    return 1.0 if result == rules.get("expected") else 0.0


def _check_include_exclude(result: Any, rules: Mapping[str, Any]) -> float:
    if result is None:
        return 0.0
    text = result if isinstance(result, str) else " ".join(map(str, result))
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return 1.0 if all(r in text for r in include) and all(r not in text for r in exclude) else 0.0


_METRICS: dict[str, Callable[[Any, Mapping[str, Any]], float]] = {
    "exact_match": _exact_match,
    "check_include_exclude": _check_include_exclude,
}
