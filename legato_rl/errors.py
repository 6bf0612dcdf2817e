"""Errors of :mod:`legato_rl`: the policy branch of legato's one exception tree.

::

    LegatoError                       (legato_gym.errors)
    ├── ConfigError ...               bad input from the user (legato_gym.errors)
    ├── MissingDependencyError        (legato_gym.errors)
    ├── StateError                    (legato_gym.errors)
    ├── DesktopError ...              the desktop failed (legato_gym.errors)
    └── PolicyError                   a call to the policy server failed
        ├── PolicyTimeout             no complete answer within ``step_timeout`` (also a TimeoutError)
        ├── PolicyUnreachable         no connection: refused, reset, dropped before the answer, DNS
        ├── PolicyHTTPError           the server answered with an HTTP error status (``status_code``)
        ├── PolicyResponseError       the answer is not JSON, or not the OpenAI chat-completion shape
        └── PolicyUnavailable         the server cannot be used at all: collect stops the batch (resumable)

Every :class:`PolicyError` carries the replica ``url`` it came from and the number of HTTP ``attempts``
made for the call. Messages never contain the API key: text that came from the server is passed through
:func:`redact` before it is put in a message.
"""

from __future__ import annotations

import json
import re
import urllib.parse

from legato_gym.errors import LegatoError

__all__ = [
    "PolicyError",
    "PolicyHTTPError",
    "PolicyResponseError",
    "PolicyTimeout",
    "PolicyUnavailable",
    "PolicyUnreachable",
    "redact",
    "secret_forms",
]


def secret_forms(secret: str) -> list[str]:
    """The spellings a secret takes when a server or a library echoes it, longest first.

    The secret as it is, JSON-escaped (ASCII-only or not, with ``/`` escaped or not), Python-``repr``-escaped,
    and URL-encoded (``quote``, ``quote_plus``; upper- and lower-case hex).
    """
    forms = {secret, repr(secret)[1:-1]}
    for ensure_ascii in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ensure_ascii)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/")))
    quoted = (urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret), urllib.parse.quote_plus(secret, safe=""))
    for encoded in quoted:
        forms.update((encoded, _LOWER_HEX.sub(lambda m: m.group().lower(), encoded)))
    return sorted(forms, key=len, reverse=True)


_LOWER_HEX = re.compile("%[0-9A-F]{2}")


def redact(text: str, secret: str | None) -> str:
    """``text`` with every form of ``secret`` (see :func:`secret_forms`) replaced by ``***``.

    A no-op when there is no secret.
    """
    if secret:
        for form in secret_forms(secret):
            text = text.replace(form, "***")
    return text


class PolicyError(LegatoError):
    """A call to the policy server failed.

    Args:
        message: what happened and how to fix it.
        url: the replica the failing request went to.
        attempts: HTTP requests sent for this call (retries included).
    """

    #: Whether :class:`legato_rl.policy.PolicyClient` retries a call that failed this way.
    retryable: bool = False

    def __init__(self, message: str, *, url: str | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[PolicyError], args: tuple[object, ...], state: dict[str, object]) -> PolicyError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class PolicyTimeout(PolicyError, TimeoutError):
    """The server gave no complete answer within the per-call deadline (``Limits.step_timeout``)."""

    retryable = True


class PolicyUnreachable(PolicyError, ConnectionError):
    """No answer at all: the connection was refused, reset or dropped before a response."""

    retryable = True


class PolicyHTTPError(PolicyError):
    """The server answered with an HTTP error status.

    Retried only for 5xx and 429 (the server is failing or busy); any other 4xx is a request the server
    will refuse again.

    Args:
        message: what happened and how to fix it.
        status_code: the HTTP status.
        body: the start of the response body (redacted).
        retry_after: the ``Retry-After`` header in seconds, when the server sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        body: str = "",
        retry_after: float | None = None,
        url: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, url=url, attempts=attempts)
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return self.status_code >= 500 or self.status_code == 429


class PolicyResponseError(PolicyError):
    """The server answered 2xx, but the body is not JSON or not an OpenAI chat completion.

    A body that is not JSON at all (cut short in transit, a proxy's HTML page) is retried; well-formed
    JSON of the wrong shape is not, since the server would answer the same again.
    """

    def __init__(self, message: str, *, retryable: bool = False, url: str | None = None, attempts: int = 1) -> None:
        super().__init__(message, url=url, attempts=attempts)
        self._retryable = retryable

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return self._retryable


class PolicyUnavailable(PolicyError):
    """The policy server cannot be used at all, so :func:`legato_rl.collect` stops the batch.

    Raised before the first attempt when no replica answers ``GET /models`` with the model, and during a
    batch when calls keep failing the same way (or the server stops answering that check). Attempts it
    interrupted are re-run when the same command runs again into the same ``out``.
    """
