"""The fake desktop: the desktop contract over the widget model, the renderer and the injected faults."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from legato_gym.actions import parse_action
from legato_gym.backends.fake.faults import Injector
from legato_gym.backends.fake.grading import check_task, grade, state_values
from legato_gym.backends.fake.layout import Layout, layout_for, ui_scale
from legato_gym.backends.fake.options import FakeOptions
from legato_gym.backends.fake.render import Frame, Pointer, redraw, render
from legato_gym.backends.fake.widgets import Window
from legato_gym.config import DesktopConfig
from legato_gym.contract import ActResult, Observation, Task, Waited
from legato_gym.errors import ActionError, DeadlineExceeded, DesktopCrashed, SetupError, StateError
from legato_gym.options import typed_options

__all__ = ["FakeDesktop"]

logger = logging.getLogger(__name__)


class FakeDesktop:
    """A deterministic fake desktop. Implements :class:`legato_gym.contract.Desktop`.

    Args:
        config: screen size, ready-signal / fixed-wait mode, deadlines, and the fake's ``options``: a
            :class:`~legato_gym.backends.fake.options.FakeOptions`, its mapping, or ``None`` (see
            :mod:`legato_gym.backends.fake`).
        seed: seeds latencies and faults; the same seed and calls give the same latencies and faults.

    Raises:
        ConfigError: bad ``config.options``, or another backend's.
    """

    def __init__(self, config: DesktopConfig | None = None, *, seed: int | None = None) -> None:
        self.config = config or DesktopConfig()
        self.options = typed_options(self.config.options, FakeOptions, "fake")
        self._injector = Injector(self.options, seed)
        self._closed = False
        self._crashed: str | None = None
        self._task: Task | None = None
        self._window: Window | None = None
        self._frame: Frame | None = None
        self._actions = 0
        self._last_special: str | None = None
        self._pointer = Pointer(ui_scale(self.config.screen))

    # -- the contract ------------------------------------------------------------------------------------

    @property
    def screen_size(self) -> tuple[int, int]:
        """``(width, height)`` from ``config.screen``."""
        return self.config.screen

    def check_task(self, task: Task) -> None:
        """Raise :class:`UnsupportedTaskError` if this desktop cannot run ``task`` (see :func:`check_task`)."""
        check_task(task)
        layout_for(task, self.screen_size)

    def reset(self, task: Task) -> str:
        """Show the task's window in its starting state (setup steps other than ``fake_window`` are no-ops).

        Returns ``fast``: the window is redrawn in place.
        """
        self._check_open("reset")
        if not isinstance(task, Task):
            raise TypeError(f"reset() takes a legato_gym.Task, not {type(task).__name__}")
        self._task = self._window = self._frame = None
        self._crashed = None
        self.check_task(task)
        self._strike("reset")
        faults = self.options.faults
        setup_failed = self._injector.setup_fails()
        self._injector.spend("reset", self.config.timeouts.reset)
        if setup_failed:
            raise SetupError(
                f"setup of task {task.task_id!r} failed (injected fault, options.faults.setup={faults.setup})"
            )
        window = Window(layout_for(task, self.screen_size), self.screen_size)
        self._task, self._window, self._frame = task, window, render(window)
        self._actions, self._last_special = 0, None
        return "fast"

    def wait_after_reset(self) -> Waited:
        """The ready-signal wait (settle latency), or ``30 * fixed_wait`` without ready signals."""
        self._begin("wait_after_reset")
        return self._wait(30.0)

    def observe(self) -> Observation:
        """A new screenshot array (the cached frame plus the pointer)."""
        self._begin("observe")
        assert self._frame is not None and self._window is not None and self._task is not None
        frame = self._frame.copy()
        self._pointer.draw(frame, self._window.state.cursor)
        return Observation(screenshot=frame, instruction=self._task.instruction)

    def act(self, action: str) -> ActResult:
        """Parse and apply one action, then wait for the screen to settle (or ``fixed_wait``).

        An action outside the action space changes nothing (as code failing inside a real desktop) and is
        logged; it still counts in the history that graders see.
        """
        self._begin("act")
        window, frame = self._window, self._frame
        assert window is not None and frame is not None
        t0 = time.perf_counter()
        self._injector.spend("act", self.config.timeouts.act)
        self._actions += 1
        try:
            parsed = parse_action(action)
        except ActionError as exc:
            self._last_special = None
            logger.debug("fake desktop ignored an invalid action: %s", exc)
        else:
            self._last_special = parsed.special
            for command in parsed.commands:
                window.apply(command)
            redraw(frame, window, window.take_changed())
        act_s = time.perf_counter() - t0
        if self.config.ready_signal:
            waited = self._wait(1.0)
            return ActResult(act_s=act_s, ready_s=waited.seconds)
        t1 = time.perf_counter()
        self._injector.sleep(self.config.fixed_wait * (2 if action.strip() == "WAIT" else 1))
        return ActResult(act_s=act_s, wait_s=time.perf_counter() - t1)

    def wait_before_eval(self) -> Waited:
        """The ready-signal wait before grading, or ``10 * fixed_wait`` without ready signals."""
        self._begin("wait_before_eval")
        return self._wait(10.0)

    def evaluate(self) -> float:
        """Grade the task from the window's state, with OSWorld's rules for ``infeasible`` and ``FAIL``."""
        self._begin("evaluate")
        self._injector.spend("evaluate", self.config.timeouts.evaluate)
        assert self._task is not None and self._window is not None
        return grade(self._task, self._window.state, last_special=self._last_special)

    def close(self) -> None:
        """Release the frame and end any wait in progress. Idempotent."""
        self._closed = True
        self._injector.wake()
        self._frame = None

    # -- introspection (tests, debugging) ----------------------------------------------------------------

    @property
    def state(self) -> Mapping[str, Any]:
        """The window's state as the ``fake_state`` getter sees it, plus the pointer and action count."""
        self._check_running("state")
        assert self._window is not None
        state = self._window.state
        return {**state_values(state), "cursor": state.cursor, "actions": self._actions}

    @property
    def layout(self) -> Layout:
        """The current task's layout."""
        self._check_running("layout")
        assert self._window is not None
        return self._window.layout

    # -- lifecycle helpers -------------------------------------------------------------------------------

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise StateError(f"{call}() called on a closed fake desktop; build a new one")

    def _check_running(self, call: str) -> None:
        self._check_open(call)
        if self._crashed is not None:
            raise DesktopCrashed(f"the fake desktop crashed during {self._crashed}; call reset(task) to restart it")
        if self._task is None:
            raise StateError(f"{call}() called before reset(task); call reset(task) first")

    def _begin(self, call: str) -> None:
        """Start a contract call on a running desktop: check the state, then inject the call's fault."""
        self._check_running(call)
        self._strike(call)

    def _strike(self, phase: str) -> None:
        """Inject the phase's fault; after a crash or a hang the desktop stays down until the next reset."""
        try:
            self._injector.strike(phase)
        except (DesktopCrashed, DeadlineExceeded):
            self._crashed = phase
            raise

    def _wait(self, fixed_factor: float) -> Waited:
        if not self.config.ready_signal:
            seconds = self.config.fixed_wait * fixed_factor
            self._injector.sleep(seconds)
            return Waited(seconds=seconds, ready=False)
        return self._injector.settle(self.config.timeouts.ready)
