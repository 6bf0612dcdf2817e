"""The fake suite and its scripted solutions: OSWorld-format task configs whose evaluator reads the window.

:func:`fake_task` builds one (its ``fake_window`` setup step describes the window), :func:`default_tasks` is the
suite ``DesktopEnv.reset()`` picks from, and :func:`fake_solution` gives the correct steps on a screen size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from legato_gym.backends.fake.grading import check_task
from legato_gym.backends.fake.layout import FAKE_WINDOW, layout_for
from legato_gym.config import DesktopConfig
from legato_gym.contract import Task
from legato_gym.errors import UnsupportedTaskError

__all__ = ["FakeStep", "default_tasks", "fake_solution", "fake_task"]


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
    clicking: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
        (("SAVE",), "EDITOR", ("OPEN", "SAVE", "PRINT", "CLOSE", "UNDO", "HELP")),
        (("EXPORT",), "REPORT", ("IMPORT", "EXPORT", "DELETE", "SEND", "CANCEL", "OK")),
        (("APPLY",), "SETTINGS", ("APPLY", "RESET", "CANCEL", "OK", "HELP", "DEFAULTS")),
        (("OPEN", "CLOSE"), "FILES", ("NEW", "OPEN", "CLOSE", "COPY", "MOVE", "DELETE")),
        (("UNDO", "SAVE"), "DRAWING", ("UNDO", "REDO", "SAVE", "ZOOM", "CROP", "EXIT")),
    )
    for labels, title, buttons in clicking:
        if len(labels) == 1:
            instruction = f'Click the button labelled "{labels[0]}".'
        else:
            instruction = ", then click ".join(f'"{label}"' for label in labels)
            instruction = f"Click {instruction}."
        tasks.append(
            fake_task(
                "fake-click-" + "-then-".join(label.lower() for label in labels),
                instruction,
                _state_eval("pressed", list(labels)),
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
