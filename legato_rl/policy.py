"""The policy client: asks an OpenAI-compatible server (vLLM, SGLang, OpenAI) for the next reply.

One :class:`PolicyClient` serves every desktop of a run. It keeps one pool of keep-alive connections, caps the
model calls in flight across all callers (``max_inflight``), bounds each HTTP attempt by ``step_timeout``
and retries timeouts, connection errors, 5xx and 429 with bounded exponential backoff and jitter (never
other 4xx). Every call asks for what a trainer needs (``logprobs``, and vLLM's ``return_token_ids`` and
``return_weight_versions``) and reads what the server actually returned::

    import asyncio
    from legato_rl.policy import PolicyClient, PolicyConfig

    async def main() -> None:
        config = PolicyConfig("http://127.0.0.1:8000/v1", "Qwen/Qwen3-VL-8B-Instruct")
        async with PolicyClient(config) as client:
            result = await client.chat([{"role": "user", "content": "hi"}], rollout_id="r0")
            print(result.content, result.token_ids, result.logprobs)

    asyncio.run(main())

Token ids: vLLM >= 0.10.2 returns ``choices[i].token_ids`` and a top-level ``prompt_token_ids``; SGLang
returns ``choices[i].response_token_ids`` and ``choices[i].prompt_token_ids``; older vLLM ignores the request
field. A server that refuses the field with HTTP 400 naming it (OpenAI does) is asked again at once without
the vLLM extras, and the client remembers that for the replica (logprobs are still requested).

Weight version: SGLang reports ``metadata.weight_version``; vLLM >= 0.33 answers ``return_weight_versions``
with ``choices[i].weight_versions`` spans. :attr:`ChatResult.weight_version` holds the label, ``None``
from servers that report none.

Replicas: ``PolicyConfig.url`` may name several servers of one model. A rollout's calls stick to one
replica (its prefix cache is reused), a new rollout goes to the replica with the fewest calls in flight,
and a replica that fails is avoided for ``replica_cooldown`` seconds, then tried again; the first answer
clears it.

The API key comes from ``api_key=`` or ``$LEGATO_POLICY_KEY`` and is sent only as
``Authorization: Bearer <key>``; it never appears in a repr, a log line, an error or a :class:`ChatResult`
(in any spelling a server may echo it in: see :func:`legato_rl.errors.secret_forms`). A trailing newline is
stripped; a key with a CR, LF or other control character inside, or a non-ASCII one, is refused with
:class:`~legato_gym.errors.ConfigError` when the config or client is built, before any request. A policy URL
with a ``user:password@`` or a ``?query`` is refused the same way (legato never sends them, and they would
be copied into every error message). Desktop workers are started without ``$LEGATO_POLICY_KEY``.

TLS: certificates are verified against ``PolicyConfig.ca_bundle`` when given, else ``$SSL_CERT_FILE`` /
``$SSL_CERT_DIR`` when set, else certifi's bundle (or the system's).

Hostile replies (docs/reliability.md, "Hostile replies"): a reply costs at most ``max_reply_bytes`` of body
(default 8 MiB; a larger one is dropped unread as soon as its ``Content-Length`` or its bytes pass the bound)
and at most :data:`MAX_REPLY_DEPTH` levels of JSON nesting (deeper is refused by the parser, never recursed
into). A reply that is larger or deeper, or whose JSON holds a lone surrogate (``"\\ud800"``: text that is
not Unicode and that no record could store), raises :class:`PolicyResponseError` at once, not retried: the
scheduler records that attempt as ``error`` kind ``policy`` and the batch goes on.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import random
import re
import ssl
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from legato_gym.errors import ConfigError, StateError
from legato_rl import _http, _json
from legato_rl.errors import (
    PolicyError,
    PolicyHTTPError,
    PolicyResponseError,
    PolicyTimeout,
    PolicyUnreachable,
    redact,
)

__all__ = [
    "KEY_ENV_VAR",
    "MAX_REPLY_BYTES",
    "MAX_REPLY_DEPTH",
    "VLLM_EXTRAS",
    "ChatResult",
    "PolicyClient",
    "PolicyConfig",
    "backoff_delay",
    "parse_chat_completion",
    "read_reply_json",
    "retry_policy_call",
    "ssl_context",
]

logger = logging.getLogger(__name__)

#: Environment variable holding the policy server's API key.
KEY_ENV_VAR = "LEGATO_POLICY_KEY"

#: Request fields only vLLM/SGLang understand; dropped for a server that answers 400 naming one of them.
VLLM_EXTRAS: tuple[str, ...] = ("return_token_ids", "return_weight_versions")

#: Default bound on one reply's body, in bytes (``PolicyConfig.max_reply_bytes``).
MAX_REPLY_BYTES = 8 * 1024 * 1024
#: Deepest JSON nesting read from a reply (orjson's own limit; the stdlib fallback is held to it too).
#: A chat completion nests about 8 levels.
MAX_REPLY_DEPTH = 1024

_BODY_EXCERPT = 400
T = TypeVar("T")

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; an environment may still lack it
    orjson = None  # type: ignore[assignment]


@dataclass(frozen=True)
class PolicyConfig:
    """Where the policy is served and how to sample from it.

    Attributes:
        url: the server's OpenAI-compatible base URL (``https://host/v1``), or several replicas of one model.
        model: the served model name (``--served-model-name`` on vLLM).
        version: the policy version stamped on every record (legato never syncs weights).
        api_key: the server's key; ``None`` reads ``$LEGATO_POLICY_KEY`` when the client is built. Never
            shown in a repr.
        temperature: sampling temperature.
        top_p: nucleus sampling.
        max_tokens: cap on generated tokens per call.
        max_inflight: cap on concurrent HTTP requests across every caller of one client (``None``: no cap).
        step_timeout: seconds one HTTP attempt may take, from sending the request to the end of the body.
            Time spent queued behind ``max_inflight`` does not count.
        retries: extra attempts after a retryable failure (timeout, connection error, 5xx, 429).
        backoff: first backoff delay in seconds; doubles each retry, with jitter.
        backoff_max: cap on one backoff delay (and on a server's ``Retry-After``).
        replica_cooldown: seconds a failing replica is avoided before it is tried again.
        vllm_extras: request vLLM's ``return_token_ids`` and ``return_weight_versions`` (turned off per
            replica when the server refuses them).
        extra_body: further request fields sent as they are (e.g. ``{"chat_template_kwargs": {...}}``).
        max_reply_bytes: largest reply body read, in bytes; a larger reply fails its attempt with
            :class:`PolicyResponseError` (raise it if you ask for prompt logprobs).
        ca_bundle: a PEM file (or a directory of hashed certificates) to verify ``https://`` servers
            against, e.g. a private CA; default ``$SSL_CERT_FILE`` / ``$SSL_CERT_DIR``, else certifi's.
    """

    url: str | tuple[str, ...]
    model: str
    version: str | None = None
    api_key: str | None = field(default=None, repr=False, compare=False)
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 2048
    max_inflight: int | None = None
    step_timeout: float = 60.0
    retries: int = 1
    backoff: float = 0.5
    backoff_max: float = 8.0
    replica_cooldown: float = 10.0
    vllm_extras: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    max_reply_bytes: int = MAX_REPLY_BYTES
    ca_bundle: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        urls = (self.url,) if isinstance(self.url, str) else tuple(self.url)
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            shown = [_shown_url(u) if isinstance(u, str) else u for u in urls]
            raise ConfigError(f"PolicyConfig.url={shown!r}: give the server's base URL, e.g. http://host:8000/v1")
        cleaned = tuple(u.strip().rstrip("/") for u in urls)
        for u in cleaned:
            _check_url(u)
        if len(set(cleaned)) != len(cleaned):
            raise ConfigError(f"policy URLs {list(cleaned)!r} name the same replica twice")
        object.__setattr__(self, "url", cleaned[0] if len(cleaned) == 1 else cleaned)
        if not self.model:
            raise ConfigError("PolicyConfig.model is empty: give the served model name (vLLM --served-model-name)")
        if self.max_inflight is not None and self.max_inflight < 1:
            raise ConfigError(f"max_inflight={self.max_inflight!r} must be >= 1, or None for no cap")
        if not self.step_timeout > 0:
            raise ConfigError(f"step_timeout={self.step_timeout!r} must be a positive number of seconds")
        if self.retries < 0:
            raise ConfigError(f"retries={self.retries!r} must be >= 0")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens={self.max_tokens!r} must be >= 1")
        if self.backoff < 0 or self.backoff_max < 0 or self.replica_cooldown < 0:
            raise ConfigError("backoff, backoff_max and replica_cooldown must be >= 0 seconds")
        if self.max_reply_bytes < 1:
            raise ConfigError(f"max_reply_bytes={self.max_reply_bytes!r} must be >= 1 (default {MAX_REPLY_BYTES})")
        if self.ca_bundle is not None and not os.path.exists(self.ca_bundle):
            raise ConfigError(
                f"ca_bundle={os.fspath(self.ca_bundle)!r} does not exist; give a PEM file or a directory of "
                "certificates (or leave it unset to use $SSL_CERT_FILE or certifi's bundle)"
            )
        if self.api_key is not None:
            object.__setattr__(self, "api_key", _clean_key(self.api_key, "PolicyConfig.api_key"))

    @property
    def urls(self) -> tuple[str, ...]:
        """Every replica's base URL, without a trailing slash."""
        return (self.url,) if isinstance(self.url, str) else self.url

    def resolved_api_key(self) -> str | None:
        """``api_key``, else ``$LEGATO_POLICY_KEY``, else ``None``; a trailing newline stripped.

        Raises:
            ConfigError: the key holds a CR, LF or other control character, or a non-ASCII one.
        """
        if self.api_key:
            return self.api_key
        return _clean_key(os.environ.get(KEY_ENV_VAR), f"${KEY_ENV_VAR}")


_KEY_BAD = re.compile("[^\x20-\x7e]")


def _clean_key(key: str | None, source: str) -> str | None:
    """The key with trailing CR/LF removed; refuses one that cannot travel in one header line."""
    if key is None:
        return None
    key = key.rstrip("\r\n")
    if not key:
        return None
    bad = _KEY_BAD.search(key)
    if bad is not None:
        char = bad.group()
        what = "a CR or LF" if char in "\r\n" else f"the character U+{ord(char):04X}"
        raise ConfigError(
            f"{source} holds {what} at character {bad.start()} (of {len(key)}); an API key must be one line of "
            "printable ASCII. It was refused before any request, since it would inject HTTP headers; set it "
            "to the key alone (a trailing newline is fine)"
        )
    return key


def _shown_url(url: str) -> str:
    """``url`` with any userinfo and query replaced by ``***`` (for messages)."""
    shown = re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)?[^/?#]*@", lambda m: (m.group(1) or "") + "***@", url)
    return re.sub(r"[?#].*\Z", "?***", shown, flags=re.DOTALL)


def _check_url(url: str) -> None:
    shown = _shown_url(url)
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"policy URL {shown!r} must start with http:// or https:// (e.g. http://{shown}/v1)")
    bad = re.search(r"[\x00-\x20\x7f]", url)
    if bad is not None:  # only the part before it is shown: what follows may be anything, a key included
        raise ConfigError(
            f"policy URL {_shown_url(url[: bad.start()]) + '...'!r} holds U+{ord(bad.group()):04X} at character "
            f"{bad.start()}; percent-encode it"
        )
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        raise ConfigError(
            f"policy URL {shown!r} carries a user:password; legato never sends it (it would only be copied into "
            f"error messages). Remove it and put the key in ${KEY_ENV_VAR}"
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ConfigError(
            f"policy URL {shown!r} has a query or fragment; give the /v1 base URL alone (legato appends "
            f"/chat/completions to it) and put a key in ${KEY_ENV_VAR}"
        )


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
        # _cut_prompt_ids let through only "[", digits, commas, whitespace and "]": what parses is a flat list
        # of integers, so the per-item type check of _int_list (a third of the time at 30,000 ids) is skipped
        return ids if isinstance(ids, list) else _int_list(ids)


def parse_chat_completion(data: Any, *, url: str | None = None, prompt_ids_json: bytes | None = None) -> dict[str, Any]:
    """Read the fields legato keeps from a chat-completion body (vLLM, SGLang or OpenAI naming).

    Args:
        data: the parsed body.
        url: the replica, for error messages.
        prompt_ids_json: the ``prompt_token_ids`` array :func:`_cut_prompt_ids` took out of the body
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
    """Parse a reply's JSON body within the bounds of a hostile reply (see the module docstring).

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


_JSON_HEADERS = {"Content-Type": "application/json"}


_PROMPT_IDS_KEY = b'"prompt_token_ids":'
_ID_BYTES = b"0123456789, \t\r\n"


def _cut_prompt_ids(body: bytes) -> tuple[bytes, bytes | None]:
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


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): exponential, capped, jittered.

    The delay is ``min(cap, base * 2**(attempt-1))`` scaled by a random factor in ``[0.5, 1]``; a server's
    ``Retry-After`` raises it, but never above ``cap``.
    """
    delay: float = min(cap, base * 2 ** (attempt - 1)) * rng.uniform(0.5, 1.0)
    if retry_after is not None:
        delay = max(delay, min(cap, retry_after))
    return delay


async def retry_policy_call(
    attempt: Callable[[], Awaitable[T]],
    *,
    retries: int,
    backoff: float,
    backoff_max: float,
    rng: random.Random,
    what: str = "policy call",
) -> T:
    """Run ``attempt`` until it succeeds, retrying only retryable :class:`PolicyError` s.

    The one retry helper of the policy client. Retryable: :class:`PolicyTimeout`,
    :class:`PolicyUnreachable`, :class:`PolicyHTTPError` with 5xx or 429, and a body that is not JSON.
    Anything else, and the last failure once ``retries`` are spent, propagates.
    """
    failures = 0
    while True:
        try:
            return await attempt()
        except PolicyError as exc:
            if not exc.retryable or failures >= retries:
                raise
            failures += 1
            retry_after = exc.retry_after if isinstance(exc, PolicyHTTPError) else None
            delay = backoff_delay(failures, backoff, backoff_max, rng, retry_after)
            logger.warning("%s failed (%s); retry %d/%d in %.2fs", what, exc, failures, retries, delay)
            await asyncio.sleep(delay)


class _Replicas:
    """Which replica serves which rollout: sticky per rollout, least in flight for new ones, failures avoided."""

    def __init__(self, urls: Sequence[str], cooldown: float, max_sticky: int = 65536) -> None:
        self.urls = tuple(urls)
        self.cooldown = cooldown
        self.inflight = dict.fromkeys(self.urls, 0)
        self.assigned = dict.fromkeys(self.urls, 0)
        self.down_until: dict[str, float] = {}
        self._sticky: OrderedDict[str, str] = OrderedDict()
        self._max_sticky = max_sticky

    def healthy(self, url: str, now: float) -> bool:
        return self.down_until.get(url, 0.0) <= now

    def acquire(self, rollout_id: str) -> str:
        """Pick the replica for one request of ``rollout_id`` and count it in flight."""
        now = time.monotonic()
        url = self._sticky.get(rollout_id)
        if url is None or not self.healthy(url, now):
            candidates = [u for u in self.urls if self.healthy(u, now)]
            if candidates:
                new = min(candidates, key=lambda u: (self.inflight[u], self.assigned[u], self.urls.index(u)))
            else:  # every replica is failing: try the one whose cooldown ends first
                new = min(self.urls, key=lambda u: self.down_until.get(u, 0.0))
            if url is not None:
                self.assigned[url] -= 1
                if new != url:
                    logger.info("rollout %s moves from failing replica %s to %s", rollout_id, url, new)
            self._sticky[rollout_id] = new
            self.assigned[new] += 1
            url = new
            while len(self._sticky) > self._max_sticky:
                _, old = self._sticky.popitem(last=False)
                self.assigned[old] -= 1
        self._sticky.move_to_end(rollout_id)
        self.inflight[url] += 1
        return url

    def release(self, url: str) -> None:
        self.inflight[url] -= 1

    def forget(self, rollout_id: str) -> None:
        url = self._sticky.pop(rollout_id, None)
        if url is not None:
            self.assigned[url] -= 1

    def failed(self, url: str) -> None:
        if len(self.urls) > 1 and self.healthy(url, time.monotonic()):
            logger.warning("policy replica %s is failing; avoiding it for %.0fs", url, self.cooldown)
        self.down_until[url] = time.monotonic() + self.cooldown

    def answered(self, url: str) -> None:
        if self.down_until.pop(url, None) is not None and len(self.urls) > 1:
            logger.info("policy replica %s answers again", url)


class ClientState(enum.Enum):
    """Lifecycle of a :class:`PolicyClient`."""

    OPEN = "open"
    CLOSED = "closed"


class PolicyClient:
    """Async client of an OpenAI-compatible chat-completions server; one per run, shared by all desktops.

    Use it as an async context manager (or call :meth:`aclose`)::

        async with PolicyClient(config) as client:
            result = await client.chat(messages, rollout_id="task-1/0")

    The HTTP session opens with the first call, on the event loop that makes it; use one client from one
    loop. Proxy variables (``HTTPS_PROXY``, ``NO_PROXY``) are honoured.

    Args:
        config: where the policy is served and how to sample.
        seed: seeds the backoff jitter.
    """

    def __init__(self, config: PolicyConfig, *, seed: int | None = None) -> None:
        self.config = config
        self._key = config.resolved_api_key()  # a bad key is refused here, before any request
        self._ssl: ssl.SSLContext | None = None
        if any(u.startswith("https://") for u in config.urls):
            self._ssl = ssl_context(config.ca_bundle)
        self._http: _http.HTTPPool | None = None
        self._slots = asyncio.Semaphore(config.max_inflight) if config.max_inflight else None
        self._replicas = _Replicas(config.urls, config.replica_cooldown)
        self._no_extras: set[str] = set()
        self._rng = random.Random(seed)
        self._state = ClientState.OPEN

    def __repr__(self) -> str:
        return f"PolicyClient(urls={list(self.config.urls)!r}, model={self.config.model!r}, state={self._state.value})"

    async def __aenter__(self) -> PolicyClient:
        self._check_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        if self._state is ClientState.CLOSED:
            return
        self._state = ClientState.CLOSED
        if self._http is not None:
            await self._http.close()

    @property
    def extras_refused(self) -> frozenset[str]:
        """Replicas that refused the vLLM extras (HTTP 400 naming them); asked without them since."""
        return frozenset(self._no_extras)

    @property
    def inflight(self) -> dict[str, int]:
        """Calls in flight (queued or sent) per replica."""
        return dict(self._replicas.inflight)

    def replica_of(self, rollout_id: str) -> str | None:
        """The replica a rollout is pinned to, if it has made a call."""
        return self._replicas._sticky.get(rollout_id)

    def forget(self, rollout_id: str) -> None:
        """Release a finished rollout's replica pin (optional; old pins are also evicted)."""
        self._replicas.forget(rollout_id)

    def _pool(self) -> _http.HTTPPool:
        """The connection pool (legato's own small HTTP/1.1 client: see ``legato_rl/_http.py`` for why)."""
        if self._http is None:
            headers = {"Authorization": f"Bearer {self._key}"} if self._key else None
            self._http = _http.HTTPPool(headers, ssl_context=self._tls_context, max_body=self.config.max_reply_bytes)
        return self._http

    def _tls_context(self) -> ssl.SSLContext:
        if self._ssl is None:  # an https:// URL only through a proxy's tunnel: built on first use
            self._ssl = ssl_context(self.config.ca_bundle)
        return self._ssl

    def _check_open(self) -> None:
        if self._state is ClientState.CLOSED:
            raise StateError("PolicyClient is closed; build a new one (use `async with PolicyClient(config)`)")

    def build_request(self, messages: Sequence[Mapping[str, Any]], *, extras: bool = True) -> dict[str, Any]:
        """The JSON body for ``messages``: model, sampling, logprobs and (when ``extras``) vLLM's extras."""
        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model,
            "messages": list(messages),
            "temperature": cfg.temperature,
            "top_p": cfg.top_p,
            "max_tokens": cfg.max_tokens,
            "logprobs": True,
            "top_logprobs": 0,
        }
        if extras and cfg.vllm_extras:
            body["return_token_ids"] = True
            body["return_weight_versions"] = True
        body.update(cfg.extra_body)
        return body

    async def models(self, url: str | None = None) -> list[str]:
        """The model ids served at ``url`` (default: the first replica), from ``GET /models``.

        Raises:
            PolicyError: the server could not be reached or answered badly (no retries).
        """
        self._check_open()
        base = url or self.config.urls[0]
        response = await self._send(base, "GET", "/models", None)
        data = self._json(base, response)
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise PolicyResponseError(
                f"{base}/models: the answer has no 'data' list; is this an OpenAI-compatible URL?"
            )
        return [str(m.get("id")) for m in items if isinstance(m, dict)]

    async def chat(self, messages: Sequence[Mapping[str, Any]], *, rollout_id: str) -> ChatResult:
        """Ask the policy for the next reply to ``messages``.

        Args:
            messages: OpenAI chat messages (images as ``image_url`` data URLs).
            rollout_id: the rollout this call belongs to; its calls stick to one replica.

        Raises:
            PolicyTimeout: every attempt overran ``step_timeout``.
            PolicyUnreachable: no connection to any replica.
            PolicyHTTPError: an HTTP error status (4xx at once; 5xx/429 after the retries).
            PolicyResponseError: the answer is not a chat completion.
            StateError: the client is closed.
        """
        self._check_open()
        started = time.monotonic()
        attempts = 0
        queued = 0.0
        last_body: dict[str, Any] = {}

        async def attempt() -> tuple[dict[str, Any], str]:
            nonlocal attempts, queued, last_body
            url = self._replicas.acquire(rollout_id)
            try:
                wait_start = time.monotonic()
                if self._slots is not None:
                    await self._slots.acquire()
                queued += time.monotonic() - wait_start
                try:
                    body = self.build_request(messages, extras=url not in self._no_extras)
                    last_body = body
                    attempts += 1
                    try:
                        response = await self._send(url, "POST", "/chat/completions", body)
                    except PolicyHTTPError as exc:
                        if not self._refuses_extras(exc, body):
                            raise
                        logger.warning(
                            "%s refused the vLLM extras %s (HTTP 400); asking again without them, logprobs kept. "
                            "Token ids will be missing: serve with vLLM >= 0.10.2 or SGLang to get them",
                            url,
                            [f for f in VLLM_EXTRAS if f in body],
                        )
                        self._no_extras.add(url)
                        body = self.build_request(messages, extras=False)
                        last_body = body
                        attempts += 1
                        response = await self._send(url, "POST", "/chat/completions", body)
                    # the prompt's token ids (tens of thousands with images) are read only if someone asks
                    answer, prompt_ids = _cut_prompt_ids(response.body)
                    data = self._json(url, replace(response, body=answer))
                    fields = parse_chat_completion(data, url=url, prompt_ids_json=prompt_ids)
                finally:
                    if self._slots is not None:
                        self._slots.release()
            except PolicyError as exc:
                exc.attempts = attempts
                if exc.retryable and not (isinstance(exc, PolicyHTTPError) and exc.status_code == 429):
                    self._replicas.failed(url)
                raise
            finally:
                self._replicas.release(url)
            self._replicas.answered(url)
            return fields, url

        fields, url = await retry_policy_call(
            attempt,
            retries=self.config.retries,
            backoff=self.config.backoff,
            backoff_max=self.config.backoff_max,
            rng=self._rng,
            what=f"policy call of rollout {rollout_id}",
        )
        seconds = time.monotonic() - started
        logger.debug("policy call of rollout %s: %s in %.3fs, %d attempt(s)", rollout_id, url, seconds, attempts)
        return ChatResult(**fields, seconds=seconds, attempts=attempts, request=last_body, url=url, queued_s=queued)

    @staticmethod
    def _refuses_extras(exc: PolicyHTTPError, body: Mapping[str, Any]) -> bool:
        sent = [f for f in VLLM_EXTRAS if f in body]
        return exc.status_code == 400 and bool(sent) and any(f in exc.body for f in sent)

    async def _send(self, url: str, method: str, path: str, body: dict[str, Any] | None) -> _http.Answer:
        """One HTTP request, bounded by ``step_timeout``; failures become :class:`PolicyError`."""
        target = url + path
        timeout = self.config.step_timeout
        data, headers = (None, None) if body is None else (_json.dumps(body), _JSON_HEADERS)
        try:
            answer = await self._pool().request(method, target, data, headers=headers, timeout=timeout)
        except _http.HTTPTimeout as exc:
            raise PolicyTimeout(
                f"{target}: no complete answer within step_timeout={timeout:g}s; raise --step-timeout, or lower "
                "--max-inflight if the server is overloaded",
                url=url,
            ) from exc
        except _http.HTTPBodyTooLarge as exc:
            raise PolicyResponseError(
                f"{target}: the answer is larger than max_reply_bytes={self.config.max_reply_bytes}; it was "
                "dropped unread. Raise PolicyConfig.max_reply_bytes if the server is right to send that much "
                "(e.g. prompt logprobs)",
                url=url,
            ) from exc
        except _http.InvalidRequest as exc:
            raise PolicyError(f"{target}: the request was refused before sending: {exc}", url=url) from exc
        except _http.HTTPError as exc:
            detail = redact(str(exc) or type(exc).__name__, self._key)
            raise PolicyUnreachable(
                f"{target}: cannot reach the policy server ({type(exc).__name__}: {detail}); check that it is up "
                "and that the URL ends with /v1",
                url=url,
            ) from exc
        if answer.status >= 400:
            raise self._status_error(url, target, answer)
        return answer

    def _status_error(self, url: str, target: str, response: _http.Answer) -> PolicyHTTPError:
        code = response.status
        text = self._excerpt(response.body, _BODY_EXCERPT)
        said = f" Server said: {text}" if text else ""
        if code in (401, 403):
            hint = (
                f"the server refused the API key (HTTP {code}); set ${KEY_ENV_VAR} to the key the server was "
                "started with (vLLM --api-key)"
            )
        elif code == 404:
            hint = (
                f"HTTP 404: model {self.config.model!r} is not served there, or the URL is not the /v1 base; "
                "check --model against `legato rl probe`"
            )
        elif code == 429:
            hint = "HTTP 429: the server is busy; lower --max-inflight"
        elif code >= 500:
            hint = f"HTTP {code}: the server failed"
        else:
            hint = f"HTTP {code}: the server rejected the request"
        retry_after: float | None = None
        header = response.headers.get("retry-after")
        if header:
            try:
                retry_after = max(0.0, float(header))
            except ValueError:
                retry_after = None
        return PolicyHTTPError(
            f"{target}: {hint}.{said}", status_code=code, body=text, retry_after=retry_after, url=url
        )

    def _excerpt(self, body: bytes, limit: int) -> str:
        """The start of ``body`` as text, redacted before it is cut (so no part of a key survives the cut)."""
        margin = 8 * len(self._key or "") + 16  # the longest spelling of the key (URL-encoded) fits in it
        text = body[: 4 * (limit + margin)].decode("utf-8", errors="replace")[: limit + margin]
        return redact(text, self._key)[:limit]

    def _json(self, url: str, response: _http.Answer) -> Any:
        try:
            return read_reply_json(response.body, url=url)
        except PolicyResponseError as exc:
            if not exc.retryable:
                raise
            excerpt = self._excerpt(response.body, 80)
            raise PolicyResponseError(
                f"{url}: the answer is not JSON ({redact(str(exc.__cause__ or exc), self._key)}; starts {excerpt!r})",
                retryable=True,
                url=url,
            ) from exc


def ssl_context(ca_bundle: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """A verifying TLS context for the policy servers.

    The CAs trusted, first that applies: ``ca_bundle`` (a PEM file, or a directory of hashed certificates);
    ``$SSL_CERT_FILE`` and/or ``$SSL_CERT_DIR`` (as OpenSSL, requests and httpx honour them); certifi's
    bundle when installed; the system's.

    Raises:
        ConfigError: ``ca_bundle`` or a path the variables name does not exist or is not a certificate.
    """
    if ca_bundle is not None:
        path = os.fspath(ca_bundle)
        cafile, capath, source = (None, path, "ca_bundle") if os.path.isdir(path) else (path, None, "ca_bundle")
    else:
        cafile = os.environ.get("SSL_CERT_FILE") or None
        capath = os.environ.get("SSL_CERT_DIR") or None
        source = "$SSL_CERT_FILE" if cafile else "$SSL_CERT_DIR"
        if cafile is None and capath is None:
            try:
                import certifi
            except ImportError:  # pragma: no cover - certifi comes with most environments
                return ssl.create_default_context()
            return ssl.create_default_context(cafile=certifi.where())
    for name, value in ((source, cafile), ("$SSL_CERT_DIR", capath)):
        if value is not None and not os.path.exists(value):
            raise ConfigError(f"{name}={value!r} does not exist; point it at a PEM bundle, or unset it")
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{source}: cannot load CA certificates from {cafile or capath!r} ({exc})") from exc
