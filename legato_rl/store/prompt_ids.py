"""Prompt token ids as deltas: a step's prompt stored as what it adds to the previous step's prompt and reply.

A step's prompt is the first ``start`` ids of the previous step's prompt followed by its response's token
ids, then ``ids`` (:class:`PromptIds`). :func:`prompt_ids_of` finds the delta while collecting, mostly from the
bytes of the server's answer; :func:`expand_prompt_ids` rebuilds every step's whole prompt when reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from legato_rl import _json
from legato_rl.store.errors import RecordError
from legato_rl.store.fields import Column, Layout, clip, decode, encode, info

if TYPE_CHECKING:
    from legato_rl.policy import ChatResult
    from legato_rl.store.schema import StepRecord

__all__ = ["PromptContext", "PromptIds", "expand_prompt_ids", "prompt_ids_of"]


@dataclass(frozen=True)
class PromptIds:
    """A step's prompt token ids, stored as a delta of the previous step's prompt and response.

    The step's prompt is ``context[:start] + ids``, where ``context`` is the previous step's prompt followed by
    its response's token ids (empty for a first step, and when the previous step lacks either). In a
    multi-turn conversation the prompt usually continues the previous one: then ``start == len(context)``,
    ``prefix`` is true and ``ids`` is only the new turn. When the conversation was rewritten (an old
    screenshot dropped past ``--image-max``, reasoning stripped by the chat template), ``prefix`` is false
    and ``ids`` follows the longest shared prefix (``start`` is 0 when nothing is shared: the whole prompt).

    Attributes:
        prefix: the prompt continues the previous step's prompt and response exactly.
        start: how many leading ids of ``context`` the prompt shares.
        ids: the prompt's ids after those.
    """

    prefix: bool = field(metadata=info(column=Column("prompt_continues", "bool")))
    start: int = field(metadata=info(minimum=0))
    ids: tuple[int, ...]

    JSON: ClassVar[Layout] = Layout(check=lambda data, what: _check_json(data, what))

    @classmethod
    def encode(cls, prompt: Sequence[int], context: Sequence[int] | None) -> PromptIds:
        """The delta that turns ``context`` (the previous prompt and response, or ``None``) into ``prompt``."""
        if not context:
            return cls(prefix=context is not None, start=0, ids=tuple(prompt))
        if not isinstance(prompt, list) or not isinstance(context, list):  # list equality needs two lists
            prompt, context = list(prompt), list(context)
        n = len(context)
        if len(prompt) >= n and prompt[:n] == context:  # the common case: list equality runs in C
            return cls(prefix=True, start=n, ids=tuple(prompt[n:]))
        # the longest shared prefix, by halving: each comparison of two slices runs in C, about n ids in all
        # (and any integer compares, where a numpy array would overflow on a hostile server's ids)
        start, high = 0, min(n, len(prompt))
        while start < high:
            mid = (start + high + 1) // 2
            if prompt[start:mid] == context[start:mid]:
                start = mid
            else:
                high = mid - 1
        return cls(prefix=False, start=start, ids=tuple(prompt[start:]))

    def decode(self, context: Sequence[int] | None, where: str = "step") -> list[int]:
        """The whole prompt, given the previous step's prompt and response (``None`` when there is none).

        Raises:
            RecordError: ``start`` runs past ``context``, or ``prefix`` does not match it.
        """
        have = 0 if context is None else len(context)
        if self.start > have or (self.prefix and self.start != have):
            raise RecordError(
                f"{where}: prompt_ids starts at {self.start} (prefix={self.prefix}) but the previous step's prompt "
                f"and response hold {have} token ids; the record is damaged or its steps are out of order"
            )
        head = list(context[: self.start]) if context is not None and self.start else []
        head.extend(self.ids)
        return head

    def to_json(self) -> dict[str, Any]:
        """The delta as written in a step."""
        return encode(self)

    @classmethod
    def from_json(cls, data: Any, what: str = "step.prompt_ids") -> PromptIds:
        """Read a delta written by :meth:`to_json`.

        Raises:
            RecordError: it misses a field, or a field is not of its type.
        """
        return decode(cls, data, what)  # type: ignore[no-any-return]


def _check_json(data: Mapping[str, Any], what: str) -> None:
    """Prompt ids are read strictly: they are rebuilt into the prompts a trainer trains on."""
    prefix, start, ids = data["prefix"], data["start"], data["ids"]
    if (
        not isinstance(prefix, bool)
        or type(start) is not int
        or start < 0
        or not isinstance(ids, list)
        or not set(map(type, ids)) <= {int}
    ):
        raise RecordError(f'{what} must be {{"prefix": bool, "start": int >= 0, "ids": [int, ...]}}, got {clip(data)}')


@dataclass(frozen=True)
class PromptContext:
    """What the next step's :class:`PromptIds` is taken against: a step's prompt and its response's token ids.

    The prompt is kept as the server's JSON text when it came as one (about 6 bytes an id, where a list of
    Python ints costs about 36: a desktop's prompt runs to tens of thousands of ids), without its closing
    ``]``; a continuation is then found by comparing bytes, and only the new turn is parsed.

    Attributes:
        head: the prompt's JSON array without its closing bracket, or the prompt's ids.
        length: how many ids the prompt holds.
        response: the response's token ids.
    """

    head: bytes | list[int]
    length: int
    response: list[int]

    def ids(self) -> list[int]:
        """The prompt's ids followed by the response's."""
        prompt = self.head if isinstance(self.head, list) else _json.loads(self.head + b"]")
        return [*prompt, *self.response]


def prompt_ids_of(result: ChatResult, context: PromptContext | None) -> tuple[PromptIds | None, PromptContext | None]:
    """The :class:`PromptIds` of one step and the context of the next.

    Both are ``None`` when the server returned no prompt ids (nothing is parsed then); the next context is
    ``None`` when the response has no token ids. A prompt that continues the previous one is recognised
    from the bytes of the server's answer, and only its new ids are parsed.

    Raises:
        PolicyResponseError: the prompt ids are not a JSON list of integers.
    """
    raw = result._prompt_ids
    if raw is None:
        return None, None
    record: PromptIds | None = None
    length = 0
    if isinstance(raw, bytes) and context is not None and isinstance(context.head, bytes):
        found = _continuation(raw, context)
        if found is not None:
            record, length = found
    if record is None:
        prompt = result.prompt_token_ids
        if prompt is None:
            return None, None
        record = PromptIds.encode(prompt, None if context is None else context.ids())
        length = len(prompt)
    if result.token_ids is None:
        return record, None
    head = raw[: raw.rindex(b"]")] if isinstance(raw, bytes) else raw
    return record, PromptContext(head=head, length=length, response=list(result.token_ids))


def _continuation(raw: bytes, context: PromptContext) -> tuple[PromptIds, int] | None:
    """The delta of ``raw`` (a prompt's JSON array) when it continues ``context``, with the prompt's length.

    ``None`` when it does not, or when the bytes do not tell (the caller then parses the whole prompt).
    """
    head = context.head
    assert isinstance(head, bytes)
    if not raw.startswith(head):
        return None
    rest = raw[len(head) :].lstrip(b" \t\r\n")
    if context.length:  # the previous prompt's last id must end where its text did: a separator follows
        if rest[:1] != b",":
            return None
        rest = rest[1:]
    try:
        tail = _json.loads(b"[" + rest)
    except ValueError:
        return None
    response = context.response
    n = len(response)
    if not isinstance(tail, list) or tail[:n] != response or not set(map(type, tail)) <= {int}:
        return None
    return PromptIds(prefix=True, start=context.length + n, ids=tuple(tail[n:])), context.length + len(tail)


def expand_prompt_ids(steps: Iterable[StepRecord], where: str = "rollout") -> Iterator[list[int] | None]:
    """Every step's whole prompt token ids (``None`` for a step without them), in step order.

    Raises:
        RecordError: a step's ``prompt_ids`` does not fit the step before it.
    """
    context: list[int] | None = None
    for step in steps:
        stored = step.prompt_ids
        if stored is None:
            context = None
            yield None
            continue
        prompt = stored.decode(context, f"{where} step {step.index}")
        token_ids = step.response.token_ids
        context = None if token_ids is None else prompt + list(token_ids)
        yield prompt
