"""The desktop contract: the seven calls every backend implements.

A *desktop* is one screen that an agent drives: a VM, a sandboxed X display on this host, or a fake. legato
drives every desktop through the same seven calls, in this order::

    desktop.reset(task)               # bring the desktop to the task's starting state (runs its setup)
    desktop.wait_after_reset()        # wait until the desktop is ready (ready signal or fixed wait)
    loop:
        desktop.observe()             # screenshot + instruction
        desktop.act(action)           # run one action, then wait for the screen to settle
    desktop.wait_before_eval()        # post-config, then wait for the screen to settle
    desktop.evaluate()                # the task's grader: a score in [0, 1]
    desktop.close()                   # release everything (idempotent)

Actions are strings in OSWorld's ``pyautogui`` action space: Python source calling ``pyautogui`` functions,
or one of the special strings ``WAIT``, ``DONE`` and ``FAIL``. Every action, special ones included, is passed
to :meth:`Desktop.act` so the desktop keeps the action history that graders need (OSWorld's ``infeasible``
tasks score 1 only when the last action is ``FAIL``). Actions are arbitrary code: a backend runs them inside
the desktop (VM or sandbox), never in the calling process.

A backend signals infrastructure failure with :class:`~legato_gym.errors.DesktopError` subclasses
(``SetupError``, ``DesktopCrashed``, ``DeadlineExceeded``); anything else it raises is treated the same way
by the vector env. A task the backend cannot run raises :class:`~legato_gym.errors.UnsupportedTaskError`
from :meth:`Desktop.reset` (or earlier, from :meth:`Desktop.check_task`).

A backend may have a ``screen_size`` property, ``(width, height)`` fixed for the desktop's lifetime; without
it, the screen's size is its first observation's, which must be ``DesktopConfig.screen`` (the spaces are
built from that).

A backend may also have ``expect_next(task)``, called before ``reset`` by a caller that knows which task the
reset *after* it will be for (``None``: not known): a scheduler handing a desktop a GRPO group's attempts
one after the other. It is a hint, never a promise: the local backend sets that task up on the desktop it
starts ahead during the episode, and a reset of another task just does not use it.

Writing a backend: implement :class:`Desktop` (a structural protocol; no base class needed), then run
:func:`legato_gym.conformance.check_desktop` against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from legato_gym.errors import ConfigError

__all__ = [
    "MAX_TASK_ID_BYTES",
    "SPECIAL_ACTIONS",
    "TASK_ID_RULE",
    "ActResult",
    "Desktop",
    "Observation",
    "Task",
    "Waited",
    "screen_size_of",
    "task_id_problem",
    "task_path",
]

#: Actions that run no code: ``WAIT`` pauses, ``DONE`` and ``FAIL`` end the episode.
SPECIAL_ACTIONS = frozenset({"WAIT", "DONE", "FAIL"})

Screenshot = npt.NDArray[np.uint8]

#: The longest task id, in UTF-8 bytes: a file name on common filesystems (ext4, xfs, tmpfs) is 255 at most.
MAX_TASK_ID_BYTES = 255


def task_id_problem(task_id: object) -> str | None:
    """Why ``task_id`` cannot name a file of its own, or ``None`` when it can.

    Backends build paths from task ids (a per-task cache folder, a task's data folder), so an id must be
    one safe file name: a non-empty string with no ``/``, ``\\`` or NUL, not ``.`` or ``..``, at most
    255 bytes in UTF-8.

    Example:
        >>> task_id_problem("28cc3b7e-b194-4bc9-8353-d04c0f4d56d2") is None
        True
        >>> task_id_problem("/home/me")
        'it contains "/", so it would be a path, not a file name'
    """
    if not isinstance(task_id, str):
        return f"it is a {type(task_id).__name__}, not a string"
    if not task_id:
        return "it is empty"
    for char, name in (("/", '"/"'), ("\\", '"\\"'), ("\0", "a NUL character")):
        if char in task_id:
            return f"it contains {name}, so it would be a path, not a file name"
    if task_id in (".", ".."):
        return f'it is "{task_id}", which names a folder'
    if len(task_id.encode("utf-8", "surrogatepass")) > MAX_TASK_ID_BYTES:
        return f"it is longer than {MAX_TASK_ID_BYTES} bytes, too long for a file name"
    return None


#: The rule of :func:`task_id_problem`, for error messages.
TASK_ID_RULE = f'one safe file name: not empty, no "/", "\\" or NUL, not "." or "..", at most {MAX_TASK_ID_BYTES} bytes'


def task_path(base: Path, task_id: str) -> Path:
    """``base / task_id``, for a task id that is checked to be one safe file name (:func:`task_id_problem`).

    Raises:
        ConfigError: the id is not a safe file name; no path is built from it.
    """
    problem = task_id_problem(task_id)
    if problem is not None:
        raise ConfigError(f"task id {task_id!r} cannot name a folder: {problem}; a task id must be {TASK_ID_RULE}")
    return base / task_id


@dataclass(frozen=True)
class Task:
    """One task: an OSWorld-format task config plus where it came from.

    Attributes:
        task_id: the task's id (OSWorld's ``id``, a UUID for real tasks).
        instruction: what the agent is asked to do.
        config: the whole OSWorld task config (``config`` setup steps, ``evaluator``, ...), as read.
        domain: OSWorld domain (``os``, ``chrome``, ...) or ``None`` for an inline config without one.
        source: the file the config was read from, or ``None`` for inline configs.

    Raises:
        ConfigError: ``task_id`` is not one safe file name (see :func:`task_id_problem`): backends build
            paths from it.
    """

    task_id: str
    instruction: str
    config: Mapping[str, Any] = field(repr=False)
    domain: str | None = None
    source: Path | None = None

    def __post_init__(self) -> None:
        problem = task_id_problem(self.task_id)
        if problem is not None:
            raise ConfigError(
                f"task id {self.task_id!r} is refused: {problem}. A task id must be {TASK_ID_RULE}, since "
                "backends build paths from it; rename the task"
            )

    @property
    def evaluator(self) -> Mapping[str, Any]:
        """The task's ``evaluator`` block (empty when it has none)."""
        value = self.config.get("evaluator") or {}
        return value if isinstance(value, Mapping) else {}

    @property
    def setup(self) -> list[Mapping[str, Any]]:
        """The task's setup steps (OSWorld's ``config`` list)."""
        return list(self.config.get("config") or [])

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (it crosses process boundaries as JSON)."""
        return {
            "task_id": self.task_id,
            "instruction": self.instruction,
            "config": dict(self.config),
            "domain": self.domain,
            "source": str(self.source) if self.source is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        """The inverse of :meth:`to_json`."""
        source = data.get("source")
        return cls(
            task_id=str(data["task_id"]),
            instruction=str(data["instruction"]),
            config=dict(data["config"]),
            domain=data.get("domain"),
            source=Path(source) if source else None,
        )


@dataclass(frozen=True)
class Observation:
    """What the agent sees after each step.

    Attributes:
        screenshot: the screen as an ``(H, W, 3)`` ``uint8`` array (RGB).
        instruction: the task's instruction.
        png: the same screenshot PNG-encoded, when the backend has it anyway (an OSWorld-protocol backend
            gets it for free: the server's ``/screenshot`` answers with PNG bytes), else ``None``. It must
            decode to exactly ``screenshot``. Vector env workers send it to the driver as it is
            (``DesktopVectorEnv(png=True)``) instead of encoding the array again.
    """

    screenshot: Screenshot = field(repr=False)
    instruction: str
    png: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Waited:
    """How one wait ended.

    Attributes:
        seconds: time spent waiting.
        ready: True when a ready signal was seen; False when the deadline passed or the wait was a fixed
            sleep (``--no-ready-signal``).
    """

    seconds: float
    ready: bool


@dataclass(frozen=True)
class ActResult:
    """Timings of one action.

    Attributes:
        act_s: time spent running the action inside the desktop.
        ready_s: time spent waiting for the ready signal (screen settled) after it.
        wait_s: time spent in a fixed wait after it (``--no-ready-signal --fixed-wait S``; 0 otherwise).
    """

    act_s: float
    ready_s: float = 0.0
    wait_s: float = 0.0


@runtime_checkable
class Desktop(Protocol):
    """A desktop backend: the seven calls. See the module docstring for the call order and the error rules.

    Anything else is optional: the desktop's ``screen_size`` (:func:`screen_size_of`), and what the backend
    declares in its unit (:class:`legato_gym.backends.Backend`: options class, task checks, ``expect_next``).
    """

    def reset(self, task: Task) -> str | None:
        """Bring the desktop to the task's starting state and run its setup.

        Returns:
            How the desktop got there, in the backend's own word (the local backend's ``fast``, ``ahead``,
            ``prepared``, ``restart``, ``fallback``; the osworld backend's ``fast``, ``revert``, ``fallback``),
            or ``None`` when the backend does not say. It reaches ``info["reset_kind"]`` and the record.
        """
        ...

    def wait_after_reset(self) -> Waited:
        """Block until the desktop is ready for the first observation."""
        ...

    def observe(self) -> Observation:
        """Take a screenshot."""
        ...

    def act(self, action: str) -> ActResult:
        """Run one action inside the desktop and wait for the screen to settle."""
        ...

    def wait_before_eval(self) -> Waited:
        """Run the task's post-config, then wait until the desktop is ready to be graded."""
        ...

    def evaluate(self) -> float:
        """Grade the task from the desktop's state: a score in ``[0, 1]``."""
        ...

    def close(self) -> None:
        """Release every process and resource of the desktop. Idempotent."""
        ...


def screen_size_of(desktop: object) -> tuple[int, int] | None:
    """A desktop's optional ``screen_size``, ``(width, height)``; ``None`` when it has none (then its first
    observation gives the size, which must be ``DesktopConfig.screen``)."""
    size = getattr(desktop, "screen_size", None)
    if size is None:
        return None
    width, height = size
    return int(width), int(height)
