"""Brains of the reference policy server: what it answers to a prompt.

A brain is any object with ``respond(messages) -> Reply``; it is called from the server's request threads,
so it must be thread-safe. Replies follow the Qwen3-VL computer-use format (OSWorld's Qwen3VLAgent)::

    Action: Click the OK button.
    <tool_call>
    {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [500, 312]}}
    </tool_call>

with coordinates on the 0..999 relative grid, and ``{"action": "terminate", "status": "success"}`` to end.

* :class:`ScriptedSolver` solves the fake backend's tasks: it reads the instruction and the step index from
  the prompt and answers the next step of ``legato_gym.backends.fake.fake_solution``.
* :class:`RandomBrain` answers random valid actions (seeded).
* :class:`ReplayBrain` answers from a list.
"""

from __future__ import annotations

import ast
import base64
import json
import logging
import random
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from legato_gym.config import DesktopConfig
from legato_gym.contract import Task
from legato_gym.errors import BackendUnavailableError, ConfigError
from legato_gym.png import png_size
from legato_rl.images import PNG_DATA_URL

__all__ = [
    "Brain",
    "RandomBrain",
    "ReplayBrain",
    "Reply",
    "ScriptedSolver",
    "brain_named",
    "prompt_instruction",
    "prompt_step_index",
    "qwen_reply",
    "to_qwen_actions",
]

logger = logging.getLogger(__name__)

_INSTRUCTION = re.compile(r"^\s*Instruction:\s*(.*?)\s*$", re.MULTILINE)
_STEP_LINE = re.compile(r"^\s*Step \d+:", re.MULTILINE)


@dataclass(frozen=True)
class Reply:
    """What a brain answers.

    Attributes:
        content: the reply text.
        reasoning: thinking text, returned in the reasoning field when the server runs a reasoning parser
            and inside ``<think>...</think>`` in the content otherwise.
    """

    content: str
    reasoning: str | None = None


@runtime_checkable
class Brain(Protocol):
    """Decides the reference server's reply. Called from several threads at once."""

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        """The reply to a chat prompt."""
        ...


def qwen_reply(description: str, actions: Iterable[Mapping[str, Any]]) -> str:
    """A reply in the Qwen3-VL computer-use format: an ``Action:`` line, then one ``<tool_call>`` per action."""
    lines = [f"Action: {description}"]
    for arguments in actions:
        call = {"name": "computer_use", "arguments": dict(arguments)}
        lines += ["<tool_call>", json.dumps(call), "</tool_call>"]
    return "\n".join(lines)


def _texts(messages: Sequence[Mapping[str, Any]], role: str) -> list[str]:
    out = []
    for message in messages:
        if message.get("role") != role:
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
    return out


def prompt_instruction(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The task instruction: the first ``Instruction:`` line of the user messages."""
    for text in _texts(messages, "user"):
        match = _INSTRUCTION.search(text)
        if match:
            return match.group(1)
    return None


def prompt_step_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """The step a prompt asks for: assistant messages plus ``Step i:`` lines (older steps kept as text)."""
    assistants = sum(1 for m in messages if m.get("role") == "assistant")
    lines = sum(len(_STEP_LINE.findall(t)) for t in _texts(messages, "user"))
    return assistants + lines


def _relative(value: float, size: int) -> int:
    return max(0, min(999, round(value * 999 / size)))


_CLICKS = {
    "click": "left_click",
    "leftClick": "left_click",
    "doubleClick": "double_click",
    "rightClick": "right_click",
    "middleClick": "middle_click",
    "moveTo": "mouse_move",
    "dragTo": "left_click_drag",
}


def to_qwen_actions(step: Any, screen_size: tuple[int, int]) -> tuple[str, list[dict[str, Any]]]:
    """A fake-task solution step as (``Action:`` sentence, Qwen ``computer_use`` arguments).

    Accepts a pyautogui action string (``pyautogui.click(10, 20)``, ``WAIT``, ``DONE``, ``FAIL``; several
    statements give several tool calls) or an object whose ``action`` (or ``code``) attribute is one, with an
    optional ``description``. Pixel coordinates become the 0..999 relative grid.
    """
    code = step if isinstance(step, str) else getattr(step, "code", None) or getattr(step, "action", None)
    if not isinstance(code, str):
        raise TypeError(f"cannot read a fake solution step {step!r}: expected a pyautogui action string")
    description = getattr(step, "description", None)
    width, height = screen_size
    special = code.strip()
    if special == "DONE":
        return description or "The task is done.", [{"action": "terminate", "status": "success"}]
    if special == "FAIL":
        return description or "The task cannot be done.", [{"action": "terminate", "status": "failure"}]
    if special == "WAIT":
        return description or "Wait for the screen.", [{"action": "wait", "time": 1}]
    actions: list[dict[str, Any]] = []
    sentences: list[str] = []
    for node in ast.walk(ast.parse(code)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        if name in _CLICKS:
            x = kwargs.get("x", args[0] if args else width // 2)
            y = kwargs.get("y", args[1] if len(args) > 1 else height // 2)
            actions.append({"action": _CLICKS[name], "coordinate": [_relative(x, width), _relative(y, height)]})
            sentences.append(f"{_CLICKS[name].replace('_', ' ')} at ({x}, {y})")
        elif name in ("typewrite", "write"):
            text = str(kwargs.get("message", args[0] if args else ""))
            actions.append({"action": "type", "text": text})
            sentences.append(f"type {text!r}")
        elif name == "press":
            keys = args[0] if args else kwargs.get("keys", "enter")
            keys = list(keys) if isinstance(keys, (list, tuple)) else [keys]
            # press([a, b]) presses one key after the other; a Qwen "key" action presses its keys together
            presses = int(kwargs.get("presses", 1))
            actions.extend({"action": "key", "keys": [key]} for key in keys for _ in range(presses))
            sentences.append(f"press {', '.join(keys)}")
        elif name == "hotkey":
            actions.append({"action": "key", "keys": [str(a) for a in args]})
            sentences.append(f"press {'+'.join(str(a) for a in args)}")
        elif name == "scroll":
            pixels = int(kwargs.get("clicks", args[0] if args else 0))
            actions.append({"action": "scroll", "pixels": pixels})
            sentences.append(f"scroll by {pixels}")
    if not actions:
        raise ValueError(f"no pyautogui call the Qwen format can express in {code!r}")
    text = description or "; ".join(sentences).capitalize() + "."
    return text, actions


Solution = Callable[[Task, tuple[int, int]], Sequence[Any]]


def last_image_size(messages: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
    """``(width, height)`` of the last PNG data-URL image in the messages, read from its header."""
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in reversed(content):
            url = part.get("image_url", {}).get("url", "") if isinstance(part, Mapping) else ""
            if url.startswith(PNG_DATA_URL):
                size = png_size(base64.b64decode(url[len(PNG_DATA_URL) : len(PNG_DATA_URL) + 32]))
                if size is not None:
                    return size
    return None


class ScriptedSolver:
    """Answers the next correct action of a fake task, in the Qwen3-VL format.

    It finds the task whose instruction matches the prompt's ``Instruction:`` line, counts the steps already
    taken (assistant messages plus ``Step i:`` lines) and answers that step of the task's solution; after
    the last step it answers ``terminate`` with status ``success``. An unknown instruction gets
    ``terminate`` with status ``failure``.

    Args:
        tasks: the tasks it can solve; default: the fake backend's ``default_tasks(DesktopConfig())``.
        screen_size: ``(width, height)`` the harness maps the 0..999 grid onto; default: the size of the
            prompt's last screenshot (a PNG data URL), else DesktopConfig's.
        solution: ``(task, screen_size) -> steps``; default: ``legato_gym.backends.fake.fake_solution``.
        reasoning: also return a short thinking text (to exercise reasoning fields).
    """

    def __init__(
        self,
        tasks: Sequence[Task] | None = None,
        *,
        screen_size: tuple[int, int] | None = None,
        solution: Solution | None = None,
        reasoning: bool = False,
    ) -> None:
        self._tasks = list(tasks) if tasks is not None else None
        self._screen = screen_size
        self._solution = solution
        self.reasoning = reasoning
        self._lock = threading.Lock()
        self._plans: dict[tuple[str, tuple[int, int]], list[Any]] = {}

    def _resolve(self) -> tuple[list[Task], tuple[int, int], Solution]:
        with self._lock:
            if self._tasks is None or self._solution is None:
                from legato_gym.backends import resolve_backend

                try:
                    fake = resolve_backend("fake")  # its unit: the suite and its scripted solutions
                except BackendUnavailableError as exc:
                    raise BackendUnavailableError(
                        "ScriptedSolver needs the fake backend (legato_gym.backends.fake) for its tasks and "
                        "solutions; pass tasks= and solution= to use it without"
                    ) from exc
                if self._tasks is None:
                    self._tasks = list(fake.default_tasks(DesktopConfig()))
                if self._solution is None and fake.solution is not None:
                    solve = fake.solution
                    self._solution = lambda task, screen: list(solve(task, screen) or [])
            assert self._solution is not None  # the fake backend declares its solutions
            return self._tasks, self._screen or DesktopConfig().screen, self._solution

    def _find(self, tasks: list[Task], instruction: str) -> Task | None:
        wanted = instruction.strip()
        for task in tasks:
            if task.instruction.strip() == wanted:
                return task
        lowered = wanted.casefold()
        for task in tasks:
            if task.instruction.strip().casefold() == lowered:
                return task
        return None

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        tasks, screen, solution = self._resolve()
        if self._screen is None:  # look at the screenshot, as a model would: its size is the screen's
            screen = last_image_size(messages) or screen
        instruction = prompt_instruction(messages)
        task = self._find(tasks, instruction) if instruction is not None else None
        if task is None:
            logger.debug("scripted solver: no fake task has the instruction %r", instruction)
            content = qwen_reply("I do not know this task.", [{"action": "terminate", "status": "failure"}])
            return Reply(content, "Unknown task." if self.reasoning else None)
        with self._lock:
            plan = self._plans.get((task.task_id, screen))
            if plan is None:
                plan = self._plans[(task.task_id, screen)] = list(solution(task, screen))
        index = prompt_step_index(messages)
        if index < len(plan):
            description, actions = to_qwen_actions(plan[index], screen)
        else:
            description, actions = "The task is done.", [{"action": "terminate", "status": "success"}]
        thought = f"Step {index + 1} of {len(plan)} for: {task.instruction}" if self.reasoning else None
        return Reply(qwen_reply(description, actions), thought)


class RandomBrain:
    """Random valid Qwen computer-use actions (seeded; thread-safe).

    Args:
        seed: seeds the choices.
        terminate_prob: chance that a reply is ``terminate`` (status success or failure at random).
    """

    _WORDS = ("hello", "legato", "report", "42", "cancel", "ok")
    _KEYS = (["enter"], ["tab"], ["ctrl", "a"], ["escape"], ["ctrl", "s"])

    def __init__(self, seed: int | None = 0, *, terminate_prob: float = 0.05) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.terminate_prob = terminate_prob

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        with self._lock:
            rng = self._rng
            if rng.random() < self.terminate_prob:
                status = rng.choice(["success", "failure"])
                return Reply(qwen_reply(f"Stop ({status}).", [{"action": "terminate", "status": status}]))
            kind = rng.choice(["left_click", "double_click", "right_click", "mouse_move", "type", "key", "scroll"])
            args: dict[str, Any] = {"action": kind}
            if kind in ("left_click", "double_click", "right_click", "mouse_move"):
                args["coordinate"] = [rng.randrange(1000), rng.randrange(1000)]
                sentence = f"{kind.replace('_', ' ').capitalize()} somewhere."
            elif kind == "type":
                args["text"] = rng.choice(self._WORDS)
                sentence = f"Type {args['text']!r}."
            elif kind == "key":
                args["keys"] = list(rng.choice(self._KEYS))
                sentence = f"Press {'+'.join(args['keys'])}."
            else:
                args["pixels"] = rng.choice([-5, -3, 3, 5])
                sentence = "Scroll."
            return Reply(qwen_reply(sentence, [args]))


class ReplayBrain:
    """Answers from a list, in order; when the list is spent, ``terminate`` with status ``failure``.

    Args:
        replies: reply texts or :class:`Reply` objects.
        cycle: start again from the first reply instead of terminating.
    """

    def __init__(self, replies: Sequence[str | Reply], *, cycle: bool = False) -> None:
        self._replies = [r if isinstance(r, Reply) else Reply(r) for r in replies]
        self._cycle = cycle
        self._next = 0
        self._lock = threading.Lock()

    @property
    def served(self) -> int:
        """Replies given so far."""
        return self._next

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        with self._lock:
            index = self._next
            self._next += 1
        if self._cycle and self._replies:
            return self._replies[index % len(self._replies)]
        if index < len(self._replies):
            return self._replies[index]
        return Reply(qwen_reply("No more replies.", [{"action": "terminate", "status": "failure"}]))


def brain_named(name: str, seed: int, replies: str | None) -> Brain:
    """The brain ``python -m legato_rl.testing.server --brain NAME`` answers with."""
    if name == "scripted":
        return ScriptedSolver()
    if name == "random":
        return RandomBrain(seed)
    if name == "replay":
        if not replies:
            raise ConfigError("--brain replay needs --replies FILE (a JSON list of reply texts)")
        with open(replies, encoding="utf-8") as f:
            return ReplayBrain([str(r) for r in json.load(f)])
    raise ConfigError(f"unknown brain {name!r}; choose scripted, random or replay")
