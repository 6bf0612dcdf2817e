"""The HTTP client: :class:`PolicyClient` (connection pool, ``max_inflight``, deadlines, retries, replicas)."""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import ssl
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from legato_gym.errors import StateError
from legato_rl import _http, _json
from legato_rl.errors import (
    PolicyError,
    PolicyHTTPError,
    PolicyResponseError,
    PolicyTimeout,
    PolicyUnreachable,
    redact,
)
from legato_rl.policy.config import KEY_ENV_VAR, PolicyConfig, ssl_context
from legato_rl.policy.replicas import Replicas
from legato_rl.policy.reply import ChatResult, cut_prompt_ids, parse_chat_completion, read_reply_json
from legato_rl.policy.retry import retry_policy_call

__all__ = ["VLLM_EXTRAS", "ClientState", "PolicyClient"]

logger = logging.getLogger("legato_rl.policy")  # one logger for the policy client, whichever module logs

#: Request fields only vLLM/SGLang understand; dropped for a server that answers 400 naming one of them.
VLLM_EXTRAS: tuple[str, ...] = ("return_token_ids", "return_weight_versions")
_MISSING_TOKEN_IDS = " Token ids will be missing: serve with vLLM >= 0.10.2 or SGLang to get them"

_BODY_EXCERPT = 400
_JSON_HEADERS = {"Content-Type": "application/json"}


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
        limits = config.limits
        self._slots = asyncio.Semaphore(limits.max_inflight) if limits.max_inflight else None
        self._replicas = Replicas(config.urls, limits.replica_cooldown)
        self._refused: dict[str, set[str]] = {}  # per replica: the vLLM extras it refused (HTTP 400 naming them)
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
        """Replicas that refused one of the vLLM extras or more (HTTP 400 naming them); see :meth:`refused_extras`."""
        return frozenset(url for url, fields in self._refused.items() if fields)

    def refused_extras(self, url: str) -> frozenset[str]:
        """The vLLM extras replica ``url`` refused, each by an HTTP 400 naming it; it is asked without them since
        (and with the others)."""
        return frozenset(self._refused.get(url, ()))

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
            max_body = self.config.limits.max_reply_bytes
            self._http = _http.HTTPPool(headers, ssl_context=self._tls_context, max_body=max_body)
        return self._http

    def _tls_context(self) -> ssl.SSLContext:
        if self._ssl is None:  # an https:// URL only through a proxy's tunnel: built on first use
            self._ssl = ssl_context(self.config.ca_bundle)
        return self._ssl

    def _check_open(self) -> None:
        if self._state is ClientState.CLOSED:
            raise StateError("PolicyClient is closed; build a new one (use `async with PolicyClient(config)`)")

    def build_request(
        self, messages: Sequence[Mapping[str, Any]], *, extras: bool = True, without: Collection[str] = ()
    ) -> dict[str, Any]:
        """The JSON body for ``messages``: model, sampling, logprobs and (when ``extras``) vLLM's extras but those
        named in ``without``."""
        cfg, sampling = self.config, self.config.sampling
        body: dict[str, Any] = {
            "model": cfg.model,
            "messages": list(messages),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "logprobs": True,
            "top_logprobs": 0,
        }
        if extras and cfg.vllm_extras:
            body.update((name, True) for name in VLLM_EXTRAS if name not in without)
        body.update(sampling.extra_body)
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
            PolicyTimeout: every attempt overran ``limits.step_timeout``.
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
                    response: _http.Answer | None = None
                    while response is None:  # each refusal drops the extras it names, and the rest are kept
                        body = self.build_request(messages, without=self._refused.get(url, ()))
                        last_body = body
                        attempts += 1
                        try:
                            response = await self._send(url, "POST", "/chat/completions", body)
                        except PolicyHTTPError as exc:
                            named = self._refused_fields(exc, body)
                            if not named:
                                raise
                            self._refused.setdefault(url, set()).update(named)
                            logger.warning(
                                "%s refused %s (HTTP 400); asking again without %s, logprobs and the other "
                                "fields kept.%s",
                                url,
                                ", ".join(named),
                                "it" if len(named) == 1 else "them",
                                _MISSING_TOKEN_IDS if "return_token_ids" in named else "",
                            )
                    # the prompt's token ids (tens of thousands with images) are read only if someone asks
                    answer, prompt_ids = cut_prompt_ids(response.body)
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

        limits = self.config.limits
        fields, url = await retry_policy_call(
            attempt,
            retries=limits.retries,
            backoff=limits.backoff,
            backoff_max=limits.backoff_max,
            rng=self._rng,
            what=f"policy call of rollout {rollout_id}",
        )
        seconds = time.monotonic() - started
        logger.debug("policy call of rollout %s: %s in %.3fs, %d attempt(s)", rollout_id, url, seconds, attempts)
        return ChatResult(**fields, seconds=seconds, attempts=attempts, request=last_body, url=url, queued_s=queued)

    @staticmethod
    def _refused_fields(exc: PolicyHTTPError, body: Mapping[str, Any]) -> list[str]:
        """The vLLM extras sent in ``body`` that an HTTP 400 names (OpenAI names the first unknown field)."""
        if exc.status_code != 400:
            return []
        return [f for f in VLLM_EXTRAS if f in body and f in exc.body]

    async def _send(self, url: str, method: str, path: str, body: dict[str, Any] | None) -> _http.Answer:
        """One HTTP request, bounded by ``step_timeout``; failures become :class:`PolicyError`."""
        target = url + path
        timeout = self.config.limits.step_timeout
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
                f"{target}: the answer is larger than max_reply_bytes={self.config.limits.max_reply_bytes}; it "
                "was dropped unread. Raise Limits.max_reply_bytes if the server is right to send that much "
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
