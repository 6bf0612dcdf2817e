"""Reading a policy reply: the vLLM / SGLang / OpenAI chat-completion contract, within hostile-reply bounds.

:func:`read_reply_json` parses a body (bounded nesting, no lone surrogates), :func:`cut_prompt_ids` takes the
prompt's token ids out of it unparsed, and :func:`parse_chat_completion` reads the fields a trainer needs
(text, token ids, logprobs, usage, weight version) into a :class:`ChatResult`. See :mod:`legato_rl.policy`
for which server names which field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from legato_rl import _json
from legato_rl.errors import PolicyResponseError

__all__ = ["MAX_REPLY_DEPTH", "ChatResult", "cut_prompt_ids", "parse_chat_completion", "read_reply_json"]

#: Deepest JSON nesting read from a reply (orjson's own limit; the stdlib fallback is held to it too).
#: A chat completion nests about 8 levels.
MAX_REPLY_DEPTH = 1024

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; an environment may still lack it
    orjson = None  # type: ignore[assignment]


@dataclass(frozen=True)
class ChatResult:
    """One policy reply, as the server returned it.

    Attributes:
        content: the reply text (reasoning excluded when the server separates it).
        reasoning: vLLM ``message.reasoning`` or ``message.reasoning_content`` (SGLang, older vLLM).
        token_ids: the generated token ids (vLLM ``token_ids``, SGLang ``response_token_ids``), or ``None``.
        prompt_token_ids: the prompt's token ids, when returned. With images they run to tens of thousands,
            so they are read from the answer when first asked for (a property, cached).
        logprobs: one float per generated token (``choices[0].logprobs.content[*].logprob``), or ``None``.
        tokens: the token strings of ``logprobs.content``, only when there are no token ids.
        finish_reason: ``stop``, ``length``, ...
        prompt_tokens: ``usage.prompt_tokens``.
        completion_tokens: ``usage.completion_tokens``.
        cached_tokens: ``usage.prompt_tokens_details.cached_tokens`` (``None`` when not reported).
        seconds: wall time of the call: queueing, every attempt and the backoffs.
        attempts: HTTP requests sent for this call.
        request: the exact JSON body finally sent (no key: the key travels only in a header).
        url: the replica that answered.
        queued_s: seconds spent waiting for a ``max_inflight`` slot.
        weight_version: the weight version the server reported: SGLang's ``metadata.weight_version``, or
            vLLM's (>= 0.33) ``choices[0].weight_versions`` label (the labels of its spans joined by ``,`` when
            the weights changed during the generation); ``None`` when the server reports none.
    """

    content: str
    reasoning: str | None
    token_ids: list[int] | None
    _prompt_ids: list[int] | bytes | None = field(repr=False)  # bytes: the JSON array, not read yet
    logprobs: list[float] | None
    tokens: list[str] | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    seconds: float
    attempts: int
    request: dict[str, Any] = field(repr=False)
    url: str | None = None
    queued_s: float = 0.0
    weight_version: str | None = None

    @cached_property
    def prompt_token_ids(self) -> list[int] | None:
        """The prompt's token ids, when the server returned them (see the class docstring)."""
        if not isinstance(self._prompt_ids, bytes):
            return self._prompt_ids
        try:
            ids = _json.loads(self._prompt_ids)
        except ValueError as exc:  # orjson's and json's decode errors are ValueErrors
            raise PolicyResponseError(f"{self.url}: prompt_token_ids is not a JSON list ({exc})", url=self.url) from exc
        # cut_prompt_ids let through only "[", digits, commas, whitespace and "]": what parses is a flat list
        # of integers, so the per-item type check of _int_list (a third of the time at 30,000 ids) is skipped
        return ids if isinstance(ids, list) else _int_list(ids)


def parse_chat_completion(data: Any, *, url: str | None = None, prompt_ids_json: bytes | None = None) -> dict[str, Any]:
    """Read the fields legato keeps from a chat-completion body (vLLM, SGLang or OpenAI naming).

    Args:
        data: the parsed body.
        url: the replica, for error messages.
        prompt_ids_json: the ``prompt_token_ids`` array :func:`cut_prompt_ids` took out of the body
            unparsed (``data`` then holds ``null`` in its place).

    Returns:
        The keyword arguments of :class:`ChatResult` that come from the body.

    Raises:
        PolicyResponseError: the body is not a chat completion with at least one choice.
    """
    if not isinstance(data, dict):
        raise PolicyResponseError(f"{url}: the answer is a JSON {type(data).__name__}, not a chat completion", url=url)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise PolicyResponseError(
            f"{url}: the answer has no choices (keys: {sorted(data)[:10]}); is this an OpenAI-compatible "
            "/v1/chat/completions endpoint?",
            url=url,
        )
    choice: dict[str, Any] = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise PolicyResponseError(f"{url}: choices[0] has no message object", url=url)

    content = _text(message.get("content"))
    reasoning = message.get("reasoning") or message.get("reasoning_content") or None
    token_ids = _int_list(choice.get("token_ids"))
    if token_ids is None:
        token_ids = _int_list(choice.get("response_token_ids"))
    prompt_token_ids: list[int] | bytes | None = _int_list(data.get("prompt_token_ids"))
    if prompt_token_ids is None:
        prompt_token_ids = _int_list(choice.get("prompt_token_ids"))
    if prompt_token_ids is None and prompt_ids_json is not None:
        prompt_token_ids = prompt_ids_json

    logprobs: list[float] | None = None
    tokens: list[str] | None = None
    lp = choice.get("logprobs")
    entries = lp.get("content") if isinstance(lp, dict) else None
    if isinstance(entries, list):
        try:
            logprobs = [float(e["logprob"]) for e in entries]
            tokens = [str(e.get("token", "")) for e in entries]
        except (TypeError, KeyError, ValueError) as exc:
            raise PolicyResponseError(f"{url}: malformed logprobs.content entry ({exc!r})", url=url) from exc

    raw_usage = data.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return {
        "content": content,
        "reasoning": str(reasoning) if reasoning is not None else None,
        "token_ids": token_ids,
        "_prompt_ids": prompt_token_ids,
        "logprobs": logprobs,
        "tokens": tokens if token_ids is None else None,
        "finish_reason": choice.get("finish_reason"),
        "prompt_tokens": _opt_int(usage.get("prompt_tokens")),
        "completion_tokens": _opt_int(usage.get("completion_tokens")),
        "cached_tokens": _opt_int(cached),
        "weight_version": _weight_version(data, choice),
    }


def _weight_version(data: dict[str, Any], choice: dict[str, Any]) -> str | None:
    """SGLang's ``metadata.weight_version``, else vLLM's ``weight_versions`` span labels (in span order)."""
    metadata = data.get("metadata")
    version = metadata.get("weight_version") if isinstance(metadata, dict) else None
    if isinstance(version, (str, int)) and not isinstance(version, bool):
        return str(version)
    spans = choice.get("weight_versions")
    if not isinstance(spans, list):
        return None
    labels: list[str] = []
    for span in spans:
        label = span.get("version") if isinstance(span, dict) else None
        if isinstance(label, (str, int)) and not isinstance(label, bool) and (not labels or labels[-1] != str(label)):
            labels.append(str(label))
    return ",".join(labels) or None


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPENERS = np.zeros(256, dtype=np.int8)
_OPENERS[[ord("["), ord("{")]] = 1
_OPENERS[[ord("]"), ord("}")]] = -1
_SURROGATE = re.compile("[\ud800-\udfff]")


def _too_deep(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests deeper than ``limit`` (brackets inside strings do not count)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    steps = _OPENERS[np.frombuffer(_STRING.sub(b"", body), dtype=np.uint8)]
    return bool(steps.size) and int(np.cumsum(steps, dtype=np.int64).max()) > limit


def _has_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a lone surrogate in any string (a key too); no recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            for key, inner in item.items():
                if not key.isascii() and _SURROGATE.search(key):
                    return True
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def read_reply_json(body: bytes, *, url: str | None = None) -> Any:
    """Parse a reply's JSON body within the bounds of a hostile reply (see :mod:`legato_rl.policy`).

    orjson reads the body when it can: it refuses nesting deeper than :data:`MAX_REPLY_DEPTH`, lone
    surrogates and invalid UTF-8 without recursing. The stdlib re-reads only what orjson refused (``NaN``,
    integers beyond 64 bits), after a check of the nesting depth, and its result is checked for lone
    surrogates.

    Raises:
        PolicyResponseError: the body is not JSON (retryable: it may have been cut in transit), or it nests
            deeper than :data:`MAX_REPLY_DEPTH` or holds a lone surrogate (not retryable).
    """
    if orjson is not None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    if _too_deep(body, MAX_REPLY_DEPTH):
        raise PolicyResponseError(
            f"{url}: the answer nests deeper than {MAX_REPLY_DEPTH} levels of JSON; refused unread (a chat "
            "completion nests about 8)",
            url=url,
        )
    try:
        data = json.loads(body)
    except RecursionError as exc:  # below MAX_REPLY_DEPTH but past this interpreter's recursion limit
        raise PolicyResponseError(f"{url}: the answer's JSON nests too deep to read", url=url) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise PolicyResponseError(f"{url}: the answer is not JSON ({exc})", retryable=True, url=url) from exc
    if _has_surrogate(data):
        raise PolicyResponseError(
            f'{url}: the answer\'s JSON holds a lone surrogate (such as "\\ud800"): it is not Unicode text, '
            "and could be neither parsed as the reply nor stored; the server's output is broken",
            url=url,
        )
    return data


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
    return str(value)


def _int_list(value: Any) -> list[int] | None:
    if not isinstance(value, list):
        return None
    # The prompt's token ids run to thousands per call: check their types in C (``type(v) is int`` also
    # refuses bools).
    if value and not set(map(type, value)) <= {int}:
        raise PolicyResponseError(f"token ids must be integers, got {str(value[:5])[:80]}")
    return list(value)


_PROMPT_IDS_KEY = b'"prompt_token_ids":'
_ID_BYTES = b"0123456789, \t\r\n"


def cut_prompt_ids(body: bytes) -> tuple[bytes, bytes | None]:
    """Take the ``prompt_token_ids`` array out of a chat-completion body, unparsed.

    Returns the body with ``null`` in the array's place, and the array's JSON (``None`` when there is no
    such array of plain integers: the body is returned as it is). In valid JSON the text
    ``"prompt_token_ids":`` can only be a key: inside a string its quotes would be escaped.
    """
    start = body.find(_PROMPT_IDS_KEY)
    if start < 0:
        return body, None
    value = start + len(_PROMPT_IDS_KEY)
    while body[value : value + 1] in (b" ", b"\t", b"\r", b"\n"):
        value += 1
    end = body.find(b"]", value) + 1
    if body[value : value + 1] != b"[" or end == 0:
        return body, None
    array = body[value:end]
    if array[1:-1].translate(None, _ID_BYTES):  # anything but digits and separators: leave it to the parser
        return body, None
    return body[:value] + b"null" + body[end:], array


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
