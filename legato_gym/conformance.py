"""Check that a desktop backend keeps the desktop contract (:mod:`legato_gym.contract`).

Run it against your backend class before plugging it into legato::

    from legato_gym import DesktopConfig
    from legato_gym.conformance import check_desktop

    check_desktop(lambda: MyDesktop(DesktopConfig(screen=(1280, 720))))

It drives fresh desktops through the seven calls in order (twice, so the second episode must not see the
first one's actions) and in wrong orders, and checks the values they return. Every failure is collected and
reported at once in a :class:`~legato_gym.errors.ConformanceError`.

What is checked:

* the desktop matches the ``Desktop`` protocol (the seven calls), and its ``screen_size``, when it has one
  (it is optional), is ``(width, height)`` of positive ints; without it, the first observation gives the size;
* ``observe``, ``act`` and ``evaluate`` before the first ``reset`` raise ``StateError``;
* ``reset`` returns ``None``; ``wait_after_reset`` and ``wait_before_eval`` return ``Waited``; ``observe``
  returns an ``Observation`` whose screenshot is a new ``(height, width, 3)`` ``uint8`` array, whose
  instruction is the task's and whose ``png``, when given, is PNG bytes of the screen's size; ``act`` accepts
  ``WAIT``, pyautogui code, ``DONE`` and ``FAIL`` and returns an
  ``ActResult`` of non-negative seconds; ``evaluate`` returns a float in ``[0, 1]``;
* with the default task (OSWorld's ``infeasible``): the score is 1 after ``FAIL`` and 0 after ``DONE``;
* ``close`` is idempotent and calls after it raise ``StateError``.

This module imports only the standard library and numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from legato_gym.contract import ActResult, Desktop, Observation, Task, Waited
from legato_gym.errors import ConformanceError, StateError
from legato_gym.png import png_size

__all__ = ["CONFORMANCE_TASK", "check_desktop"]

#: The task :func:`check_desktop` runs by default: infeasible, so any backend can grade it without setup.
CONFORMANCE_TASK = Task(
    task_id="legato-conformance-infeasible",
    instruction="Switch on the Bluetooth.",
    config={
        "id": "legato-conformance-infeasible",
        "instruction": "Switch on the Bluetooth.",
        "config": [],
        "evaluator": {"func": "infeasible"},
    },
)


class _Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.passed: list[str] = []

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        if ok:
            self.passed.append(name)
        else:
            self.failures.append(f"{name}: {detail}" if detail else name)
        return ok

    def call(self, name: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        try:
            return True, fn()
        except Exception as exc:
            self.failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            return False, None

    def expect_state_error(self, name: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except StateError:
            self.passed.append(name)
            return
        except Exception as exc:
            self.failures.append(f"{name}: raised {type(exc).__name__}: {exc}; expected legato_gym.errors.StateError")
            return
        self.failures.append(f"{name}: returned normally; expected legato_gym.errors.StateError")


def _seconds_ok(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _check_waited(c: _Checker, name: str, value: Any) -> None:
    if c.check(name, isinstance(value, Waited), f"returned {type(value).__name__}, expected Waited"):
        c.check(f"{name}.seconds", _seconds_ok(value.seconds), f"{value.seconds!r} is not seconds >= 0")
        c.check(f"{name}.ready", isinstance(value.ready, bool), f"{value.ready!r} is not a bool")


def _check_act(c: _Checker, name: str, value: Any) -> None:
    if c.check(name, isinstance(value, ActResult), f"returned {type(value).__name__}, expected ActResult"):
        for attr in ("act_s", "ready_s", "wait_s"):
            got = getattr(value, attr)
            c.check(f"{name}.{attr}", _seconds_ok(got), f"{got!r} is not seconds >= 0")


def _check_observation(c: _Checker, name: str, value: Any, size: tuple[int, int], task: Task) -> None:
    if not c.check(name, isinstance(value, Observation), f"returned {type(value).__name__}, expected Observation"):
        return
    shot = value.screenshot
    width, height = size
    if c.check(f"{name}.screenshot", isinstance(shot, np.ndarray), f"is {type(shot).__name__}, not a numpy array"):
        c.check(
            f"{name}.screenshot.shape",
            shot.shape == (height, width, 3),
            f"{shot.shape} does not match screen_size {size}: expected (height, width, 3) = {(height, width, 3)}",
        )
        c.check(f"{name}.screenshot.dtype", shot.dtype == np.uint8, f"{shot.dtype} is not uint8")
    png = getattr(value, "png", None)
    if png is not None and c.check(f"{name}.png", isinstance(png, bytes), f"is {type(png).__name__}, not bytes"):
        c.check(
            f"{name}.png",
            png_size(png) == size,
            f"is not a PNG of the screen's size {size} (its header says {png_size(png)}); give None or the PNG",
        )
    c.check(
        f"{name}.instruction",
        value.instruction == task.instruction,
        f"{value.instruction!r:.60} is not the task's instruction",
    )


def _check_score(c: _Checker, name: str, value: Any, expected: float | None) -> None:
    ok = isinstance(value, (float, int)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    if c.check(name, ok, f"returned {value!r}, expected a float in [0, 1]") and expected is not None:
        c.check(f"{name} == {expected}", value == expected, f"returned {value!r}")


def check_desktop(factory: Callable[[], Desktop], task: Task | None = None) -> list[str]:
    """Run the conformance checks against desktops built by ``factory``.

    Args:
        factory: builds a fresh desktop, e.g. ``lambda: MyDesktop(DesktopConfig())``. It is called twice.
        task: the task to run; default :data:`CONFORMANCE_TASK` (infeasible), which also checks grading.

    Returns:
        The names of the checks that passed.

    Raises:
        ConformanceError: one or more checks failed; its message and ``failures`` list each of them.
    """
    c = _Checker()
    run = task or CONFORMANCE_TASK
    graded = task is None

    ok, desktop = c.call("factory()", factory)
    if ok:
        try:
            _check_lifecycle(c, desktop, run, graded)
        finally:
            try:
                desktop.close()
            except Exception as exc:
                c.failures.append(f"close() in cleanup: raised {type(exc).__name__}: {exc}")

    ok, fresh = c.call("factory() (second desktop)", factory)
    if ok:
        c.expect_state_error("observe() before reset()", fresh.observe)
        c.expect_state_error("act('WAIT') before reset()", lambda: fresh.act("WAIT"))
        c.expect_state_error("evaluate() before reset()", fresh.evaluate)
        c.call("close() of a desktop never reset", fresh.close)

    if c.failures:
        lines = "\n".join(f"  - {line}" for line in c.failures)
        raise ConformanceError(
            f"the desktop fails {len(c.failures)} of {len(c.failures) + len(c.passed)} conformance checks:\n{lines}",
            c.failures,
        )
    return c.passed


def _check_lifecycle(c: _Checker, desktop: Any, task: Task, graded: bool) -> None:
    c.check(
        "implements the Desktop protocol",
        isinstance(desktop, Desktop),
        "missing one of reset, wait_after_reset, observe, act, wait_before_eval, evaluate, close",
    )
    size: Any = None  # without screen_size (optional), the first observation's size
    if hasattr(type(desktop), "screen_size") or hasattr(desktop, "screen_size"):
        ok, size = c.call("screen_size", lambda: desktop.screen_size)
        size_ok = (
            ok
            and isinstance(size, tuple)
            and len(size) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
        )
        if not c.check("screen_size is (width, height)", size_ok, f"got {size!r}"):
            return

    for episode, (last, expected) in enumerate((("FAIL", 1.0), ("DONE", 0.0)), start=1):
        tag = f"episode {episode}: "
        ok, value = c.call(f"{tag}reset(task)", lambda: desktop.reset(task))
        if not ok:
            return
        said = value is None or (isinstance(value, str) and value.strip() != "")
        c.check(f"{tag}reset(task) returns its reset kind (a word) or None", said, f"returned {value!r}")
        ok, value = c.call(f"{tag}wait_after_reset()", desktop.wait_after_reset)
        if ok:
            _check_waited(c, f"{tag}wait_after_reset()", value)
        ok, first = c.call(f"{tag}observe()", desktop.observe)
        if size is None:
            shape: tuple[int, ...] = getattr(getattr(first, "screenshot", None), "shape", ())
            if not c.check(
                f"{tag}observe() gives the screen's size (no screen_size)",
                ok and len(shape) == 3 and shape[0] > 0 and shape[1] > 0,
                f"the first observation's screenshot has shape {shape!r}, expected (height, width, 3)",
            ):
                return
            size = (int(shape[1]), int(shape[0]))
        if ok:
            _check_observation(c, f"{tag}observe()", first, size, task)
        width, height = size
        for action in ("WAIT", f"import pyautogui; pyautogui.moveTo({width // 2}, {height // 2})", last):
            ok, value = c.call(f"{tag}act({action!r})", lambda a=action: desktop.act(a))  # type: ignore[misc]
            if ok:
                _check_act(c, f"{tag}act({action!r})", value)
        ok, second = c.call(f"{tag}observe() after act", desktop.observe)
        if ok:
            _check_observation(c, f"{tag}observe() after act", second, size, task)
            if isinstance(first, Observation) and isinstance(second, Observation):
                c.check(
                    f"{tag}observe() returns a new array each call",
                    first.screenshot is not second.screenshot
                    and not np.may_share_memory(first.screenshot, second.screenshot),
                    "two observations share one screenshot buffer; return a copy",
                )
        ok, value = c.call(f"{tag}wait_before_eval()", desktop.wait_before_eval)
        if ok:
            _check_waited(c, f"{tag}wait_before_eval()", value)
        ok, value = c.call(f"{tag}evaluate()", desktop.evaluate)
        if ok:
            _check_score(c, f"{tag}evaluate() after {last}", value, expected if graded else None)

    ok, _ = c.call("close()", desktop.close)
    if ok:
        c.call("close() again (idempotent)", desktop.close)
        c.expect_state_error("observe() after close()", desktop.observe)
        c.expect_state_error("reset() after close()", lambda: desktop.reset(task))
