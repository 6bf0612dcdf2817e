"""The harness interface: how a model's prompt is built and how its replies become desktop actions.

A harness owns one model family's conversation format. It is stateless; the state of one attempt (the
screenshots sent and the replies received) lives in a :class:`Conversation`, which drives any harness::

    conversation = QwenHarness().start(instruction, screen_size=(1920, 1080))
    messages = conversation.messages(screenshot)        # the chat messages to send, images included
    # or, with the PNG a vector env made in its worker (DesktopVectorEnv(png=True)):
    messages = conversation.messages(screenshot, png=info["screenshot_png"])
    reply = conversation.record_reply(result.content)   # the actions to run, the ``Action:`` line
    for action in reply.actions:
        ...                                             # env.step(action)

Unparsable replies (the rule, the same for every harness):

* A reply from which no action can be read is recorded with its ``error`` and runs as a single ``WAIT``:
  a real desktop step that counts towards ``max_steps``, refreshes the observation and keeps the step limit
  as the bound on a confused model. It is the agent's failure, never an infrastructure one, so the attempt
  stays ``ok`` and is graded as usual.
* It is not mapped to ``FAIL``: ``FAIL`` is an answer ("this task is infeasible") that OSWorld's infeasible
  tasks reward with 1, so garbage would score. It is not skipped either (OSWorld runs no step): the
  observation would not change and the step counter would not move.
* After ``max_unparsable`` consecutive unparsable replies (default 3), the reply comes back with no actions
  and ``give_up=True``: the scheduler grades the desktop as it is (``atruncate``), and the attempt ends
  ``ok`` with that reward. This stops a model that has fallen out of the format from burning the rest of
  its step budget on the policy server.

A reply that yields some actions but also has a malformed tool call runs the actions it could read and
carries the ``error`` for the record.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from legato_gym.errors import ConfigError, StateError

__all__ = ["DEFAULT_MAX_UNPARSABLE", "BaseHarness", "Conversation", "Harness", "ParsedReply", "Turn"]

Screenshot = npt.NDArray[np.uint8]

#: Consecutive unparsable replies after which an attempt is graded as it stands.
DEFAULT_MAX_UNPARSABLE = 3


@dataclass(frozen=True)
class Turn:
    """One earlier step of an attempt, as the harness needs it to build the next prompt.

    Attributes:
        image_url: the screenshot the reply answered, as sent (a ``data:image/png;base64,...`` URL; from
            :class:`~legato_rl.harness.QwenHarness` a :class:`~legato_rl.images.PngDataURL` holding its bytes).
        reply: the model's raw reply text.
        description: the reply's short description (Qwen: its ``Action:`` line); ``""`` when it had none.
    """

    image_url: str = field(repr=False)
    reply: str
    description: str


@dataclass(frozen=True)
class ParsedReply:
    """What a reply asks the desktop to do.

    Attributes:
        actions: action strings for :meth:`legato_gym.DesktopEnv.step`, in order: pyautogui code, ``WAIT``,
            ``DONE`` or ``FAIL``. Nothing follows a ``DONE`` or ``FAIL``.
        description: the reply's description of its action (Qwen: the ``Action:`` line), ``""`` if none.
        error: why (part of) the reply could not be read, or ``None``.
        unparsable: no action could be read; :class:`Conversation` then runs ``WAIT`` instead.
        give_up: the attempt should end now and be graded as it stands (see the module docstring).
    """

    actions: tuple[str, ...]
    description: str = ""
    error: str | None = None
    unparsable: bool = False
    give_up: bool = False


@runtime_checkable
class Harness(Protocol):
    """A model's conversation format.

    To plug in another model's format, subclass :class:`BaseHarness` and implement ``name``,
    :meth:`encode_image`, :meth:`build_messages` and :meth:`parse_reply`; :meth:`start` comes with it.
    :meth:`encode_image` gets the screenshot's PNG bytes too when the caller has them (a vector env's worker
    encoded them); a harness that sends PNG should use them rather than encode the array again, and return
    them as a :class:`~legato_rl.images.PngDataURL`, so that the record store files those bytes without
    decoding the URL again (any other URL string works too, at the cost of that decoding).
    A harness must be deterministic (the same inputs give the same messages, byte for byte) so that the
    record store can keep each message once and the server's prefix cache can hit.
    """

    @property
    def name(self) -> str:
        """A short name recorded in the run manifest (e.g. ``"qwen3vl"``)."""
        ...

    def encode_image(self, screenshot: Screenshot, *, png: bytes | None = None) -> str:
        """Encode an ``(H, W, 3)`` ``uint8`` screenshot as the image URL to send (``png``: the same, PNG-encoded)."""
        ...

    def build_messages(self, instruction: str, image_url: str, history: Sequence[Turn]) -> list[dict[str, Any]]:
        """The chat messages for the next call: the current screenshot plus the attempt so far."""
        ...

    def parse_reply(self, content: str, screen_size: tuple[int, int]) -> ParsedReply:
        """Read the actions out of a reply; ``screen_size`` is the ``(width, height)`` actions address."""
        ...

    def start(
        self,
        instruction: str,
        screen_size: tuple[int, int] | None = None,
        *,
        max_unparsable: int | None = DEFAULT_MAX_UNPARSABLE,
    ) -> Conversation:
        """A new :class:`Conversation` for one attempt at a task."""
        ...


class BaseHarness(ABC):
    """Base class for harnesses: provides :meth:`start`; subclasses implement the rest of :class:`Harness`."""

    @property
    @abstractmethod
    def name(self) -> str:
        """A short name recorded in the run manifest."""

    @abstractmethod
    def encode_image(self, screenshot: Screenshot, *, png: bytes | None = None) -> str:
        """Encode an ``(H, W, 3)`` ``uint8`` screenshot as the image URL to send (``png``: the same, PNG-encoded)."""

    @abstractmethod
    def build_messages(self, instruction: str, image_url: str, history: Sequence[Turn]) -> list[dict[str, Any]]:
        """The chat messages for the next call: the current screenshot plus the attempt so far."""

    @abstractmethod
    def parse_reply(self, content: str, screen_size: tuple[int, int]) -> ParsedReply:
        """Read the actions out of a reply; ``screen_size`` is the ``(width, height)`` actions address."""

    def start(
        self,
        instruction: str,
        screen_size: tuple[int, int] | None = None,
        *,
        max_unparsable: int | None = DEFAULT_MAX_UNPARSABLE,
    ) -> Conversation:
        """A new :class:`Conversation` for one attempt (see :class:`Conversation` for the arguments)."""
        return Conversation(self, instruction, screen_size=screen_size, max_unparsable=max_unparsable)


@functools.lru_cache(maxsize=64)
def _takes_png(harness_type: type) -> bool:
    """Whether the harness class's ``encode_image`` takes ``png=`` (asked once per class)."""
    try:
        return "png" in inspect.signature(getattr(harness_type, "encode_image")).parameters  # noqa: B009
    except (AttributeError, TypeError, ValueError):
        return False


class Conversation:
    """One attempt's dialogue with the policy, through a :class:`Harness`.

    Call :meth:`messages` with each new screenshot, send them, and pass the reply's text to
    :meth:`record_reply`. The two calls alternate; calling them out of order raises :class:`StateError`.

    Args:
        harness: the conversation format.
        instruction: the task's instruction.
        screen_size: ``(width, height)`` of the desktop, which the actions' pixel coordinates address;
            ``None``: the size of each screenshot.
        max_unparsable: consecutive unparsable replies after which :meth:`record` gives up (``None``: never).
    """

    def __init__(
        self,
        harness: Harness,
        instruction: str,
        *,
        screen_size: tuple[int, int] | None = None,
        max_unparsable: int | None = DEFAULT_MAX_UNPARSABLE,
    ) -> None:
        if max_unparsable is not None and max_unparsable < 1:
            raise ConfigError(f"max_unparsable={max_unparsable!r} must be at least 1, or None to never give up")
        self.harness = harness
        self.instruction = instruction
        self.screen_size = screen_size
        self.max_unparsable = max_unparsable
        self._turns: list[Turn] = []
        self._pending: tuple[str, tuple[int, int]] | None = None
        self._unparsable = 0
        # A harness written before encode_image took png= still works: it encodes the array itself.
        self._takes_png = _takes_png(type(harness))

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The steps recorded so far."""
        return tuple(self._turns)

    @property
    def consecutive_unparsable(self) -> int:
        """How many of the latest replies in a row could not be read."""
        return self._unparsable

    def messages(self, screenshot: Screenshot, *, png: bytes | None = None) -> list[dict[str, Any]]:
        """The messages to send for this screenshot.

        Args:
            screenshot: the current screen, ``(H, W, 3)`` ``uint8``.
            png: the same screenshot PNG-encoded, when the caller has it (``info["screenshot_png"]`` of a
                ``DesktopVectorEnv(png=True)``): the harness then sends these bytes instead of encoding the
                array itself, unless it has to resize the image.

        Raises:
            StateError: the previous prompt's reply was not recorded yet.
        """
        if self._pending is not None:
            raise StateError(
                "Conversation.messages() called twice; expected record_reply(content) for the previous prompt"
            )
        size = self.screen_size or (int(screenshot.shape[1]), int(screenshot.shape[0]))
        if png is None or not self._takes_png:
            image_url = self.harness.encode_image(screenshot)
        else:
            image_url = self.harness.encode_image(screenshot, png=png)
        self._pending = (image_url, size)
        return self.harness.build_messages(self.instruction, image_url, self._turns)

    def record_reply(self, content: str) -> ParsedReply:
        """Record the model's reply to the last prompt and read its actions (see the module docstring).

        Raises:
            StateError: there is no prompt waiting for a reply.
        """
        if self._pending is None:
            raise StateError("Conversation.record_reply() called without a prompt; expected messages(screenshot) first")
        image_url, screen_size = self._pending
        self._pending = None
        reply = self.harness.parse_reply(content, screen_size)
        self._turns.append(Turn(image_url=image_url, reply=content, description=reply.description))
        if reply.actions:
            self._unparsable = 0
            return reply
        self._unparsable += 1
        error = reply.error or "the reply holds no action"
        if self.max_unparsable is not None and self._unparsable >= self.max_unparsable:
            return replace(reply, actions=(), error=error, unparsable=True, give_up=True)
        return replace(reply, actions=("WAIT",), error=error, unparsable=True)
