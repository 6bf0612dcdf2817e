"""The fake backend: deterministic desktops that render real pixels, with no VM.

A fake desktop shows one application window (a title bar, a text field, labelled buttons and a status line)
on a plain desktop, and a mouse pointer. It accepts the same actions as a real desktop (OSWorld's pyautogui
action space, parsed by :mod:`legato_gym.actions` and never executed) and changes state as a real window
would: a click on the field focuses it, typing goes into the focused field, ``press('enter')`` submits it, a
click on a button presses it. Fake tasks are OSWorld-format task configs whose evaluator reads that state
(result ``{"type": "fake_state", "key": ...}``, expected ``{"type": "rule", "rules": ...}``), so a correct
policy scores 1 and a random one almost always 0.

Inline OSWorld task configs run too when the fake can honour their evaluator: ``infeasible`` (1 only when the
last action is ``FAIL``), and ``exact_match`` / ``check_include_exclude`` over ``fake_state`` results. Their
setup steps are accepted as no-ops. Any other evaluator raises
:class:`~legato_gym.errors.UnsupportedTaskError` naming it, from :func:`check_task` and :meth:`FakeDesktop.reset`.

Options (``DesktopConfig.options``; all optional, zero latency and no faults by default)::

    {
      "latency": {                       # seconds per phase: a number, or a lognormal distribution
        "reset": 0.5,                    #   desktop.reset (task setup)
        "act": {"median": 0.2, "sigma": 0.5, "max": 5.0},   # running one action
        "settle": 0.1,                   #   each ready-signal wait (after reset, after an action, before grading)
        "evaluate": 0.3                  #   grading
      },
      "faults": {                        # seeded by the desktop's seed: the same seed gives the same faults
        "crash": 0.01,                   #   probability per call (in "phases") of DesktopCrashed
        "crash_mode": "raise",           #   "raise", or "exit": os._exit(70) so the worker process dies
        "hang": 0.01,                    #   probability per call of blocking for hang_seconds
        "hang_seconds": 3600.0,          #   then DeadlineExceeded (close() from another thread ends it early)
        "setup": 0.05,                   #   probability per reset of SetupError
        "phases": ["reset", "act", "evaluate"]   # calls where crash and hang may strike
      }
    }

A latency longer than the phase's deadline (``DesktopConfig.timeouts``) raises
:class:`~legato_gym.errors.DeadlineExceeded` after the deadline (for ``settle``: the wait ends with
``ready=False``). With ``ready_signal=False`` the waits are OSWorld's fixed sleeps: ``fixed_wait`` after each
action (twice for ``WAIT``), ``30 * fixed_wait`` after reset and ``10 * fixed_wait`` before grading.

Example::

    from legato_gym import DesktopConfig, Episode
    from legato_gym.backends.fake import FakeDesktop, default_tasks, fake_solution

    config = DesktopConfig(screen=(640, 480))
    desktop = FakeDesktop(config, seed=0)
    task = default_tasks(config)[0]
    episode = Episode(desktop)
    episode.reset(task)
    for step in fake_solution(task, desktop.screen_size):
        obs, reward, terminated, truncated, info = episode.step(step.action)
    assert reward == 1.0
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from legato_gym.actions import (
    Click,
    Command,
    Drag,
    Hotkey,
    KeyDown,
    KeyUp,
    MouseDown,
    MouseMove,
    MouseUp,
    Press,
    Scroll,
    Sleep,
    TypeText,
    parse_action,
)
from legato_gym.backends._font import GLYPH_HEIGHT, GLYPH_WIDTH, text_mask
from legato_gym.config import DesktopConfig
from legato_gym.contract import ActResult, Observation, Task, Waited
from legato_gym.errors import (
    ActionError,
    ConfigError,
    DeadlineExceeded,
    DesktopCrashed,
    SetupError,
    StateError,
    UnsupportedTaskError,
)

__all__ = [
    "CRASH_EXIT_CODE",
    "FAKE_WINDOW",
    "SUPPORTED_FUNCS",
    "FakeDesktop",
    "FakeOptions",
    "FakeStep",
    "Faults",
    "Latency",
    "check_task",
    "default_tasks",
    "fake_solution",
    "fake_task",
]

logger = logging.getLogger(__name__)

#: Setup step type that describes the fake window: ``{"type": "fake_window", "parameters": {"title": str,
#: "buttons": [labels], "field": bool}}``. Tasks without one get a window with a field and OK / CANCEL.
FAKE_WINDOW = "fake_window"

#: Evaluator functions (OSWorld metric names) the fake desktop can grade.
SUPPORTED_FUNCS = frozenset({"infeasible", "exact_match", "check_include_exclude"})

#: Keys of the ``fake_state`` result getter.
STATE_KEYS = frozenset({"submitted", "last_submitted", "pressed", "last_pressed", "field_text"})

#: Exit status of a worker killed by an injected crash with ``crash_mode="exit"``.
CRASH_EXIT_CODE = 70

LATENCY_PHASES = ("reset", "act", "settle", "evaluate")
FAULT_PHASES = ("reset", "wait_after_reset", "observe", "act", "wait_before_eval", "evaluate")
_MODIFIERS = frozenset(
    {"ctrl", "ctrlleft", "ctrlright", "alt", "altleft", "altright", "shift", "shiftleft", "shiftright"}
    | {"win", "winleft", "winright", "command", "option", "optionleft", "optionright", "fn"}
)
_MAX_FIELD_CHARS = 256


def _base_modifier(key: str) -> str:
    return key.removesuffix("left").removesuffix("right")


RGB = tuple[int, int, int]
Frame = npt.NDArray[np.uint8]


# --- options ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    """A phase's latency: ``median * exp(sigma * N(0, 1))`` seconds, capped at ``max`` (fixed when sigma is 0)."""

    median: float = 0.0
    sigma: float = 0.0
    max: float | None = None

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one latency in seconds (always draws once, so the stream stays aligned across settings)."""
        z = float(rng.standard_normal())
        if self.median <= 0:
            return 0.0
        value = self.median * math.exp(self.sigma * z)
        return min(value, self.max) if self.max is not None else value


@dataclass(frozen=True)
class Faults:
    """Seeded fault injection; see the module docstring for each field."""

    crash: float = 0.0
    crash_mode: Literal["raise", "exit"] = "raise"
    hang: float = 0.0
    hang_seconds: float = 3600.0
    setup: float = 0.0
    phases: frozenset[str] = frozenset({"reset", "act", "evaluate"})


@dataclass(frozen=True)
class FakeOptions:
    """The fake backend's options, read from ``DesktopConfig.options`` by :meth:`from_mapping`."""

    latency: Mapping[str, Latency] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> FakeOptions:
        """Validate and read the options.

        Raises:
            ConfigError: an unknown key or a bad value; the message names the key path and the fix.
        """
        _only(options, {"latency", "faults"}, "options")
        latency_in = options.get("latency") or {}
        if not isinstance(latency_in, Mapping):
            raise ConfigError(f"options.latency={latency_in!r} must map phases ({', '.join(LATENCY_PHASES)}) to s")
        _only(latency_in, set(LATENCY_PHASES), "options.latency")
        latency = {phase: _latency(value, f"options.latency.{phase}") for phase, value in latency_in.items()}

        faults_in = options.get("faults") or {}
        if not isinstance(faults_in, Mapping):
            raise ConfigError(f"options.faults={faults_in!r} must be an object such as {{'crash': 0.01}}")
        _only(faults_in, {"crash", "crash_mode", "hang", "hang_seconds", "setup", "phases"}, "options.faults")
        rates = {name: _probability(faults_in.get(name, 0.0), f"options.faults.{name}") for name in ("crash", "hang")}
        setup = _probability(faults_in.get("setup", 0.0), "options.faults.setup")
        mode = faults_in.get("crash_mode", "raise")
        if mode not in ("raise", "exit"):
            raise ConfigError(f"options.faults.crash_mode={mode!r} must be 'raise' or 'exit'")
        hang_seconds = _seconds(faults_in.get("hang_seconds", 3600.0), "options.faults.hang_seconds")
        phases_in = faults_in.get("phases", ["reset", "act", "evaluate"])
        if isinstance(phases_in, str) or not isinstance(phases_in, Sequence):
            raise ConfigError(f"options.faults.phases={phases_in!r} must be a list such as ['act']")
        for phase in phases_in:
            if phase not in FAULT_PHASES:
                raise ConfigError(f"options.faults.phases: unknown phase {phase!r}; use {', '.join(FAULT_PHASES)}")
        faults = Faults(
            crash=rates["crash"],
            crash_mode="exit" if mode == "exit" else "raise",
            hang=rates["hang"],
            hang_seconds=hang_seconds,
            setup=setup,
            phases=frozenset(phases_in),
        )
        return cls(latency=latency, faults=faults)


def _only(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    import difflib

    for key in mapping:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint} (known: {', '.join(sorted(allowed))})")


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
        raise ConfigError(f"{where}={value!r} must be a finite number of seconds >= 0")
    return float(value)


def _probability(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{where}={value!r} must be a probability between 0 and 1")
    return float(value)


def _latency(value: Any, where: str) -> Latency:
    if isinstance(value, Mapping):
        _only(value, {"median", "sigma", "max"}, where)
        cap = value.get("max")
        return Latency(
            median=_seconds(value.get("median", 0.0), f"{where}.median"),
            sigma=_seconds(value.get("sigma", 0.0), f"{where}.sigma"),
            max=None if cap is None else _seconds(cap, f"{where}.max"),
        )
    return Latency(median=_seconds(value, where))


# --- layout and rendering --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rect:
    """A screen rectangle in pixels."""

    x: int
    y: int
    w: int
    h: int

    def contains(self, px: int, py: int) -> bool:
        return self.x <= px < self.x + self.w and self.y <= py < self.y + self.h

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2


@dataclass(frozen=True)
class WindowSpec:
    """What the task's window holds (from its ``fake_window`` setup step)."""

    title: str = "APPLICATION"
    buttons: tuple[str, ...] = ("OK", "CANCEL")
    field: bool = True


@dataclass(frozen=True)
class Layout:
    """Where everything is, for one task on one screen size."""

    scale: int
    background: RGB
    panel: Rect
    window: Rect
    title_bar: Rect
    title: str
    field: Rect | None
    buttons: tuple[tuple[str, Rect], ...]
    status: Rect

    def button(self, label: str) -> Rect | None:
        for name, rect in self.buttons:
            if name == label:
                return rect
        return None


def window_spec(task: Task) -> WindowSpec:
    """The task's window, from its ``fake_window`` setup step (a default window when it has none)."""
    for step in task.setup:
        if step.get("type") == FAKE_WINDOW:
            params = step.get("parameters") or {}
            buttons = params.get("buttons", ["OK", "CANCEL"])
            if not isinstance(buttons, list) or not all(isinstance(b, str) and b for b in buttons):
                raise UnsupportedTaskError(
                    f"task {task.task_id!r}: fake_window.parameters.buttons must be a list of labels, not {buttons!r}"
                )
            return WindowSpec(str(params.get("title", "APPLICATION")), tuple(buttons), bool(params.get("field", True)))
    return WindowSpec()


def _task_rng(task_id: str, screen: tuple[int, int]) -> np.random.Generator:
    digest = hashlib.sha256(f"{task_id}|{screen[0]}x{screen[1]}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def layout_for(task: Task, screen: tuple[int, int]) -> Layout:
    """The task's layout on a ``(width, height)`` screen: deterministic per task id and screen size.

    Raises:
        UnsupportedTaskError: the window does not fit on the screen.
    """
    spec = window_spec(task)
    width, height = screen
    s = max(1, min(width // 640, height // 360))
    rng = _task_rng(task.task_id, screen)
    cell = GLYPH_WIDTH + 1
    longest = max((len(b) for b in spec.buttons), default=0)
    bw, bh, gap, pad = max(cell * longest + 8, 44) * s, 13 * s, 6 * s, 8 * s
    cols = min(3, max(1, len(spec.buttons)))
    rows = math.ceil(len(spec.buttons) / cols) if spec.buttons else 0
    inner_w = cols * bw + (cols - 1) * gap
    title_h, field_h, status_h, panel_h = 11 * s, 13 * s, 9 * s, 10 * s
    win_w = inner_w + 2 * pad
    win_h = title_h + pad + (field_h + pad if spec.field else 0) + rows * (bh + gap) + pad + status_h + pad
    if win_w > width or win_h > height - panel_h:
        raise UnsupportedTaskError(
            f"task {task.task_id!r}: its fake window ({win_w}x{win_h}) does not fit on a {width}x{height} screen; "
            "use a larger DesktopConfig.screen"
        )
    x0 = int(rng.integers(0, width - win_w + 1))
    y0 = int(rng.integers(panel_h, height - win_h + 1))
    hue = rng.integers(40, 150, size=3)
    background: RGB = (int(hue[0]), int(hue[1]), int(hue[2]))
    y = y0 + title_h + pad
    field_rect = None
    if spec.field:
        field_rect = Rect(x0 + pad, y, inner_w, field_h)
        y += field_h + pad
    order = rng.permutation(len(spec.buttons))
    buttons = []
    for slot, index in enumerate(order):
        row, col = divmod(slot, cols)
        buttons.append((spec.buttons[int(index)], Rect(x0 + pad + col * (bw + gap), y + row * (bh + gap), bw, bh)))
    y += rows * (bh + gap)
    return Layout(
        scale=s,
        background=background,
        panel=Rect(0, 0, width, panel_h),
        window=Rect(x0, y0, win_w, win_h),
        title_bar=Rect(x0, y0, win_w, title_h),
        title=spec.title,
        field=field_rect,
        buttons=tuple(buttons),
        status=Rect(x0 + pad, y + pad // 2, inner_w, status_h),
    )


def _fill(frame: Frame, rect: Rect, color: RGB) -> None:
    region = frame[max(rect.y, 0) : max(rect.y + rect.h, 0), max(rect.x, 0) : max(rect.x + rect.w, 0)]
    if region.size:
        # Broadcasting one row is ~50x faster than broadcasting a 3-tuple over a large region.
        row = np.empty((region.shape[1], 3), dtype=np.uint8)
        row[:] = color
        region[:] = row


def _box(frame: Frame, rect: Rect, fill: RGB, border: RGB, thickness: int) -> None:
    _fill(frame, rect, border)
    t = thickness
    _fill(frame, Rect(rect.x + t, rect.y + t, rect.w - 2 * t, rect.h - 2 * t), fill)


def _text(frame: Frame, text: str, x: int, y: int, color: RGB, scale: int, clip: Rect) -> None:
    """Draw ``text`` with its top-left at ``(x, y)``, clipped to ``clip``."""
    if not text:
        return
    max_chars = max(0, (clip.x + clip.w - x) // ((GLYPH_WIDTH + 1) * scale))
    mask = text_mask(text[:max_chars], scale)
    h = min(mask.shape[0], clip.y + clip.h - y)
    w = min(mask.shape[1], clip.x + clip.w - x)
    if h <= 0 or w <= 0:
        return
    frame[y : y + h, x : x + w][mask[:h, :w]] = color


def _centered_text(frame: Frame, text: str, rect: Rect, color: RGB, scale: int) -> None:
    tw = (GLYPH_WIDTH + 1) * scale * len(text) - scale
    x = rect.x + max(0, (rect.w - tw) // 2)
    y = rect.y + (rect.h - GLYPH_HEIGHT * scale) // 2
    _text(frame, text, x, y, color, scale, rect)


_CURSOR_ROWS = (
    "X.........",
    "XX........",
    "XWX.......",
    "XWWX......",
    "XWWWX.....",
    "XWWWWX....",
    "XWWWWWX...",
    "XWWWWWWX..",
    "XWWWWXXXX.",
    "XWXWWX....",
    "XX.XWWX...",
    "X...XWX...",
    ".....XX...",
)


def _cursor_masks(scale: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    rows = np.array([list(r) for r in _CURSOR_ROWS])
    outline, inside = rows == "X", rows == "W"
    if scale > 1:
        outline = np.repeat(np.repeat(outline, scale, axis=0), scale, axis=1)
        inside = np.repeat(np.repeat(inside, scale, axis=0), scale, axis=1)
    return outline, inside


# --- tasks -----------------------------------------------------------------------------------------------


def fake_task(
    task_id: str,
    instruction: str,
    evaluator: Mapping[str, Any],
    *,
    title: str = "APPLICATION",
    buttons: Sequence[str] = ("OK", "CANCEL"),
    field: bool = True,
) -> Task:
    """Build a fake task: an OSWorld-format config whose setup step describes the window."""
    config = {
        "id": task_id,
        "snapshot": "fake",
        "instruction": instruction,
        "source": "legato fake suite",
        "config": [{"type": FAKE_WINDOW, "parameters": {"title": title, "buttons": list(buttons), "field": field}}],
        "related_apps": ["fake"],
        "evaluator": dict(evaluator),
        "proxy": False,
        "fixed_ip": False,
        "possibility_of_env_change": "low",
    }
    return Task(task_id=task_id, instruction=instruction, config=config, domain="fake")


def _state_eval(key: str, expected: Any) -> dict[str, Any]:
    return {
        "func": "exact_match",
        "result": {"type": "fake_state", "key": key},
        "expected": {"type": "rule", "rules": {"expected": expected}},
    }


def default_tasks(config: DesktopConfig | None = None) -> list[Task]:
    """The fake suite: 11 tasks (4 type-and-Enter, 3 click-a-button, 2 click-two-in-order, 2 infeasible).

    The tasks do not depend on ``config``; their layouts depend on the task id and the screen size.
    """
    tasks = []
    typing: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("banana", "NOTES", ("OK", "CANCEL", "HELP")),
        ("violet", "SEARCH", ("FIND", "CLEAR", "CLOSE")),
        ("harbor42", "LOGIN", ("SIGN IN", "CANCEL", "HELP", "RESET")),
        ("quartz", "RENAME", ("APPLY", "UNDO", "CLOSE")),
    )
    for word, title, buttons in typing:
        tasks.append(
            fake_task(
                f"fake-type-{word}",
                f'Type "{word}" into the text field and press Enter.',
                _state_eval("submitted", [word]),
                title=title,
                buttons=buttons,
            )
        )
    clicking: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("SAVE", "EDITOR", ("OPEN", "SAVE", "PRINT", "CLOSE", "UNDO", "HELP")),
        ("EXPORT", "REPORT", ("IMPORT", "EXPORT", "DELETE", "SEND", "CANCEL", "OK")),
        ("APPLY", "SETTINGS", ("APPLY", "RESET", "CANCEL", "OK", "HELP", "DEFAULTS")),
    )
    for label, title, buttons in clicking:
        tasks.append(
            fake_task(
                f"fake-click-{label.lower()}",
                f'Click the button labelled "{label}".',
                _state_eval("pressed", [label]),
                title=title,
                buttons=buttons,
                field=False,
            )
        )
    sequences: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
        ("OPEN", "CLOSE", "FILES", ("NEW", "OPEN", "CLOSE", "COPY", "MOVE", "DELETE")),
        ("UNDO", "SAVE", "DRAWING", ("UNDO", "REDO", "SAVE", "ZOOM", "CROP", "EXIT")),
    )
    for first, second, title, buttons in sequences:
        tasks.append(
            fake_task(
                f"fake-click-{first.lower()}-then-{second.lower()}",
                f'Click "{first}", then click "{second}".',
                _state_eval("pressed", [first, second]),
                title=title,
                buttons=buttons,
                field=False,
            )
        )
    infeasible: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
        ("bluetooth", "Turn on Bluetooth from this window.", "NOTES", ("OK", "CANCEL")),
        ("dark-theme", "Switch this application to a dark theme.", "EDITOR", ("OPEN", "SAVE", "CLOSE")),
    )
    for slug, instruction, title, buttons in infeasible:
        tasks.append(
            fake_task(f"fake-infeasible-{slug}", instruction, {"func": "infeasible"}, title=title, buttons=buttons)
        )
    return tasks


def check_task(task: Task) -> None:
    """Check that the fake desktop can grade ``task``.

    Raises:
        UnsupportedTaskError: its evaluator uses a function or getter the fake cannot honour (named).
    """
    evaluator = task.evaluator
    funcs = evaluator.get("func")
    func_list = funcs if isinstance(funcs, list) else [funcs]
    for func in func_list:
        if func not in SUPPORTED_FUNCS:
            raise UnsupportedTaskError(
                f"task {task.task_id!r}: the fake backend cannot grade evaluator func {func!r}; it supports "
                f"{', '.join(sorted(SUPPORTED_FUNCS))} (over fake_state results). Run it on the osworld backend"
            )
    if funcs == "infeasible":
        return
    results = _as_list(evaluator.get("result"), len(func_list))
    expected = _as_list(evaluator.get("expected"), len(func_list))
    for func, result, exp in zip(func_list, results, expected, strict=True):
        if func == "infeasible":
            continue
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


# --- the scripted solution -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeStep:
    """One step of a fake task's correct solution.

    Attributes:
        kind: ``click`` (at ``x, y``), ``type`` (``text``), ``key`` (``keys``), ``done`` or ``fail``.
        x: pixel column of a click.
        y: pixel row of a click.
        text: text to type.
        keys: keys to press (one key, or a hotkey chord).
        target: what a click hits (``"text field"`` or a button label), for describing the step.
    """

    kind: Literal["click", "type", "key", "done", "fail"]
    x: int | None = None
    y: int | None = None
    text: str | None = None
    keys: tuple[str, ...] = ()
    target: str | None = None

    @property
    def action(self) -> str:
        """The step as an action string (pyautogui code, ``DONE`` or ``FAIL``)."""
        if self.kind == "click":
            return f"pyautogui.click({self.x}, {self.y})"
        if self.kind == "type":
            return f"pyautogui.typewrite({self.text!r})"
        if self.kind == "key":
            if len(self.keys) == 1:
                return f"pyautogui.press({self.keys[0]!r})"
            return f"pyautogui.hotkey({', '.join(repr(k) for k in self.keys)})"
        return "DONE" if self.kind == "done" else "FAIL"

    @property
    def description(self) -> str:
        """One short imperative sentence (the Qwen format's ``Action:`` line)."""
        if self.kind == "click":
            return f'Click the "{self.target}" button.' if self.target != "text field" else "Click the text field."
        if self.kind == "type":
            return f'Type "{self.text}".'
        if self.kind == "key":
            return f"Press {'+'.join(self.keys)}."
        return "The task is done." if self.kind == "done" else "The task is infeasible."

    def relative(self, screen_size: tuple[int, int]) -> tuple[int, int]:
        """The click position on Qwen's 0..999 relative grid (maps back with ``int(v * size / 999)``)."""
        if self.x is None or self.y is None:
            raise ValueError(f"a {self.kind} step has no position")
        width, height = screen_size
        return round(self.x * 999 / width), round(self.y * 999 / height)


def fake_solution(task: Task, screen_size: tuple[int, int]) -> list[FakeStep]:
    """The correct sequence of steps for a fake task (or an inline task the fake can solve).

    Args:
        task: a task from :func:`default_tasks`, or one whose evaluator is ``infeasible`` or an
            ``exact_match`` over the ``fake_state`` keys ``submitted``, ``last_submitted``, ``pressed``,
            ``last_pressed`` or ``field_text``.
        screen_size: ``(width, height)`` of the desktop; click positions depend on it.

    Raises:
        UnsupportedTaskError: the task has no solution the fake knows.
    """
    check_task(task)
    evaluator = task.evaluator
    func = evaluator.get("func")
    if func == "infeasible":
        return [FakeStep("fail")]
    result, expected = evaluator.get("result"), evaluator.get("expected")
    if func != "exact_match" or not isinstance(result, Mapping) or not isinstance(expected, Mapping):
        raise UnsupportedTaskError(f"task {task.task_id!r}: fake_solution only solves single exact_match tasks")
    key, value = result["key"], expected["rules"].get("expected")
    layout = layout_for(task, screen_size)
    steps: list[FakeStep] = []
    if key in ("submitted", "last_submitted", "field_text"):
        words = value if key == "submitted" else [value]
        if layout.field is None or not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise UnsupportedTaskError(f"task {task.task_id!r}: cannot type {value!r} (no text field or not text)")
        fx, fy = layout.field.center
        steps.append(FakeStep("click", fx, fy, target="text field"))
        for i, word in enumerate(words):
            if word:
                steps.append(FakeStep("type", text=word))
            if key != "field_text":
                steps.append(FakeStep("key", keys=("enter",)))
            elif i:
                raise UnsupportedTaskError(f"task {task.task_id!r}: field_text expects one string")
    else:
        labels = value if key == "pressed" else [value]
        if not isinstance(labels, list):
            raise UnsupportedTaskError(f"task {task.task_id!r}: pressed expects a list of labels, not {value!r}")
        for label in labels:
            rect = layout.button(label) if isinstance(label, str) else None
            if rect is None:
                raise UnsupportedTaskError(f"task {task.task_id!r}: the window has no button {label!r}")
            bx, by = rect.center
            steps.append(FakeStep("click", bx, by, target=label))
    steps.append(FakeStep("done"))
    return steps


# --- the desktop -----------------------------------------------------------------------------------------


@dataclass
class _State:
    cursor: tuple[int, int]
    focused: bool = False
    select_all: bool = False
    field_text: str = ""
    submitted: list[str] = field(default_factory=list)
    pressed: list[str] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    mouse_down_on: str | None = None
    status: str = "READY"
    actions: list[str] = field(default_factory=list)
    last_special: str | None = None
    invalid_actions: int = 0


class FakeDesktop:
    """A deterministic fake desktop. Implements :class:`legato_gym.contract.Desktop`.

    Args:
        config: screen size, ready-signal / fixed-wait mode, deadlines, and the fake's ``options`` (see the
            module docstring).
        seed: seeds latencies and faults; the same seed and calls give the same latencies and faults.

    Raises:
        ConfigError: bad ``config.options``.
    """

    def __init__(self, config: DesktopConfig | None = None, *, seed: int | None = None) -> None:
        self.config = config or DesktopConfig()
        self.options = FakeOptions.from_mapping(self.config.options)
        self._latency_rng = np.random.default_rng(None if seed is None else [seed, 1])
        self._fault_rng = np.random.default_rng(None if seed is None else [seed, 2])
        self._wake = threading.Event()
        self._closed = False
        self._crashed: str | None = None
        self._task: Task | None = None
        self._layout: Layout | None = None
        self._state: _State | None = None
        self._frame: Frame | None = None
        self._cursor_masks = _cursor_masks(max(1, min(self.config.screen[0] // 640, self.config.screen[1] // 360)))

    # -- the contract ------------------------------------------------------------------------------------

    @property
    def screen_size(self) -> tuple[int, int]:
        """``(width, height)`` from ``config.screen``."""
        return self.config.screen

    def check_task(self, task: Task) -> None:
        """Raise :class:`UnsupportedTaskError` if this desktop cannot run ``task`` (see :func:`check_task`)."""
        check_task(task)
        layout_for(task, self.screen_size)

    def reset(self, task: Task) -> None:
        """Show the task's window in its starting state (setup steps other than ``fake_window`` are no-ops)."""
        self._check_open("reset")
        if not isinstance(task, Task):
            raise TypeError(f"reset() takes a legato_gym.Task, not {type(task).__name__}")
        self._task = self._layout = self._state = self._frame = None
        self._crashed = None
        self.check_task(task)
        self._fault("reset")
        faults = self.options.faults
        setup_failed = float(self._fault_rng.random()) < faults.setup
        self._spend("reset", self.config.timeouts.reset)
        if setup_failed:
            raise SetupError(
                f"setup of task {task.task_id!r} failed (injected fault, options.faults.setup={faults.setup})"
            )
        layout = layout_for(task, self.screen_size)
        width, height = self.screen_size
        self._task, self._layout = task, layout
        self._state = _State(cursor=(width // 2, height // 2))
        self._frame = self._render_all()

    def wait_after_reset(self) -> Waited:
        """The ready-signal wait (settle latency), or ``30 * fixed_wait`` without ready signals."""
        self._check_running("wait_after_reset")
        self._fault("wait_after_reset")
        return self._wait(30.0)

    def observe(self) -> Observation:
        """A new screenshot array (the cached frame plus the pointer)."""
        self._check_running("observe")
        self._fault("observe")
        assert self._frame is not None and self._state is not None and self._task is not None
        frame = self._frame.copy()
        self._draw_cursor(frame, self._state.cursor)
        return Observation(screenshot=frame, instruction=self._task.instruction)

    def act(self, action: str) -> ActResult:
        """Parse and apply one action, then wait for the screen to settle (or ``fixed_wait``).

        An action outside the action space changes nothing (as code failing inside a real desktop) and is
        logged; it still counts in the history that graders see.
        """
        self._check_running("act")
        self._fault("act")
        state = self._state
        assert state is not None
        t0 = time.perf_counter()
        self._spend("act", self.config.timeouts.act)
        state.actions.append(action)
        try:
            parsed = parse_action(action)
        except ActionError as exc:
            state.invalid_actions += 1
            state.last_special = None
            logger.debug("fake desktop ignored an invalid action: %s", exc)
        else:
            state.last_special = parsed.special
            for command in parsed.commands:
                self._apply(command)
        act_s = time.perf_counter() - t0
        if self.config.ready_signal:
            waited = self._wait(1.0)
            return ActResult(act_s=act_s, ready_s=waited.seconds)
        t1 = time.perf_counter()
        self._sleep(self.config.fixed_wait * (2 if action.strip() == "WAIT" else 1))
        return ActResult(act_s=act_s, wait_s=time.perf_counter() - t1)

    def wait_before_eval(self) -> Waited:
        """The ready-signal wait before grading, or ``10 * fixed_wait`` without ready signals."""
        self._check_running("wait_before_eval")
        self._fault("wait_before_eval")
        return self._wait(10.0)

    def evaluate(self) -> float:
        """Grade the task from the window's state, with OSWorld's rules for ``infeasible`` and ``FAIL``."""
        self._check_running("evaluate")
        self._fault("evaluate")
        self._spend("evaluate", self.config.timeouts.evaluate)
        assert self._task is not None and self._state is not None
        return self._grade(self._task, self._state)

    def close(self) -> None:
        """Release the frame and end any wait in progress. Idempotent."""
        self._closed = True
        self._wake.set()
        self._frame = None

    # -- introspection (tests, debugging) ----------------------------------------------------------------

    @property
    def state(self) -> Mapping[str, Any]:
        """The window's state as the ``fake_state`` getter sees it, plus the pointer and action count."""
        self._check_running("state")
        assert self._state is not None
        return {**self._state_values(self._state), "cursor": self._state.cursor, "actions": len(self._state.actions)}

    @property
    def layout(self) -> Layout:
        """The current task's layout."""
        self._check_running("layout")
        assert self._layout is not None
        return self._layout

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

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._wake.wait(seconds)

    def _spend(self, phase: str, deadline: float) -> float:
        latency = self.options.latency.get(phase, Latency()).sample(self._latency_rng)
        if latency > deadline:
            self._sleep(deadline)
            raise DeadlineExceeded(
                f"fake {phase} took {latency:.1f}s, over its {deadline:.1f}s deadline (options.latency.{phase}; "
                "raise DesktopConfig.timeouts to allow it)"
            )
        self._sleep(latency)
        return latency

    def _wait(self, fixed_factor: float) -> Waited:
        if not self.config.ready_signal:
            seconds = self.config.fixed_wait * fixed_factor
            self._sleep(seconds)
            return Waited(seconds=seconds, ready=False)
        latency = self.options.latency.get("settle", Latency()).sample(self._latency_rng)
        deadline = self.config.timeouts.ready
        self._sleep(min(latency, deadline))
        return Waited(seconds=min(latency, deadline), ready=latency <= deadline)

    def _fault(self, phase: str) -> None:
        faults = self.options.faults
        if phase not in faults.phases:
            return
        crash, hang = float(self._fault_rng.random()), float(self._fault_rng.random())
        if crash < faults.crash:
            if faults.crash_mode == "exit":
                logger.error("fake desktop: injected crash during %s, exiting the process", phase)
                os._exit(CRASH_EXIT_CODE)
            self._crashed = phase
            raise DesktopCrashed(f"the fake desktop crashed during {phase} (injected fault, options.faults.crash)")
        if hang < faults.hang:
            logger.warning("fake desktop: injected hang during %s for %.0fs", phase, faults.hang_seconds)
            self._sleep(faults.hang_seconds)
            self._crashed = phase
            raise DeadlineExceeded(
                f"the fake desktop hung for {faults.hang_seconds:.0f}s during {phase} (injected fault, "
                "options.faults.hang)"
            )

    # -- grading -----------------------------------------------------------------------------------------

    @staticmethod
    def _state_values(state: _State) -> dict[str, Any]:
        return {
            "submitted": list(state.submitted),
            "last_submitted": state.submitted[-1] if state.submitted else None,
            "pressed": list(state.pressed),
            "last_pressed": state.pressed[-1] if state.pressed else None,
            "field_text": state.field_text,
        }

    def _grade(self, task: Task, state: _State) -> float:
        evaluator = task.evaluator
        funcs = evaluator.get("func")
        if funcs == "infeasible":
            return 1.0 if state.last_special == "FAIL" else 0.0
        if state.last_special == "FAIL":
            return 0.0
        func_list = funcs if isinstance(funcs, list) else [funcs]
        results = _as_list(evaluator.get("result"), len(func_list))
        expected = _as_list(evaluator.get("expected"), len(func_list))
        values = self._state_values(state)
        conj = evaluator.get("conj", "and")
        scores = []
        for func, result, exp in zip(func_list, results, expected, strict=True):
            if func == "infeasible":
                continue
            score = _METRICS[func](values[result["key"]], exp["rules"])
            if conj == "and" and score == 0:
                return 0.0
            if conj == "or" and score == 1:
                return 1.0
            scores.append(score)
        if not scores:
            return 0.0
        return float(sum(scores) / len(scores)) if conj == "and" else float(max(scores))

    # -- applying actions --------------------------------------------------------------------------------

    def _clamp(self, x: int, y: int) -> tuple[int, int]:
        width, height = self.screen_size
        return min(max(x, 0), width - 1), min(max(y, 0), height - 1)

    def _widget_at(self, x: int, y: int) -> str | None:
        layout = self._layout
        assert layout is not None
        if layout.field is not None and layout.field.contains(x, y):
            return "\0field"
        for label, rect in layout.buttons:
            if rect.contains(x, y):
                return label
        return None

    def _apply(self, command: Command) -> None:
        state = self._state
        assert state is not None
        if isinstance(command, (Click, MouseDown, MouseUp, Scroll)) and command.x is not None:
            assert command.y is not None
            state.cursor = self._clamp(command.x, command.y)
        if isinstance(command, MouseMove):
            state.cursor = self._clamp(command.x, command.y)
        elif isinstance(command, Click):
            if command.button == "left" and command.clicks > 0:
                self._click(self._widget_at(*state.cursor), command.clicks)
        elif isinstance(command, MouseDown):
            state.mouse_down_on = self._widget_at(*state.cursor) if command.button == "left" else None
        elif isinstance(command, MouseUp):
            down, state.mouse_down_on = state.mouse_down_on, None
            if command.button == "left" and down is not None and down == self._widget_at(*state.cursor):
                self._click(down, 1)
        elif isinstance(command, Drag):
            # A drag presses where it starts and releases where it ends: it clicks only if both are the same widget.
            start = self._widget_at(*state.cursor)
            state.cursor = self._clamp(command.x, command.y)
            if command.button == "left" and start is not None and start == self._widget_at(*state.cursor):
                self._click(start, 1)
        elif isinstance(command, TypeText):
            for ch in command.text:
                self._key({"\n": "enter", "\r": "enter", "\t": "tab"}.get(ch, ch))
        elif isinstance(command, Press):
            for _ in range(min(command.presses, 1000)):
                for key in command.keys:
                    self._key(key)
        elif isinstance(command, Hotkey):
            self._hotkey(command.keys)
        elif isinstance(command, KeyDown):
            if command.key in _MODIFIERS:
                state.held.add(command.key)
            else:
                self._key(command.key)
        elif isinstance(command, KeyUp):
            state.held.discard(command.key)
        elif isinstance(command, (Scroll, Sleep)):
            pass  # nothing scrolls in the fake window; sleeps inside an action are not slept

    def _click(self, widget: str | None, clicks: int) -> None:
        state = self._state
        assert state is not None
        was_focused = state.focused
        if widget == "\0field":
            state.focused = True
            state.select_all = clicks >= 2
        else:
            state.focused = state.select_all = False
            if widget is not None:
                state.pressed.append(widget)
                state.status = f"PRESSED: {widget}"
                self._draw_buttons()
                self._draw_status()
        if was_focused != state.focused or widget == "\0field":
            self._draw_field()

    def _hotkey(self, keys: Sequence[str]) -> None:
        state = self._state
        assert state is not None
        mods = {_base_modifier(k) for k in keys if k in _MODIFIERS}
        rest = [k for k in keys if k not in _MODIFIERS]
        if not rest:
            return
        key = rest[-1]
        if mods <= {"shift"}:
            self._key(key.upper() if len(key) == 1 else key, shifted=bool(mods))
        elif mods == {"ctrl"} and key in ("a", "A") and state.focused:
            state.select_all = True
            self._draw_field()
        elif mods == {"ctrl"} and key == "backspace" and state.focused:
            state.field_text = ""
            self._draw_field()

    def _key(self, key: str, *, shifted: bool = False) -> None:
        state = self._state
        assert state is not None
        held = {_base_modifier(k) for k in state.held}
        if held - {"shift"} and not shifted:
            self._hotkey([*sorted(held), key])
            return
        if "shift" in held and len(key) == 1:
            key = key.upper()
        if not state.focused:
            return
        if key in ("enter", "return"):
            state.submitted.append(state.field_text)
            state.status = f"SUBMITTED: {state.field_text}"
            state.field_text, state.select_all = "", False
            self._draw_status()
        elif key in ("backspace", "delete", "del"):
            state.field_text = "" if state.select_all else state.field_text[:-1]
            state.select_all = False
        elif key in ("escape", "esc", "tab"):
            state.focused = state.select_all = False
        elif key == "space" or len(key) == 1:
            ch = " " if key == "space" else key
            if state.select_all:
                state.field_text, state.select_all = "", False
            if len(state.field_text) < _MAX_FIELD_CHARS:
                state.field_text += ch
        else:
            return
        self._draw_field()

    # -- rendering ---------------------------------------------------------------------------------------

    def _render_all(self) -> Frame:
        layout = self._layout
        assert layout is not None
        width, height = self.screen_size
        s = layout.scale
        frame = np.empty((height, width, 3), dtype=np.uint8)
        _fill(frame, Rect(0, 0, width, height), layout.background)
        _fill(frame, layout.panel, (32, 32, 36))
        _text(frame, "ACTIVITIES", 4 * s, (layout.panel.h - 7 * s) // 2, (230, 230, 230), s, layout.panel)
        win = layout.window
        _box(frame, win, (236, 236, 236), (60, 60, 70), s)
        _fill(frame, layout.title_bar, (52, 92, 168))
        _centered_text(frame, layout.title, layout.title_bar, (255, 255, 255), s)
        self._frame = frame
        self._draw_field()
        self._draw_buttons()
        self._draw_status()
        return frame

    def _draw_field(self) -> None:
        layout, state, frame = self._layout, self._state, self._frame
        if layout is None or state is None or frame is None or layout.field is None:
            return
        s, rect = layout.scale, layout.field
        border = (40, 110, 230) if state.focused else (120, 120, 128)
        _box(frame, rect, (255, 255, 255), border, 2 * s if state.focused else s)
        inner = Rect(rect.x + 3 * s, rect.y, rect.w - 6 * s, rect.h)
        cell = (GLYPH_WIDTH + 1) * s
        visible = state.field_text[-max(1, inner.w // cell - 1) :] if state.field_text else ""
        ty = rect.y + (rect.h - GLYPH_HEIGHT * s) // 2
        if state.select_all and visible:
            _fill(frame, Rect(inner.x, ty - s, len(visible) * cell, (GLYPH_HEIGHT + 2) * s), (170, 200, 250))
        _text(frame, visible, inner.x, ty, (20, 20, 20), s, inner)
        if state.focused:
            _fill(frame, Rect(inner.x + len(visible) * cell, ty - s, s, (GLYPH_HEIGHT + 2) * s), (20, 20, 20))

    def _draw_buttons(self) -> None:
        layout, state, frame = self._layout, self._state, self._frame
        if layout is None or state is None or frame is None:
            return
        s = layout.scale
        last = state.pressed[-1] if state.pressed else None
        for label, rect in layout.buttons:
            fill = (190, 205, 230) if label == last else (250, 250, 250)
            _box(frame, rect, fill, (90, 90, 100), s)
            _centered_text(frame, label, rect, (20, 20, 20), s)

    def _draw_status(self) -> None:
        layout, state, frame = self._layout, self._state, self._frame
        if layout is None or state is None or frame is None:
            return
        _fill(frame, layout.status, (236, 236, 236))
        _text(frame, state.status, layout.status.x, layout.status.y, (70, 70, 80), layout.scale, layout.status)

    def _draw_cursor(self, frame: Frame, at: tuple[int, int]) -> None:
        outline, inside = self._cursor_masks
        x, y = at
        height, width = frame.shape[:2]
        h, w = min(outline.shape[0], height - y), min(outline.shape[1], width - x)
        region = frame[y : y + h, x : x + w]
        region[outline[:h, :w]] = (0, 0, 0)
        region[inside[:h, :w]] = (255, 255, 255)
